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

package v1alpha1

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestIsTerminal(t *testing.T) {
	cases := map[OperationPhase]bool{
		"":                       false,
		OperationPhaseNew:        false,
		OperationPhaseInProgress: false,
		OperationPhaseCompleted:  true,
		OperationPhaseFailed:     true,
		OperationPhaseCanceled:   true,
	}
	for phase, want := range cases {
		if got := phase.IsTerminal(); got != want {
			t.Errorf("%q.IsTerminal() = %v, want %v", phase, got, want)
		}
	}
}

func TestDeepCopyDoesNotShare(t *testing.T) {
	now := metav1.NewTime(time.Now())
	op := &ItemOperation{
		Spec: ItemOperationSpec{
			PostOperationItems: []ResourceIdentifier{{Resource: "datauploads", Name: "a"}},
			Timeout:            &metav1.Duration{Duration: time.Hour},
		},
		Status: ItemOperationStatus{
			Created:    &now,
			Conditions: []metav1.Condition{{Type: ConditionStalled}},
		},
	}
	out := op.DeepCopy()
	out.Spec.PostOperationItems[0].Name = "b"
	out.Spec.Timeout.Duration = time.Minute
	out.Status.Created.Time = time.Time{}
	out.Status.Conditions[0].Type = ConditionCanceled
	if op.Spec.PostOperationItems[0].Name != "a" || op.Spec.Timeout.Duration != time.Hour ||
		op.Status.Created.IsZero() || op.Status.Conditions[0].Type != ConditionStalled {
		t.Fatalf("DeepCopy shares memory with the original: %+v", op)
	}
}

func TestSchemeKnowsTheKinds(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ItemOperation", "ItemOperationList"} {
		if !scheme.Recognizes(GroupVersion.WithKind(kind)) {
			t.Errorf("scheme does not recognise %s", kind)
		}
	}
}
