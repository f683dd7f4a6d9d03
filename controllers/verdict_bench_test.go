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
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// BenchmarkVeleroVerdict measures what looking for Velero's verdict costs
// each reconcile of an operation read from an operations file (the record
// in its annotation is decoded): go test -run '^$' -bench VeleroVerdict ./controllers
func BenchmarkVeleroVerdict(b *testing.B) {
	now := metav1.NewTime(time.Now())
	op := withRecord(b, &itemopsv1alpha1.ItemOperation{}, itemoperation.OperationStatus{
		Phase: itemoperation.OperationPhaseInProgress, NCompleted: 1 << 30, NTotal: 10 << 30, OperationUnits: "Bytes",
		Description: "uploading the data of PVC shop/data-0", Created: &now, Started: &now, Updated: &now})
	op.Status.Created = &now
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := veleroVerdict(op); ok {
			b.Fatal("an operation in progress has no verdict")
		}
	}
}
