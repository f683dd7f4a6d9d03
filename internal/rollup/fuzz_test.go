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

// FuzzNext: for any phase and any counts (even impossible ones), Next
// never moves a phase itemops does not own, never goes back, never loses a
// partial failure, and finalizes only when nothing is left to wait for
// (counts with more ended than known, which no caller makes, end the wait).
func FuzzNext(f *testing.F) {
	for _, p := range []Phase{WaitingForPluginOperations, WaitingForPluginOperationsPartiallyFailed, Finalizing,
		FinalizingPartiallyFailed, PartiallyFailed, "Completed", "InProgress", ""} {
		f.Add(string(p), 3, 1, 1)
		f.Add(string(p), 2, 1, 1)
	}
	f.Add(string(WaitingForPluginOperations), -1, 0, 0)
	f.Add(string(WaitingForPluginOperations), 1, -5, 0)
	f.Add(string(WaitingForPluginOperations), 9223372036854775807, 9223372036854775807, 1)
	f.Fuzz(func(t *testing.T, phase string, total, completed, failed int) {
		in, c := Phase(phase), Counts{Total: total, Completed: completed, Failed: failed}
		got := Next(in, c)
		if !Owned(in) {
			if got != in {
				t.Fatalf("Next(%q, %+v) = %q moves a phase itemops does not own", in, c, got)
			}
			return
		}
		if _, known := order[got]; !known {
			t.Fatalf("Next(%q, %+v) = %q, not a phase itemops moves to", in, c, got)
		}
		if order[got] < order[in] {
			t.Fatalf("Next(%q, %+v) = %q goes back", in, c, got)
		}
		if (partial[in] || c.Failed > 0) && !partial[got] {
			t.Fatalf("Next(%q, %+v) = %q loses a failure", in, c, got)
		}
		if !Owned(got) && c.Unfinished() > 0 {
			t.Fatalf("Next(%q, %+v) = %q while %d are unfinished", in, c, got, c.Unfinished())
		}
	})
}
