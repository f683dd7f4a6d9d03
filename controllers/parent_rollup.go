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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/rollup"
	"github.com/itemops/itemops/internal/store"
)

// +kubebuilder:rbac:groups=velero.io,namespace=velero,resources=backups;restores,verbs=patch
// +kubebuilder:rbac:groups=velero.io,namespace=velero,resources=backupstoragelocations,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=velero,resources=secrets,verbs=get

// OperationsStore reads and writes Velero's operations files; *store.Store
// is the real one.
type OperationsStore interface {
	BackupOperations(ctx context.Context, backup *velerov1api.Backup) ([]*itemoperation.BackupOperation, error)
	PutBackupOperations(ctx context.Context, backup *velerov1api.Backup, ops []*itemoperation.BackupOperation) error
	RestoreOperations(ctx context.Context, restore *velerov1api.Restore) ([]*itemoperation.RestoreOperation, error)
	PutRestoreOperations(ctx context.Context, restore *velerov1api.Restore, ops []*itemoperation.RestoreOperation) error
	// CheckWritable returns store.ErrReadOnly when the location of the
	// Backup or Restore takes no writes.
	CheckWritable(ctx context.Context, parent client.Object) error
}

var _ OperationsStore = (*store.Store)(nil)

// Event reasons on parents.
const (
	reasonIngested        = "OperationsIngested"
	reasonUnreadable      = "OperationsFileUnreadable"
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
// this UID: those Velero waits for. Volume snapshot operations are not
// among them (see VolumeSnapshotReconciler).
func listOperations(ctx context.Context, c client.Client, namespace string, uid types.UID) ([]itemopsv1alpha1.ItemOperation, error) {
	ops, err := listAllOperations(ctx, c, namespace, uid)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ops, func(op itemopsv1alpha1.ItemOperation) bool {
		return op.Spec.Plugin.Kind == itemopsv1alpha1.PluginKindVolumeSnapshotter
	}), nil
}

// listAllOperations returns every ItemOperation of the parent with this UID,
// through the cache's index by parent UID: a label selector would make the
// cache look at every ItemOperation of the namespace on every call.
//
// The items share their fields with the cache and must only be read: a
// parent is listed on every change of one of its operations, and copying
// its hundred operations each time was a fifth of the CPU at 10,000.
func listAllOperations(ctx context.Context, c client.Client, namespace string, uid types.UID) ([]itemopsv1alpha1.ItemOperation, error) {
	list := &itemopsv1alpha1.ItemOperationList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{IndexParentUID: string(uid)},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing operations: %w", err)
	}
	return list.Items, nil
}

// countOperations counts the records of operations by outcome.
func countOperations(ops []itemopsv1alpha1.ItemOperation) rollup.Counts {
	counts := rollup.Counts{}
	for i := range ops {
		// An operation repeated in the file counts once per record, as
		// Velero counts it.
		n := recordCount(&ops[i])
		counts.Total += n
		switch ops[i].Status.Phase {
		case itemopsv1alpha1.OperationPhaseCompleted:
			counts.Completed += n
		case itemopsv1alpha1.OperationPhaseFailed, itemopsv1alpha1.OperationPhaseCanceled:
			counts.Failed += n
		}
	}
	return counts
}

// nextParentState computes a parent's new phase and counters. Until as many
// operations as expected are known the parent never leaves
// WaitingForPluginOperations*, so that an operation not yet ingested can never
// be skipped. expected is what Velero recorded as attempted, or the number of
// records once the operations file has been read.
func nextParentState(phase rollup.Phase, old parentCounters, counts rollup.Counts, expected int) (rollup.Phase, parentCounters) {
	next := parentCounters{Attempted: max(old.Attempted, counts.Total), Completed: counts.Completed, Failed: counts.Failed}
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
	gvk         schema.GroupVersionKind
	pluginKind  itemopsv1alpha1.PluginKind
	newObject   func() T
	phase       func(T) rollup.Phase
	counters    func(T) parentCounters
	setStatus   func(T, rollup.Phase, parentCounters)
	errors      func(T) int
	setErrors   func(T, int)
	started     func(T) *metav1.Time
	timeout     func(T) time.Duration
	finish      func(T, rollup.Phase, metav1.Time)
	read        func(context.Context, OperationsStore, T) ([]opRecord, error)
	write       func(context.Context, OperationsStore, T, []opRecord) error
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
}

// SetupWithManager registers the reconciler; any change of an operation wakes its parent.
func (r *parentReconciler[T]) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(r.kind.controlName).
		For(r.kind.newObject()).
		Watches(&itemopsv1alpha1.ItemOperation{}, handler.EnqueueRequestsFromMapFunc(parentRequestForOperation(r.kind.kind))).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.opts.MaxConcurrentReconciles)}).
		Complete(quietConflicts{r})
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
		return ctrl.Result{}, nil
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
		reason := reasonUnreadable
		if errors.Is(readErr, errMissingOperations) {
			reason = reasonMissing
		}
		r.recorder.Eventf(parent, corev1.EventTypeWarning, reason, "%v", readErr)
		if r.opts.Manage && r.mustGiveUp(parent, readErr) {
			return ctrl.Result{}, r.giveUp(ctx, parent, phase, readErr)
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
	if next == rollup.Finalizing || next == rollup.FinalizingPartiallyFailed {
		// Velero's finalizer reads the file: it must hold what itemops saw.
		if err := r.writeBack(ctx, parent, ops); err != nil {
			r.recorder.Eventf(parent, corev1.EventTypeWarning, reasonNotWritten, "%v", err)
			if errors.Is(err, store.ErrReadOnly) || r.mustGiveUp(parent, err) {
				return ctrl.Result{}, r.giveUp(ctx, parent, phase, err)
			}
			return ctrl.Result{}, err
		}
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

// ingestSettle bounds how long after reading a parent's operations file
// the ItemOperations created from it that the cache does not list yet are
// taken as known without reading the file again.
const ingestSettle = 10 * time.Second

// ingestion is the last reading of a parent's operations file.
type ingestion struct {
	at       time.Time
	expected int
	invalid  rollup.Counts
	// pending are the ItemOperations made from it that the cache has not
	// listed yet, by name.
	pending map[string]itemopsv1alpha1.ItemOperation
}

func (r *parentReconciler[T]) ingested(parent T, result ingestResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ingestions == nil {
		r.ingestions = map[types.UID]ingestion{}
	}
	last := ingestion{at: r.now(), expected: result.expected, invalid: result.invalid,
		pending: make(map[string]itemopsv1alpha1.ItemOperation, len(result.made))}
	for _, op := range result.made {
		last.pending[op.Name] = op
	}
	r.ingestions[parent.GetUID()] = last
}

// lastIngestion returns the operations made from the file that the cache
// does not list yet, if it was read a moment ago. An operation the cache
// has listed since is no longer pending: when it disappears (deleted), the
// file is read again and it is made again.
func (r *parentReconciler[T]) lastIngestion(parent T, cached []itemopsv1alpha1.ItemOperation) (ingestion, []itemopsv1alpha1.ItemOperation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.ingestions[parent.GetUID()]
	if !ok || r.now().Sub(last.at) >= ingestSettle {
		return ingestion{}, nil, false
	}
	for _, op := range cached {
		delete(last.pending, op.Name)
	}
	if len(last.pending) == 0 {
		return ingestion{}, nil, false
	}
	pending := make([]itemopsv1alpha1.ItemOperation, 0, len(last.pending))
	for _, op := range last.pending {
		pending = append(pending, op)
	}
	return last, pending, true
}

// mergeOperations adds to the cached operations those made since that the
// cache does not list yet.
func mergeOperations(cached, made []itemopsv1alpha1.ItemOperation) []itemopsv1alpha1.ItemOperation {
	listed := make(map[string]bool, len(cached))
	for _, op := range cached {
		listed[op.Name] = true
	}
	out := cached
	for _, op := range made {
		if !listed[op.Name] {
			out = append(out, op)
		}
	}
	return out
}

// counterWait is how long a patch that only moves a parent's completed count
// must wait: Velero's own controller updates it once per sync, and with
// thousands of operations ending together a patch per ending would be a
// write storm on the parent.
func (r *parentReconciler[T]) counterWait(parent T) time.Duration {
	if r.opts.CounterInterval <= 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.counted[parent.GetUID()]
	if !ok {
		return 0
	}
	return r.opts.CounterInterval - r.now().Sub(last)
}

func (r *parentReconciler[T]) counterPatched(parent T) {
	if r.opts.CounterInterval <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counted == nil {
		r.counted = map[types.UID]time.Time{}
	}
	r.counted[parent.GetUID()] = r.now()
}

// forget drops what is kept of a parent that itemops no longer moves.
func (r *parentReconciler[T]) forget(parent T, phase rollup.Phase) {
	if rollup.Owned(phase) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.counted, parent.GetUID())
	delete(r.ingestions, parent.GetUID())
	delete(r.moved, parent.GetUID())
}

func (r *parentReconciler[T]) settled(parent T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ingestions, parent.GetUID())
}

func (r *parentReconciler[T]) markMoved(parent T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.moved == nil {
		r.moved = map[types.UID]bool{}
	}
	r.moved[parent.GetUID()] = true
}

func (r *parentReconciler[T]) wasMoved(parent T) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.moved[parent.GetUID()]
}

func (r *parentReconciler[T]) now() time.Time {
	if r.opts.Clock == nil {
		return time.Now()
	}
	return r.opts.Clock.Now()
}

// known is what a reconcile knows of a parent's operations.
type known struct {
	// ops are the parent's ItemOperations.
	ops []itemopsv1alpha1.ItemOperation
	// expected is how many operations the parent waits for.
	expected int
	// invalid are records that cannot become ItemOperations; they count as failed.
	invalid rollup.Counts
	// readErr is why the operations file could not be read, or why
	// operations Velero attempted are still missing.
	readErr error
	// recheck: operations made from the file are not listed by the cache
	// yet; reconcile again after this long if nothing else does.
	recheck time.Duration
}

// knownOperations lists the parent's ItemOperations and, while fewer exist
// than Velero attempted, reads the operations file and creates the missing
// ones. A parent whose operations are all known costs no object storage request.
func (r *parentReconciler[T]) knownOperations(ctx context.Context, parent T, old parentCounters) (known, error) {
	ops, err := listOperations(ctx, r.client, parent.GetNamespace(), parent.GetUID())
	if err != nil {
		return known{}, err
	}
	k := known{ops: ops, expected: old.Attempted}
	if r.opts.Store == nil || recordCounts(ops) >= max(old.Attempted, 1) {
		// Everything made from the last reading is listed: an operation
		// that disappears from now on is read from the file again at once.
		r.settled(parent)
		return k, nil
	}
	if last, pending, ok := r.lastIngestion(parent, ops); ok {
		// The file was read a moment ago and its operations created: the
		// cache has not caught up yet, and every creation it sees wakes
		// this parent again. Reading the file and creating again on each
		// of those events would cost an object storage read and a create
		// per record per event.
		k.ops, k.invalid = mergeOperations(ops, pending), last.invalid
		k.expected = max(old.Attempted, last.expected)
		k.recheck = ingestSettle // in case one never shows up
		return k, nil
	}
	records, err := r.kind.read(ctx, r.opts.Store, parent)
	if err != nil {
		k.readErr = err
		return k, nil
	}
	ingested, err := r.ingest(ctx, parent, records, ops)
	if err != nil {
		return known{}, err
	}
	r.ingested(parent, ingested)
	k.invalid = ingested.invalid
	k.expected = max(old.Attempted, ingested.expected)
	k.ops = mergeOperations(ops, ingested.made)
	if n := recordCounts(k.ops) + k.invalid.Total; n < old.Attempted {
		// Velero uploads the file before it records the attempts, so
		// records were lost: wait for them until no operation could
		// still be running, then give up.
		k.readErr = fmt.Errorf("%w: Velero attempted %d plugin operations, %d are known, the operations file lists %d",
			errMissingOperations, old.Attempted, n, ingested.expected)
	}
	return k, nil
}

// retryable is err when a later attempt may succeed, so the workqueue backs
// off and retries; a location or file that is wrong waits for a change instead.
func retryable(err error) error {
	if err == nil || errors.Is(err, store.ErrNoLocation) || errors.Is(err, store.ErrMalformed) {
		return nil
	}
	return err
}

// ingestResult is what reading the operations file found.
type ingestResult struct {
	// expected is the number of records of this parent.
	expected int
	// invalid are records that cannot become ItemOperations; they count as failed.
	invalid rollup.Counts
	// made are the ItemOperations of the records that the cache did not
	// list: created now, or found to exist already.
	made []itemopsv1alpha1.ItemOperation
}

// ingest creates the ItemOperation of every record that has none yet.
// Names are deterministic, so a second read or a restart creates nothing twice.
func (r *parentReconciler[T]) ingest(ctx context.Context, parent T, records []opRecord, existing []itemopsv1alpha1.ItemOperation) (ingestResult, error) {
	have := map[string]bool{}
	for _, op := range existing {
		have[op.Name] = true
	}
	// A record repeated in the file (the same plugin and operation ID) is
	// one operation: one ItemOperation follows it and counts for each record.
	names := make([]string, len(records))
	repeats, first := map[string]int{}, map[string]int{}
	for i, rec := range records {
		if rec.ParentUID != "" && rec.ParentUID != string(parent.GetUID()) {
			r.recorder.Eventf(parent, corev1.EventTypeWarning, reasonForeignRecord,
				"record %d of the operations file belongs to %s UID %s, not this one; ignored", i, r.kind.kind, rec.ParentUID)
			continue
		}
		names[i] = operationName(parent.GetName(), string(parent.GetUID()), rec.Plugin, rec.OperationID)
		repeats[names[i]]++
		if j, seen := first[names[i]]; seen {
			r.recorder.Eventf(parent, corev1.EventTypeWarning, reasonDuplicateRecord,
				"record %d of the operations file repeats record %d (operation %q of plugin %q); one ItemOperation follows both and counts for each",
				i, j, rec.OperationID, rec.Plugin)
			continue
		}
		first[names[i]] = i
	}
	result := ingestResult{}
	created := 0
	for i, rec := range records {
		if names[i] == "" {
			continue
		}
		result.expected++
		if first[names[i]] != i {
			continue
		}
		op, err := newItemOperation(parent, r.kind.gvk, r.kind.kind, r.kind.pluginKind, i, rec)
		if err != nil {
			return ingestResult{}, err
		}
		n := repeats[op.Name]
		if n > 1 {
			op.Annotations[itemopsv1alpha1.AnnotationRecords] = strconv.Itoa(n)
		}
		if have[op.Name] {
			continue
		}
		if err := r.client.Create(ctx, op); err != nil {
			switch {
			case apierrors.IsAlreadyExists(err):
				// Created by an earlier reconcile; the cache has not seen it yet.
				result.made = append(result.made, *op)
				continue
			case apierrors.IsInvalid(err):
				// Nothing can poll it: count it failed rather than wait for it forever.
				r.recorder.Eventf(parent, corev1.EventTypeWarning, reasonInvalidRecord,
					"operation %q of plugin %q cannot be tracked and counts as failed: %v", rec.OperationID, rec.Plugin, err)
				result.invalid.Total += n
				if rec.Status.Phase != itemoperation.OperationPhaseCompleted {
					result.invalid.Failed += n
				} else {
					result.invalid.Completed += n
				}
				continue
			}
			return ingestResult{}, fmt.Errorf("creating ItemOperation %s: %w", op.Name, err)
		}
		result.made = append(result.made, *op)
		created++
	}
	if created > 0 {
		ctrl.LoggerFrom(ctx).Info("ingested operations", "created", created, "records", len(records))
		r.recorder.Eventf(parent, corev1.EventTypeNormal, reasonIngested, "created %d ItemOperations from the %d records of the operations file", created, len(records))
	}
	return result, nil
}

// writeBack uploads the operations file with the status of every
// ItemOperation. Records with no ItemOperation are kept as Velero wrote them.
func (r *parentReconciler[T]) writeBack(ctx context.Context, parent T, ops []itemopsv1alpha1.ItemOperation) error {
	if r.opts.Store == nil {
		return nil
	}
	start := time.Now()
	records, err := r.kind.read(ctx, r.opts.Store, parent)
	if err != nil && !errors.Is(err, store.ErrMalformed) {
		return err
	}
	byName := map[string]itemopsv1alpha1.ItemOperation{}
	for _, op := range ops {
		byName[op.Name] = op
	}
	out := make([]opRecord, 0, max(len(records), len(ops)))
	inFile := map[string]bool{}
	for _, rec := range records {
		name := operationName(parent.GetName(), string(parent.GetUID()), rec.Plugin, rec.OperationID)
		// Every record of a repeated operation gets its status.
		if op, ok := byName[name]; ok {
			rec = toRecord(&op)
			inFile[name] = true
		}
		out = append(out, rec)
	}
	// Operations that are not in the file (created by hand) go last, in record order.
	rest := make([]itemopsv1alpha1.ItemOperation, 0, len(byName))
	for name, op := range byName {
		if !inFile[name] {
			rest = append(rest, op)
		}
	}
	slices.SortFunc(rest, func(a, b itemopsv1alpha1.ItemOperation) int {
		if d := recordIndex(&a) - recordIndex(&b); d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	for i := range rest {
		out = append(out, toRecord(&rest[i]))
	}
	if err := r.kind.write(ctx, r.opts.Store, parent, out); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("wrote the operations file back", "records", len(out), "took", time.Since(start).String())
	return nil
}

// WriteBack uploads the current state of the named parent's operations, if
// the parent is still waiting for them (a DownloadRequest asked for them).
func (r *parentReconciler[T]) WriteBack(ctx context.Context, key types.NamespacedName) error {
	parent := r.kind.newObject()
	if err := r.client.Get(ctx, key, parent); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !rollup.Owned(r.kind.phase(parent)) {
		return nil
	}
	ops, err := listOperations(ctx, r.client, parent.GetNamespace(), parent.GetUID())
	if err != nil {
		return err
	}
	if err := r.writeBack(ctx, parent, ops); err != nil {
		return fmt.Errorf("writing back the operations of %s %s: %w", r.kind.kind, key.Name, err)
	}
	return nil
}

// mustGiveUp reports whether the parent's operations can no longer be
// known or recorded: the location or file is wrong, or the object store has
// been failing for longer than any of the parent's operations may run.
func (r *parentReconciler[T]) mustGiveUp(parent T, err error) bool {
	if errors.Is(err, store.ErrNoLocation) || errors.Is(err, store.ErrMalformed) {
		return true
	}
	started := r.kind.started(parent)
	if started == nil {
		return false
	}
	timeout := r.kind.timeout(parent)
	if timeout <= 0 {
		timeout = defaultParentTimeout
	}
	return !r.opts.Clock.Now().Before(started.Add(timeout))
}

// giveUp ends a parent whose operations cannot be known or recorded in
// PartiallyFailed, as Velero does for a missing or read-only location,
// rather than leave it waiting for ever.
func (r *parentReconciler[T]) giveUp(ctx context.Context, parent T, phase rollup.Phase, cause error) error {
	patch := client.MergeFromWithOptions(parent.DeepCopyObject().(T), client.MergeFromWithOptimisticLock{})
	r.kind.finish(parent, parentPartiallyFailed, metav1.NewTime(r.opts.Clock.Now()))
	r.kind.setErrors(parent, r.kind.errors(parent)+1)
	if err := r.client.Patch(ctx, parent, patch); err != nil {
		return fmt.Errorf("updating %s %s: %w", r.kind.kind, parent.GetName(), err)
	}
	ctrl.LoggerFrom(ctx).Info("gave up on the operations of "+string(r.kind.kind), "from", phase, "to", parentPartiallyFailed, "cause", cause.Error())
	r.recorder.Eventf(parent, corev1.EventTypeWarning, reasonGaveUp, "%s -> %s: its plugin operations cannot be tracked: %v",
		phase, parentPartiallyFailed, cause)
	return nil
}
