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
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
)

// unitScheme knows ItemOperations and Velero's kinds, for the fake client.
func unitScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{itemopsv1alpha1.AddToScheme, velerov1api.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return scheme
}

// conflicting is a reconciler that always loses an optimistic-lock race.
type conflicting struct{ err error }

func (c conflicting) Reconcile(context.Context, ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, c.err
}

var _ = Describe("Writes of the parent reconcilers", Label("unit"), func() {
	// Operations ending one by one
	// move a parent's completed count at most once per CounterInterval, while a
	// failure and the final move are patched at once.
	It("completed count is patched once per interval", func() {
		t := GinkgoTB()
		ctx := context.Background()
		scheme := unitScheme(t)
		backup := &velerov1api.Backup{
			ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "velero", UID: "uid-b"},
			Status:     velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations, BackupItemOperationsAttempted: 4},
		}
		objects := []client.Object{backup}
		for i := range 4 {
			objects = append(objects, &itemopsv1alpha1.ItemOperation{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("op-%d", i), Namespace: "velero"},
				Spec: itemopsv1alpha1.ItemOperationSpec{
					Parent: itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindBackup, Name: "b", UID: "uid-b"},
					Plugin: itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: "example.io/p"},
				},
				Status: itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress},
			})
		}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).
			WithStatusSubresource(&itemopsv1alpha1.ItemOperation{}).
			WithIndex(&itemopsv1alpha1.ItemOperation{}, IndexParentUID, parentUID).Build()
		clock := clocktesting.NewFakeClock(time.Now())
		r := NewBackupReconciler(c, record.NewFakeRecorder(100), ParentOptions{Manage: true, Clock: clock, CounterInterval: 10 * time.Second})

		end := func(i int, phase itemopsv1alpha1.OperationPhase) {
			t.Helper()
			op := &itemopsv1alpha1.ItemOperation{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "velero", Name: fmt.Sprintf("op-%d", i)}, op); err != nil {
				t.Fatal(err)
			}
			op.Status.Phase = phase
			if err := c.Status().Update(ctx, op); err != nil {
				t.Fatal(err)
			}
		}
		reconcile := func() (ctrl.Result, velerov1api.BackupStatus) {
			t.Helper()
			result, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)})
			if err != nil {
				t.Fatal(err)
			}
			got := &velerov1api.Backup{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(backup), got); err != nil {
				t.Fatal(err)
			}
			return result, got.Status
		}

		end(0, itemopsv1alpha1.OperationPhaseCompleted)
		if _, s := reconcile(); s.BackupItemOperationsCompleted != 1 {
			t.Fatalf("the first completion was not counted at once: %+v", s)
		}
		end(1, itemopsv1alpha1.OperationPhaseCompleted)
		clock.Step(4 * time.Second)
		result, s := reconcile()
		if s.BackupItemOperationsCompleted != 1 {
			t.Errorf("a second completion 4s later was patched at once: completed = %d", s.BackupItemOperationsCompleted)
		}
		if result.RequeueAfter != 6*time.Second {
			t.Errorf("the held count is written after %s, want 6s", result.RequeueAfter)
		}
		end(2, itemopsv1alpha1.OperationPhaseFailed)
		if _, s := reconcile(); s.Phase != velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed ||
			s.BackupItemOperationsCompleted != 2 || s.BackupItemOperationsFailed != 1 {
			t.Errorf("a failure was not patched at once with the counts: %+v", s)
		}
		clock.Step(10 * time.Second)
		end(3, itemopsv1alpha1.OperationPhaseCompleted)
		if _, s := reconcile(); s.Phase != velerov1api.BackupPhaseFinalizingPartiallyFailed || s.BackupItemOperationsCompleted != 3 {
			t.Errorf("the last operation's end did not move the backup on: %+v", s)
		}
		if len(r.counted) != 0 {
			t.Errorf("a parent itemops no longer moves is still remembered: %v", r.counted)
		}
	})

	// Creating a parent's
	// ItemOperations wakes the parent once per creation while the cache (here:
	// one that lists none of them) still lags; those wake-ups must not read the
	// file, create everything again or report the operations missing.
	It("operations just created are not read again", func() {
		t := GinkgoTB()
		ctx := context.Background()
		scheme := unitScheme(t)
		const n = 20
		backup, store := waitingBackupWithRecords("b", "uid-lag", n)
		creates := 0
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(backup).
			WithIndex(&itemopsv1alpha1.ItemOperation{}, IndexParentUID, parentUID).
			WithInterceptorFuncs(interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if _, ok := list.(*itemopsv1alpha1.ItemOperationList); ok {
						return nil // the cache has seen none of them yet
					}
					return c.List(ctx, list, opts...)
				},
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					creates++
					return c.Create(ctx, obj, opts...)
				},
			}).Build()
		recorder := record.NewFakeRecorder(100)
		clock := clocktesting.NewFakeClock(time.Now())
		r := NewBackupReconciler(c, recorder, ParentOptions{Manage: true, Store: store, Clock: clock})
		for range 3 {
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)}); err != nil {
				t.Fatal(err)
			}
		}
		if reads, _ := store.counts(string(backup.UID)); reads != 1 {
			t.Errorf("the operations file was read %d times for one ingestion", reads)
		}
		if creates != n {
			t.Errorf("%d creates for %d records", creates, n)
		}
		close(recorder.Events)
		for e := range recorder.Events {
			if strings.Contains(e, reasonMissing) {
				t.Errorf("operations just created were reported missing: %s", e)
			}
		}
		// The cache never shows them (say they were deleted): after a while
		// the file is read again, so nothing stays missing for ever.
		clock.Step(ingestSettle)
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)}); err != nil {
			t.Fatal(err)
		}
		if reads, _ := store.counts(string(backup.UID)); reads != 2 {
			t.Errorf("the file was not read again once the operations failed to show up: %d reads", reads)
		}
	})

	// After moving a parent to
	// Finalizing, a reconcile of the cache's older copy (still waiting) neither
	// writes the operations file again nor patches the parent.
	It("a moved parent is not written again from a stale copy", func() {
		t := GinkgoTB()
		ctx := context.Background()
		scheme := unitScheme(t)
		backup := &velerov1api.Backup{
			ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "velero", UID: "uid-b"},
			Status:     velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations, BackupItemOperationsAttempted: 1},
		}
		op := &itemopsv1alpha1.ItemOperation{
			ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "velero"},
			Spec: itemopsv1alpha1.ItemOperationSpec{
				Parent: itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindBackup, Name: "b", UID: "uid-b"},
				Plugin: itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: "example.io/p"},
			},
			Status: itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseCompleted},
		}
		var stale *velerov1api.Backup
		patches := 0
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(backup, op).
			WithIndex(&itemopsv1alpha1.ItemOperation{}, IndexParentUID, parentUID).
			WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if b, ok := obj.(*velerov1api.Backup); ok && stale != nil {
						stale.DeepCopyInto(b)
						return nil
					}
					return c.Get(ctx, key, obj, opts...)
				},
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					if _, ok := obj.(*velerov1api.Backup); ok {
						patches++
					}
					return c.Patch(ctx, obj, patch, opts...)
				},
			}).Build()
		files := newFakeStore()
		files.setBackup("uid-b", []*itemoperation.BackupOperation{{Spec: itemoperation.BackupOperationSpec{
			BackupUID: "uid-b", BackupItemAction: "example.io/p", OperationID: "1"}}})
		r := NewBackupReconciler(c, record.NewFakeRecorder(100), ParentOptions{Manage: true, Store: files})

		stale = nil
		cached := &velerov1api.Backup{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(backup), cached); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)}); err != nil {
			t.Fatal(err)
		}
		_, writesBefore := files.counts("uid-b")
		if patches != 1 || writesBefore != 1 {
			t.Fatalf("moving the backup took %d patches and %d file writes, want 1 and 1", patches, writesBefore)
		}
		stale = cached
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)}); err != nil {
			t.Fatalf("reconciling the stale copy: %v", err)
		}
		if _, writes := files.counts("uid-b"); patches != 1 || writes != writesBefore {
			t.Errorf("the stale copy led to %d more patches and %d more file writes", patches-1, writes-writesBefore)
		}
	})

	// A Backup of 100,000 operations is
	// followed whole, one ItemOperation per record, all counted: none is
	// dropped for being one too many. (Against a real API server the creates go
	// at the manager's --kube-api-qps.)
	It("huge operations file is ingested whole", func() {
		t := GinkgoTB()
		ctx := context.Background()
		const n = 100_000
		backup, store := waitingBackupWithRecords("huge", "uid-huge", n)
		c := fake.NewClientBuilder().WithScheme(unitScheme(t)).WithObjects(backup).
			WithIndex(&itemopsv1alpha1.ItemOperation{}, IndexParentUID, parentUID).Build()
		recorder := record.NewFakeRecorder(1000)
		r := NewBackupReconciler(c, recorder, ParentOptions{Manage: true, Store: store, Clock: clocktesting.NewFakeClock(time.Now())})
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)}); err != nil {
			t.Fatal(err)
		}
		ops := &itemopsv1alpha1.ItemOperationList{}
		if err := c.List(ctx, ops); err != nil {
			t.Fatal(err)
		}
		if len(ops.Items) != n {
			t.Fatalf("%d ItemOperations for %d records", len(ops.Items), n)
		}
		ids := make(map[string]bool, n)
		for _, op := range ops.Items {
			ids[op.Spec.OperationID] = true
		}
		if len(ids) != n {
			t.Errorf("%d distinct operations among %d ItemOperations", len(ids), n)
		}
		got := &velerov1api.Backup{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(backup), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != velerov1api.BackupPhaseWaitingForPluginOperations || got.Status.BackupItemOperationsAttempted != n {
			t.Errorf("the Backup is %s with %d attempted, want still waiting for all %d", got.Status.Phase, got.Status.BackupItemOperationsAttempted, n)
		}
		close(recorder.Events)
		for e := range recorder.Events {
			if strings.Contains(e, reasonMissing) || strings.Contains(e, reasonInvalidRecord) {
				t.Errorf("unexpected event: %s", e)
			}
		}
	})

	It("conflicts are requeued quietly and other errors returned", func() {
		t := GinkgoTB()
		conflict := apierrors.NewConflict(schema.GroupResource{Group: "velero.io", Resource: "backups"}, "b",
			errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		res, err := kube.QuietConflicts{Reconciler: conflicting{fmt.Errorf("patching backup b: %w", conflict)}}.Reconcile(context.Background(), ctrl.Request{})
		if err != nil || res.RequeueAfter != kube.ConflictRetry {
			t.Errorf("a conflict: result %+v, error %v; want a requeue after %s and no error", res, err, kube.ConflictRetry)
		}
		other := errors.New("connection refused")
		if _, err := (kube.QuietConflicts{Reconciler: conflicting{other}}).Reconcile(context.Background(), ctrl.Request{}); !errors.Is(err, other) {
			t.Errorf("another error: got %v, want it returned", err)
		}
	})

	// A parent acts on its operations' phases and the records they stand
	// for; their progress and the release of their finalizers wake it no more.
	It("wakes a parent only for changes of its operations that it acts on", func() {
		t := GinkgoTB()
		old := &itemopsv1alpha1.ItemOperation{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "velero", Generation: 1,
			Labels: map[string]string{itemopsv1alpha1.LabelParentKind: "Backup"}, Annotations: map[string]string{itemopsv1alpha1.AnnotationRecords: "1"},
			Finalizers: []string{itemopsv1alpha1.Finalizer}},
			Status: itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress, NCompleted: 10, NTotal: 100}}
		changed := func(change func(*itemopsv1alpha1.ItemOperation)) *itemopsv1alpha1.ItemOperation {
			op := old.DeepCopy()
			change(op)
			return op
		}
		cases := []struct {
			name string
			new  *itemopsv1alpha1.ItemOperation
			want bool
		}{
			{"progress", changed(func(op *itemopsv1alpha1.ItemOperation) {
				op.Status.NCompleted = 50
				op.Status.Progress = "50/100 (50%)"
			}), false},
			{"finalizer released", changed(func(op *itemopsv1alpha1.ItemOperation) { op.Finalizers = nil }), false},
			{"completed", changed(func(op *itemopsv1alpha1.ItemOperation) { op.Status.Phase = itemopsv1alpha1.OperationPhaseCompleted }), true},
			{"cancel requested", changed(func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Cancel = true; op.Generation = 2 }), true},
			{"deletion started", changed(func(op *itemopsv1alpha1.ItemOperation) { op.DeletionTimestamp = &metav1.Time{Time: time.Now()} }), true},
			{"records", changed(func(op *itemopsv1alpha1.ItemOperation) { op.Annotations[itemopsv1alpha1.AnnotationRecords] = "2" }), true},
			{"labels", changed(func(op *itemopsv1alpha1.ItemOperation) { op.Labels[itemopsv1alpha1.LabelParentKind] = "Restore" }), true},
		}
		p := operationChangeMatters()
		for _, tc := range cases {
			if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: tc.new}); got != tc.want {
				t.Errorf("%s: wakes the parent = %v, want %v", tc.name, got, tc.want)
			}
		}
		// Phases: only an end changes what the parent counts.
		for _, tc := range []struct {
			from, to itemopsv1alpha1.OperationPhase
			want     bool
		}{
			{"", itemopsv1alpha1.OperationPhaseNew, false},
			{itemopsv1alpha1.OperationPhaseNew, itemopsv1alpha1.OperationPhaseInProgress, false},
			{"", itemopsv1alpha1.OperationPhaseInProgress, false},
			{itemopsv1alpha1.OperationPhaseNew, itemopsv1alpha1.OperationPhaseCompleted, true},
			{itemopsv1alpha1.OperationPhaseInProgress, itemopsv1alpha1.OperationPhaseFailed, true},
			{itemopsv1alpha1.OperationPhaseInProgress, itemopsv1alpha1.OperationPhaseCanceled, true},
			{"", itemopsv1alpha1.OperationPhaseCompleted, true},
		} {
			from := changed(func(op *itemopsv1alpha1.ItemOperation) { op.Status.Phase = tc.from })
			to := changed(func(op *itemopsv1alpha1.ItemOperation) { op.Status.Phase = tc.to })
			if got := p.Update(event.UpdateEvent{ObjectOld: from, ObjectNew: to}); got != tc.want {
				t.Errorf("phase %q -> %q: wakes the parent = %v, want %v", tc.from, tc.to, got, tc.want)
			}
		}
		if !p.Create(event.CreateEvent{Object: old}) || !p.Delete(event.DeleteEvent{Object: old}) {
			t.Error("the creation and the deletion of an operation must wake its parent")
		}
	})
})

// A parent's operations are counted on every change of one of them: the
// count of an operation that stands for one record (nearly all) allocates
// nothing.
var _ = Describe("Records written back", Label("unit"), func() {
	It("keeps Velero's record of an operation whose status is not written yet, as its parent counts it", func() {
		t := GinkgoTB()
		created := metav1.NewTime(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC))
		for _, tc := range []struct {
			name   string
			record itemoperation.OperationStatus
			status itemopsv1alpha1.ItemOperationStatus
			want   itemoperation.OperationPhase
			error  string
		}{
			{"failed in Velero's file, not polled yet",
				itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseFailed, Error: "transfer cancelled", Created: &created},
				itemopsv1alpha1.ItemOperationStatus{}, itemoperation.OperationPhaseFailed, "transfer cancelled"},
			{"in progress in Velero's file, not polled yet",
				itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseInProgress, Created: &created},
				itemopsv1alpha1.ItemOperationStatus{}, itemoperation.OperationPhaseInProgress, ""},
			{"polled since: its own status",
				itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseInProgress, Created: &created},
				itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseCanceled, Created: &created, Error: "canceled"},
				itemoperation.OperationPhaseFailed, "canceled"},
		} {
			raw, err := json.Marshal(tc.record)
			if err != nil {
				t.Fatal(err)
			}
			op := &itemopsv1alpha1.ItemOperation{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{itemopsv1alpha1.AnnotationRecordStatus: string(raw)}},
				Spec:       itemopsv1alpha1.ItemOperationSpec{OperationID: "du-1", Plugin: itemopsv1alpha1.PluginReference{Name: "example.io/mover"}},
				Status:     tc.status,
			}
			got := toRecord(op).Status
			if got.Phase != tc.want || got.Error != tc.error {
				t.Errorf("%s: written back %s (%q), want %s (%q)", tc.name, got.Phase, got.Error, tc.want, tc.error)
			}
			if counted := startingPhase(op); !(string(counted) == string(got.Phase) ||
				counted == itemopsv1alpha1.OperationPhaseCanceled && got.Phase == itemoperation.OperationPhaseFailed ||
				counted == "" && got.Phase == tc.record.Phase) {
				t.Errorf("%s: counted %q but written back %s", tc.name, counted, got.Phase)
			}
		}
	})
})

var _ = Describe("Record counts of operations", Label("unit"), func() {
	It("reads the annotations, and allocates nothing without them", func() {
		t := GinkgoTB()
		op := func(annotations map[string]string) *itemopsv1alpha1.ItemOperation {
			return &itemopsv1alpha1.ItemOperation{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}}
		}
		for _, tc := range []struct {
			annotations  map[string]string
			count, index int
		}{
			{nil, 1, -1},
			{map[string]string{itemopsv1alpha1.AnnotationRecords: "3", itemopsv1alpha1.AnnotationRecordIndex: "7"}, 3, 7},
			{map[string]string{itemopsv1alpha1.AnnotationRecords: "0"}, 1, -1},
			{map[string]string{itemopsv1alpha1.AnnotationRecords: "many", itemopsv1alpha1.AnnotationRecordIndex: "first"}, 1, -1},
		} {
			if got := recordCount(op(tc.annotations)); got != tc.count {
				t.Errorf("recordCount(%v) = %d, want %d", tc.annotations, got, tc.count)
			}
			if got := recordIndex(op(tc.annotations)); got != tc.index {
				t.Errorf("recordIndex(%v) = %d, want %d", tc.annotations, got, tc.index)
			}
		}
		plain := op(map[string]string{"velero.io/backup-name": "nightly"})
		if n := testing.AllocsPerRun(100, func() { _, _ = recordCount(plain), recordIndex(plain) }); n != 0 {
			t.Errorf("%.0f allocations counting an operation of one record, want none", n)
		}
	})
})
