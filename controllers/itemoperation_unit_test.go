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
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/plugin"
)

// scriptedPlugin answers Progress with a linear transfer of total bytes at
// one byte a millisecond from started, measured at the clock's time.
type scriptedPlugin struct {
	clock   *clocktesting.FakeClock
	started time.Time
	total   int64
	calls   int
}

func (p *scriptedPlugin) Progress(context.Context, plugin.Operation) (velero.OperationProgress, error) {
	p.calls++
	now := p.clock.Now()
	done := min(p.total, now.Sub(p.started).Milliseconds())
	return velero.OperationProgress{Completed: done == p.total, NCompleted: done, NTotal: p.total, OperationUnits: "Bytes",
		Started: p.started, Updated: now}, nil
}

func (p *scriptedPlugin) Cancel(context.Context, plugin.Operation) error { return nil }

// deniedPlugin answers every Progress with the error Velero's data mover
// returns when itemops' identity may not list DataUploads: in Velero's
// namespace (v1.18), or at the cluster scope (before v1.18).
type deniedPlugin struct{ clusterScope bool }

func (p deniedPlugin) Progress(context.Context, plugin.Operation) (velero.OperationProgress, error) {
	scope := `in the namespace "velero"`
	if p.clusterScope {
		scope = "at the cluster scope"
	}
	return velero.OperationProgress{}, &plugin.Error{Kind: plugin.ErrPluginError, Plugin: "velero.io/csi-pvc-backupper", Call: "Progress",
		Err: errors.New(`error to list DataUpload: datauploads.velero.io is forbidden: User "system:serviceaccount:velero:itemops" ` +
			`cannot list resource "datauploads" in API group "velero.io" ` + scope)}
}

func (deniedPlugin) Cancel(context.Context, plugin.Operation) error { return nil }

// unreachablePlugin fails its first calls as a plugin process that died
// during them does, or with err when set.
type unreachablePlugin struct {
	failures int
	err      error
	progress int
	cancels  int
}

func (p *unreachablePlugin) Progress(context.Context, plugin.Operation) (velero.OperationProgress, error) {
	p.progress++
	return velero.OperationProgress{}, p.err
}

func (p *unreachablePlugin) Cancel(_ context.Context, op plugin.Operation) error {
	p.cancels++
	if p.cancels > p.failures {
		return nil
	}
	if p.err != nil {
		return p.err
	}
	return &plugin.Error{Kind: plugin.ErrTransport, Plugin: op.Plugin, Call: "Cancel", Err: errors.New("rpc error: code = Unavailable desc = error reading from server: EOF")}
}

// oneWaitingOperation is a fake client holding a Backup waiting for its
// plugin operations and its one ItemOperation, of plugin and operation ID.
func oneWaitingOperation(t testing.TB, plugin, operationID string) (client.Client, *itemopsv1alpha1.ItemOperation) {
	t.Helper()
	backup := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "velero", UID: "uid-b"},
		Status:     velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations},
	}
	op := &itemopsv1alpha1.ItemOperation{
		ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "velero", Finalizers: []string{itemopsv1alpha1.Finalizer}},
		Spec: itemopsv1alpha1.ItemOperationSpec{
			Parent:      itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindBackup, Name: "b", UID: "uid-b"},
			Plugin:      itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: plugin},
			OperationID: operationID,
		},
	}
	c := fake.NewClientBuilder().WithScheme(unitScheme(t)).WithObjects(backup, op).WithStatusSubresource(op).Build()
	return c, op
}

var _ = Describe("Polling decisions of the ItemOperation reconciler", Label("unit"), func() {
	It("poll interval backs off", func() {
		t := GinkgoTB()
		r := &ItemOperationReconciler{SyncFrequency: 10 * time.Second}
		cases := map[int32]time.Duration{0: 10 * time.Second, 1: 10 * time.Second, 2: 20 * time.Second,
			3: 40 * time.Second, 5: 160 * time.Second, 6: 5 * time.Minute, 30: 5 * time.Minute}
		for failures, want := range cases {
			op := &itemopsv1alpha1.ItemOperation{Status: itemopsv1alpha1.ItemOperationStatus{PollFailures: failures}}
			if got := r.pollInterval(op); got != want {
				t.Errorf("pollInterval after %d failures = %s, want %s", failures, got, want)
			}
		}
	})

	// A reconcile working on a cached
	// copy older than the stored one (which another reconcile already finished)
	// writes nothing and tells nobody.
	It("a phase is not changed twice from a stale copy", func() {
		t := GinkgoTB()
		scheme := runtime.NewScheme()
		if err := itemopsv1alpha1.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		stored := &itemopsv1alpha1.ItemOperation{
			ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "velero"},
			Status:     itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress},
		}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(stored).WithStatusSubresource(stored).Build()
		ctx := context.Background()
		stale := &itemopsv1alpha1.ItemOperation{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(stored), stale); err != nil {
			t.Fatal(err)
		}
		// Another reconcile finishes it first.
		done := stale.DeepCopy()
		done.Status.Phase = itemopsv1alpha1.OperationPhaseFailed
		if err := c.Status().Update(ctx, done); err != nil {
			t.Fatal(err)
		}

		recorder := record.NewFakeRecorder(10)
		r := &ItemOperationReconciler{Client: c, Recorder: recorder}
		op := stale.DeepCopy()
		op.Status.Phase = itemopsv1alpha1.OperationPhaseFailed
		op.Status.Error = "from the stale copy"
		if err := r.writeStatus(ctx, stale, op, time.Now()); !errors.Is(err, errStale) {
			t.Fatalf("a conflict must be retried on a fresh copy, got %v", err)
		}
		if len(recorder.Events) != 0 {
			t.Errorf("an Event was recorded for a phase change that was not written: %s", <-recorder.Events)
		}
		got := &itemopsv1alpha1.ItemOperation{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(stored), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Error != "" {
			t.Errorf("the stale copy's status was written: %q", got.Status.Error)
		}
	})

	It("ETA polling polls at the predicted completion", func() {
		t := GinkgoTB()
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		eta := func(d time.Duration) *itemopsv1alpha1.ItemOperation {
			return &itemopsv1alpha1.ItemOperation{Status: itemopsv1alpha1.ItemOperationStatus{EstimatedCompletion: &metav1.Time{Time: now.Add(d)}}}
		}
		on := &ItemOperationReconciler{SyncFrequency: 10 * time.Second, ETAPolling: true, MinPollInterval: time.Second}
		off := &ItemOperationReconciler{SyncFrequency: 10 * time.Second, MinPollInterval: time.Second}
		cases := []struct {
			name       string
			r          *ItemOperationReconciler
			op         *itemopsv1alpha1.ItemOperation
			slipped    bool
			min, max   time.Duration
			byEstimate bool
			// recent is the completion the rate since the last poll predicts.
			recent time.Time
		}{
			{"done before the next poll", on, eta(3 * time.Second), false, 3*time.Second + etaMargin, 3*time.Second + etaMargin, true, time.Time{}},
			{"done after the next poll", on, eta(time.Minute), false, 8000 * time.Millisecond, 9000 * time.Millisecond, false, time.Time{}},
			{"done any moment", on, eta(300 * time.Millisecond), false, 300*time.Millisecond + etaMargin, 300*time.Millisecond + etaMargin, true, time.Time{}},
			{"done any moment, estimate slipped", on, eta(300 * time.Millisecond), true, time.Second, time.Second, true, time.Time{}},
			{"estimate passed", on, eta(-time.Second), false, etaMargin, etaMargin, true, time.Time{}},
			{"estimate passed and slipped", on, eta(-time.Second), true, time.Second, time.Second, true, time.Time{}},
			{"slipped, done after the next poll", on, eta(time.Minute), true, 8000 * time.Millisecond, 9000 * time.Millisecond, false, time.Time{}},
			{"no prediction", on, &itemopsv1alpha1.ItemOperation{}, false, 8000 * time.Millisecond, 9000 * time.Millisecond, false, time.Time{}},
			{"failing polls back off", on, func() *itemopsv1alpha1.ItemOperation {
				op := eta(3 * time.Second)
				op.Status.PollFailures = 2
				return op
			}(), false, 16000 * time.Millisecond, 18000 * time.Millisecond, false, time.Time{}},
			{"off", off, eta(3 * time.Second), false, 8000 * time.Millisecond, 9000 * time.Millisecond, false, time.Time{}},
			{"speeding up: the recent rate ends it first", on, eta(time.Minute), false, 4*time.Second + etaMargin, 4*time.Second + etaMargin, true, now.Add(4 * time.Second)},
			{"slowing down: the average ends it first", on, eta(3 * time.Second), false, 3*time.Second + etaMargin, 3*time.Second + etaMargin, true, now.Add(time.Minute)},
			{"recent rate, off", off, eta(time.Minute), false, 8000 * time.Millisecond, 9000 * time.Millisecond, false, now.Add(4 * time.Second)},
		}
		for _, tc := range cases {
			got, by := tc.r.nextPoll(tc.op, now, false, tc.slipped, predictedEnd(tc.op, tc.recent), 0)
			byEstimate := !by.IsZero()
			if got < tc.min || got > tc.max {
				t.Errorf("%s: next poll in %s, want %s to %s", tc.name, got, tc.min, tc.max)
			}
			if byEstimate != tc.byEstimate {
				t.Errorf("%s: next poll by the estimate: %t, want %t", tc.name, byEstimate, tc.byEstimate)
			}
		}
	})

	It("predicts from the rate since the last poll, at the plugin's time of each reading", func() {
		g := NewWithT(GinkgoT())
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		op := func(done int64, updated time.Time) *itemopsv1alpha1.ItemOperation {
			return &itemopsv1alpha1.ItemOperation{Status: itemopsv1alpha1.ItemOperationStatus{
				NCompleted: done, NTotal: 1000, Started: &metav1.Time{Time: start}, Updated: &metav1.Time{Time: updated}}}
		}
		prev := readingOf(op(100, start.Add(10*time.Second)), start.Add(11*time.Second))
		g.Expect(prev).To(Equal(reading{done: 100, measured: start.Add(10 * time.Second)}), "the plugin's time, not the poll's")
		// 200 more in 2 s: the 700 left take 7 s more.
		recent := func(prev reading, o *itemopsv1alpha1.ItemOperation, now time.Time) time.Time {
			return recentEstimate(prev, readingOf(o, now), o.Status.NTotal)
		}
		g.Expect(recent(prev, op(300, start.Add(12*time.Second)), start.Add(13*time.Second))).To(Equal(start.Add(19 * time.Second)))
		g.Expect(recent(prev, op(100, start.Add(12*time.Second)), start.Add(13*time.Second))).To(BeZero(), "paused: no rate")
		g.Expect(recent(reading{}, op(300, start.Add(12*time.Second)), start.Add(13*time.Second))).To(BeZero(), "no earlier reading")
	})

	// Operations polled together
	// for the first time are not polled together again, yet each within the
	// interval.
	It("the first poll spreads the next over the interval", func() {
		t := GinkgoTB()
		r := &ItemOperationReconciler{SyncFrequency: 10 * time.Second}
		op := &itemopsv1alpha1.ItemOperation{}
		lowest, highest := time.Hour, time.Duration(0)
		buckets := map[time.Duration]int{}
		for range 2000 {
			next, _ := r.nextPoll(op, time.Now(), true, false, time.Time{}, 0)
			lowest, highest = min(lowest, next), max(highest, next)
			buckets[next/time.Second]++
		}
		if lowest < time.Second || highest > 9*time.Second {
			t.Fatalf("next polls from %s to %s, want within 1s to 9s", lowest, highest)
		}
		for s := time.Duration(1); s < 9; s++ {
			if n := buckets[s]; n < 100 { // 250 expected in each second
				t.Errorf("%d of 2000 next polls %ds to %ds after the first, want them spread evenly", n, s, s+1)
			}
		}
		// The last tenth of the interval is left for the work queue.
		lowest, highest = time.Hour, 0
		for range 2000 {
			later, _ := r.nextPoll(op, time.Now(), false, false, time.Time{}, 0)
			lowest, highest = min(lowest, later), max(highest, later)
		}
		if lowest < 8*time.Second || highest > 9*time.Second || highest-lowest < 900*time.Millisecond {
			t.Errorf("later polls come from %s to %s after the previous, want drawn over 8s to 9s", lowest, highest)
		}
	})

	// The rate behind the
	// estimate is taken at the plugin's Updated time, not at the reconcile's
	// start, which may be long before the call; and it is not rounded.
	It("ETA is measured at the plugin's time of the reading", func() {
		t := GinkgoTB()
		started := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		reconcileStart := started.Add(7 * time.Second)
		reading := started.Add(10*time.Second + 300*time.Millisecond)
		op := &itemopsv1alpha1.ItemOperation{Status: itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress}}
		r := &ItemOperationReconciler{}
		r.applyProgress(op, velero.OperationProgress{NCompleted: 50, NTotal: 100, Started: started, Updated: reading}, reconcileStart)
		want := started.Add(20*time.Second + 600*time.Millisecond)
		if got := op.Status.EstimatedCompletion; got == nil || !got.Time.Equal(want) {
			t.Errorf("estimated completion = %v, want %v", got, want)
		}
	})

	// Progress, and the first
	// InProgress, are skipped without budget; an end is always written.
	It("progress writes give way when the budget is spent", func() {
		t := GinkgoTB()
		scheme := runtime.NewScheme()
		if err := itemopsv1alpha1.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		stored := &itemopsv1alpha1.ItemOperation{
			ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "velero"},
			Status:     itemopsv1alpha1.ItemOperationStatus{},
		}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(stored).WithStatusSubresource(stored).Build()
		ctx := context.Background()
		r := &ItemOperationReconciler{Client: c, Recorder: record.NewFakeRecorder(10), ProgressUpdateInterval: time.Second,
			StatusWrites: rate.NewLimiter(0, 0)}
		now := time.Now()
		get := func() *itemopsv1alpha1.ItemOperation {
			got := &itemopsv1alpha1.ItemOperation{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(stored), got); err != nil {
				t.Fatal(err)
			}
			return got
		}

		original := get()
		op := original.DeepCopy()
		r.initialize(op, now)
		op.Status.Phase = itemopsv1alpha1.OperationPhaseInProgress
		op.Status.NCompleted, op.Status.NTotal = 5, 10
		setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionTrue, itemopsv1alpha1.ReasonPolling, "polling", now)
		if err := r.writeStatus(ctx, original, op, now); err != nil {
			t.Fatal(err)
		}
		if got := get(); got.Status.Phase != "" {
			t.Fatalf("the first InProgress was written without budget: %+v", got.Status)
		}

		original = get()
		op = original.DeepCopy()
		r.initialize(op, now)
		op.Status.Phase = itemopsv1alpha1.OperationPhaseFailed
		op.Status.Error = "simulated failure"
		if err := r.writeStatus(ctx, original, op, now); err != nil {
			t.Fatal(err)
		}
		if got := get(); got.Status.Phase != itemopsv1alpha1.OperationPhaseFailed || got.Status.Error != "simulated failure" {
			t.Fatalf("an end must always be written: %+v", got.Status)
		}

		// With budget, progress is written.
		r.StatusWrites = nil
		stored2 := get()
		op = stored2.DeepCopy()
		op.Status.NCompleted = 7
		if err := r.writeStatus(ctx, stored2, op, now.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if got := get(); got.Status.NCompleted != 7 {
			t.Fatalf("progress was not written with budget: %+v", got.Status)
		}
	})

	// Finished operations reserve
	// their release once and come back at their turn: a backlog of releases
	// waits in the queue's delay, not in its line.
	It("finalizer releases are paced, each reconciled at its reserved turn", func() {
		t := GinkgoTB()
		scheme := runtime.NewScheme()
		if err := itemopsv1alpha1.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		var objs []client.Object
		for _, name := range []string{"first", "second", "third"} {
			objs = append(objs, &itemopsv1alpha1.ItemOperation{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "velero", Finalizers: []string{itemopsv1alpha1.Finalizer}},
				Status:     itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseCompleted},
			})
		}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(objs...).Build()
		ctx := context.Background()
		clock := clocktesting.NewFakeClock(time.Now())
		// One release a second, none saved up; three status writes
		// saved up, and (next to) none coming.
		writes := rate.NewLimiter(rate.Limit(0.001), 3)
		writes.ReserveN(clock.Now(), 0)
		r := &ItemOperationReconciler{Client: c, Recorder: record.NewFakeRecorder(10), Clock: clock,
			SyncFrequency: 10 * time.Second, Releases: rate.NewLimiter(1, 1), StatusWrites: writes}
		reconcile := func(name string) (time.Duration, bool) {
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "velero", Name: name}})
			if err != nil {
				t.Fatal(err)
			}
			got := &itemopsv1alpha1.ItemOperation{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "velero", Name: name}, got); err != nil {
				t.Fatal(err)
			}
			return res.RequeueAfter, len(got.Finalizers) > 0
		}

		if wait, held := reconcile("first"); wait != 0 || held {
			t.Fatalf("first: requeued after %s, finalizer held %v; want released at once", wait, held)
		}
		if wait, held := reconcile("second"); wait != time.Second || !held {
			t.Fatalf("second: requeued after %s, finalizer held %v; want its turn in 1s", wait, held)
		}
		if wait, held := reconcile("third"); wait != 2*time.Second || !held {
			t.Fatalf("third: requeued after %s, finalizer held %v; want its turn in 2s", wait, held)
		}
		// Woken early (a watch event), it keeps its turn rather than
		// reserve another.
		clock.Step(500 * time.Millisecond)
		if wait, held := reconcile("third"); wait != 1500*time.Millisecond || !held {
			t.Fatalf("third woken early: requeued after %s, finalizer held %v; want the rest of its turn, 1.5s", wait, held)
		}
		clock.Step(500 * time.Millisecond)
		if wait, held := reconcile("second"); wait != 0 || held {
			t.Fatalf("second at its turn: requeued after %s, finalizer held %v; want released", wait, held)
		}
		clock.Step(time.Second)
		if wait, held := reconcile("third"); wait != 0 || held {
			t.Fatalf("third at its turn: requeued after %s, finalizer held %v; want released", wait, held)
		}
		for _, name := range []string{"first", "second", "third"} {
			if _, ok := r.releaseAt.Load(client.ObjectKey{Namespace: "velero", Name: name}); ok {
				t.Errorf("%s: its turn is still held after its release", name)
			}
		}
		// The three releases spent the status write budget: progress
		// writes and releases together stay within it.
		if left := writes.TokensAt(clock.Now()); left > 0.1 {
			t.Errorf("%.2f status write tokens left after three releases; want none", left)
		}
	})

	// A plugin's huge error,
	// description or units never make a status the API refuses, and a cut
	// never splits a character.
	It("plugin strings are bounded to what the API accepts", func() {
		t := GinkgoTB()
		huge := strings.Repeat("é", 40000) // two bytes each: a cut at an odd offset splits one
		s := itemopsv1alpha1.ItemOperationStatus{Error: huge, Description: huge, OperationUnits: huge,
			Conditions: []metav1.Condition{{Type: itemopsv1alpha1.ConditionProgressing, Message: "failing: " + huge}}}
		boundStatus(&s)
		for name, got := range map[string]struct {
			value string
			max   int
		}{"error": {s.Error, maxMessageBytes}, "description": {s.Description, maxDescriptionBytes},
			"units": {s.OperationUnits, maxUnitsBytes}, "condition message": {s.Conditions[0].Message, maxMessageBytes}} {
			if len(got.value) > got.max || !utf8.ValidString(got.value) || !strings.HasSuffix(got.value, "…") {
				t.Errorf("%s: %d bytes, valid UTF-8 %v, want at most %d ending in …", name, len(got.value), utf8.ValidString(got.value), got.max)
			}
		}
		if got := bounded("short", 10); got != "short" {
			t.Errorf("bounded cut a short string: %q", got)
		}
		if got := bounded("a\xffb"+strings.Repeat("x", 20), 10); got != "a\xffb"+strings.Repeat("x", 4)+"…" {
			t.Errorf("bounded(invalid UTF-8 before the cut) = %q", got)
		}
	})

	// A Backup's counters move
	// its generation (Velero's CRDs have no status subresource), but must not
	// re-poll its hundred operations; a cancelling phase, a deletion and a new
	// timeout must.
	It("only parent changes that matter wake the operations", func() {
		t := GinkgoTB()
		old := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 3},
			Status: velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations}}
		changed := func(change func(*velerov1api.Backup)) *velerov1api.Backup {
			b := old.DeepCopy()
			b.Generation++
			change(b)
			return b
		}
		cases := []struct {
			name string
			new  *velerov1api.Backup
			want bool
		}{
			{"counters", changed(func(b *velerov1api.Backup) { b.Status.BackupItemOperationsCompleted = 7 }), false},
			{"finalizing", changed(func(b *velerov1api.Backup) { b.Status.Phase = velerov1api.BackupPhaseFinalizing }), false},
			{"failed", changed(func(b *velerov1api.Backup) { b.Status.Phase = velerov1api.BackupPhaseFailed }), true},
			{"deleting", changed(func(b *velerov1api.Backup) { b.Status.Phase = velerov1api.BackupPhaseDeleting }), true},
			{"deleted", changed(func(b *velerov1api.Backup) { b.DeletionTimestamp = &metav1.Time{Time: time.Now()} }), true},
			{"timeout", changed(func(b *velerov1api.Backup) { b.Spec.ItemOperationTimeout = metav1.Duration{Duration: time.Hour} }), true},
		}
		p := parentChangeMatters()
		for _, tc := range cases {
			if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: tc.new}); got != tc.want {
				t.Errorf("%s: wakes the operations = %v, want %v", tc.name, got, tc.want)
			}
		}
	})

	// A regular poll that
	// finds an operation about to end polls again at its estimated end, even
	// sooner than the minimum interval; a poll made for an estimate that finds
	// the operation still running (the estimate slipped) waits the minimum.
	It("a poll just before the end is followed by one just after", func() {
		t := GinkgoTB()
		// Not on a whole second: a written status comes back with its times
		// cut to the second, and the next poll must not be timed by those.
		start := time.Date(2026, 1, 1, 0, 0, 0, 600_000_000, time.UTC)
		clock := clocktesting.NewFakeClock(start)
		c, op := oneWaitingOperation(t, "example.io/p", "id")
		// 10 s long; polls at 9.6 s, then at the estimate (10.1 s).
		p := &scriptedPlugin{clock: clock, started: start, total: 10_000}
		r := &ItemOperationReconciler{Client: c, Plugins: p, Recorder: record.NewFakeRecorder(100), Clock: clock,
			SyncFrequency: 10 * time.Second, ProgressUpdateInterval: 30 * time.Second, StallAfter: time.Hour,
			MaxProgressFailures: 3, ETAPolling: true, MinPollInterval: time.Second}
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}
		ctx := context.Background()
		reconcile := func() time.Duration {
			t.Helper()
			res, err := r.Reconcile(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			return res.RequeueAfter
		}

		clock.SetTime(start.Add(9600 * time.Millisecond))
		r.polled.Store(req.NamespacedName, polled{}) // polled regularly before
		if got, want := reconcile(), 400*time.Millisecond+etaMargin; got != want {
			t.Fatalf("a poll 400ms before the end: next in %s, want %s (at the estimate)", got, want)
		}

		// The transfer slows down: at the estimate it is still 300 bytes short.
		p.started = start.Add(300 * time.Millisecond)
		clock.SetTime(start.Add(10100 * time.Millisecond))
		if got, want := reconcile(), time.Second; got != want {
			t.Fatalf("a poll at a slipped estimate: next in %s, want the minimum interval %s", got, want)
		}

		clock.SetTime(start.Add(11100 * time.Millisecond))
		if got := reconcile(); got != 0 {
			t.Fatalf("the finished operation is polled again in %s", got)
		}
		got := &itemopsv1alpha1.ItemOperation{}
		if err := c.Get(ctx, req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != itemopsv1alpha1.OperationPhaseCompleted || p.calls != 3 {
			t.Fatalf("phase %s after %d Progress calls, want Completed after 3", got.Status.Phase, p.calls)
		}
	})

	// Velero before v1.18 lists DataUploads in every namespace: the refusal
	// says what to set.
	It("a data mover of Velero before v1.18 refused the cluster-wide list names the chart value to set", func() {
		t := GinkgoTB()
		c, op := oneWaitingOperation(t, "velero.io/csi-pvc-backupper", "du-1")
		r := &ItemOperationReconciler{Client: c, Plugins: deniedPlugin{clusterScope: true}, Recorder: record.NewFakeRecorder(100),
			Clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), SyncFrequency: 10 * time.Second,
			ProgressUpdateInterval: 30 * time.Second, StallAfter: time.Hour, MaxProgressFailures: 3, MinPollInterval: time.Second}
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		got := &itemopsv1alpha1.ItemOperation{}
		if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionProgressing)
		for _, want := range []string{"builtinPlugins.image.tag", "config/velero-before-1.18",
			"system:serviceaccount:velero:itemops may not list datauploads.velero.io at the cluster scope"} {
			if cond == nil || cond.Reason != itemopsv1alpha1.ReasonPluginForbidden || !strings.Contains(cond.Message, want) {
				t.Errorf("condition %+v; want PluginForbidden saying %q", cond, want)
			}
		}
	})

	// A plugin's own
	// request refused by the API server is a failed poll within the budget, shown
	// as PluginForbidden with the permission, once as an Event; at the end of the
	// budget the operation fails with the same words.
	It("a plugin refused by the API server names the missing permission", func() {
		t := GinkgoTB()
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := clocktesting.NewFakeClock(now)
		c, op := oneWaitingOperation(t, "velero.io/csi-pvc-backupper", "du-1")
		recorder := record.NewFakeRecorder(100)
		r := &ItemOperationReconciler{Client: c, Plugins: deniedPlugin{}, Recorder: recorder, Clock: clock,
			SyncFrequency: 10 * time.Second, ProgressUpdateInterval: 30 * time.Second, StallAfter: time.Hour,
			MaxProgressFailures: 3, MinPollInterval: time.Second}
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}
		ctx := context.Background()
		const permission = "system:serviceaccount:velero:itemops may not list datauploads.velero.io in namespace velero"

		got := &itemopsv1alpha1.ItemOperation{}
		for i := 1; i <= 3; i++ {
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if i < 3 {
				cond := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionProgressing)
				if got.Status.Phase.IsTerminal() || cond == nil || cond.Reason != itemopsv1alpha1.ReasonPluginForbidden ||
					!strings.Contains(cond.Message, permission) {
					t.Fatalf("after %d refused polls: phase %s, condition %+v; want it running, PluginForbidden naming %q", i, got.Status.Phase, cond, permission)
				}
			}
			clock.Step(time.Minute)
		}
		if got.Status.Phase != itemopsv1alpha1.OperationPhaseFailed || !strings.Contains(got.Status.Error, permission) {
			t.Errorf("at the end of the budget: phase %s, error %q; want Failed naming %q", got.Status.Phase, got.Status.Error, permission)
		}
		var forbidden int
		for len(recorder.Events) > 0 {
			if e := <-recorder.Events; strings.Contains(e, itemopsv1alpha1.ReasonPluginForbidden) {
				forbidden++
				if !strings.Contains(e, permission) {
					t.Errorf("the Event does not name the permission: %s", e)
				}
			}
		}
		if forbidden != 1 {
			t.Errorf("%d PluginForbidden Events, want 1", forbidden)
		}
	})

	// An operation's first status is written like progress, a progress
	// interval after its object was created; one that ends sooner gets its
	// end as its only status write. Anything more to say than "running"
	// is written at once.
	It("an operation's first status waits a progress interval, unless there is more to say", func() {
		t := GinkgoTB()
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		type step struct {
			at    time.Duration
			phase itemopsv1alpha1.OperationPhase // as stored after the reconcile at
		}
		for _, tc := range []struct {
			name   string
			plugin plugin.Client
			steps  []step
			writes int
		}{
			{"runs 50s", nil, []step{{0, ""}, {10 * time.Second, ""}, {20 * time.Second, ""},
				{30 * time.Second, itemopsv1alpha1.OperationPhaseInProgress}, {40 * time.Second, itemopsv1alpha1.OperationPhaseInProgress},
				{50 * time.Second, itemopsv1alpha1.OperationPhaseCompleted}}, 2},
			{"runs 20s", nil, []step{{0, ""}, {10 * time.Second, ""}, {20 * time.Second, itemopsv1alpha1.OperationPhaseCompleted}}, 1},
			{"plugin not installed", &unreachablePlugin{err: &plugin.Error{Kind: plugin.ErrPluginNotFound, Plugin: "example.io/p",
				Call: "Progress", Err: errors.New("no binary registers it")}}, []step{{0, itemopsv1alpha1.OperationPhaseNew}}, 1},
		} {
			clock := clocktesting.NewFakeClock(start)
			scripted := &scriptedPlugin{clock: clock, started: start, total: 50_000}
			if tc.name == "runs 20s" {
				scripted.total = 20_000
			}
			var p plugin.Client = scripted
			if tc.plugin != nil {
				p = tc.plugin
			}
			c, op := oneWaitingOperation(t, "example.io/p", "id")
			op.CreationTimestamp = metav1.NewTime(start)
			writes := 0
			c = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					writes++
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				},
			})
			ctx := context.Background()
			// The object as the API server holds it: created at start.
			stored := &itemopsv1alpha1.ItemOperation{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(op), stored); err != nil {
				t.Fatal(err)
			}
			stored.CreationTimestamp = metav1.NewTime(start)
			if err := c.Update(ctx, stored); err != nil {
				t.Fatal(err)
			}
			r := &ItemOperationReconciler{Client: c, Plugins: p, Recorder: record.NewFakeRecorder(100), Clock: clock,
				SyncFrequency: 10 * time.Second, ProgressUpdateInterval: 30 * time.Second, StallAfter: time.Hour, MaxProgressFailures: 3}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}
			for _, s := range tc.steps {
				clock.SetTime(start.Add(s.at))
				if _, err := r.Reconcile(ctx, req); err != nil {
					t.Fatal(err)
				}
				got := &itemopsv1alpha1.ItemOperation{}
				if err := c.Get(ctx, req.NamespacedName, got); err != nil {
					t.Fatal(err)
				}
				if got.Status.Phase != s.phase {
					t.Errorf("%s: at %s the stored phase is %q, want %q", tc.name, s.at, got.Status.Phase, s.phase)
				}
			}
			if writes != tc.writes {
				t.Errorf("%s: %d status writes, want %d", tc.name, writes, tc.writes)
			}
		}
	})

	It("a poll refused while the plugin process restarts is not a failure", func() {
		t := GinkgoTB()
		clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		c, op := oneWaitingOperation(t, "velero.io/csi-pvc-backupper", "du-1")
		pending := &plugin.Error{Kind: plugin.ErrTransport, Plugin: "velero.io/csi-pvc-backupper", Call: "Progress",
			Err: &plugin.RestartPending{Binary: "/plugins/velero", Exits: 3, At: clock.Now().Add(time.Minute)}}
		r := &ItemOperationReconciler{Client: c, Plugins: &unreachablePlugin{err: pending}, Recorder: record.NewFakeRecorder(100),
			Clock: clock, SyncFrequency: 10 * time.Second, ProgressUpdateInterval: 30 * time.Second, StallAfter: time.Hour,
			MaxProgressFailures: 3, MinPollInterval: time.Second}
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}
		got := &itemopsv1alpha1.ItemOperation{}
		for i := 0; i < 10; i++ {
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			clock.Step(10 * time.Second)
		}
		if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionProgressing)
		if got.Status.Phase.IsTerminal() || got.Status.PollFailures != 0 || cond == nil || cond.Reason != itemopsv1alpha1.ReasonPluginRestarting ||
			!strings.Contains(cond.Message, "/plugins/velero") {
			t.Errorf("after 10 refused polls: phase %s, %d failures, condition %+v; want it running, none counted, PluginRestarting",
				got.Status.Phase, got.Status.PollFailures, cond)
		}
	})

	It("a Cancel that does not reach the plugin is tried again, a bounded number of times", func() {
		t := GinkgoTB()
		deadline := &plugin.Error{Kind: plugin.ErrTransport, Plugin: "velero.io/csi-pvc-backupper", Call: "Cancel", Err: context.DeadlineExceeded}
		cases := []struct {
			name    string
			plugin  *unreachablePlugin
			waits   []time.Duration
			message string
		}{
			{"reached on the third attempt", &unreachablePlugin{failures: 2}, []time.Duration{time.Second, 2 * time.Second},
				"the plugin accepted the cancel request"},
			{"never reached", &unreachablePlugin{failures: 100}, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second},
				"the plugin could not be reached in 5 attempts"},
			{"out of time: not tried again", &unreachablePlugin{failures: 100, err: deadline}, nil, "the plugin could not cancel it"},
		}
		for _, tc := range cases {
			clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			c, op := oneWaitingOperation(t, "velero.io/csi-pvc-backupper", "du-1")
			op.Spec.Cancel = true
			if err := c.Update(context.Background(), op); err != nil {
				t.Fatal(err)
			}
			r := &ItemOperationReconciler{Client: c, Plugins: tc.plugin, Recorder: record.NewFakeRecorder(100), Clock: clock,
				SyncFrequency: 10 * time.Second, ProgressUpdateInterval: 30 * time.Second, StallAfter: time.Hour, MaxProgressFailures: 3}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}
			var waits []time.Duration
			got := &itemopsv1alpha1.ItemOperation{}
			for range 10 {
				res, err := r.Reconcile(context.Background(), req)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
					t.Fatal(err)
				}
				// The answer is recorded once the attempts are over: a
				// cancel is a request, the operation Canceling.
				if got.Status.Phase == itemopsv1alpha1.OperationPhaseCanceling || got.Status.Phase.IsTerminal() {
					break
				}
				waits = append(waits, res.RequeueAfter)
				clock.Step(res.RequeueAfter)
			}
			if !slices.Equal(waits, tc.waits) {
				t.Errorf("%s: waits between attempts %v, want %v", tc.name, waits, tc.waits)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionCanceled)
			if got.Status.Phase != itemopsv1alpha1.OperationPhaseCanceling || cond == nil || !strings.Contains(cond.Message, tc.message) {
				t.Errorf("%s: phase %s, condition %+v; want Canceling saying %q", tc.name, got.Status.Phase, cond, tc.message)
			}
			if want := len(tc.waits) + 1; tc.plugin.cancels != want {
				t.Errorf("%s: %d Cancel calls, want %d", tc.name, tc.plugin.cancels, want)
			}
		}
	})
	It("a parent the cache has not seen yet is asked of the API server before the operation is cancelled", func() {
		t := GinkgoTB()
		for _, tc := range []struct {
			name      string
			apiServer bool // the API server holds the Backup
			want      itemopsv1alpha1.OperationPhase
		}{
			{"created a moment before its operation", true, itemopsv1alpha1.OperationPhaseInProgress},
			{"deleted", false, itemopsv1alpha1.OperationPhaseCanceled},
		} {
			clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			live, op := oneWaitingOperation(t, "velero.io/csi-pvc-backupper", "du-1")
			op.CreationTimestamp = metav1.NewTime(clock.Now())
			// The cache holds the operation, not its Backup.
			cached := fake.NewClientBuilder().WithScheme(unitScheme(t)).WithObjects(op.DeepCopy()).WithStatusSubresource(op).Build()
			if !tc.apiServer {
				live = cached
			}
			plugin := &scriptedPlugin{clock: clock, started: clock.Now(), total: 3_600_000}
			r := &ItemOperationReconciler{Client: cached, APIReader: live, Plugins: plugin, Recorder: record.NewFakeRecorder(100),
				Clock: clock, SyncFrequency: 10 * time.Second, ProgressUpdateInterval: 30 * time.Second, StallAfter: time.Hour,
				MaxProgressFailures: 3, MinPollInterval: time.Second}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			clock.Step(31 * time.Second) // past the deferral of the first status
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			got := &itemopsv1alpha1.ItemOperation{}
			if err := cached.Get(context.Background(), req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != tc.want {
				t.Errorf("%s: phase %s, want %s (conditions %+v)", tc.name, got.Status.Phase, tc.want, got.Status.Conditions)
			}
		}
	})
})

// A cancel patch of a mirrored object the API server refuses because the
// object of that name is another one (422: metadata.uid is immutable; 409)
// or gone (404) is an answer, not an error tried again for ever.
func TestCancelMirrorOfAReplacedObject(t *testing.T) {
	scheme := unitScheme(t)
	uid := func(name string) types.UID { return types.UID("uid-" + name) }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"replaced (422)", apierrors.NewInvalid(schema.GroupKind{Group: "velero.io", Kind: "PodVolumeBackup"}, "pvb",
			field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "other", "field is immutable")}), "the object of that name is another one"},
		{"replaced (409)", apierrors.NewConflict(schema.GroupResource{Group: "velero.io", Resource: "podvolumebackups"}, "pvb", errors.New("uid")),
			"the object of that name is another one"},
		{"gone (404)", apierrors.NewNotFound(schema.GroupResource{Group: "velero.io", Resource: "podvolumebackups"}, "pvb"), "no longer exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvb := &velerov1api.PodVolumeBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "pvb", UID: uid("now")}}
			patches := 0
			c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(pvb).Build(), interceptor.Funcs{
				Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
					patches++
					return tc.err
				},
			})
			r := &ItemOperationReconciler{Client: c}
			op := &itemopsv1alpha1.ItemOperation{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "op"},
				Spec: itemopsv1alpha1.ItemOperationSpec{Mirror: &itemopsv1alpha1.MirrorReference{
					Kind: itemopsv1alpha1.MirrorKindPodVolumeBackup, Name: "pvb", UID: string(uid("before"))}}}
			answer, err := r.cancelMirror(context.Background(), op)
			if err != nil {
				t.Fatalf("an error, tried again for ever: %v", err)
			}
			if !strings.Contains(answer, tc.want) || patches != 1 {
				t.Errorf("answer %q after %d patch(es), want %q after one", answer, patches, tc.want)
			}
		})
	}
}
