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
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/metrics"
	"github.com/itemops/itemops/internal/why"
)

// IndexParentUID indexes ItemOperations by spec.parent.uid in the cache, so
// that listing a parent's operations costs its operations, not all of them.
const IndexParentUID = "spec.parent.uid"

// SetupIndexes registers the cache indexes the reconcilers list by. Call it
// once per manager, before the reconcilers start.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &itemopsv1alpha1.ItemOperation{}, IndexParentUID, parentUID); err != nil {
		return fmt.Errorf("indexing ItemOperations by parent: %w", err)
	}
	// Velero's backup queue, which the metrics read at each scrape.
	if err := mgr.GetFieldIndexer().IndexField(ctx, &velerov1api.Backup{}, metrics.IndexQueuePhase, metrics.QueuePhase); err != nil {
		return fmt.Errorf("indexing Backups by their phase in Velero's queue: %w", err)
	}
	// The data mover's DataUploads and DataDownloads, which finding why an
	// operation waits reads.
	return why.SetupIndexes(ctx, mgr.GetFieldIndexer())
}

func parentUID(obj client.Object) []string {
	op, ok := obj.(*itemopsv1alpha1.ItemOperation)
	if !ok || op.Spec.Parent.UID == "" {
		return nil
	}
	return []string{op.Spec.Parent.UID}
}
