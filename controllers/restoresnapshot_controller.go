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
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
)

// RestoreSnapshotReconciler warns on a Restore whose Backup has native
// volume snapshots that did not become durable, or are still copying:
// Velero restores volumes from every snapshot it recorded, as if whole. It
// never writes to a Restore, in either mode. A Restore is warned about once
// in its first hour, whatever its phase: Velero may end a small one before
// the warning could come first.
type RestoreSnapshotReconciler struct {
	Client   client.Client
	Recorder record.EventRecorder
	// Stores reads a Backup's ItemOperations from the cache's store;
	// through Client when nil.
	Stores *kube.Stores

	Clock  clock.Clock
	warned sync.Map // restore UID -> true, so each Restore is warned once
}

// restoreWarningAge is how old a Restore may be and still be warned about:
// one that ended within seconds of its creation is warned about all the
// same, and a restart of itemops does not warn again about old ones.
const restoreWarningAge = time.Hour

// SetupWithManager registers the reconciler for Restores.
func (r *RestoreSnapshotReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("restoresnapshots").
		For(&velerov1api.Restore{}).
		Complete(kube.QuietConflicts{Reconciler: r})
}

// Reconcile implements reconcile.Reconciler.
func (r *RestoreSnapshotReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	restore := &velerov1api.Restore{}
	if err := r.Client.Get(ctx, req.NamespacedName, restore); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.Clock.Since(restore.CreationTimestamp.Time) > restoreWarningAge {
		r.warned.Delete(restore.UID)
		return ctrl.Result{}, nil // told long ago, or before itemops ran
	}
	if restore.Spec.BackupName == "" || (restore.Spec.RestorePVs != nil && !*restore.Spec.RestorePVs) {
		return ctrl.Result{}, nil
	}
	if _, done := r.warned.Load(restore.UID); done {
		return ctrl.Result{}, nil
	}
	backup := &velerov1api.Backup{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: restore.Namespace, Name: restore.Spec.BackupName}, backup); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ops, err := listAllOperations(ctx, r.Client, r.Stores, backup.Namespace, backup.UID)
	if err != nil {
		return ctrl.Result{}, err
	}
	var failed, copying []string
	for _, op := range ops {
		if op.Spec.Plugin.Kind != itemopsv1alpha1.PluginKindVolumeSnapshotter {
			continue
		}
		switch op.Status.Phase {
		case itemopsv1alpha1.OperationPhaseFailed, itemopsv1alpha1.OperationPhaseCanceled:
			failed = append(failed, op.Spec.Resource.Name)
		case itemopsv1alpha1.OperationPhaseCompleted:
		default:
			copying = append(copying, op.Spec.Resource.Name)
		}
	}
	if len(failed)+len(copying) == 0 {
		return ctrl.Result{}, nil
	}
	slices.Sort(failed)
	slices.Sort(copying)
	var parts []string
	if len(failed) > 0 {
		parts = append(parts, fmt.Sprintf("the volume snapshots of PersistentVolumes %s did not become durable", strings.Join(failed, ", ")))
	}
	if len(copying) > 0 {
		parts = append(parts, fmt.Sprintf("those of %s are still copying", strings.Join(copying, ", ")))
	}
	r.warned.Store(restore.UID, true)
	kube.Emitf(r.Recorder, restore, corev1.EventTypeWarning, reasonRestoreNotDurable,
		"Backup %s: %s; Velero restores volumes from them as if whole: expect their restore to fail, or to hold incomplete data",
		backup.Name, strings.Join(parts, "; "))
	return ctrl.Result{}, nil
}
