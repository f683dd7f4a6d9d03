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
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/metrics"
	"github.com/itemops/itemops/internal/plugin"
	"github.com/itemops/itemops/internal/store"
)

// DefaultOperationTimeout applies when neither the ItemOperation nor its
// parent sets one; it is Velero's default too.
const DefaultOperationTimeout = 4 * time.Hour

// +kubebuilder:rbac:groups=velero.io,namespace=velero,resources=backups;restores;deletebackuprequests,verbs=get;list;watch

// ItemOperationReconciler polls one operation's plugin, throttles what it
// writes, and cancels the operation on timeout, request, or when its parent
// goes away or fails.
type ItemOperationReconciler struct {
	Client client.Client
	// APIReader reads around the cache, to make sure an operation is not
	// cancelled twice on a stale copy; Client when nil.
	APIReader client.Reader
	Plugins   plugin.Client
	// SnapshotLocations gives VolumeSnapshotter plugins the configuration of
	// their VolumeSnapshotLocation; *store.Store is the real one.
	SnapshotLocations SnapshotLocations
	Recorder          record.EventRecorder
	Clock             clock.Clock

	// SyncFrequency is the time between two polls of an operation in progress.
	SyncFrequency time.Duration
	// ProgressUpdateInterval is the least time between two status writes
	// when only the progress moved.
	ProgressUpdateInterval time.Duration
	// StallAfter is how long progress may stand still before Stalled.
	StallAfter time.Duration
	// MaxProgressFailures is the budget of transport failures in a row.
	MaxProgressFailures int
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int
	// ETAPolling polls an operation whose progress predicts it finishes
	// before the next regular poll at the predicted time instead. Once a
	// predicted time has passed without the operation ending, the next
	// poll comes no sooner than MinPollInterval.
	ETAPolling      bool
	MinPollInterval time.Duration
	// StatusWrites, when set, bounds the writes that only report progress
	// (see writeStatus); unbounded when nil.
	StatusWrites *rate.Limiter

	// polled holds the operations this process has polled (by name), so
	// that the first poll of each can spread the next over the interval,
	// with the estimated completion the next poll was made for (a
	// time.Time, zero for a regular poll).
	polled sync.Map
}

// SnapshotLocations reads VolumeSnapshotLocations.
type SnapshotLocations interface {
	SnapshotLocation(ctx context.Context, name string) (store.SnapshotLocation, error)
}

var _ SnapshotLocations = (*store.Store)(nil)

// SetupWithManager registers the reconciler; a change of a parent or a new
// DeleteBackupRequest wakes the parent's operations at once.
func (r *ItemOperationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("itemoperation").
		// Its own status writes do not wake an operation: it is polled on
		// its schedule, not once more after every write.
		For(&itemopsv1alpha1.ItemOperation{}, builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, deletionStarted()))).
		Watches(&velerov1api.Backup{}, handler.EnqueueRequestsFromMapFunc(r.operationsOfParent), builder.WithPredicates(parentChangeMatters())).
		Watches(&velerov1api.Restore{}, handler.EnqueueRequestsFromMapFunc(r.operationsOfParent), builder.WithPredicates(parentChangeMatters())).
		Watches(&velerov1api.DeleteBackupRequest{}, handler.EnqueueRequestsFromMapFunc(r.operationsOfDeletedBackup)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(quietConflicts{r})
}

func (r *ItemOperationReconciler) operationsOfParent(ctx context.Context, parent client.Object) []reconcile.Request {
	return r.requestsFor(ctx, parent.GetNamespace(), client.MatchingFields{IndexParentUID: string(parent.GetUID())})
}

// parentChangeMatters passes the changes of a Backup or Restore that its
// operations act on: its deletion, a phase that means cancel (Failed,
// Deleting), and a new itemOperationTimeout. Counters and other phases do
// not wake every operation of the parent, which in manage mode would re-poll
// them all whenever one finished. (Velero's CRDs have no status subresource,
// so their generation moves with every status change too.)
func parentChangeMatters() predicate.Predicate {
	cancelling := func(obj client.Object) bool {
		switch p := obj.(type) {
		case *velerov1api.Backup:
			return p.Status.Phase == velerov1api.BackupPhaseFailed || p.Status.Phase == velerov1api.BackupPhaseDeleting ||
				!p.DeletionTimestamp.IsZero()
		case *velerov1api.Restore:
			return p.Status.Phase == velerov1api.RestorePhaseFailed || !p.DeletionTimestamp.IsZero()
		}
		return false
	}
	timeout := func(obj client.Object) time.Duration {
		switch p := obj.(type) {
		case *velerov1api.Backup:
			return p.Spec.ItemOperationTimeout.Duration
		case *velerov1api.Restore:
			return p.Spec.ItemOperationTimeout.Duration
		}
		return 0
	}
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return cancelling(e.ObjectNew) != cancelling(e.ObjectOld) || timeout(e.ObjectNew) != timeout(e.ObjectOld)
		},
	}
}

func (r *ItemOperationReconciler) operationsOfDeletedBackup(ctx context.Context, obj client.Object) []reconcile.Request {
	dbr, ok := obj.(*velerov1api.DeleteBackupRequest)
	if !ok {
		return nil
	}
	backup := &velerov1api.Backup{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: dbr.Namespace, Name: dbr.Spec.BackupName}, backup); err != nil {
		return nil
	}
	return r.operationsOfParent(ctx, backup)
}

func (r *ItemOperationReconciler) requestsFor(ctx context.Context, namespace string, selector client.ListOption) []reconcile.Request {
	list := &itemopsv1alpha1.ItemOperationList{}
	// Only the names are read: nothing is copied out of the cache.
	if err := r.Client.List(ctx, list, client.InNamespace(namespace), selector, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing operations of a parent")
		return nil
	}
	requests := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return requests
}

// parentState is what the operation needs to know about its Backup or Restore.
type parentState struct {
	// gone: deleted, or replaced by another object of the same name.
	gone    bool
	failed  bool
	backup  *velerov1api.Backup
	restore *velerov1api.Restore
	timeout *metav1.Duration
	// deletionRequested: a DeleteBackupRequest names the Backup.
	deletionRequested bool
}

// Reconcile implements reconcile.Reconciler.
func (r *ItemOperationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	op := &itemopsv1alpha1.ItemOperation{}
	if err := r.Client.Get(ctx, req.NamespacedName, op); err != nil {
		if apierrors.IsNotFound(err) {
			r.polled.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("itemoperation", klog.KObj(op)))

	if !op.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, op)
	}
	if op.Status.Phase == "" {
		// Read from an operations file in which it had already finished:
		// record that, and there is nothing to poll or cancel.
		if finishedBeforeIngestion(op) {
			original, now := op.DeepCopy(), r.Clock.Now()
			r.initialize(op, now)
			return r.writeEnd(ctx, original, op, now)
		}
	}
	if op.Status.Phase.IsTerminal() {
		r.polled.Delete(req.NamespacedName)
		return r.release(ctx, op)
	}
	if !controllerutil.ContainsFinalizer(op, itemopsv1alpha1.Finalizer) {
		patch := client.MergeFrom(op.DeepCopy())
		controllerutil.AddFinalizer(op, itemopsv1alpha1.Finalizer)
		if err := r.Client.Patch(ctx, op, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}

	parent, err := r.parent(ctx, op)
	if err != nil {
		return ctrl.Result{}, err
	}
	original := op.DeepCopy()
	now := r.Clock.Now()
	r.initialize(op, now)

	if reason, message := cancelReason(op, parent); reason != "" {
		if err := r.cancel(ctx, op, parent, reason, message, itemopsv1alpha1.OperationPhaseCanceled, now); err != nil {
			return staleOr(err)
		}
		return r.writeEnd(ctx, original, op, now)
	}
	deadline := op.Status.Created.Add(r.timeout(op, parent))
	if !now.Before(deadline) {
		if err := r.cancel(ctx, op, parent, itemopsv1alpha1.ReasonTimedOut,
			fmt.Sprintf("the operation did not finish within its timeout of %s", r.timeout(op, parent)),
			itemopsv1alpha1.OperationPhaseFailed, now); err != nil {
			return staleOr(err)
		}
		return r.writeEnd(ctx, original, op, now)
	}

	r.poll(ctx, op, parent, now)
	if op.Status.Phase.IsTerminal() {
		return r.writeEnd(ctx, original, op, now)
	}
	last, polledBefore := r.polled.Load(req.NamespacedName)
	// A poll made for an estimated completion that finds the operation
	// still running: the estimate slipped.
	slipped := polledBefore && !last.(time.Time).IsZero() && !now.Before(last.(time.Time))
	// Decided before the write: the status comes back from the API server
	// with its times cut to the second, and a poll timed by a cut estimate
	// came up to a second early and found the operation not quite done.
	wait, byEstimate := r.nextPoll(op, now, !polledBefore, slipped)
	var estimate time.Time
	if byEstimate {
		estimate = op.Status.EstimatedCompletion.Time
	}
	if err := r.writeStatus(ctx, original, op, now); err != nil {
		return staleOr(err)
	}
	r.polled.Store(req.NamespacedName, estimate)
	// Counted from the reconcile's start, so the time the call and the
	// write took does not push the next poll past the interval.
	next := min(wait, deadline.Sub(now)) - r.Clock.Since(now)
	return ctrl.Result{RequeueAfter: max(next, time.Millisecond)}, nil
}

// writeEnd writes the status of an operation that just ended and then
// releases it, in the same reconcile: its own status write does not wake it.
func (r *ItemOperationReconciler) writeEnd(ctx context.Context, original, op *itemopsv1alpha1.ItemOperation, now time.Time) (ctrl.Result, error) {
	r.polled.Delete(client.ObjectKeyFromObject(op))
	if err := r.writeStatus(ctx, original, op, now); err != nil {
		return staleOr(err)
	}
	return r.release(ctx, op)
}

// release removes the finalizer of a finished operation: it has nothing left
// to cancel. The release is not urgent, so it waits for the status write
// budget rather than compete with the writes that report ends.
func (r *ItemOperationReconciler) release(ctx context.Context, op *itemopsv1alpha1.ItemOperation) (ctrl.Result, error) {
	if controllerutil.ContainsFinalizer(op, itemopsv1alpha1.Finalizer) && r.StatusWrites != nil && !r.StatusWrites.Allow() {
		return ctrl.Result{RequeueAfter: jitter(r.SyncFrequency)}, nil
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, op)
}

// deletionStarted passes the update that marks an object for deletion.
func deletionStarted() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// etaMargin is added to a predicted completion, so that the poll at the
// predicted time finds the operation done rather than a moment short of it.
const etaMargin = 100 * time.Millisecond

// nextPoll is when to poll a running operation again: the sync frequency
// (with jitter, backed off after failures), or with ETA polling the
// predicted completion when that comes first (byEstimate). A poll that comes
// a moment before the operation ends is followed by one just after it, not
// a whole interval later. Only once an estimate has slipped (a poll made for
// it found the operation still running) is the next poll no sooner than
// MinPollInterval: an estimate that keeps slipping costs at most a poll per
// MinPollInterval until the operation ends.
//
// After the first poll by this process the next one is spread over the
// whole interval. Operations created together, or all of them when the
// manager starts, would otherwise be polled in waves of thousands at once;
// at 10,000 operations the end of each wave came later than the interval.
// Spread, the same polls come at an even rate, for half a poll more per
// operation.
func (r *ItemOperationReconciler) nextPoll(op *itemopsv1alpha1.ItemOperation, now time.Time, first, slipped bool) (wait time.Duration, byEstimate bool) {
	next := jitter(r.pollInterval(op))
	if first {
		next = spread(r.pollInterval(op))
	}
	if !r.ETAPolling || op.Status.PollFailures > 0 || op.Status.EstimatedCompletion == nil {
		return next, false
	}
	until := op.Status.EstimatedCompletion.Sub(now) + etaMargin
	if until >= next {
		return next, false
	}
	floor := etaMargin
	if slipped {
		floor = r.MinPollInterval
	}
	return max(until, floor), true
}

// maxRetryInterval bounds the backoff between failing polls.
const maxRetryInterval = 5 * time.Minute

// pollInterval is the sync frequency, doubled for every failed poll in a
// row, so a plugin in trouble is not hammered.
func (r *ItemOperationReconciler) pollInterval(op *itemopsv1alpha1.ItemOperation) time.Duration {
	d := r.SyncFrequency
	for i := int32(1); i < op.Status.PollFailures && d < maxRetryInterval; i++ {
		d *= 2
	}
	return min(d, max(r.SyncFrequency, maxRetryInterval))
}

// jitter draws the next poll between 85% and 95% of the interval: early
// rather than late, so that every operation is still polled at least once
// per interval. The last 5% is for the workqueue to hand the poll out: at
// 10,000 operations on two cores a poll due at 100% came up to 260 ms late,
// and one due at 97% once 341 ms.
func jitter(d time.Duration) time.Duration {
	return d - d*5/100 - time.Duration(rand.Int64N(int64(d)/10+1))
}

// spread is a time drawn evenly between 10% and 95% of d.
func spread(d time.Duration) time.Duration {
	return d/10 + time.Duration(rand.Int64N(int64(d)*85/100+1))
}

// parent reads the operation's Backup or Restore.
func (r *ItemOperationReconciler) parent(ctx context.Context, op *itemopsv1alpha1.ItemOperation) (*parentState, error) {
	key := types.NamespacedName{Namespace: op.Namespace, Name: op.Spec.Parent.Name}
	state := &parentState{}
	var obj client.Object
	switch op.Spec.Parent.Kind {
	case itemopsv1alpha1.ParentKindRestore:
		state.restore = &velerov1api.Restore{}
		obj = state.restore
	default:
		state.backup = &velerov1api.Backup{}
		obj = state.backup
	}
	if err := r.Client.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			state.gone = true
			return state, nil
		}
		return nil, fmt.Errorf("reading %s %s: %w", op.Spec.Parent.Kind, key.Name, err)
	}
	if string(obj.GetUID()) != op.Spec.Parent.UID {
		state.gone = true
		return state, nil
	}
	if state.backup != nil {
		state.failed = state.backup.Status.Phase == velerov1api.BackupPhaseFailed
		state.deletionRequested = state.backup.Status.Phase == velerov1api.BackupPhaseDeleting
		if state.backup.Spec.ItemOperationTimeout.Duration > 0 {
			state.timeout = &state.backup.Spec.ItemOperationTimeout
		}
		if !state.deletionRequested {
			requested, err := r.deletionRequested(ctx, state.backup)
			if err != nil {
				return nil, err
			}
			state.deletionRequested = requested
		}
	} else {
		state.failed = state.restore.Status.Phase == velerov1api.RestorePhaseFailed
		if state.restore.Spec.ItemOperationTimeout.Duration > 0 {
			state.timeout = &state.restore.Spec.ItemOperationTimeout
		}
	}
	return state, nil
}

// deletionRequested reports whether a DeleteBackupRequest made since the
// backup was created names it.
func (r *ItemOperationReconciler) deletionRequested(ctx context.Context, backup *velerov1api.Backup) (bool, error) {
	list := &velerov1api.DeleteBackupRequestList{}
	if err := r.Client.List(ctx, list, client.InNamespace(backup.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("listing DeleteBackupRequests: %w", err)
	}
	for _, dbr := range list.Items {
		if dbr.Spec.BackupName != backup.Name || dbr.CreationTimestamp.Before(&backup.CreationTimestamp) {
			continue
		}
		if uid, ok := dbr.Labels[velerov1api.BackupUIDLabel]; ok && uid != string(backup.UID) {
			continue
		}
		// A processed request for a backup that still exists is one Velero
		// refused ("backup is still in progress"): the deletion was still
		// asked for, and cancelling lets the backup end so it can be deleted.
		return true, nil
	}
	return false, nil
}

// timeout is the operation's own timeout, else its parent's, else the default.
func (r *ItemOperationReconciler) timeout(op *itemopsv1alpha1.ItemOperation, parent *parentState) time.Duration {
	if op.Spec.Timeout != nil {
		return op.Spec.Timeout.Duration
	}
	if parent != nil && parent.timeout != nil {
		return parent.timeout.Duration
	}
	return DefaultOperationTimeout
}

// cancelReason says why the operation must be cancelled now, if it must.
func cancelReason(op *itemopsv1alpha1.ItemOperation, parent *parentState) (string, string) {
	kind, name := op.Spec.Parent.Kind, op.Spec.Parent.Name
	switch {
	case op.Spec.Cancel:
		return itemopsv1alpha1.ReasonCancelRequested, "spec.cancel was set"
	case parent.gone:
		return itemopsv1alpha1.ReasonParentDeleted, fmt.Sprintf("%s %s (uid %s) no longer exists", kind, name, op.Spec.Parent.UID)
	case parent.failed:
		return itemopsv1alpha1.ReasonParentFailed, fmt.Sprintf("%s %s failed", kind, name)
	case parent.deletionRequested:
		return itemopsv1alpha1.ReasonBackupDeletionRequested, fmt.Sprintf("deletion of Backup %s was requested", name)
	}
	return "", ""
}

// errSnapshotLocation: a VolumeSnapshotter cannot be called, because the
// configuration it must be initialised with cannot be read.
var errSnapshotLocation = errors.New("snapshot location unavailable")

// pluginOperation is how the plugin layer names the operation. A
// VolumeSnapshotter also needs its location's configuration.
func (r *ItemOperationReconciler) pluginOperation(ctx context.Context, op *itemopsv1alpha1.ItemOperation, parent *parentState) (plugin.Operation, error) {
	p := plugin.Operation{Kind: op.Spec.Plugin.Kind, Plugin: op.Spec.Plugin.Name, ID: op.Spec.OperationID}
	if parent != nil && !parent.gone {
		p.Backup, p.Restore = parent.backup, parent.restore
	}
	if op.Spec.Plugin.Kind != itemopsv1alpha1.PluginKindVolumeSnapshotter {
		return p, nil
	}
	if r.SnapshotLocations == nil {
		return p, fmt.Errorf("%w: itemops was started without access to VolumeSnapshotLocations", errSnapshotLocation)
	}
	location, err := r.SnapshotLocations.SnapshotLocation(ctx, op.Spec.SnapshotLocation)
	if err != nil {
		return p, fmt.Errorf("%w: %v", errSnapshotLocation, err)
	}
	p.SnapshotConfig = location.Config
	return p, nil
}

// reconcileDelete cancels an unfinished operation before letting it go.
func (r *ItemOperationReconciler) reconcileDelete(ctx context.Context, op *itemopsv1alpha1.ItemOperation) error {
	r.polled.Delete(client.ObjectKeyFromObject(op))
	if !controllerutil.ContainsFinalizer(op, itemopsv1alpha1.Finalizer) {
		return nil
	}
	if !op.Status.Phase.IsTerminal() {
		parent, err := r.parent(ctx, op)
		if err != nil {
			return err
		}
		original := op.DeepCopy()
		now := r.Clock.Now()
		r.initialize(op, now)
		reason, message := itemopsv1alpha1.ReasonObjectDeleted, "the ItemOperation was deleted before the operation finished"
		if parent.gone {
			reason, message = cancelReason(op, parent)
		}
		if err := r.cancel(ctx, op, parent, reason, message, itemopsv1alpha1.OperationPhaseCanceled, now); err != nil {
			if errors.Is(err, errStale) {
				return err // the workqueue retries on a fresh copy
			}
			return client.IgnoreNotFound(err)
		}
		if err := r.writeStatus(ctx, original, op, now); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return r.removeFinalizer(ctx, op)
}

func (r *ItemOperationReconciler) removeFinalizer(ctx context.Context, op *itemopsv1alpha1.ItemOperation) error {
	if !controllerutil.ContainsFinalizer(op, itemopsv1alpha1.Finalizer) {
		return nil
	}
	patch := client.MergeFrom(op.DeepCopy())
	controllerutil.RemoveFinalizer(op, itemopsv1alpha1.Finalizer)
	if err := r.Client.Patch(ctx, op, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer: %w", err)
	}
	return nil
}

// errStale: the cached copy of an operation is older than the API server's,
// so acting on it could repeat what a previous reconcile already did.
var errStale = errors.New("the cached ItemOperation is out of date")

// staleOr turns errStale into an immediate retry, on a copy the cache will
// have caught up with; other errors go to the workqueue's backoff.
func staleOr(err error) (ctrl.Result, error) {
	if errors.Is(err, errStale) {
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	return ctrl.Result{}, err
}

// cancel calls the plugin's Cancel once per operation, records the answer in
// the Canceled condition and an Event, and ends the operation in phase.
// Cancel has an effect outside the API server, so it is only called on a copy
// that is the API server's latest: a reconcile woken by several events at
// once must not cancel again on a stale cache.
func (r *ItemOperationReconciler) cancel(ctx context.Context, op *itemopsv1alpha1.ItemOperation, parent *parentState,
	reason, why string, phase itemopsv1alpha1.OperationPhase, now time.Time) error {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	live := &itemopsv1alpha1.ItemOperation{}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(op), live); err != nil {
		return fmt.Errorf("reading the operation before cancelling it: %w", err)
	}
	if live.ResourceVersion != op.ResourceVersion {
		return errStale
	}
	answer := "the plugin accepted the cancel request"
	target, err := r.pluginOperation(ctx, op, parent)
	if err == nil {
		err = r.Plugins.Cancel(ctx, target)
	}
	metrics.CancelCall(op.Spec.Plugin.Kind, op.Spec.Plugin.Name, reason, callResult(err))
	switch {
	case errors.Is(err, errSnapshotLocation):
		answer = "the plugin could not be asked to cancel it: " + err.Error()
	case err != nil:
		answer = "the plugin could not cancel it: " + err.Error()
	}
	message := why + "; " + answer
	ctrl.LoggerFrom(ctx).Info("cancelled operation", "reason", reason, "message", message)
	r.Recorder.Event(op, corev1.EventTypeWarning, reason, "Cancel: "+message)
	setCondition(op, itemopsv1alpha1.ConditionCanceled, metav1.ConditionTrue, reason, message, now)
	op.Status.Error = why
	r.finish(op, phase, now)
	return nil
}

// errMessage is the plugin's own words for a failure, without the call's prefix.
func errMessage(err error) string {
	var perr *plugin.Error
	if errors.As(err, &perr) && perr.Err != nil {
		return perr.Err.Error()
	}
	return err.Error()
}
