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

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/why"
)

// scriptedCauses answers with its cause, or its error.
type scriptedCauses struct {
	cause *why.Cause
	err   error
	calls int
}

func (s *scriptedCauses) Cause(context.Context, *itemopsv1alpha1.ItemOperation) (*why.Cause, error) {
	s.calls++
	return s.cause, s.err
}

var _ = Describe("Why an operation waits, polled", Label("unit"), func() {
	It("a cause is written at once, said once, cleared, and gone with the end; the rate is of the last minute", func() {
		t := GinkgoTB()
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := clocktesting.NewFakeClock(start)
		c, op := oneWaitingOperation(t, why.DataUploadPlugin, "du-1")
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
