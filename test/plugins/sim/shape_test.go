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

package sim

import (
	"fmt"
	"testing"
	"time"
)

// TestRealShape checks the real-shaped transfers of many operations: the
// bytes moved never go back, reach the size exactly when the transfer says
// it completes, the rate stays within its bounds, some transfers pause, and
// each ends in a burst; the same ID always gives the same transfer.
func TestRealShape(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const speed = 1 << 20
	paused := 0
	for i := range 50 {
		st := &State{ID: fmt.Sprintf("op-%d", i), Size: 60 << 20, Speed: speed, Shape: ShapeReal, FailAt: -1, StallAt: -1, Started: start}
		end := st.Duration()
		if got := st.progressAt(start.Add(end)); !got.Completed || got.NCompleted != st.Size {
			t.Fatalf("%s: at its end (%s) moved %d of %d, completed %t", st.ID, end, got.NCompleted, st.Size, got.Completed)
		}
		if got := st.progressAt(start.Add(end - time.Second)); got.Completed {
			t.Fatalf("%s: completed a second before its end", st.ID)
		}
		var last int64
		flat := time.Duration(0)
		for at := time.Duration(0); at <= end; at += 250 * time.Millisecond {
			moved := st.movedAfter(at)
			if moved < last {
				t.Fatalf("%s: moved %d at %s, less than %d before", st.ID, moved, at, last)
			}
			if moved == last && at > 0 {
				flat += 250 * time.Millisecond
				if flat >= minPause-time.Second {
					paused++
					flat = -time.Hour // count one pause per transfer
				}
			} else if flat >= 0 {
				flat = 0
			}
			last = moved
		}
		profile := st.profile()
		for _, s := range profile[:len(profile)-1] {
			if s.rate != 0 && (s.rate < minFactor*speed || s.rate > maxFactor*speed) {
				t.Fatalf("%s: a stretch at %.0f B/s, outside ±50%% of %d", st.ID, s.rate, speed)
			}
		}
		if burst := profile[len(profile)-1]; burst.rate != burstFactor*speed {
			t.Fatalf("%s: ends at %.0f B/s, not in a burst", st.ID, burst.rate)
		}
		again := &State{ID: st.ID, Size: st.Size, Speed: speed, Shape: ShapeReal, Started: start}
		if again.Duration() != end {
			t.Fatalf("%s: the same ID gave another transfer", st.ID)
		}
		failing := *st
		failing.FailAt = 50
		if got := failing.progressAt(failing.CompletesAt()); !got.Completed || got.Err == "" {
			t.Fatalf("%s: not failed at its failure time", st.ID)
		}
	}
	if paused == 0 {
		t.Error("no transfer paused")
	}
}
