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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/rollup"
)

// +kubebuilder:rbac:groups=velero.io,namespace=velero,resources=backups;restores,verbs=patch

// parentCounters are a parent's operation counters as Velero stores them.
type parentCounters struct {
	Attempted, Completed, Failed int
}

// countOperations counts the ItemOperations of the parent with this UID.
func countOperations(ctx context.Context, c client.Client, namespace string, uid types.UID) (rollup.Counts, error) {
	list := &itemopsv1alpha1.ItemOperationList{}
	if err := c.List(ctx, list, client.InNamespace(namespace),
		client.MatchingLabels{itemopsv1alpha1.LabelParentUID: string(uid)}); err != nil {
		return rollup.Counts{}, fmt.Errorf("listing operations: %w", err)
	}
	counts := rollup.Counts{}
	for _, op := range list.Items {
		if op.Spec.Parent.UID != string(uid) {
			continue
		}
		counts.Total++
		switch op.Status.Phase {
		case itemopsv1alpha1.OperationPhaseCompleted:
			counts.Completed++
		case itemopsv1alpha1.OperationPhaseFailed, itemopsv1alpha1.OperationPhaseCanceled:
			counts.Failed++
		}
	}
	return counts, nil
}

// nextParentState computes a parent's new phase and counters. Velero recorded
// how many operations it started (attempted); until that many ItemOperations
// exist the parent never leaves WaitingForPluginOperations*, so that an
// operation not yet ingested can never be skipped.
func nextParentState(phase rollup.Phase, old parentCounters, counts rollup.Counts) (rollup.Phase, parentCounters) {
	next := parentCounters{Attempted: max(old.Attempted, counts.Total), Completed: counts.Completed, Failed: counts.Failed}
	if counts.Total < old.Attempted {
		counts.Total = old.Attempted
	}
	return rollup.Next(phase, counts), next
}

// parentRequestForOperation maps an ItemOperation to its parent of kind.
func parentRequestForOperation(kind itemopsv1alpha1.ParentKind) handler.MapFunc {
	return func(_ context.Context, obj client.Object) []reconcile.Request {
		op, ok := obj.(*itemopsv1alpha1.ItemOperation)
		if !ok || op.Spec.Parent.Kind != kind {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: op.Namespace, Name: op.Spec.Parent.Name}}}
	}
}

// recordPhase tells people why a parent moved.
func recordPhase(recorder record.EventRecorder, obj client.Object, from, to rollup.Phase, counts parentCounters) {
	kind := corev1.EventTypeNormal
	if to == rollup.WaitingForPluginOperationsPartiallyFailed || to == rollup.FinalizingPartiallyFailed {
		kind = corev1.EventTypeWarning
	}
	recorder.Eventf(obj, kind, "PhaseChanged", "%s -> %s: %d of %d plugin operations completed, %d failed",
		from, to, counts.Completed, counts.Attempted, counts.Failed)
}

// parentKind adapts one Velero kind (Backup or Restore) to the rollup.
type parentKind[T client.Object] struct {
	kind        itemopsv1alpha1.ParentKind
	newObject   func() T
	phase       func(T) rollup.Phase
	counters    func(T) parentCounters
	setStatus   func(T, rollup.Phase, parentCounters)
	controlName string
}

// parentReconciler moves a parent on from WaitingForPluginOperations* as its
// operations finish (manage mode only), doing the job of Velero's
// backup-operations or restore-operations controller, which must be disabled.
type parentReconciler[T client.Object] struct {
	client   client.Client
	recorder record.EventRecorder
	kind     parentKind[T]
}

// SetupWithManager registers the reconciler; any change of an operation wakes its parent.
func (r *parentReconciler[T]) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(r.kind.controlName).
		For(r.kind.newObject()).
		Watches(&itemopsv1alpha1.ItemOperation{}, handler.EnqueueRequestsFromMapFunc(parentRequestForOperation(r.kind.kind))).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *parentReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	parent := r.kind.newObject()
	if err := r.client.Get(ctx, req.NamespacedName, parent); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	phase := r.kind.phase(parent)
	if !rollup.Owned(phase) {
		return ctrl.Result{}, nil
	}
	counts, err := countOperations(ctx, r.client, parent.GetNamespace(), parent.GetUID())
	if err != nil {
		return ctrl.Result{}, err
	}
	old := r.kind.counters(parent)
	next, counters := nextParentState(phase, old, counts)
	if next == phase && counters == old {
		return ctrl.Result{}, nil
	}
	// Velero's Backup and Restore have no status subresource; the optimistic
	// lock makes sure nothing Velero wrote meanwhile is overwritten.
	patch := client.MergeFromWithOptions(parent.DeepCopyObject().(T), client.MergeFromWithOptimisticLock{})
	r.kind.setStatus(parent, next, counters)
	if err := r.client.Patch(ctx, parent, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating %s %s: %w", r.kind.kind, parent.GetName(), err)
	}
	if next != phase {
		ctrl.LoggerFrom(ctx).Info("moved "+string(r.kind.kind), "parent", klog.KObj(parent), "from", phase, "to", next)
		recordPhase(r.recorder, parent, phase, next, counters)
	}
	return ctrl.Result{}, nil
}
