/*
Copyright The itemops Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command volumesnapshotter is a complete VolumeSnapshotter v2 plugin: the
// one docs/plugins.md walks through, built and run against the real Velero
// by itemops' tests.
//
// Its provider keeps everything in a directory that every process running
// the plugin reaches (the VolumeSnapshotLocation's config "dir"), as a cloud
// keeps volumes and snapshots behind its API:
//
//	volumes/<volume ID>       a volume; the file's size is the volume's
//	volumes/<volume ID>.bad   where reading the volume fails, in bytes
//	snapshots/<snapshot ID>   a snapshot, as JSON
//
// The provider copies a snapshot's data in the background from the moment
// it was taken, at config "bytesPerSecond"; Progress reads how far it got
// from the snapshot's record and the clock. CreateSnapshot runs in Velero's
// plugin process and Progress in itemops': nothing but the configuration is
// kept in memory.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	"github.com/itemops/itemops/pkg/plugin/framework"
	vsv2 "github.com/itemops/itemops/pkg/plugin/velero/volumesnapshotter/v2"
)

// PluginName is the name a VolumeSnapshotLocation's spec.provider gives.
const PluginName = "example.io/disks"

// VolumePrefix marks the PersistentVolumes of this provider: hostPath
// volumes below it, named by their volume ID.
const VolumePrefix = "/disks/"

func main() {
	framework.NewServer().
		BindFlags(pflag.CommandLine).
		RegisterVolumeSnapshotterV2(PluginName, framework.VolumeSnapshotterV2(newDisks)).
		Serve()
}

func newDisks(log logrus.FieldLogger) (vsv2.VolumeSnapshotter, error) {
	return &disks{log: log}, nil
}

// disks is the plugin. Progress and Cancel are called concurrently; the
// configuration Init sets is the only state, and is read under mu.
type disks struct {
	log  logrus.FieldLogger
	mu   sync.RWMutex
	dir  string
	rate int64 // bytes per second
}

var _ vsv2.VolumeSnapshotter = (*disks)(nil)

// snapshot is the provider's record of a snapshot.
type snapshot struct {
	Volume   string    `json:"volume"`
	Size     int64     `json:"size"`
	BadAt    int64     `json:"badAt,omitempty"` // where the copy fails; 0: it does not
	Taken    time.Time `json:"taken"`
	Canceled bool      `json:"canceled,omitempty"`
}

// progress is how far the provider has copied s at now.
func (s snapshot) progress(now time.Time, rate int64) velero.OperationProgress {
	copied := min(s.Size, int64(now.Sub(s.Taken).Seconds()*float64(rate)))
	p := velero.OperationProgress{NCompleted: copied, NTotal: s.Size, OperationUnits: vsv2.UnitsBytes, Started: s.Taken, Updated: now}
	switch {
	case s.Canceled:
		p.Completed, p.Err = true, "the copy was canceled"
	case s.BadAt > 0 && copied >= s.BadAt:
		p.NCompleted, p.Completed = s.BadAt, true
		p.Err = fmt.Sprintf("reading volume %s failed at byte %d", s.Volume, s.BadAt)
	default:
		p.Completed = copied == s.Size
	}
	return p
}

func (d *disks) Init(config map[string]string) error {
	dir := config["dir"]
	if dir == "" {
		return errors.New(`config "dir" is required`)
	}
	rate := int64(64 << 20)
	if v, ok := config["bytesPerSecond"]; ok {
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Value() <= 0 {
			return fmt.Errorf(`config "bytesPerSecond" must be a positive quantity, not %q`, v)
		}
		rate = q.Value()
	}
	for _, sub := range []string{"volumes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dir, d.rate = dir, rate
	return nil
}

func (d *disks) config() (string, int64) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.dir, d.rate
}

// GetVolumeID claims the hostPath PersistentVolumes below VolumePrefix; an
// empty ID tells Velero the volume is not this provider's.
func (d *disks) GetVolumeID(u runtime.Unstructured) (string, error) {
	pv := &corev1.PersistentVolume{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), pv); err != nil {
		return "", err
	}
	if pv.Spec.HostPath == nil || !strings.HasPrefix(pv.Spec.HostPath.Path, VolumePrefix) {
		return "", nil
	}
	return path.Base(pv.Spec.HostPath.Path), nil
}

// SetVolumeID points a restored PersistentVolume at the volume
// CreateVolumeFromSnapshot made.
func (d *disks) SetVolumeID(u runtime.Unstructured, volumeID string) (runtime.Unstructured, error) {
	pv := &corev1.PersistentVolume{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), pv); err != nil {
		return nil, err
	}
	if pv.Spec.HostPath == nil {
		return nil, errors.New("the PersistentVolume has no hostPath")
	}
	pv.Spec.HostPath.Path = VolumePrefix + volumeID
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pv)
	if err != nil {
		return nil, err
	}
	u.SetUnstructuredContent(content)
	return u, nil
}

func (d *disks) GetVolumeInfo(string, string) (string, *int64, error) { return "", nil, nil }

// CreateSnapshot records the snapshot; the provider copies it from now on.
func (d *disks) CreateSnapshot(volumeID, _ string, _ map[string]string) (string, error) {
	dir, _ := d.config()
	info, err := os.Stat(filepath.Join(dir, "volumes", volumeID))
	if err != nil {
		return "", fmt.Errorf("volume %s: %w", volumeID, err)
	}
	s := snapshot{Volume: volumeID, Size: info.Size(), Taken: time.Now()}
	if bad, err := os.ReadFile(filepath.Join(dir, "volumes", volumeID+".bad")); err == nil {
		if s.BadAt, err = strconv.ParseInt(strings.TrimSpace(string(bad)), 10, 64); err != nil {
			return "", fmt.Errorf("volume %s: bad offset: %w", volumeID, err)
		}
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return "", err
	}
	snapshotID := "snap-" + hex.EncodeToString(id)
	return snapshotID, d.save(snapshotID, s)
}

// Progress reports the provider's copy. An unknown ID is Velero's
// InvalidOperationIDError, so itemops fails the operation at once.
func (d *disks) Progress(snapshotID string) (velero.OperationProgress, error) {
	_, rate := d.config()
	s, err := d.load(snapshotID)
	if err != nil {
		return velero.OperationProgress{}, err
	}
	return s.progress(time.Now(), rate), nil
}

// Cancel stops the copy. A snapshot that finished, failed or was canceled
// already is left as it is; an unknown ID is refused.
func (d *disks) Cancel(snapshotID string) error {
	_, rate := d.config()
	s, err := d.load(snapshotID)
	if err != nil {
		return err
	}
	if s.progress(time.Now(), rate).Completed {
		return nil
	}
	s.Canceled = true
	d.log.WithField("snapshot", snapshotID).Info("copy canceled")
	return d.save(snapshotID, s)
}

// CreateVolumeFromSnapshot refuses a snapshot whose data is not all
// copied: Velero restores from any snapshot it recorded, so a plugin must
// not hand it an incomplete one.
func (d *disks) CreateVolumeFromSnapshot(snapshotID, _, _ string, _ *int64) (string, error) {
	dir, rate := d.config()
	s, err := d.load(snapshotID)
	if err != nil {
		return "", err
	}
	if p := s.progress(time.Now(), rate); !p.Completed || p.Err != "" {
		why := p.Err
		if why == "" {
			why = fmt.Sprintf("%d of %d bytes copied", p.NCompleted, p.NTotal)
		}
		return "", fmt.Errorf("snapshot %s of volume %s is not durable (%s): refusing to restore from it", snapshotID, s.Volume, why)
	}
	volumeID := s.Volume + "-from-" + snapshotID
	f, err := os.Create(filepath.Join(dir, "volumes", volumeID))
	if err != nil {
		return "", err
	}
	defer f.Close()
	return volumeID, f.Truncate(s.Size)
}

// DeleteSnapshot removes the snapshot; one already gone is deleted.
func (d *disks) DeleteSnapshot(snapshotID string) error {
	dir, _ := d.config()
	if err := os.Remove(filepath.Join(dir, "snapshots", snapshotID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (d *disks) load(snapshotID string) (snapshot, error) {
	dir, _ := d.config()
	var s snapshot
	data, err := os.ReadFile(filepath.Join(dir, "snapshots", filepath.Base(snapshotID)))
	if errors.Is(err, fs.ErrNotExist) {
		return s, vsv2.InvalidOperationIDError(snapshotID)
	}
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(data, &s)
}

// save writes the record whole or not at all (a rename), so a process
// reading it meanwhile never sees half of it.
func (d *disks) save(snapshotID string, s snapshot) error {
	dir, _ := d.config()
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Join(dir, "snapshots"), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, "snapshots", snapshotID))
}
