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
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/plugin"
	"github.com/itemops/itemops/internal/store"
	"github.com/itemops/itemops/internal/why"
)

// scriptedCauses answers with its cause, or its error.
type scriptedCauses struct {
	cause *why.Cause
	err   error
	calls int
}

func (s *scriptedCauses) Cause(context.Context, *itemopsv1alpha1.ItemOperation, why.When) (why.Finding, error) {
	s.calls++
	return why.Finding{Cause: s.cause, Checked: []string{"DataUpload du (InProgress)"}}, s.err
}

// heldPlugin reports the progress the test sets, or the failure it sets,
// and counts the cancels asked of it.
type heldPlugin struct {
	done, total int64
	fail        error
	completed   bool
	cancels     int
}

func (p *heldPlugin) Progress(context.Context, plugin.Operation) (velero.OperationProgress, error) {
	return velero.OperationProgress{NCompleted: p.done, NTotal: p.total, OperationUnits: "Bytes", Completed: p.completed, Description: "InProgress"}, p.fail
}

func (p *heldPlugin) Cancel(context.Context, plugin.Operation) error {
	p.cancels++
	return nil
}

// fixedLocation is any VolumeSnapshotLocation, configured with nothing.
type fixedLocation struct{}

func (fixedLocation) SnapshotLocation(context.Context, string) (store.SnapshotLocation, error) {
	return store.SnapshotLocation{}, nil
}

// fixedServer says what Velero's Deployment says.
type fixedServer struct{ s *why.Server }

func (f fixedServer) Server(context.Context) (*why.Server, error) { return f.s, nil }

var _ = Describe("Why an operation waits, polled", Label("unit"), func() {
	It("a cause is written at once, said once, cleared, and gone with the end; the rate is of the last minute", func() {
		t := GinkgoTB()
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := clocktesting.NewFakeClock(start)
		c, op := oneWaitingOperation(t, itemopsv1alpha1.DataUploadPlugin, "du-1")
		// 1,000 bytes a second, 120 s long.
		p := &scriptedPlugin{clock: clock, started: start, total: 120_000}
		causes := &scriptedCauses{}
		recorder := record.NewFakeRecorder(100)
		r := &ItemOperationReconciler{Client: c, Plugins: p, Causes: causes, Recorder: recorder, Clock: clock,
			SyncFrequency: 10 * time.Second, ProgressUpdateInterval: time.Second, StallAfter: time.Hour,
			MaxProgressFailures: 3, MinPollInterval: time.Second}
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}
		ctx := context.Background()
		got := &itemopsv1alpha1.ItemOperation{}
		pollAt := func(at time.Duration) {
			t.Helper()
			clock.SetTime(start.Add(at))
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
		}
		waitEvents := func() (waiting, ended []string) {
			for len(recorder.Events) > 0 {
				e := <-recorder.Events
				switch {
				case strings.Contains(e, " "+string(EventWaiting)+" "):
					waiting = append(waiting, e)
				case strings.Contains(e, string(EventWaitEnded)):
					ended = append(ended, e)
				}
			}
			return waiting, ended
		}

		pollAt(2 * time.Second)
		if got.Status.Throughput != "" || got.Status.WaitingFor != "" {
			t.Fatalf("after one reading: throughput %q, waitingFor %q; want neither", got.Status.Throughput, got.Status.WaitingFor)
		}
		causes.cause = &why.Cause{Reason: itemopsv1alpha1.WaitingNodeAgentBusy, Evidence: "2 ahead", Action: "wait"}
		for _, at := range []time.Duration{12, 22, 32} {
			pollAt(at * time.Second)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionWaiting); c == nil ||
			!meta.IsStatusConditionTrue(got.Status.Conditions, itemopsv1alpha1.ConditionWaiting) || c.Reason != itemopsv1alpha1.WaitingNodeAgentBusy ||
			c.Message != "2 ahead. wait" || got.Status.WaitingFor != itemopsv1alpha1.WaitingNodeAgentBusy {
			t.Fatalf("Waiting %+v, waitingFor %q; want True NodeAgentBusy", c, got.Status.WaitingFor)
		}
		if waiting, _ := waitEvents(); len(waiting) != 1 || !strings.Contains(waiting[0], "NodeAgentBusy: 2 ahead. wait") {
			t.Fatalf("Waiting Events over three polls: %q; want one", waiting)
		}
		if got.Status.Throughput != "1000B/s" || got.Status.UnitsPerSecond != 1000 {
			t.Fatalf("throughput %q (%d/s), want 1000B/s", got.Status.Throughput, got.Status.UnitsPerSecond)
		}

		// A read that fails keeps the cause; the next that succeeds clears it.
		causes.err = errors.New("informer not synced")
		pollAt(42 * time.Second)
		if got.Status.WaitingFor != itemopsv1alpha1.WaitingNodeAgentBusy {
			t.Fatalf("after a failed read: waitingFor %q, want the cause kept", got.Status.WaitingFor)
		}
		causes.cause, causes.err = nil, nil
		pollAt(52 * time.Second)
		if meta.IsStatusConditionTrue(got.Status.Conditions, itemopsv1alpha1.ConditionWaiting) || got.Status.WaitingFor != "" {
			t.Fatalf("after the cause went: Waiting %+v, waitingFor %q", got.Status.Conditions, got.Status.WaitingFor)
		}
		if waiting, ended := waitEvents(); len(waiting) != 0 || len(ended) != 1 || !strings.Contains(ended[0], "no longer waits on NodeAgentBusy") {
			t.Fatalf("Events at the end of the wait: Waiting %q, WaitEnded %q; want one WaitEnded", waiting, ended)
		}

		causes.cause = &why.Cause{Reason: itemopsv1alpha1.WaitingRepositoryNotReady, Evidence: "NotReady"}
		pollAt(62 * time.Second)
		pollAt(121 * time.Second)
		if got.Status.Phase != itemopsv1alpha1.OperationPhaseCompleted {
			t.Fatalf("phase %s, want Completed", got.Status.Phase)
		}
		w := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionWaiting)
		if w == nil || w.Status != "False" || w.Reason != itemopsv1alpha1.ReasonFinished || got.Status.WaitingFor != "" ||
			got.Status.Throughput != "" || got.Status.UnitsPerSecond != 0 {
			t.Fatalf("at the end: Waiting %+v, waitingFor %q, throughput %q %d; want all cleared", w, got.Status.WaitingFor,
				got.Status.Throughput, got.Status.UnitsPerSecond)
		}
		if _, ended := waitEvents(); len(ended) != 0 {
			t.Fatalf("an operation that ended got %q", ended)
		}
	})
})

var _ = Describe("No claim without evidence", Label("unit"), func() {
	It("progress that stands still for the not-moving window is NotMoving, with what was checked, or VeleroNotRunning; moving clears it", func() {
		t := GinkgoTB()
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := clocktesting.NewFakeClock(start)
		c, op := oneWaitingOperation(t, "example.io/copier", "op-1")
		// Watched since the start, as an operation ingested then.
		op.Status = itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress, Created: &metav1.Time{Time: start},
			LastProgressTime: &metav1.Time{Time: start}, NCompleted: 10, NTotal: 100}
		Expect(c.Status().Update(context.Background(), op)).To(Succeed())
		p := &heldPlugin{done: 10, total: 100}
		server := &why.Server{Namespace: "velero", Name: "velero", Found: true, Observed: true, Replicas: 1, Ready: 1}
		recorder := record.NewFakeRecorder(100)
		r := &ItemOperationReconciler{Client: c, Plugins: p, VeleroServer: fixedServer{server}, Recorder: recorder, Clock: clock,
			SyncFrequency: 10 * time.Second, ProgressUpdateInterval: time.Second, StallAfter: time.Hour, NotMovingAfter: time.Minute,
			MaxProgressFailures: 3, MinPollInterval: time.Second}
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}
		got := &itemopsv1alpha1.ItemOperation{}
		pollAt := func(at time.Duration) *metav1.Condition {
			t.Helper()
			clock.SetTime(start.Add(at))
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			return meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionWaiting)
		}
		for _, at := range []time.Duration{0, 10, 20, 30, 40, 50} {
			if w := pollAt(at * time.Second); w != nil && w.Status == metav1.ConditionTrue {
				t.Fatalf("at %ds, within the window: Waiting %s %s", at, w.Reason, w.Message)
			}
		}
		w := pollAt(70 * time.Second)
		if w == nil || w.Status != metav1.ConditionTrue || w.Reason != itemopsv1alpha1.WaitingNotMoving || got.Status.WaitingFor != itemopsv1alpha1.WaitingNotMoving {
			t.Fatalf("a minute without progress: Waiting %+v; want NotMoving", w)
		}
		for _, says := range []string{"no progress since 2026-01-01T00:00:00Z", "checked: the plugin's progress, velero server (Deployment velero/velero: 1 of 1 ready)",
			"the plugin says: InProgress", "example.io/copier"} {
			if !strings.Contains(w.Message, says) {
				t.Errorf("NotMoving says %q, not %q", w.Message, says)
			}
		}

		By("velero server scaled to 0")
		server.Ready, server.Replicas = 0, 0
		w = pollAt(80 * time.Second)
		if w.Reason != itemopsv1alpha1.WaitingVeleroNotRunning || !strings.Contains(w.Message, "Deployment velero/velero is scaled to 0") {
			t.Fatalf("velero server scaled to 0: Waiting %s %q", w.Reason, w.Message)
		}
		server.Ready, server.Replicas = 1, 1

		By("bytes moving again")
		p.done = 20
		w = pollAt(90 * time.Second)
		if w.Status != metav1.ConditionFalse || got.Status.WaitingFor != "" {
			t.Fatalf("progress moved: Waiting %+v, waitingFor %q; want it cleared", w, got.Status.WaitingFor)
		}
		By("standing still again: the window counts from then")
		if w = pollAt(140 * time.Second); w.Status == metav1.ConditionTrue {
			t.Fatalf("50s after progress moved: %s", w.Reason)
		}
		if w = pollAt(151 * time.Second); w.Reason != itemopsv1alpha1.WaitingNotMoving || !strings.Contains(w.Message, "since 2026-01-01T00:01:30Z") {
			t.Fatalf("61s after: Waiting %s %q", w.Reason, w.Message)
		}
		var reasons []string
		for len(recorder.Events) > 0 {
			e := <-recorder.Events
			if strings.Contains(e, " "+string(EventWaiting)+" ") || strings.Contains(e, string(EventWaitEnded)) {
				reasons = append(reasons, strings.SplitN(e, ":", 2)[0])
			}
		}
		Expect(reasons).To(Equal([]string{"Warning Waiting NotMoving", "Warning Waiting VeleroNotRunning",
			"Normal WaitEnded no longer waits on VeleroNotRunning", "Warning Waiting NotMoving"}))
	})

	DescribeTable("a requested cancel is not an outcome",
		func(veleroRecords bool, answer func(*heldPlugin), verdict string, want itemopsv1alpha1.OperationPhase) {
			t := GinkgoTB()
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := clocktesting.NewFakeClock(start)
			c, op := oneWaitingOperation(t, "example.io/copier", "op-1")
			// Read from Velero's operations file, as Velero recorded it then.
			op.Annotations = map[string]string{itemopsv1alpha1.AnnotationRecordStatus: `{"phase":"InProgress"}`}
			Expect(c.Update(context.Background(), op)).To(Succeed())
			p := &heldPlugin{done: 10, total: 100}
			recorder := record.NewFakeRecorder(100)
			r := &ItemOperationReconciler{Client: c, Plugins: p, Recorder: recorder, Clock: clock, VeleroRecordsEnds: veleroRecords,
				VeleroTimesOut: veleroRecords, SyncFrequency: 10 * time.Second, ProgressUpdateInterval: time.Second, StallAfter: time.Hour,
				NotMovingAfter: time.Minute, MaxProgressFailures: 3, MinPollInterval: time.Second}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}
			got := &itemopsv1alpha1.ItemOperation{}
			reconcileAt := func(at time.Duration) {
				t.Helper()
				clock.SetTime(start.Add(at))
				if _, err := r.Reconcile(context.Background(), req); err != nil {
					t.Fatal(err)
				}
				if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
					t.Fatal(err)
				}
			}
			reconcileAt(0)
			got.Spec.Cancel = true
			Expect(c.Update(context.Background(), got)).To(Succeed())
			reconcileAt(10 * time.Second)
			Expect(got.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCanceling))
			Expect(p.cancels).To(Equal(1))
			Expect(meta.IsStatusConditionTrue(got.Status.Conditions, itemopsv1alpha1.ConditionCanceled)).To(BeTrue())
			w := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionWaiting)
			Expect(w).NotTo(BeNil())
			Expect(w.Reason).To(Equal(itemopsv1alpha1.WaitingCancelPending))

			By("the plugin answers")
			answer(p)
			reconcileAt(20 * time.Second)
			Expect(p.cancels).To(Equal(1), "the plugin asked once")
			if verdict != "" {
				Expect(got.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCanceling), "what itemops read is not Velero's record")
				Expect(got.Status.CompletionTimestamp).To(BeNil())
				By("Velero records it")
				got.Annotations[itemopsv1alpha1.AnnotationRecordStatus] = verdict
				Expect(c.Update(context.Background(), got)).To(Succeed())
				reconcileAt(30 * time.Second)
			}
			Expect(got.Status.Phase).To(Equal(want))
			Expect(meta.IsStatusConditionTrue(got.Status.Conditions, itemopsv1alpha1.ConditionDiffersFromVelero)).To(BeFalse())
		},
		Entry("observe mode: the plugin reports a failure, Velero records it Failed: Canceled", true,
			func(p *heldPlugin) {
				p.fail = &plugin.Error{Kind: plugin.ErrOperationFailed, Err: errors.New("DataUpload is canceled")}
			},
			`{"phase":"Failed","error":"DataUpload is canceled"}`, itemopsv1alpha1.OperationPhaseCanceled),
		Entry("observe mode: the plugin reports it completed first, Velero records Completed", true,
			func(p *heldPlugin) { p.done, p.completed = 100, true }, `{"phase":"Completed"}`, itemopsv1alpha1.OperationPhaseCompleted),
		Entry("manage mode: the plugin reports a failure: Canceled", false,
			func(p *heldPlugin) {
				p.fail = &plugin.Error{Kind: plugin.ErrOperationFailed, Err: errors.New("DataUpload is canceled")}
			},
			"", itemopsv1alpha1.OperationPhaseCanceled),
		Entry("manage mode: the plugin reports it completed: Completed", false,
			func(p *heldPlugin) { p.done, p.completed = 100, true }, "", itemopsv1alpha1.OperationPhaseCompleted),
	)

	It("a VolumeSnapshotter's snapshot, which Velero does not follow, ends as its plugin reports it in observe mode too", func() {
		t := GinkgoTB()
		clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		c, op := oneWaitingOperation(t, "example.io/disks", "snap-1")
		op.Spec.Plugin.Kind, op.Spec.SnapshotLocation = itemopsv1alpha1.PluginKindVolumeSnapshotter, "disks"
		op.Annotations = map[string]string{itemopsv1alpha1.AnnotationRecordStatus: `{"phase":"InProgress"}`}
		op.Spec.Cancel = true
		Expect(c.Update(context.Background(), op)).To(Succeed())
		p := &heldPlugin{done: 10, total: 100, fail: &plugin.Error{Kind: plugin.ErrOperationFailed, Err: errors.New("snapshot canceled")}}
		r := &ItemOperationReconciler{Client: c, Plugins: p, SnapshotLocations: fixedLocation{}, Recorder: record.NewFakeRecorder(100), Clock: clock,
			VeleroRecordsEnds: true, VeleroTimesOut: true, SyncFrequency: 10 * time.Second, ProgressUpdateInterval: time.Second,
			StallAfter: time.Hour, MaxProgressFailures: 3, MinPollInterval: time.Second}
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(op)}
		got := &itemopsv1alpha1.ItemOperation{}
		for range 2 {
			_, err := r.Reconcile(context.Background(), req)
			Expect(err).NotTo(HaveOccurred())
			clock.Step(10 * time.Second)
		}
		Expect(c.Get(context.Background(), req.NamespacedName, got)).To(Succeed())
		Expect(got.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCanceled))
		Expect(got.Status.Error).To(Equal("snapshot canceled"))
	})
})
