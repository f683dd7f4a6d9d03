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

package why

import (
	"context"
	"fmt"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
)

// AddToScheme adds the kinds Gather reads to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{velerov2alpha1.AddToScheme, snapshotv1.AddToScheme} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// The cache's field indexes the gatherer reads DataUploads, DataDownloads,
// PodVolumeBackups and PodVolumeRestores through: however many Velero keeps (until their Backup or
// Restore is deleted), a poll reads only the one of its operation and those
// running on one node.
const (
	// IndexOperationID: a movement's operation ID, its label
	// velero.io/async-operation-id.
	IndexOperationID = "itemops.io/async-operation-id"
	// IndexRunningOn: the node of a movement InProgress, which holds one of
	// node-agent's data paths there.
	IndexRunningOn = "itemops.io/running-on"
)

// Index is a field index the gatherer's Reader must have.
type Index struct {
	Object  client.Object
	Field   string
	Extract client.IndexerFunc
}

// Indexes are the field indexes the gatherer's Reader must have.
func Indexes() []Index {
	operationID := func(o client.Object) []string {
		if id := o.GetLabels()[velerov1api.AsyncOperationIDLabel]; id != "" {
			return []string{id}
		}
		return nil
	}
	return []Index{
		{&velerov2alpha1.DataUpload{}, IndexOperationID, operationID},
		{&velerov2alpha1.DataDownload{}, IndexOperationID, operationID},
		{&velerov2alpha1.DataUpload{}, IndexRunningOn, func(o client.Object) []string {
			if du := o.(*velerov2alpha1.DataUpload); du.Status.Phase == velerov2alpha1.DataUploadPhaseInProgress && du.Status.Node != "" {
				return []string{du.Status.Node}
			}
			return nil
		}},
		{&velerov2alpha1.DataDownload{}, IndexRunningOn, func(o client.Object) []string {
			if dd := o.(*velerov2alpha1.DataDownload); dd.Status.Phase == velerov2alpha1.DataDownloadPhaseInProgress && dd.Status.Node != "" {
				return []string{dd.Status.Node}
			}
			return nil
		}},
		// File-system backups and restores hold the same data paths of
		// node-agent as the data mover's movements.
		{&velerov1api.PodVolumeBackup{}, IndexRunningOn, func(o client.Object) []string {
			if pvb := o.(*velerov1api.PodVolumeBackup); pvb.Status.Phase == velerov1api.PodVolumeBackupPhaseInProgress && pvb.Spec.Node != "" {
				return []string{pvb.Spec.Node}
			}
			return nil
		}},
		{&velerov1api.PodVolumeRestore{}, IndexRunningOn, func(o client.Object) []string {
			if pvr := o.(*velerov1api.PodVolumeRestore); pvr.Status.Phase == velerov1api.PodVolumeRestorePhaseInProgress && pvr.Status.Node != "" {
				return []string{pvr.Status.Node}
			}
			return nil
		}},
	}
}

// SetupIndexes adds Indexes to a cache (the manager's field indexer),
// before it starts. A kind the API server does not serve (a cluster
// without Velero's data mover CRDs) has no movements to index: skipped.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	for _, i := range Indexes() {
		if err := indexer.IndexField(ctx, i.Object, i.Field, i.Extract); err != nil && !meta.IsNoMatchError(err) {
			return fmt.Errorf("indexing %T by %s: %w", i.Object, i.Field, err)
		}
	}
	return nil
}
