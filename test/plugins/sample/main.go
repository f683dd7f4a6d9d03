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

// Command sample is a Velero plugin binary, built on itemops' plugin
// framework (Velero's, plus the VolumeSnapshotter v2 kind), that serves a
// BackupItemAction v2 (itemops.io/sample-datamover), a RestoreItemAction v2
// (itemops.io/sample-restorer) and a VolumeSnapshotter v2
// (itemops.io/sample-snapshotter). All start simulated transfers whose
// behaviour the item's annotations set (see package sim); the snapshotter
// reads them from the PersistentVolume. Install it like any Velero plugin; it
// works with Velero itself too, which sees the snapshotter as a v1 one.
package main

import (
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	biav2 "github.com/vmware-tanzu/velero/pkg/plugin/velero/backupitemaction/v2"
	riav2 "github.com/vmware-tanzu/velero/pkg/plugin/velero/restoreitemaction/v2"

	"github.com/itemops/itemops/pkg/plugin/framework"
	"github.com/itemops/itemops/test/plugins/sim"
)

// The names the sample actions register.
const (
	DatamoverName   = "itemops.io/sample-datamover"
	RestorerName    = "itemops.io/sample-restorer"
	SnapshotterName = "itemops.io/sample-snapshotter"
)

func main() {
	sim.LogLaunch()
	framework.NewServer().
		BindFlags(pflag.CommandLine).
		RegisterBackupItemActionV2(DatamoverName, func(log logrus.FieldLogger) (any, error) {
			store, err := sim.NewHandlerStore(DatamoverName, log)
			return &datamover{log: log, store: store}, err
		}).
		RegisterRestoreItemActionV2(RestorerName, func(log logrus.FieldLogger) (any, error) {
			store, err := sim.NewHandlerStore(RestorerName, log)
			return &restorer{log: log, store: store}, err
		}).
		RegisterVolumeSnapshotterV2(SnapshotterName, func(log logrus.FieldLogger) (any, error) {
			store, err := sim.NewHandlerStore(SnapshotterName, log)
			return &snapshotter{log: log, store: store}, err
		}).
		Serve()
}

func selector() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{LabelSelector: sim.LabelSelect}, nil
}

func describe(item runtime.Unstructured) (string, map[string]string, error) {
	obj, err := meta.Accessor(item)
	if err != nil {
		return "", nil, err
	}
	return obj.GetNamespace() + "/" + obj.GetName(), obj.GetAnnotations(), nil
}

// datamover starts a simulated upload for every item it backs up.
type datamover struct {
	log   logrus.FieldLogger
	store *sim.Store
}

var _ biav2.BackupItemAction = (*datamover)(nil)

func (d *datamover) Name() string                                { return DatamoverName }
func (d *datamover) AppliesTo() (velero.ResourceSelector, error) { return selector() }

func (d *datamover) Execute(item runtime.Unstructured, backup *velerov1api.Backup) (
	runtime.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	name, annotations, err := describe(item)
	if err != nil {
		return nil, nil, "", nil, err
	}
	id, err := d.store.Start("upload", name, annotations)
	if err != nil {
		return nil, nil, "", nil, err
	}
	d.log.WithField("operationID", id).WithField("backup", backup.Name).Info("started simulated upload")
	return item, nil, id, nil, nil
}

func (d *datamover) Progress(operationID string, _ *velerov1api.Backup) (velero.OperationProgress, error) {
	return d.store.Progress(operationID)
}

func (d *datamover) Cancel(operationID string, _ *velerov1api.Backup) error {
	d.log.WithField("operationID", operationID).Info("cancel requested")
	return d.store.Cancel(operationID)
}

// restorer starts a simulated download for every item it restores.
type restorer struct {
	log   logrus.FieldLogger
	store *sim.Store
}

var _ riav2.RestoreItemAction = (*restorer)(nil)

func (r *restorer) Name() string                                { return RestorerName }
func (r *restorer) AppliesTo() (velero.ResourceSelector, error) { return selector() }

func (r *restorer) Execute(input *velero.RestoreItemActionExecuteInput) (*velero.RestoreItemActionExecuteOutput, error) {
	name, annotations, err := describe(input.Item)
	if err != nil {
		return nil, err
	}
	id, err := r.store.Start("download", name, annotations)
	if err != nil {
		return nil, err
	}
	r.log.WithField("operationID", id).WithField("restore", input.Restore.Name).Info("started simulated download")
	return &velero.RestoreItemActionExecuteOutput{UpdatedItem: input.Item, OperationID: id}, nil
}

func (r *restorer) Progress(operationID string, _ *velerov1api.Restore) (velero.OperationProgress, error) {
	return r.store.Progress(operationID)
}

func (r *restorer) Cancel(operationID string, _ *velerov1api.Restore) error {
	r.log.WithField("operationID", operationID).Info("cancel requested")
	return r.store.Cancel(operationID)
}

func (r *restorer) AreAdditionalItemsReady([]velero.ResourceIdentifier, *velerov1api.Restore) (bool, error) {
	return true, nil
}
