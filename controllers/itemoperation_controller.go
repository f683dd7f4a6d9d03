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
	"sync"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"github.com/itemops/itemops/internal/kube"
	"github.com/itemops/itemops/internal/plugin"
	"github.com/itemops/itemops/internal/progress"
	"github.com/itemops/itemops/internal/store"
)

// DefaultOperationTimeout applies when neither the ItemOperation nor its
// parent sets one; it is Velero's default too.
const DefaultOperationTimeout = 4 * time.Hour

// VeleroTimeoutGrace is how long past an operation's deadline itemops waits,
// where Velero's own controllers time operations out (VeleroTimesOut), for
// Velero to record the end before it cancels the operation itself. Velero
// checks the deadline at each of its polls, 10 s apart by default.
const VeleroTimeoutGrace = 5 * time.Minute

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
	// Stores, when set, reads the operation to reconcile and its parent
	// from the cache's stores: one copy of the operation per reconcile
	// rather than two, and none of the parent.
	Stores *kube.Stores
	// Patcher, when set, sends the status writes and the releases of
	// finalizers without decoding the object the API server answers with
	// (the cache sees it through its watch); through Client when nil.
	Patcher *kube.Patcher

	// VeleroTimesOut: Velero's own operations controllers run beside
	// itemops (observe mode) and cancel and fail an operation past its
	// parent's itemOperationTimeout themselves. itemops leaves that timeout
	// to them, so that the plugin is asked to cancel once, and follows the
	// end Velero records; it cancels itself only when Velero has recorded
	// nothing VeleroTimeoutGrace after the deadline (Velero is stopped, say).
	// An ItemOperation's own spec.timeout, which Velero does not know, is
	// always itemops' to enforce.
	VeleroTimesOut bool
	// VeleroRecordsEnds: Velero's own operations controllers run beside
	// itemops (observe mode) and record how each operation of their files
	// ended. A requested cancel of such an operation is then not an
	// outcome until Velero records one: it stays Canceling whatever
	// itemops' own polls read, and ends as Velero's record says. In manage
	// mode, and for the snapshots of VolumeSnapshotters, which Velero does
	// not follow, the plugin's Progress ends it.
	VeleroRecordsEnds bool

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
	// Causes, when set, finds why an operation of Velero's data mover
	// waits (see explain); only stalls are explained when nil.
	Causes Causes
	// VeleroServer, when set, tells whether velero server runs, for an
	// operation that does not move.
	VeleroServer VeleroServer
	// NotMovingAfter is how long progress may stand still before an
	// operation that nothing else explains waits on NotMoving (zero: never).
	// Shorter than StallAfter: no operation is shown moving without
	// progress for longer than this.
	NotMovingAfter time.Duration
	// Lateness, when set, learns how late each plugin's estimates come and
	// has ETA polls made ahead of them by that (leadFor).
	Lateness *progress.Lateness
	// StatusWrites, when set, bounds the writes that only report progress
	// (see writeStatus); unbounded when nil.
	StatusWrites *rate.Limiter
	// Releases, when set, paces the release of finished operations'
	// finalizers (see release), each of which also spends a StatusWrites
	// token; unpaced when nil.
	Releases *rate.Limiter

	// releaseAt holds, by name, the turn a finished operation reserved for
	// the release of its finalizer.
	releaseAt sync.Map
	// polled holds the operations this process has polled (by name, a
	// polled), so that the first poll of each can spread the next over the
	// interval and ETA polling knows its last reading.
	polled sync.Map
	// causeErrors holds the last error of reading causes, logged once.
	causeErrors lastErrors
	// cancelTries counts, by name, the Cancel calls that could not reach
	// the plugin in a row.
	cancelTries sync.Map
}

// polled is what the last poll of an operation by this process left for the next.
type polled struct {
	// estimate is the time the next poll was made for, by an estimated
	// completion; zero for a regular poll.
	estimate time.Time
	// steps counts the polls in a row made for an estimate that found the
	// operation still running, up to the one that made this.
	steps int
	// predicted is the completion the poll's reading predicted; zero when
	// none.
	predicted time.Time
	// reading is what the poll read.
	reading reading
	// window holds the readings of about the last minute, for the
	// operation's throughput.
	window []progress.Sample
}

// SnapshotLocations reads VolumeSnapshotLocations.
type SnapshotLocations interface {
	SnapshotLocation(ctx context.Context, name string) (store.SnapshotLocation, error)
}

var _ SnapshotLocations = (*store.Store)(nil)

// SetupWithManager registers the reconciler; a change of a parent or a new
// DeleteBackupRequest wakes the parent's operations at once.
func (r *ItemOperationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("itemoperation").
		// Its own status writes do not wake an operation: it is polled on
		// its schedule, not once more after every write.
		// Velero's record of its end, copied by the parent reconciler,
		// does.
		For(&itemopsv1alpha1.ItemOperation{}, builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, deletionStarted(), recordChanged()))).
		Watches(&velerov1api.Backup{}, handler.EnqueueRequestsFromMapFunc(r.operationsOfParent), builder.WithPredicates(parentChangeMatters())).
		Watches(&velerov1api.Restore{}, handler.EnqueueRequestsFromMapFunc(r.operationsOfParent), builder.WithPredicates(parentChangeMatters())).
		Watches(&velerov1api.DeleteBackupRequest{}, handler.EnqueueRequestsFromMapFunc(r.operationsOfDeletedBackup)).
		// A mirror reads its object at every poll; a new phase or a
		// cancel is read at once.
		Watches(&velerov1api.PodVolumeBackup{}, handler.EnqueueRequestsFromMapFunc(mirrorOf), builder.WithPredicates(podVolumeChanged())).
		Watches(&velerov1api.PodVolumeRestore{}, handler.EnqueueRequestsFromMapFunc(mirrorOf), builder.WithPredicates(podVolumeChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(kube.QuietConflicts{Reconciler: r})
}

// mirrorOf is the ItemOperation that mirrors a PodVolumeBackup or
// PodVolumeRestore, found by its name.
func mirrorOf(_ context.Context, obj client.Object) []reconcile.Request {
	pv, ok := podVolumeOf(obj)
	if !ok || pv.parent == nil {
		return nil
	}
	name := mirrorName(pv.parent.Name, string(pv.parent.UID), pv.kind, obj.GetName())
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// podVolumeChanged passes the changes of a PodVolumeBackup or
// PodVolumeRestore that its mirror acts on at once: its phase, its cancel,
// its deletion. Its progress is read at the mirror's polls; its creation
// makes the mirror, whose own creation wakes it.
func podVolumeChanged() predicate.Funcs {
	changed := podVolumePhaseChanged()
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		UpdateFunc:  changed.UpdateFunc,
	}
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

// Reconcile implements reconcile.Reconciler.
func (r *ItemOperationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	op, unchanged, err := r.operation(ctx, req.NamespacedName)
	if err != nil {
		if apierrors.IsNotFound(err) {
			r.polled.Delete(req.NamespacedName)
			r.cancelTries.Delete(req.NamespacedName)
			r.releaseAt.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("itemoperation", klog.KObj(op)))

	if !op.DeletionTimestamp.IsZero() {
		return staleOr(r.reconcileDelete(ctx, op))
	}
	if op.Status.Created == nil {
		// Read from an operations file in which it had already finished:
		// record that, and there is nothing to poll or cancel.
		if finishedBeforeIngestion(op) {
			original, now := unchanged, r.Clock.Now()
			r.initialize(op, now)
			return r.writeEnd(ctx, original, op, now)
		}
	}
	if rec, ok := veleroVerdict(op); ok {
		return r.followVelero(ctx, unchanged, op, rec, r.Clock.Now())
	}
	if op.Status.Phase.IsTerminal() {
		r.polled.Delete(req.NamespacedName)
		return r.release(ctx, op)
	}
	original := unchanged
	if !controllerutil.ContainsFinalizer(op, itemopsv1alpha1.Finalizer) {
		patch := client.MergeFrom(unchanged)
		controllerutil.AddFinalizer(op, itemopsv1alpha1.Finalizer)
		if err := r.Client.Patch(ctx, op, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
		original = op.DeepCopy()
	}

	parent, err := r.parent(ctx, op)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	r.initialize(op, now)

	if reason, message := cancelReason(op, parent); reason != "" {
		switch {
		case !awaitsOutcome(reason) && !(op.IsMirror() && !parent.gone):
			if err := r.cancel(ctx, op, parent, reason, message, itemopsv1alpha1.OperationPhaseCanceled, now); err != nil {
				return staleOr(err)
			}
			return r.writeEnd(ctx, original, op, now)
		case op.Status.Phase != itemopsv1alpha1.OperationPhaseCanceling:
			// A request, not an outcome: the operation is Canceling until
			// Velero records its end (observe mode) or the plugin's
			// Progress reports it (manage mode).
			if err := r.cancel(ctx, op, parent, reason, message, itemopsv1alpha1.OperationPhaseCanceling, now); err != nil {
				return staleOr(err)
			}
		}
	}
	deadline, why := r.deadline(op, parent)
	if !now.Before(deadline) {
		if err := r.cancel(ctx, op, parent, itemopsv1alpha1.ReasonTimedOut, why,
			itemopsv1alpha1.OperationPhaseFailed, now); err != nil {
			return staleOr(err)
		}
		return r.writeEnd(ctx, original, op, now)
	}

	var last polled
	v, polledBefore := r.polled.Load(req.NamespacedName)
	if polledBefore {
		last = v.(polled)
	}
	if op.IsMirror() {
		r.pollMirror(ctx, op, now)
	} else {
		r.poll(ctx, op, parent, now)
	}
	if op.Status.Phase.IsTerminal() {
		r.learnLateness(op, last, now)
		return r.writeEnd(ctx, original, op, now)
	}
	r.explain(ctx, op, parent, now)
	window := measureRate(op, last.window, now)
	// A poll made for an estimated completion that finds the operation
	// still running: the estimate slipped.
	slipped := !last.estimate.IsZero() && !now.Before(last.estimate)
	steps := 0
	if slipped {
		steps = last.steps + 1
	}
	// Decided before the write: the status comes back from the API server
	// with its times cut to the second, and a poll timed by a cut estimate
	// came up to a second early and found the operation not quite done.
	read := readingOf(op, now)
	predicted := predictedEnd(op, recentEstimate(last.reading, read, op.Status.NTotal))
	wait, by := r.nextPoll(op, now, !polledBefore, slipped, predicted, r.leadFor(op, steps))
	if err := r.writeStatus(ctx, original, op, now); err != nil {
		return staleOr(err)
	}
	r.polled.Store(req.NamespacedName, polled{estimate: by, steps: steps, predicted: predicted, reading: read, window: window})
	// Counted from the reconcile's start, so the time the call and the
	// write took does not push the next poll past the interval.
	next := min(wait, deadline.Sub(now)) - r.Clock.Since(now)
	return ctrl.Result{RequeueAfter: max(next, time.Millisecond)}, nil
}

// operation reads the operation to reconcile: a copy to work on, and the
// copy as read, which must not be changed (through Stores it is the
// cache's own object).
func (r *ItemOperationReconciler) operation(ctx context.Context, key types.NamespacedName) (op, unchanged *itemopsv1alpha1.ItemOperation, err error) {
	cached, found, usable, err := kube.Stored[*itemopsv1alpha1.ItemOperation](r.Stores, key)
	switch {
	case err != nil:
		return nil, nil, err
	case usable && !found:
		return nil, nil, apierrors.NewNotFound(itemopsv1alpha1.GroupVersion.WithResource("itemoperations").GroupResource(), key.Name)
	case usable:
		return cached.DeepCopy(), cached, nil
	}
	op = &itemopsv1alpha1.ItemOperation{}
	if err := r.Client.Get(ctx, key, op); err != nil {
		return nil, nil, err
	}
	return op, op.DeepCopy(), nil
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
// to cancel. The release is not urgent, so it is paced by Releases rather
// than compete with the writes that report ends: a finished operation
// reserves its turn once and is reconciled again at it. When operations end
// faster than they are released, the backlog waits in the queue's delay,
// each reconciled twice, instead of coming back every sync to ask again and
// delaying the polls of those still running. Each release also spends a
// token of the StatusWrites budget, so that releases and progress writes
// together stay within it.
func (r *ItemOperationReconciler) release(ctx context.Context, op *itemopsv1alpha1.ItemOperation) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(op, itemopsv1alpha1.Finalizer) {
		return ctrl.Result{}, nil
	}
	key := client.ObjectKeyFromObject(op)
	if r.Releases != nil {
		now := r.Clock.Now()
		turn, reserved := r.releaseAt.Load(key)
		if !reserved {
			turn = now
			if res := r.Releases.ReserveN(now, 1); res.OK() {
				turn = now.Add(res.DelayFrom(now))
			}
			r.releaseAt.Store(key, turn)
		}
		if wait := turn.(time.Time).Sub(now); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	if err := r.removeFinalizer(ctx, op); err != nil {
		return ctrl.Result{}, err
	}
	r.releaseAt.Delete(key)
	// The release is a write the progress writes' budget counts too, so
	// that both together stay within it: the progress writes left out are
	// those that can wait for the next poll.
	if r.StatusWrites != nil {
		r.StatusWrites.ReserveN(r.Clock.Now(), 1)
	}
	return ctrl.Result{}, nil
}

// patch sends patch for op, to its status subresource when status is set.
// After a write through Patcher, op keeps the resourceVersion it had.
func (r *ItemOperationReconciler) patch(ctx context.Context, op *itemopsv1alpha1.ItemOperation, patch client.Patch, status bool) error {
	switch {
	case r.Patcher != nil && status:
		return r.Patcher.Patch(ctx, op, patch, "status")
	case r.Patcher != nil:
		return r.Patcher.Patch(ctx, op, patch)
	case status:
		return r.Client.Status().Patch(ctx, op, patch)
	}
	return r.Client.Patch(ctx, op, patch)
}

// deletionStarted passes the update that marks an object for deletion.
func deletionStarted() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
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

// errStale: the cached copy of an operation is older than the API server's,
// so acting on it could repeat what a previous reconcile already did.
var errStale = errors.New("the cached ItemOperation is out of date")

// staleOr turns errStale into an immediate retry, on a copy the cache will
// have caught up with; other errors go to the workqueue's backoff.
// A cancel that must be tried again comes back after its wait, without the
// workqueue's error backoff.
func staleOr(err error) (ctrl.Result, error) {
	var retry *cancelRetry
	switch {
	case errors.Is(err, errStale):
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	case errors.As(err, &retry):
		return ctrl.Result{RequeueAfter: retry.after}, nil
	}
	return ctrl.Result{}, err
}

// errMessage is the plugin's own words for a failure, without the call's prefix.
func errMessage(err error) string {
	var perr *plugin.Error
	if errors.As(err, &perr) && perr.Err != nil {
		return perr.Err.Error()
	}
	return err.Error()
}
