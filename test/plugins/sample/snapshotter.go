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

package main

import (
	"errors"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	vsv2 "github.com/itemops/itemops/pkg/plugin/velero/volumesnapshotter/v2"
	"github.com/itemops/itemops/test/plugins/sim"
)

// AnnotationVolumeID is set on a PersistentVolume by SetVolumeID, as a real
// snapshotter sets its provider's volume ID.
const AnnotationVolumeID = "itemops.io/sample-volume-id"

var errNotInitialised = errors.New("the snapshotter was not initialised: Init must come first")

// snapshotter takes simulated snapshots of PersistentVolumes labelled with
// sim.LabelSnapshot; each snapshot "uploads" over time as the volume's
// annotations say, like an EBS snapshot that stays pending until copied.
type snapshotter struct {
	log   logrus.FieldLogger
	store *sim.Store

	mu     sync.Mutex
	config map[string]string
}

func (s *snapshotter) initialised() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.config != nil
}

var _ vsv2.VolumeSnapshotter = (*snapshotter)(nil)

// Init accepts any configuration; "fail-init" in it makes Init fail, as a
// real snapshotter fails on a bad VolumeSnapshotLocation.
func (s *snapshotter) Init(config map[string]string) error {
	if v, ok := config["fail-init"]; ok {
		return fmt.Errorf("invalid configuration: fail-init=%s", v)
	}
	if config == nil {
		config = map[string]string{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.config = config
	return nil
}

// GetVolumeID names the volume of a labelled PersistentVolume and keeps its
// annotations for CreateSnapshot; other volumes are not this snapshotter's.
func (s *snapshotter) GetVolumeID(pv runtime.Unstructured) (string, error) {
	obj := &unstructured.Unstructured{Object: pv.UnstructuredContent()}
	if _, ok := obj.GetLabels()[sim.LabelSnapshot]; !ok {
		return "", nil
	}
	volumeID := "vol-" + obj.GetName()
	if err := s.store.RememberVolume(volumeID, obj.GetAnnotations()); err != nil {
		return "", err
	}
	return volumeID, nil
}

func (s *snapshotter) SetVolumeID(pv runtime.Unstructured, volumeID string) (runtime.Unstructured, error) {
	obj := &unstructured.Unstructured{Object: pv.UnstructuredContent()}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationVolumeID] = volumeID
	obj.SetAnnotations(annotations)
	return obj, nil
}

func (s *snapshotter) CreateSnapshot(volumeID, _ string, tags map[string]string) (string, error) {
	annotations, err := s.store.VolumeAnnotations(volumeID)
	if err != nil {
		return "", err
	}
	id, err := s.store.Start("snapshot", volumeID, annotations)
	if err != nil {
		return "", err
	}
	s.log.WithField("snapshotID", id).WithField("backup", tags["velero.io/backup"]).Info("started simulated snapshot upload")
	return id, nil
}

// Progress, like a cloud provider's snapshotter, needs the configuration
// Init gave it: it fails on an instance that was never initialised.
func (s *snapshotter) Progress(snapshotID string) (velero.OperationProgress, error) {
	s.mu.Lock()
	config := s.config
	s.mu.Unlock()
	if config == nil {
		return velero.OperationProgress{}, errNotInitialised
	}
	p, err := s.store.Progress(snapshotID)
	if region := config["region"]; region != "" {
		// Says which configuration answered, as a real snapshotter asks its
		// location's region.
		p.Description += " in " + region
	}
	return p, err
}

func (s *snapshotter) Cancel(snapshotID string) error {
	if !s.initialised() {
		return errNotInitialised
	}
	s.log.WithField("snapshotID", snapshotID).Info("cancel requested")
	return s.store.Cancel(snapshotID)
}

func (s *snapshotter) DeleteSnapshot(snapshotID string) error {
	return s.store.Delete(snapshotID)
}

func (s *snapshotter) CreateVolumeFromSnapshot(snapshotID, _, _ string, _ *int64) (string, error) {
	if _, err := s.store.Load(snapshotID); err != nil {
		return "", err
	}
	return "vol-from-" + snapshotID, nil
}

func (s *snapshotter) GetVolumeInfo(string, string) (string, *int64, error) {
	return "sample", nil, nil
}
