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
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
	"github.com/itemops/itemops/internal/rollup"
	"github.com/itemops/itemops/internal/store"
)

// +kubebuilder:rbac:groups=velero.io,namespace=velero,resources=backups;restores,verbs=patch
// +kubebuilder:rbac:groups=velero.io,namespace=velero,resources=backupstoragelocations,verbs=get;list;watch
// The credential Secrets locations name (spec.credential), read one by one;
// cloud-credentials is the one `velero install` makes. Add yours: the
// chart's rbac.secretNames, or a patch of config/rbac's Role.
// +kubebuilder:rbac:groups="",namespace=velero,resources=secrets,verbs=get,resourceNames=cloud-credentials

// OperationsStore reads and writes Velero's operations files; *store.Store
// is the real one.
type OperationsStore interface {
	BackupOperations(ctx context.Context, backup *velerov1api.Backup) ([]*itemoperation.BackupOperation, error)
	// UpdateBackupOperations replaces the file with what update makes of
	// its records (given with the read's error), read and written in one
	// session with the object store plugin.
	UpdateBackupOperations(ctx context.Context, backup *velerov1api.Backup,
		update func([]*itemoperation.BackupOperation, error) ([]*itemoperation.BackupOperation, error)) error
	RestoreOperations(ctx context.Context, restore *velerov1api.Restore) ([]*itemoperation.RestoreOperation, error)
	UpdateRestoreOperations(ctx context.Context, restore *velerov1api.Restore,
		update func([]*itemoperation.RestoreOperation, error) ([]*itemoperation.RestoreOperation, error)) error
	// CheckWritable returns store.ErrReadOnly when the location of the
	// Backup or Restore takes no writes.
	CheckWritable(ctx context.Context, parent client.Object) error
}

var _ OperationsStore = (*store.Store)(nil)

// Event reasons on parents.
const (
	reasonIngested        = "OperationsIngested"
	reasonUnreadable      = "OperationsFileUnreadable"
	reasonTooLarge        = "OperationsFileTooLarge"
	reasonNotWritten      = "OperationsFileNotWritten"
	reasonForeignRecord   = "OperationRecordIgnored"
	reasonInvalidRecord   = "OperationRecordInvalid"
	reasonDuplicateRecord = "OperationRecordRepeated"
	reasonGaveUp          = "OperationsUnknown"
	reasonMissing         = "OperationsMissing"
	defaultParentTimeout  = DefaultOperationTimeout
	parentPartiallyFailed = rollup.PartiallyFailed
)

// errMissingOperations: fewer operations are known than Velero attempted.
var errMissingOperations = errors.New("plugin operations missing")

// ParentOptions configure the Backup and Restore reconcilers.
type ParentOptions struct {
	// Store reads Velero's operations files and, in manage mode, writes them
	// back. Without one, ItemOperations are expected to be created by others.
	Store OperationsStore
	// Manage lets the reconciler move the parent and write to object
	// storage; without it, it only creates ItemOperations (observe mode).
	Manage bool
	// Clock decides when a parent whose operations cannot be read is given up.
	Clock clock.Clock
	// CounterInterval is the least time between two patches of a parent
	// that only move its completed count; zero patches every change.
	CounterInterval time.Duration
	// Stores reads a parent's ItemOperations from the cache's store;
	// through the client when nil.
	Stores *kube.Stores
	// MaxConcurrentReconciles bounds parents reconciled at once (one when
	// zero). A parent's reconcile may wait on object storage or create a
	// hundred ItemOperations; one worker would make every other parent,
	// one whose last operation just ended among them, wait behind it.
	MaxConcurrentReconciles int
}

// parentCounters are a parent's operation counters as Velero stores them.
type parentCounters struct {
	Attempted, Completed, Failed int
}

// listOperations returns the item-action ItemOperations of the parent with
// this UID: those Velero waits for. Volume snapshot operations (see
// VolumeSnapshotReconciler) and mirrors of file-system backups (Velero
// waits for those before its plugin operations) are not among them.
func listOperations(ctx context.Context, c client.Client, stores *kube.Stores, namespace string, uid types.UID) ([]*itemopsv1alpha1.ItemOperation, error) {
	ops, err := listAllOperations(ctx, c, stores, namespace, uid)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ops, func(op *itemopsv1alpha1.ItemOperation) bool {
		return op.Spec.Plugin.Kind == itemopsv1alpha1.PluginKindVolumeSnapshotter || op.IsMirror()
	}), nil
}

// listAllOperations returns every ItemOperation of the parent with this UID,
// from the cache's store through stores when it can, else through the cache's
// index by parent UID (a label selector would make the cache look at every
// ItemOperation of the namespace on every call).
//
// The operations are shared with the cache and must only be read: a parent
// is listed on every end of one of its operations, and copying its hundred
// operations each time was a fifth of the CPU at 10,000.
func listAllOperations(ctx context.Context, c client.Client, stores *kube.Stores, namespace string, uid types.UID) ([]*itemopsv1alpha1.ItemOperation, error) {
	ops, ok, err := kube.StoredByIndex[*itemopsv1alpha1.ItemOperation](stores, storeIndexParentUID, string(uid))
	if err != nil {
		return nil, err
	}
	if ok {
		return slices.DeleteFunc(ops, func(op *itemopsv1alpha1.ItemOperation) bool { return op.Namespace != namespace }), nil
	}
	list := &itemopsv1alpha1.ItemOperationList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{IndexParentUID: string(uid)},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing operations: %w", err)
	}
	out := make([]*itemopsv1alpha1.ItemOperation, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// countOperations counts the records of operations by outcome.
func countOperations(ops []*itemopsv1alpha1.ItemOperation) rollup.Counts {
	counts := rollup.Counts{}
	for _, op := range ops {
		// An operation repeated in the file counts once per record, as
		// Velero counts it.
		n := recordCount(op)
		counts.Total += n
		switch startingPhase(op) {
		case itemopsv1alpha1.OperationPhaseCompleted:
			counts.Completed += n
		case itemopsv1alpha1.OperationPhaseFailed, itemopsv1alpha1.OperationPhaseCanceled:
			counts.Failed += n
		}
	}
	return counts
}

// startingPhase is op's phase, or, for one whose status is not written yet,
// the phase it starts from: the end Velero recorded for it, when it was
// read from the file already ended. Counted as anything else, a failure
// Velero had counted would be counted again once the status shows it.
func startingPhase(op *itemopsv1alpha1.ItemOperation) itemopsv1alpha1.OperationPhase {
	if op.Status.Created != nil {
		return op.Status.Phase
	}
	if rec, err := recordStatus(op); err == nil && rec != nil && recordEnded(rec.Phase) {
		return itemopsv1alpha1.OperationPhase(rec.Phase)
	}
	return op.Status.Phase
}

// nextParentState computes a parent's new phase and counters. Until as many
// operations as expected are known the parent never leaves
// WaitingForPluginOperations*, so that an operation not yet ingested can never
// be skipped. expected is what Velero recorded as attempted, or the number of
// records once the operations file has been read.
func nextParentState(phase rollup.Phase, old parentCounters, counts rollup.Counts, expected int) (rollup.Phase, parentCounters) {
	// A failure once counted stays counted (its error is in status.errors):
	// fewer failed operations than counted only means some have not shown
	// their end yet.
	next := parentCounters{Attempted: max(old.Attempted, counts.Total), Completed: counts.Completed, Failed: max(old.Failed, counts.Failed)}
	if counts.Total < expected {
		counts.Total = expected
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

// operationChangeMatters passes the changes of an ItemOperation that its
// parent acts on: its creation and deletion (the operations known), its end
// (the counters and the rollup), the start of its deletion, and its labels
// and annotations (the records it stands for). Its progress, its move from
// New to InProgress and the release of its finalizer change nothing the
// parent reads until every operation has ended, and the last end is a
// change of phase too. Woken by them, a parent of a hundred operations
// listed all hundred for each such write: a tenth of itemops' CPU side by
// side with Velero.
func operationChangeMatters() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*itemopsv1alpha1.ItemOperation)
		cur, okNew := e.ObjectNew.(*itemopsv1alpha1.ItemOperation)
		if !okOld || !okNew {
			return true
		}
		return old.Status.Phase.IsTerminal() != cur.Status.Phase.IsTerminal() ||
			(cur.Status.Phase.IsTerminal() && old.Status.Phase != cur.Status.Phase) || old.Generation != cur.Generation ||
			old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero() ||
			!maps.Equal(old.Labels, cur.Labels) || !maps.Equal(old.Annotations, cur.Annotations)
	}}
}

// recordPhase tells people why a parent moved.
func recordPhase(recorder record.EventRecorder, obj client.Object, from, to rollup.Phase, counts parentCounters) {
	kind := corev1.EventTypeNormal
	if to == rollup.WaitingForPluginOperationsPartiallyFailed || to == rollup.FinalizingPartiallyFailed {
		kind = corev1.EventTypeWarning
	}
	kube.Emitf(recorder, obj, kind, "PhaseChanged", "%s -> %s: %d of %d plugin operations completed, %d failed",
		from, to, counts.Completed, counts.Attempted, counts.Failed)
}

// parentKind adapts one Velero kind (Backup or Restore) to the rollup.
type parentKind[T client.Object] struct {
	kind       itemopsv1alpha1.ParentKind
	gvk        schema.GroupVersionKind
	pluginKind itemopsv1alpha1.PluginKind
	newObject  func() T
	phase      func(T) rollup.Phase
	counters   func(T) parentCounters
	setStatus  func(T, rollup.Phase, parentCounters)
	errors     func(T) int
	setErrors  func(T, int)
	started    func(T) *metav1.Time
	timeout    func(T) time.Duration
	finish     func(T, rollup.Phase, metav1.Time)
	read       func(context.Context, OperationsStore, T) ([]opRecord, error)
	// update replaces the operations file with what its function makes of
	// the records read (or of the read's error).
	update      func(context.Context, OperationsStore, T, func([]opRecord, error) ([]opRecord, error)) error
	controlName string
}

// parentReconciler creates the ItemOperations of a parent in
// WaitingForPluginOperations* from its operations file and, in manage mode,
// moves the parent on as they finish, writing the file back first: the job
// of Velero's backup-operations or restore-operations controller, which must
// then be disabled.
type parentReconciler[T client.Object] struct {
	client   client.Client
	recorder record.EventRecorder
	opts     ParentOptions
	kind     parentKind[T]

	mu sync.Mutex
	// counted is when each parent's counters were last patched, by UID.
	counted map[types.UID]time.Time
	// ingestions is the last reading of each parent's operations file, by UID.
	ingestions map[types.UID]ingestion
	// moved are the parents this reconciler moved to Finalizing* that the
	// cache still shows waiting, by UID: nothing is left to do for them, and
	// a reconcile of the stale copy would write the operations file again
	// only to fail on the optimistic lock.
	moved map[types.UID]bool
	// verdicts is each parent as it was when its file was last read for
	// the ends Velero recorded, by UID (see followVerdicts).
	verdicts map[types.UID]verdictState
}

// SetupWithManager registers the reconciler; a change of an operation that
// its parent acts on wakes the parent.
func (r *parentReconciler[T]) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(r.kind.controlName).
		For(r.kind.newObject()).
		Watches(&itemopsv1alpha1.ItemOperation{}, handler.EnqueueRequestsFromMapFunc(parentRequestForOperation(r.kind.kind)),
			builder.WithPredicates(operationChangeMatters())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.opts.MaxConcurrentReconciles)}).
		Complete(kube.QuietConflicts{Reconciler: r})
}

// Reconcile implements reconcile.Reconciler.
func (r *parentReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, err error) {
	parent := r.kind.newObject()
	if err := r.client.Get(ctx, req.NamespacedName, parent); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	phase := r.kind.phase(parent)
	if !rollup.Owned(phase) {
		r.forget(parent, phase)
		if r.opts.Manage || !postOperations(phase) {
			r.verdictsRead(parent, nil)
			return ctrl.Result{}, nil
		}
		// Velero is done with the operations and uploaded its final
		// records: the ItemOperations follow them.
		ops, err := listOperations(ctx, r.client, r.opts.Stores, parent.GetNamespace(), parent.GetUID())
		if err != nil || len(ops) == 0 {
			// None: a parent itemops never followed (one that ended
			// before it was installed, say) has nothing to show.
			return ctrl.Result{}, err
		}
		_, err = r.followVerdicts(ctx, parent, phase, r.kind.counters(parent), ops, rollup.Counts{})
		return ctrl.Result{}, err
	}
	if r.wasMoved(parent) {
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues(string(r.kind.kind), klog.KObj(parent)))
	old := r.kind.counters(parent)
	k, err := r.knownOperations(ctx, parent, old)
	if err != nil {
		return ctrl.Result{}, err
	}
	if k.recheck > 0 {
		defer func() {
			if err == nil && (result.RequeueAfter == 0 || result.RequeueAfter > k.recheck) {
				result.RequeueAfter = k.recheck
			}
		}()
	}
	ops, expected, extra, readErr := k.ops, k.expected, k.invalid, k.readErr
	if readErr != nil {
		var reason kube.EventReason = reasonUnreadable
		switch {
		case errors.Is(readErr, errMissingOperations):
			reason = reasonMissing
		case errors.Is(readErr, store.ErrTooLarge):
			reason = reasonTooLarge
		}
		kube.Emitf(r.recorder, parent, corev1.EventTypeWarning, reason, "%v", readErr)
		if r.opts.Manage && r.mustGiveUp(parent, readErr) {
			return ctrl.Result{}, r.giveUp(ctx, parent, phase, readErr)
		}
	}
	if readErr == nil {
		// Ends Velero recorded (observe mode; in manage mode, before
		// itemops took over) that the ItemOperations do not show yet.
		copied, err := r.followVerdicts(ctx, parent, phase, old, ops, extra)
		if err != nil {
			return ctrl.Result{}, err
		}
		if copied > 0 && r.opts.Manage {
			// Counted once they show them: each of their ends wakes the parent.
			return ctrl.Result{}, nil
		}
	}
	if !r.opts.Manage {
		return ctrl.Result{}, retryable(readErr)
	}
	if r.opts.Store != nil {
		// As Velero does: operations on a read-only location cannot be
		// recorded, so the parent ends PartiallyFailed at once.
		if err := r.opts.Store.CheckWritable(ctx, parent); errors.Is(err, store.ErrReadOnly) {
			return ctrl.Result{}, r.giveUp(ctx, parent, phase, err)
		}
	}

	counts := countOperations(ops)
	counts.Total += extra.Total
	counts.Failed += extra.Failed
	next, counters := nextParentState(phase, old, counts, expected)
	if next == phase && counters == old {
		r.forget(parent, next)
		return ctrl.Result{}, retryable(readErr)
	}
	if next == phase && counters.Failed == old.Failed && counters.Attempted == old.Attempted {
		if wait := r.counterWait(parent); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, retryable(readErr)
		}
	}
	// The file is written before the counters, so that it always holds
	// every end they count: Velero's finalizer reads it, and so does
	// Velero's own operations controller when itemops is removed or goes
	// back to observe mode, which would otherwise poll an operation that
	// itemops counted failed again and count its error a second time.
	if err := r.writeBack(ctx, parent, ops, !rollup.Owned(next)); err != nil {
		kube.Emitf(r.recorder, parent, corev1.EventTypeWarning, reasonNotWritten, "%v", err)
		if errors.Is(err, store.ErrReadOnly) || r.mustGiveUp(parent, err) {
			return ctrl.Result{}, r.giveUp(ctx, parent, phase, err)
		}
		return ctrl.Result{}, err
	}
	// Velero's Backup and Restore have no status subresource; the optimistic
	// lock makes sure nothing Velero wrote meanwhile is overwritten.
	patch := client.MergeFromWithOptions(parent.DeepCopyObject().(T), client.MergeFromWithOptimisticLock{})
	r.kind.setStatus(parent, next, counters)
	// Velero counts every failed operation as an error of its parent.
	if newlyFailed := counters.Failed - old.Failed; newlyFailed > 0 {
		r.kind.setErrors(parent, r.kind.errors(parent)+newlyFailed)
	}
	if err := r.client.Patch(ctx, parent, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating %s %s: %w", r.kind.kind, parent.GetName(), err)
	}
	r.counterPatched(parent)
	if next != phase {
		ctrl.LoggerFrom(ctx).Info("moved "+string(r.kind.kind), "from", phase, "to", next)
		recordPhase(r.recorder, parent, phase, next, counters)
	}
	r.forget(parent, next)
	if !rollup.Owned(next) {
		r.markMoved(parent)
	}
	return ctrl.Result{}, retryable(readErr)
}
