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

package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/persistence"
	"github.com/vmware-tanzu/velero/pkg/util/encode"

	"github.com/itemops/itemops/internal/plugin"
)

// ErrNoSnapshotLocation: the VolumeSnapshotLocation does not exist.
var ErrNoSnapshotLocation = errors.New("volume snapshot location unavailable")

// VolumeSnapshot is one native volume snapshot Velero recorded for a backup
// in <backup>-volumesnapshots.json.gz.
type VolumeSnapshot struct {
	// BackupUID is the backup the snapshot was taken for.
	BackupUID string
	// Location is the VolumeSnapshotLocation the snapshot was taken with.
	Location string
	// PersistentVolumeName is the volume's PersistentVolume.
	PersistentVolumeName string
	// ProviderVolumeID is the volume's ID at the provider.
	ProviderVolumeID string
	// SnapshotID is the snapshot's ID at the provider: its operation ID.
	// Empty when CreateSnapshot failed.
	SnapshotID string
	// Phase is Velero's phase of the snapshot: New, Completed or Failed.
	Phase string
}

// BackupVolumeSnapshots returns the native volume snapshots Velero recorded
// for a backup; no file means none were taken.
func (s *Store) BackupVolumeSnapshots(ctx context.Context, backup *velerov1api.Backup) ([]VolumeSnapshot, error) {
	var out []VolumeSnapshot
	err := s.withBackupStore(ctx, backup.Spec.StorageLocation, false, func(bs persistence.BackupStore) error {
		snapshots, err := bs.GetBackupVolumeSnapshots(backup.Name)
		if err != nil {
			return classifyRead(err)
		}
		for _, snap := range snapshots {
			if snap == nil {
				continue
			}
			out = append(out, VolumeSnapshot{
				BackupUID:            snap.Spec.BackupUID,
				Location:             snap.Spec.Location,
				PersistentVolumeName: snap.Spec.PersistentVolumeName,
				ProviderVolumeID:     snap.Spec.ProviderVolumeID,
				SnapshotID:           snap.Status.ProviderSnapshotID,
				Phase:                string(snap.Status.Phase),
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the volume snapshots of backup %s: %w", backup.Name, err)
	}
	return out, nil
}

// SnapshotLocation is what a VolumeSnapshotter plugin needs of a
// VolumeSnapshotLocation: its plugin name and the configuration Init takes.
type SnapshotLocation struct {
	// Plugin is the VolumeSnapshotter's name, resolved from spec.provider as Velero does.
	Plugin string
	// Config is spec.config, with credentialsFile set to a file holding the
	// key spec.credential names, as Velero passes it.
	Config map[string]string
}

// SnapshotLocation reads the VolumeSnapshotLocation name in Velero's namespace.
func (s *Store) SnapshotLocation(ctx context.Context, name string) (SnapshotLocation, error) {
	location := &velerov1api.VolumeSnapshotLocation{}
	if err := s.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, location); err != nil {
		if apierrors.IsNotFound(err) {
			return SnapshotLocation{}, fmt.Errorf("%w: VolumeSnapshotLocation %q does not exist", ErrNoSnapshotLocation, name)
		}
		return SnapshotLocation{}, fmt.Errorf("reading VolumeSnapshotLocation %s: %w", name, err)
	}
	config := maps.Clone(location.Spec.Config)
	if config == nil {
		config = map[string]string{}
	}
	if location.Spec.Credential != nil {
		path, err := (&credentialFiles{ctx: ctx, store: s}).Path(location.Spec.Credential)
		if err != nil {
			return SnapshotLocation{}, fmt.Errorf("credentials of VolumeSnapshotLocation %s: %w", name, err)
		}
		config["credentialsFile"] = path
	}
	return SnapshotLocation{Plugin: plugin.VolumeSnapshotterName(location.Spec.Provider), Config: config}, nil
}

// MarkSnapshotsNotDurable writes to a Backup's files in object storage what
// itemops found after Velero had ended it: backup (its phase and error
// count as itemops changed them) becomes the backup's metadata, which backup
// sync and `velero backup describe` of another cluster read; and each
// native snapshot of the PersistentVolumes pvs gets the result "failed" in
// the volume information file, which `velero backup describe --details`
// shows. Writing the same again changes nothing.
func (s *Store) MarkSnapshotsNotDurable(ctx context.Context, backup *velerov1api.Backup, pvs []string) error {
	err := s.withBackupStore(ctx, backup.Spec.StorageLocation, true, func(bs persistence.BackupStore) error {
		infos, err := bs.GetBackupVolumeInfos(backup.Name)
		if err != nil {
			return fmt.Errorf("reading the volume information: %w", classifyRead(err))
		}
		changed := false
		for _, info := range infos {
			if info != nil && info.BackupMethod == nativeSnapshot && slices.Contains(pvs, info.PVName) && info.Result != volumeResultFailed {
				info.Result = volumeResultFailed
				changed = true
			}
		}
		if changed {
			body, err := gzipJSON(infos)
			if err == nil {
				err = bs.PutBackupVolumeInfos(backup.Name, body)
			}
			if err != nil {
				return fmt.Errorf("writing the volume information: %w", err)
			}
		}
		metadata := &bytes.Buffer{}
		if err := encode.To(backup, "json", metadata); err != nil {
			return fmt.Errorf("encoding the backup's metadata: %w", err)
		}
		if err := bs.PutBackupMetadata(backup.Name, metadata); err != nil {
			return fmt.Errorf("writing the backup's metadata: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recording the volume snapshots of backup %s that did not become durable: %w", backup.Name, err)
	}
	return nil
}

// Velero's names, in its volume information file, of a native snapshot and
// of a volume whose backup failed (its internal/volume package).
const (
	nativeSnapshot     = "NativeSnapshot"
	volumeResultFailed = "failed"
)
