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

package rollup

import "testing"

func TestNext(t *testing.T) {
	cases := []struct {
		name   string
		phase  Phase
		counts Counts
		want   Phase
	}{
		// WaitingForPluginOperations
		{"waiting, nothing finished", WaitingForPluginOperations, Counts{Total: 3}, WaitingForPluginOperations},
		{"waiting, some completed", WaitingForPluginOperations, Counts{Total: 3, Completed: 2}, WaitingForPluginOperations},
		{"waiting, one failed, others running", WaitingForPluginOperations, Counts{Total: 3, Completed: 1, Failed: 1}, WaitingForPluginOperationsPartiallyFailed},
		{"waiting, all completed", WaitingForPluginOperations, Counts{Total: 3, Completed: 3}, Finalizing},
		{"waiting, all done, one failed", WaitingForPluginOperations, Counts{Total: 3, Completed: 2, Failed: 1}, FinalizingPartiallyFailed},
		{"waiting, all failed", WaitingForPluginOperations, Counts{Total: 2, Failed: 2}, FinalizingPartiallyFailed},
		{"waiting, no operations at all", WaitingForPluginOperations, Counts{}, Finalizing},
		{"waiting, more finished than known", WaitingForPluginOperations, Counts{Total: 1, Completed: 2}, Finalizing},

		// WaitingForPluginOperationsPartiallyFailed (the backup itself had errors)
		{"partial, running", WaitingForPluginOperationsPartiallyFailed, Counts{Total: 2, Completed: 1}, WaitingForPluginOperationsPartiallyFailed},
		{"partial, all completed", WaitingForPluginOperationsPartiallyFailed, Counts{Total: 2, Completed: 2}, FinalizingPartiallyFailed},
		{"partial, all done with failures", WaitingForPluginOperationsPartiallyFailed, Counts{Total: 2, Failed: 1, Completed: 1}, FinalizingPartiallyFailed},
		{"partial, no operations", WaitingForPluginOperationsPartiallyFailed, Counts{}, FinalizingPartiallyFailed},

		// Phases itemops does not own never move, whatever the counts.
		{"new", "New", Counts{Total: 1, Completed: 1}, "New"},
		{"in progress", "InProgress", Counts{Total: 1, Completed: 1}, "InProgress"},
		{"finalizing stays", Finalizing, Counts{Total: 2, Failed: 2}, Finalizing},
		{"finalizing partially failed stays", FinalizingPartiallyFailed, Counts{Total: 2}, FinalizingPartiallyFailed},
		{"completed never regresses", "Completed", Counts{Total: 2}, "Completed"},
		{"partially failed never regresses", "PartiallyFailed", Counts{Total: 2}, "PartiallyFailed"},
		{"failed stays", "Failed", Counts{Total: 2, Completed: 2}, "Failed"},
		{"failed validation stays", "FailedValidation", Counts{}, "FailedValidation"},
		{"deleting stays", "Deleting", Counts{}, "Deleting"},
		{"empty phase stays", "", Counts{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Next(tc.phase, tc.counts); got != tc.want {
				t.Errorf("Next(%q, %+v) = %q, want %q", tc.phase, tc.counts, got, tc.want)
			}
		})
	}
}

// order is the order of the phases itemops moves a parent through.
var order = map[Phase]int{
	WaitingForPluginOperations: 0, WaitingForPluginOperationsPartiallyFailed: 1,
	Finalizing: 2, FinalizingPartiallyFailed: 3,
}

// partial are the phases that carry a failure.
var partial = map[Phase]bool{WaitingForPluginOperationsPartiallyFailed: true, FinalizingPartiallyFailed: true}

// TestNextNeverRegresses checks every phase and a grid of counts: a result is
// never earlier in the order than its input, and a partial failure is never lost.
func TestNextNeverRegresses(t *testing.T) {
	for phase := range order {
		for total := 0; total <= 4; total++ {
			for completed := 0; completed <= total; completed++ {
				for failed := 0; completed+failed <= total; failed++ {
					c := Counts{Total: total, Completed: completed, Failed: failed}
					got := Next(phase, c)
					if order[got] < order[phase] {
						t.Errorf("Next(%q, %+v) = %q regresses", phase, c, got)
					}
					if partial[phase] && !partial[got] {
						t.Errorf("Next(%q, %+v) = %q loses the partial failure", phase, c, got)
					}
					if phase == Finalizing && got != Finalizing {
						t.Errorf("Next(%q, %+v) = %q moves a phase itemops does not own", phase, c, got)
					}
				}
			}
		}
	}
}
