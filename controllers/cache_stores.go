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

package controllers

import (
	"reflect"

	toolscache "k8s.io/client-go/tools/cache"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
)

// Indexes of the stores the reconcilers read (NewStores).
const (
	// storeIndexParentUID indexes ItemOperations by spec.parent.uid.
	storeIndexParentUID = "itemops.io/parent-uid"
	// storeIndexBackupName indexes DeleteBackupRequests by spec.backupName.
	storeIndexBackupName = "itemops.io/backup-name"
)

// NewStores keeps the stores of the kinds the reconcilers read at every
// poll and every end of an operation straight from the cache's informers
// (kube.Stores): ItemOperations by parent, DeleteBackupRequests by Backup,
// Backups and Restores.
func NewStores() *kube.Stores {
	return kube.NewStores(storeIndexes)
}

// storeIndexes are the indexes Stores adds, by the kind they index.
var storeIndexes = map[reflect.Type]toolscache.Indexers{
	reflect.TypeFor[*itemopsv1alpha1.ItemOperation](): {storeIndexParentUID: func(obj any) ([]string, error) {
		if op, ok := obj.(*itemopsv1alpha1.ItemOperation); ok && op.Spec.Parent.UID != "" {
			return []string{op.Spec.Parent.UID}, nil
		}
		return nil, nil
	}},
	reflect.TypeFor[*velerov1api.DeleteBackupRequest](): {storeIndexBackupName: func(obj any) ([]string, error) {
		if dbr, ok := obj.(*velerov1api.DeleteBackupRequest); ok {
			return []string{dbr.Spec.BackupName}, nil
		}
		return nil, nil
	}},
	reflect.TypeFor[*velerov1api.Backup]():  {},
	reflect.TypeFor[*velerov1api.Restore](): {},
}
