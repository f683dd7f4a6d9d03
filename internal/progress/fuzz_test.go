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

package progress

import (
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzFormat: whatever counts a plugin reports, the percentage is the true
// floor of done/total, clamped to 0–100, and nothing is printed for nothing.
func FuzzFormat(f *testing.F) {
	f.Add(int64(4509715661), int64(10737418240), "Bytes")
	f.Add(int64(12), int64(10), "items")
	f.Add(int64(-1), int64(10), "")
	f.Add(int64(0), int64(0), "Bytes")
	f.Add(int64(1)<<62, int64(1)<<62+1, "b")
	f.Add(int64(9223372036854775807), int64(9223372036854775807), "bytes")
	f.Fuzz(func(t *testing.T, done, total int64, units string) {
		got := Format(done, total, units)
		if done <= 0 && total <= 0 {
			if got != "" {
				t.Fatalf("Format(%d, %d, %q) = %q, want nothing", done, total, units, got)
			}
			return
		}
		if total <= 0 {
			if strings.Contains(got, "%)") && !strings.Contains(units, "%)") {
				t.Fatalf("Format(%d, %d, %q) = %q: a percentage of an unknown total", done, total, units, got)
			}
			return
		}
		open := strings.LastIndex(got, " (")
		if open < 0 || !strings.HasSuffix(got, "%)") {
			t.Fatalf("Format(%d, %d, %q) = %q has no percentage", done, total, units, got)
		}
		percent, err := strconv.Atoi(got[open+2 : len(got)-2])
		if err != nil {
			t.Fatalf("Format(%d, %d, %q) = %q: %v", done, total, units, got, err)
		}
		want := new(big.Int).Mul(big.NewInt(done), big.NewInt(100))
		want.Quo(want, big.NewInt(total))
		if want.Cmp(big.NewInt(0)) < 0 {
			want.SetInt64(0)
		}
		if want.Cmp(big.NewInt(100)) > 0 {
			want.SetInt64(100)
		}
		if int64(percent) != want.Int64() {
			t.Fatalf("Format(%d, %d, %q) = %q, want %d%%", done, total, units, got, want.Int64())
		}
	})
}

// FuzzETA: an estimate is never before the time it was measured at, never
// before the start, and grows with the part left to do.
func FuzzETA(f *testing.F) {
	f.Add(int64(0), int64(10*time.Minute), int64(25), int64(100))
	f.Add(int64(0), int64(time.Nanosecond), int64(1), int64(9223372036854775807))
	f.Add(int64(-1), int64(time.Hour), int64(1), int64(2))
	f.Add(int64(1)<<60, int64(1)<<61, int64(3), int64(1)<<40)
	f.Fuzz(func(t *testing.T, startUnixNano, elapsed, done, total int64) {
		started := time.Unix(0, startUnixNano).UTC()
		now := started.Add(time.Duration(elapsed))
		eta, ok := ETA(started, now, done, total)
		if !ok {
			return
		}
		if done <= 0 || total <= 0 || done >= total || !now.After(started) {
			t.Fatalf("ETA(%v, %v, %d, %d) estimated from nothing", started, now, done, total)
		}
		if eta.Before(now) {
			t.Fatalf("ETA(%v, %v, %d, %d) = %v, before the measurement", started, now, done, total, eta)
		}
		if later, ok := ETA(started, now, done, total+1); ok && later.Before(eta) {
			t.Fatalf("ETA(%v, %v, %d, %d) = %v, but with one more to do %v", started, now, done, total, eta, later)
		}
	})
}
