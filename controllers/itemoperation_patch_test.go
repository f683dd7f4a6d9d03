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
	"encoding/json"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// A status patch must change on the API server exactly what
// client.MergeFrom would have changed, and nothing outside the status.
var _ = Describe("Status patches", Label("unit"), func() {
	now := metav1.NewTime(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
	later := metav1.NewTime(now.Add(10 * time.Second))
	running := &itemopsv1alpha1.ItemOperation{
		ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "velero", ResourceVersion: "41",
			Labels: map[string]string{itemopsv1alpha1.LabelParentKind: "Backup"}},
		Spec: itemopsv1alpha1.ItemOperationSpec{OperationID: "id-1"},
		Status: itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress, NCompleted: 10, NTotal: 100,
			Progress: "10/100 (10%)", EstimatedCompletion: &later, LastPolled: &now,
			Conditions: []metav1.Condition{{Type: itemopsv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue,
				Reason: itemopsv1alpha1.ReasonPolling, Message: "polling", LastTransitionTime: now}}},
	}
	cases := map[string]func(*itemopsv1alpha1.ItemOperation){
		"progress": func(op *itemopsv1alpha1.ItemOperation) {
			op.Status.NCompleted, op.Status.Progress, op.Status.LastPolled = 50, "50/100 (50%)", &later
		},
		"an end that clears fields": func(op *itemopsv1alpha1.ItemOperation) {
			op.Status.Phase, op.Status.EstimatedCompletion, op.Status.CompletionTimestamp = itemopsv1alpha1.OperationPhaseCompleted, nil, &later
			op.Status.Conditions[0].Status, op.Status.Conditions[0].Reason = metav1.ConditionFalse, itemopsv1alpha1.ReasonFinished
		},
		"a new condition": func(op *itemopsv1alpha1.ItemOperation) {
			op.Status.Conditions = append(op.Status.Conditions, metav1.Condition{Type: itemopsv1alpha1.ConditionStalled,
				Status: metav1.ConditionTrue, Reason: itemopsv1alpha1.ReasonNoProgress, Message: "still", LastTransitionTime: later})
		},
	}
	for name, change := range cases {
		It("writes "+name+" as MergeFrom would", func() {
			op := running.DeepCopy()
			change(op)
			for _, lock := range []bool{false, true} {
				data, err := statusPatch(running, lock).Data(op)
				Expect(err).NotTo(HaveOccurred())
				var patch map[string]any
				Expect(json.Unmarshal(data, &patch)).To(Succeed())
				Expect(patch).To(HaveKey("status"))
				if lock {
					Expect(patch).To(HaveKeyWithValue("metadata", map[string]any{"resourceVersion": "41"}))
					Expect(patch).To(HaveLen(2))
				} else {
					Expect(patch).To(HaveLen(1), "nothing but the status")
				}
				// Applied to the stored object, it gives what MergeFrom's patch gives.
				stored, err := json.Marshal(running)
				Expect(err).NotTo(HaveOccurred())
				ours, err := jsonpatch.MergePatch(stored, data)
				Expect(err).NotTo(HaveOccurred())
				theirs, err := client.MergeFrom(running).Data(op)
				Expect(err).NotTo(HaveOccurred())
				want, err := jsonpatch.MergePatch(stored, theirs)
				Expect(err).NotTo(HaveOccurred())
				var got, expected itemopsv1alpha1.ItemOperation
				Expect(json.Unmarshal(ours, &got)).To(Succeed())
				Expect(json.Unmarshal(want, &expected)).To(Succeed())
				Expect(got).To(Equal(expected))
				gotStatus, err := json.Marshal(got.Status)
				Expect(err).NotTo(HaveOccurred())
				Expect(json.Marshal(op.Status)).To(MatchJSON(gotStatus))
			}
		})
	}
})
