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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/progress"
)

var _ = Describe("ETA polls of a plugin whose estimates run late", Label("unit"), func() {
	const dataMover = "velero.io/csi-pvc-backupper"
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	operation := func(started, updated time.Time, phase itemopsv1alpha1.OperationPhase) *itemopsv1alpha1.ItemOperation {
		op := &itemopsv1alpha1.ItemOperation{Spec: itemopsv1alpha1.ItemOperationSpec{
			Plugin: itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: dataMover}}}
		op.Status.Phase, op.Status.Started = phase, &metav1.Time{Time: started}
		if !updated.IsZero() {
			op.Status.Updated = &metav1.Time{Time: updated}
		}
		return op
	}
	// staleEnds has the reconciler learn from 100 data-mover operations
	// whose last estimate came 0 to 9.9 s after their end, as estimates
	// from readings up to 10 s old do.
	staleEnds := func(r *ItemOperationReconciler) {
		for i := range 100 {
			end := now.Add(-time.Minute)
			done := operation(end.Add(-time.Minute), end, itemopsv1alpha1.OperationPhaseCompleted)
			r.learnLateness(done, polled{predicted: end.Add(time.Duration(i) * 100 * time.Millisecond)}, now)
		}
	}

	It("polls ahead of the estimate by what its estimates ran late, nearer at each slip, then at the estimate", func() {
		r := &ItemOperationReconciler{SyncFrequency: 10 * time.Second, ETAPolling: true, MinPollInterval: time.Second,
			Lateness: &progress.Lateness{Max: 10 * time.Second}}
		staleEnds(r)
		running := operation(now.Add(-time.Minute), time.Time{}, itemopsv1alpha1.OperationPhaseInProgress)
		estimate := now.Add(8 * time.Second)

		wait, by := r.nextPoll(running, now, false, false, estimate, r.leadFor(running, 0))
		Expect(by).To(Equal(estimate.Add(-6600*time.Millisecond)), "first: ahead by two thirds of the lateness")
		Expect(wait).To(Equal(1400*time.Millisecond + etaMargin))

		wait, by = r.nextPoll(running, now.Add(1500*time.Millisecond), false, true, estimate, r.leadFor(running, 1))
		Expect(by).To(Equal(estimate.Add(-3300*time.Millisecond)), "after a slip: ahead by one third")
		Expect(wait).To(Equal(3200*time.Millisecond + etaMargin))

		_, by = r.nextPoll(running, now.Add(4800*time.Millisecond), false, true, estimate, r.leadFor(running, 2))
		Expect(by).To(Equal(estimate), "after two slips: at the estimate")
	})

	It("learns nothing from ends the plugin gives no time of, nor from failures, nor for other plugins", func() {
		r := &ItemOperationReconciler{Lateness: &progress.Lateness{Max: 10 * time.Second}}
		for range 100 {
			started := now.Add(-time.Minute)
			last := polled{predicted: now.Add(5 * time.Second)}
			r.learnLateness(operation(started, time.Time{}, itemopsv1alpha1.OperationPhaseCompleted), last, now)
			r.learnLateness(operation(started, now.Add(-time.Second), itemopsv1alpha1.OperationPhaseFailed), last, now)
			r.learnLateness(operation(started, now.Add(time.Hour), itemopsv1alpha1.OperationPhaseCompleted), last, now)
			r.learnLateness(operation(started, now.Add(-time.Second), itemopsv1alpha1.OperationPhaseCompleted), polled{}, now)
		}
		running := operation(now, time.Time{}, itemopsv1alpha1.OperationPhaseInProgress)
		Expect(r.leadFor(running, 0)).To(BeZero())

		staleEnds(r)
		Expect(r.leadFor(running, 0)).To(Equal(6600 * time.Millisecond))
		other := running.DeepCopy()
		other.Spec.Plugin.Name = "example.io/fresh"
		Expect(r.leadFor(other, 0)).To(BeZero())
		Expect((&ItemOperationReconciler{}).leadFor(running, 0)).To(BeZero(), "without a learner")
	})
})
