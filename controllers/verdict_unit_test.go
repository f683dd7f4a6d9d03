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
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/plugin"
)

// eofError is what Velero records for an operation whose plugin process
// exited during its Progress call.
const eofError = "rpc error: code = Unavailable desc = error reading from server: EOF"

// withRecord returns op with Velero's record of its status in its
// record-status annotation.
func withRecord(t testing.TB, op *itemopsv1alpha1.ItemOperation, rec itemoperation.OperationStatus) *itemopsv1alpha1.ItemOperation {
	t.Helper()
	raw, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if op.Annotations == nil {
		op.Annotations = map[string]string{}
	}
	op.Annotations[itemopsv1alpha1.AnnotationRecordStatus] = string(raw)
	return op
}

// drained returns the Events a fake recorder holds.
func drained(recorder *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

var _ = Describe("Velero's verdict on an ItemOperation", Label("unit"), func() {
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	failed := itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseFailed, Error: eofError, Created: &created,
		NCompleted: 512, NTotal: 1024, OperationUnits: "Bytes"}
	completed := itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseCompleted, Created: &created,
		NCompleted: 1024, NTotal: 1024, OperationUnits: "Bytes"}

	// reconcileOnce runs the ItemOperation reconciler on op (in phase, with
	// Velero's record rec) against plugin, and returns the operation as the
	// API server then holds it and the Events.
	reconcileOnce := func(t testing.TB, phase itemopsv1alpha1.OperationPhase, rec itemoperation.OperationStatus,
		p *scriptedPlugin) (*itemopsv1alpha1.ItemOperation, []string, *ItemOperationReconciler) {
		t.Helper()
		c, op := oneWaitingOperation(t, "example.io/p", "id")
		ctx := context.Background()
		if err := c.Get(ctx, client.ObjectKeyFromObject(op), op); err != nil {
			t.Fatal(err)
		}
		withRecord(t, op, rec)
		if err := c.Update(ctx, op); err != nil {
			t.Fatal(err)
		}
		op.Status = itemopsv1alpha1.ItemOperationStatus{Phase: phase, Created: &created, NCompleted: 600, NTotal: 1024,
			Error: map[bool]string{true: "simulated failure"}[phase == itemopsv1alpha1.OperationPhaseFailed]}
		if err := c.Status().Update(ctx, op); err != nil {
			t.Fatal(err)
		}
		recorder := record.NewFakeRecorder(100)
		r := &ItemOperationReconciler{Client: c, Plugins: p, Recorder: recorder, Clock: p.clock,
			SyncFrequency: 10 * time.Second, ProgressUpdateInterval: 30 * time.Second, StallAfter: time.Hour, MaxProgressFailures: 3}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}); err != nil {
			t.Fatal(err)
		}
		got := &itemopsv1alpha1.ItemOperation{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(op), got); err != nil {
			t.Fatal(err)
		}
		return got, drained(recorder), r
	}
	finishedPlugin := func() *scriptedPlugin {
		clock := clocktesting.NewFakeClock(created.Add(time.Minute))
		return &scriptedPlugin{clock: clock, started: created.Time, total: 1024}
	}
	runningPlugin := func() *scriptedPlugin {
		clock := clocktesting.NewFakeClock(created.Add(300 * time.Millisecond))
		return &scriptedPlugin{clock: clock, started: created.Time, total: 1024}
	}

	It("an operation itemops saw complete that Velero recorded Failed ends Failed, and says what itemops saw", func() {
		t := GinkgoTB()
		p := finishedPlugin()
		got, events, _ := reconcileOnce(t, itemopsv1alpha1.OperationPhaseCompleted, failed, p)
		if got.Status.Phase != itemopsv1alpha1.OperationPhaseFailed || got.Status.Error != eofError {
			t.Fatalf("phase %s error %q, want Velero's Failed with %q", got.Status.Phase, got.Status.Error, eofError)
		}
		if got.Status.NCompleted != 512 || got.Status.NTotal != 1024 {
			t.Errorf("counts %d/%d, want Velero's 512/1024", got.Status.NCompleted, got.Status.NTotal)
		}
		c := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionDiffersFromVelero)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != itemopsv1alpha1.ReasonPolledCompleted ||
			!strings.Contains(c.Message, "Velero recorded Failed ("+eofError+")") || !strings.Contains(c.Message, "saw it Completed") {
			t.Fatalf("DiffersFromVelero = %+v", c)
		}
		if p.calls != 0 {
			t.Errorf("an operation itemops saw end was polled again (%d calls)", p.calls)
		}
		differs := 0
		for _, e := range events {
			if strings.HasPrefix(e, "Warning DiffersFromVelero ") {
				differs++
			}
		}
		if differs != 1 {
			t.Errorf("Events %q, want one DiffersFromVelero", events)
		}
	})

	It("an operation Velero failed while itemops saw it running is asked once more, and the answer shown", func() {
		t := GinkgoTB()
		p := finishedPlugin()
		got, events, _ := reconcileOnce(t, itemopsv1alpha1.OperationPhaseInProgress, failed, p)
		if got.Status.Phase != itemopsv1alpha1.OperationPhaseFailed || got.Status.Error != eofError {
			t.Fatalf("phase %s error %q, want Velero's Failed", got.Status.Phase, got.Status.Error)
		}
		if p.calls != 1 {
			t.Errorf("Progress called %d times, want one retry", p.calls)
		}
		c := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionDiffersFromVelero)
		if c == nil || c.Reason != itemopsv1alpha1.ReasonPolledCompleted || !strings.Contains(c.Message, "a retry of Progress answered Completed") {
			t.Fatalf("DiffersFromVelero = %+v", c)
		}
		if pr := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionProgressing); pr == nil ||
			pr.Reason != itemopsv1alpha1.ReasonVeleroRecorded {
			t.Errorf("Progressing = %+v, want False/VeleroRecorded", pr)
		}
		if len(got.Finalizers) != 0 {
			t.Errorf("the ended operation keeps its finalizer: %v", got.Finalizers)
		}
		if len(events) != 2 {
			t.Errorf("Events %q, want Failed and DiffersFromVelero", events)
		}
	})

	It("a retry that finds the operation still running says so", func() {
		t := GinkgoTB()
		got, _, _ := reconcileOnce(t, itemopsv1alpha1.OperationPhaseInProgress, failed, runningPlugin())
		c := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionDiffersFromVelero)
		if got.Status.Phase != itemopsv1alpha1.OperationPhaseFailed || c == nil || c.Reason != itemopsv1alpha1.ReasonPolledInProgress ||
			!strings.Contains(c.Message, "a retry of Progress answered InProgress (300/1Ki") {
			t.Fatalf("phase %s, DiffersFromVelero = %+v", got.Status.Phase, c)
		}
	})

	It("an operation Velero completed before itemops saw its end ends Completed without a call", func() {
		t := GinkgoTB()
		p := runningPlugin()
		got, events, _ := reconcileOnce(t, itemopsv1alpha1.OperationPhaseInProgress, completed, p)
		if got.Status.Phase != itemopsv1alpha1.OperationPhaseCompleted || got.Status.NCompleted != 1024 || got.Status.Error != "" {
			t.Fatalf("status %+v, want Velero's Completed 1024/1024", got.Status)
		}
		if p.calls != 0 || len(events) != 0 {
			t.Errorf("%d Progress calls and Events %q, want none", p.calls, events)
		}
		if meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionDiffersFromVelero) != nil {
			t.Errorf("an end itemops had not seen is shown as a difference")
		}
	})

	It("an operation itemops cancelled that Velero recorded Failed keeps its phase: they agree", func() {
		t := GinkgoTB()
		got, events, _ := reconcileOnce(t, itemopsv1alpha1.OperationPhaseCanceled, failed, finishedPlugin())
		if got.Status.Phase != itemopsv1alpha1.OperationPhaseCanceled || len(events) != 0 {
			t.Fatalf("phase %s, Events %q: want Canceled and none", got.Status.Phase, events)
		}
	})

	It("a verdict is followed once: a later reconcile writes nothing", func() {
		t := GinkgoTB()
		p := finishedPlugin()
		got, _, r := reconcileOnce(t, itemopsv1alpha1.OperationPhaseCompleted, failed, p)
		rv := got.ResourceVersion
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(got)}); err != nil {
			t.Fatal(err)
		}
		again := &itemopsv1alpha1.ItemOperation{}
		if err := r.Client.Get(context.Background(), client.ObjectKeyFromObject(got), again); err != nil {
			t.Fatal(err)
		}
		if again.ResourceVersion != rv || len(drained(r.Recorder.(*record.FakeRecorder))) != 0 {
			t.Errorf("a second reconcile wrote again or sent an Event")
		}
	})
})

var _ = Describe("The parent reconcilers follow Velero's records", Label("unit"), func() {
	// parentWithOperations is a Backup in phase with Velero's counters, one
	// ItemOperation per status (named from its record), and a store whose
	// file holds records.
	type fixture struct {
		c      client.Client
		backup *velerov1api.Backup
		store  *fakeStore
		ops    []*itemopsv1alpha1.ItemOperation
		// patched counts the patches of the Backup; fileAtPatch is the
		// file's phases when the last was sent.
		patched     *int
		fileAtPatch *[]string
	}
	setup := func(t testing.TB, phase velerov1api.BackupPhase, counters parentCounters, errors int,
		own []itemopsv1alpha1.OperationPhase, file []itemoperation.OperationPhase) fixture {
		t.Helper()
		backup := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "velero", UID: "uid-b"},
			Status: velerov1api.BackupStatus{Phase: phase, BackupItemOperationsAttempted: counters.Attempted,
				BackupItemOperationsCompleted: counters.Completed, BackupItemOperationsFailed: counters.Failed, Errors: errors}}
		f := fixture{backup: backup, store: newFakeStore(), patched: new(int), fileAtPatch: new([]string)}
		objects := []client.Object{backup}
		var records []*itemoperation.BackupOperation
		for i, phase := range file {
			rec := backupRecord(backup, "operation-"+string(rune('a'+i)), phase, time.Now())
			if phase == itemoperation.OperationPhaseFailed {
				rec.Status.Error = eofError
			}
			records = append(records, rec)
			op, err := newItemOperation(backup, velerov1api.SchemeGroupVersion.WithKind("Backup"), itemopsv1alpha1.ParentKindBackup,
				itemopsv1alpha1.PluginKindBackupItemAction, i, fromBackupOperations([]*itemoperation.BackupOperation{
					backupRecord(backup, rec.Spec.OperationID, itemoperation.OperationPhaseInProgress, time.Now())})[0])
			if err != nil {
				t.Fatal(err)
			}
			op.Status = itemopsv1alpha1.ItemOperationStatus{Phase: own[i], Created: &metav1.Time{Time: time.Now()}}
			f.ops = append(f.ops, op)
			objects = append(objects, op)
		}
		f.store.setBackup("uid-b", records)
		f.c = fake.NewClientBuilder().WithScheme(unitScheme(t)).WithObjects(objects...).
			WithStatusSubresource(&itemopsv1alpha1.ItemOperation{}).
			WithIndex(&itemopsv1alpha1.ItemOperation{}, IndexParentUID, parentUID).
			WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, ok := obj.(*velerov1api.Backup); ok {
					*f.patched++
					*f.fileAtPatch = nil
					for _, rec := range f.store.backup("uid-b") {
						*f.fileAtPatch = append(*f.fileAtPatch, string(rec.Status.Phase))
					}
				}
				return c.Patch(ctx, obj, patch, opts...)
			}}).Build()
		return f
	}
	reconcile := func(t testing.TB, f fixture, manage bool) {
		t.Helper()
		r := NewBackupReconciler(f.c, record.NewFakeRecorder(100), ParentOptions{Store: f.store, Manage: manage})
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.backup)}); err != nil {
			t.Fatal(err)
		}
	}
	recordOf := func(t testing.TB, f fixture, i int) itemoperation.OperationPhase {
		t.Helper()
		op := &itemopsv1alpha1.ItemOperation{}
		if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(f.ops[i]), op); err != nil {
			t.Fatal(err)
		}
		rec, err := recordStatus(op)
		if err != nil || rec == nil {
			t.Fatalf("record of %s: %v", op.Name, err)
		}
		return rec.Phase
	}
	own := []itemopsv1alpha1.OperationPhase{itemopsv1alpha1.OperationPhaseCompleted, itemopsv1alpha1.OperationPhaseInProgress,
		itemopsv1alpha1.OperationPhaseInProgress}

	It("observe: a failure Velero counted is read from the file once and copied to the operation", func() {
		t := GinkgoTB()
		f := setup(t, velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed, parentCounters{3, 0, 1}, 1, own,
			[]itemoperation.OperationPhase{itemoperation.OperationPhaseFailed, itemoperation.OperationPhaseInProgress, itemoperation.OperationPhaseNew})
		reconcile(t, f, false)
		if got := recordOf(t, f, 0); got != itemoperation.OperationPhaseFailed {
			t.Fatalf("the operation Velero failed holds record %s", got)
		}
		if got := recordOf(t, f, 1); got != itemoperation.OperationPhaseInProgress {
			t.Errorf("a running operation's record was changed to %s", got)
		}
		if *f.patched != 0 {
			t.Errorf("observe mode patched the Backup %d times", *f.patched)
		}
		reads, writes := f.store.counts("uid-b")
		if reads != 1 || writes != 0 {
			t.Errorf("%d reads and %d writes of the file, want 1 and 0", reads, writes)
		}
	})

	It("observe: a parent whose operations show every failure Velero counted costs no read", func() {
		t := GinkgoTB()
		f := setup(t, velerov1api.BackupPhaseWaitingForPluginOperations, parentCounters{3, 1, 0}, 0, own,
			[]itemoperation.OperationPhase{itemoperation.OperationPhaseInProgress, itemoperation.OperationPhaseInProgress, itemoperation.OperationPhaseNew})
		reconcile(t, f, false)
		if reads, _ := f.store.counts("uid-b"); reads != 0 {
			t.Errorf("%d reads of the file, want none", reads)
		}
	})

	It("observe: once Velero finalizes, every end it recorded that an operation does not show is copied", func() {
		t := GinkgoTB()
		f := setup(t, velerov1api.BackupPhaseFinalizingPartiallyFailed, parentCounters{3, 2, 1}, 1, own,
			[]itemoperation.OperationPhase{itemoperation.OperationPhaseCompleted, itemoperation.OperationPhaseFailed, itemoperation.OperationPhaseCompleted})
		reconcile(t, f, false)
		for i, want := range []itemoperation.OperationPhase{itemoperation.OperationPhaseInProgress, itemoperation.OperationPhaseFailed,
			itemoperation.OperationPhaseCompleted} {
			if got := recordOf(t, f, i); got != want {
				t.Errorf("operation %d holds record %s, want %s", i, got, want)
			}
		}
		if *f.patched != 0 {
			t.Errorf("observe mode patched the Backup %d times", *f.patched)
		}
	})

	It("observe: a failure itemops saw in other words than Velero's takes Velero's once Velero is done", func() {
		t := GinkgoTB()
		ctx := context.Background()
		f := setup(t, velerov1api.BackupPhasePartiallyFailed, parentCounters{2, 1, 1}, 1,
			[]itemopsv1alpha1.OperationPhase{itemopsv1alpha1.OperationPhaseCompleted, itemopsv1alpha1.OperationPhaseFailed},
			[]itemoperation.OperationPhase{itemoperation.OperationPhaseCompleted, itemoperation.OperationPhaseFailed})
		// Velero's timeout cancelled it, and itemops' poll got the plugin's
		// answer before Velero's record: the counters agree, the words do not.
		f.ops[1].Status.Error = "operation canceled"
		if err := f.c.Status().Update(ctx, f.ops[1]); err != nil {
			t.Fatal(err)
		}
		reconcile(t, f, false)
		op := &itemopsv1alpha1.ItemOperation{}
		if err := f.c.Get(ctx, client.ObjectKeyFromObject(f.ops[1]), op); err != nil {
			t.Fatal(err)
		}
		if rec, err := recordStatus(op); err != nil || rec == nil || rec.Error != eofError {
			t.Fatalf("the failed operation holds record %+v (%v), want Velero's error %q", rec, err, eofError)
		}
		if reads, writes := f.store.counts("uid-b"); reads != 1 || writes != 0 {
			t.Errorf("%d reads and %d writes of the file, want 1 and 0", reads, writes)
		}
	})

	It("observe: a Backup that ended before itemops followed it (no ItemOperations) costs no read", func() {
		t := GinkgoTB()
		f := setup(t, velerov1api.BackupPhaseCompleted, parentCounters{3, 3, 0}, 0, nil, nil)
		reconcile(t, f, false)
		if reads, _ := f.store.counts("uid-b"); reads != 0 {
			t.Errorf("%d reads of the file, want none", reads)
		}
	})

	It("manage: ends Velero recorded before itemops took over are copied before anything is counted", func() {
		t := GinkgoTB()
		f := setup(t, velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed, parentCounters{3, 0, 1}, 1, own,
			[]itemoperation.OperationPhase{itemoperation.OperationPhaseFailed, itemoperation.OperationPhaseInProgress, itemoperation.OperationPhaseNew})
		reconcile(t, f, true)
		if got := recordOf(t, f, 0); got != itemoperation.OperationPhaseFailed {
			t.Fatalf("the operation Velero failed holds record %s", got)
		}
		if *f.patched != 0 {
			t.Errorf("the Backup was patched %d times before its operations showed Velero's failure", *f.patched)
		}
	})

	It("manage: a failure Velero counted before itemops was there is counted once (Velero alone -> manage)", func() {
		t := GinkgoTB()
		ctx := context.Background()
		f := setup(t, velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed, parentCounters{2, 0, 1}, 1, nil, nil)
		records := []*itemoperation.BackupOperation{
			backupRecord(f.backup, "operation-failed", itemoperation.OperationPhaseFailed, time.Now()),
			backupRecord(f.backup, "operation-running", itemoperation.OperationPhaseInProgress, time.Now()),
		}
		records[0].Status.Error = "simulated failure at 10%"
		f.store.setBackup("uid-b", records)
		counted := func() []int {
			t.Helper()
			got := &velerov1api.Backup{}
			if err := f.c.Get(ctx, client.ObjectKeyFromObject(f.backup), got); err != nil {
				t.Fatal(err)
			}
			s := got.Status
			return []int{s.BackupItemOperationsAttempted, s.BackupItemOperationsCompleted, s.BackupItemOperationsFailed, s.Errors}
		}
		// itemops starts: it reads the file and creates both; their
		// status is not written yet.
		reconcile(t, f, true)
		if got := counted(); got[2] != 1 || got[3] != 1 {
			t.Fatalf("after ingestion: attempted, completed, failed, errors = %v, want the failure Velero counted, once", got)
		}
		// Their status is written (the failed one from Velero's record),
		// and the other completes.
		list := &itemopsv1alpha1.ItemOperationList{}
		if err := f.c.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 2 {
			t.Fatalf("%d ItemOperations, want 2", len(list.Items))
		}
		for i := range list.Items {
			op := &list.Items[i]
			op.Status.Created = &metav1.Time{Time: time.Now()}
			op.Status.Phase = itemopsv1alpha1.OperationPhaseCompleted
			if op.Spec.OperationID == "operation-failed" {
				op.Status.Phase, op.Status.Error = itemopsv1alpha1.OperationPhaseFailed, "simulated failure at 10%"
			}
			if err := f.c.Status().Update(ctx, op); err != nil {
				t.Fatal(err)
			}
		}
		reconcile(t, f, true)
		if got, want := counted(), []int{2, 1, 1, 1}; strings.Join(strings.Fields(fmt.Sprint(got)), " ") != strings.Join(strings.Fields(fmt.Sprint(want)), " ") {
			t.Errorf("at the end: attempted, completed, failed, errors = %v, want %v", got, want)
		}
	})

	It("manage: the file is written before the counters, with every end they count", func() {
		t := GinkgoTB()
		f := setup(t, velerov1api.BackupPhaseWaitingForPluginOperations, parentCounters{3, 0, 0}, 0,
			[]itemopsv1alpha1.OperationPhase{itemopsv1alpha1.OperationPhaseFailed, itemopsv1alpha1.OperationPhaseCompleted,
				itemopsv1alpha1.OperationPhaseInProgress},
			[]itemoperation.OperationPhase{itemoperation.OperationPhaseInProgress, itemoperation.OperationPhaseInProgress, itemoperation.OperationPhaseNew})
		f.ops[0].Status.Error = "simulated failure at 50%"
		if err := f.c.Status().Update(context.Background(), f.ops[0]); err != nil {
			t.Fatal(err)
		}
		reconcile(t, f, true)
		got := &velerov1api.Backup{}
		if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(f.backup), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.BackupItemOperationsFailed != 1 || got.Status.BackupItemOperationsCompleted != 1 || got.Status.Errors != 1 {
			t.Fatalf("counters %+v", got.Status)
		}
		if got, want := strings.Join(*f.fileAtPatch, " "), "Failed Completed InProgress"; got != want {
			t.Errorf("when the counters were patched the file held %s, want %s", got, want)
		}
	})
})

// cancelCounting is a plugin whose operation runs on and that counts the
// Cancel calls it gets.
type cancelCounting struct {
	scriptedPlugin
	cancels int
}

func (p *cancelCounting) Cancel(context.Context, plugin.Operation) error {
	p.cancels++
	return nil
}

var _ = Describe("The timeout where Velero times operations out (observe mode)", Label("unit"), func() {
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	deadline := created.Add(DefaultOperationTimeout)

	// at reconciles an operation created at created, running on, once at
	// the time given, and returns it as the API server then holds it and
	// the number of Cancel calls the plugin got.
	at := func(t testing.TB, now time.Time, veleroTimesOut bool, own *metav1.Duration) (*itemopsv1alpha1.ItemOperation, int) {
		t.Helper()
		c, op := oneWaitingOperation(t, "example.io/p", "id")
		ctx := context.Background()
		if err := c.Get(ctx, client.ObjectKeyFromObject(op), op); err != nil {
			t.Fatal(err)
		}
		if own != nil {
			op.Spec.Timeout = own
			if err := c.Update(ctx, op); err != nil {
				t.Fatal(err)
			}
		}
		op.Status = itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress, Created: &created}
		if err := c.Status().Update(ctx, op); err != nil {
			t.Fatal(err)
		}
		p := &cancelCounting{scriptedPlugin: scriptedPlugin{clock: clocktesting.NewFakeClock(now), started: created.Time, total: 1 << 62}}
		r := &ItemOperationReconciler{Client: c, Plugins: p, Recorder: record.NewFakeRecorder(100), Clock: p.clock,
			VeleroTimesOut: veleroTimesOut, SyncFrequency: 10 * time.Second, ProgressUpdateInterval: 30 * time.Second,
			StallAfter: time.Hour, MaxProgressFailures: 3}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}); err != nil {
			t.Fatal(err)
		}
		got := &itemopsv1alpha1.ItemOperation{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(op), got); err != nil {
			t.Fatal(err)
		}
		return got, p.cancels
	}
	timedOut := func(t testing.TB, got *itemopsv1alpha1.ItemOperation, cancels int, message string) {
		t.Helper()
		c := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionCanceled)
		if got.Status.Phase != itemopsv1alpha1.OperationPhaseFailed || cancels != 1 || c == nil ||
			c.Reason != itemopsv1alpha1.ReasonTimedOut || !strings.Contains(c.Message, message) {
			t.Fatalf("phase %s, %d Cancel calls, Canceled condition %+v; want Failed, one Cancel, TimedOut with %q",
				got.Status.Phase, cancels, c, message)
		}
	}

	It("leaves the parent's timeout to Velero, past the deadline", func() {
		t := GinkgoTB()
		got, cancels := at(t, deadline.Add(VeleroTimeoutGrace-time.Second), true, nil)
		if got.Status.Phase != itemopsv1alpha1.OperationPhaseInProgress || cancels != 0 {
			t.Fatalf("phase %s after %d Cancel calls, want InProgress and none: Velero cancels it", got.Status.Phase, cancels)
		}
	})

	It("cancels itself when Velero has recorded nothing a grace period after the deadline", func() {
		t := GinkgoTB()
		got, cancels := at(t, deadline.Add(VeleroTimeoutGrace), true, nil)
		timedOut(t, got, cancels, "Velero had not recorded its end 5m0s later")
	})

	It("enforces an ItemOperation's own timeout, which Velero does not know", func() {
		t := GinkgoTB()
		got, cancels := at(t, created.Add(time.Hour), true, &metav1.Duration{Duration: time.Hour})
		timedOut(t, got, cancels, "within its timeout of 1h0m0s")
	})

	It("manage mode cancels at the deadline", func() {
		t := GinkgoTB()
		got, cancels := at(t, deadline, false, nil)
		timedOut(t, got, cancels, "within its timeout of 4h0m0s")
	})
})
