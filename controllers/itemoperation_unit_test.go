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

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

func TestPollIntervalBacksOff(t *testing.T) {
	r := &ItemOperationReconciler{SyncFrequency: 10 * time.Second}
	cases := map[int32]time.Duration{0: 10 * time.Second, 1: 10 * time.Second, 2: 20 * time.Second,
		3: 40 * time.Second, 5: 160 * time.Second, 6: 5 * time.Minute, 30: 5 * time.Minute}
	for failures, want := range cases {
		op := &itemopsv1alpha1.ItemOperation{Status: itemopsv1alpha1.ItemOperationStatus{PollFailures: failures}}
		if got := r.pollInterval(op); got != want {
			t.Errorf("pollInterval after %d failures = %s, want %s", failures, got, want)
		}
	}
}
