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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	"github.com/itemops/itemops/internal/kube"
)

// +kubebuilder:rbac:groups=velero.io,namespace=velero,resources=downloadrequests,verbs=get;list;watch

// WriteBacker uploads the current state of a parent's operations.
type WriteBacker interface {
	WriteBack(ctx context.Context, key types.NamespacedName) error
}

// DownloadRequestReconciler keeps `velero backup describe --details` live in
// manage mode: when a DownloadRequest asks for the item operations of a
// Backup or Restore that is still waiting for them, the operations file is
// written back at once with what the ItemOperations show. Velero's own
// download-request controller still answers the request.
type DownloadRequestReconciler struct {
	Client   client.Client
	Recorder record.EventRecorder
	Backups  WriteBacker
	Restores WriteBacker
}

// SetupWithManager registers the reconciler for new DownloadRequests of item operations.
func (r *DownloadRequestReconciler) SetupWithManager(mgr ctrl.Manager) error {
	wanted := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		dr, ok := obj.(*velerov1api.DownloadRequest)
		return ok && dr.Status.Phase != velerov1api.DownloadRequestPhaseProcessed && isOperationsTarget(dr.Spec.Target.Kind)
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("downloadrequest").
		For(&velerov1api.DownloadRequest{}, builder.WithPredicates(wanted)).
		Complete(kube.QuietConflicts{Reconciler: r})
}

func isOperationsTarget(kind velerov1api.DownloadTargetKind) bool {
	return kind == velerov1api.DownloadTargetKindBackupItemOperations || kind == velerov1api.DownloadTargetKindRestoreItemOperations
}

// Reconcile implements reconcile.Reconciler.
func (r *DownloadRequestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	dr := &velerov1api.DownloadRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, dr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if dr.Status.Phase == velerov1api.DownloadRequestPhaseProcessed || !isOperationsTarget(dr.Spec.Target.Kind) {
		return ctrl.Result{}, nil
	}
	parent := types.NamespacedName{Namespace: dr.Namespace, Name: dr.Spec.Target.Name}
	writer := r.Backups
	if dr.Spec.Target.Kind == velerov1api.DownloadTargetKindRestoreItemOperations {
		writer = r.Restores
	}
	if err := writer.WriteBack(ctx, parent); err != nil {
		// Velero answers the request anyway, with the file as it was.
		kube.Emitf(r.Recorder, dr, corev1.EventTypeWarning, reasonNotWritten, "%v", err)
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, nil
}
