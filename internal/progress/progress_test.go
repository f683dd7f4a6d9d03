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
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	cases := []struct {
		done, total int64
		units, want string
	}{
		{4509715661, 10737418240, "Bytes", "4.2Gi/10Gi (42%)"},
		{0, 10737418240, "bytes", "0/10Gi (0%)"},
		{512, 1024, "Bytes", "512/1Ki (50%)"},
		{10737418240, 10737418240, "Bytes", "10Gi/10Gi (100%)"},
		{3, 10, "items", "3/10 items (30%)"},
		{3, 10, "", "3/10 (30%)"},
		{5 << 20, 0, "Bytes", "5Mi"},
		{12, 10, "items", "12/10 items (100%)"},
		{-1, 10, "items", "-1/10 items (0%)"},
		{0, 0, "Bytes", ""},
	}
	for _, tc := range cases {
		if got := Format(tc.done, tc.total, tc.units); got != tc.want {
			t.Errorf("Format(%d, %d, %q) = %q, want %q", tc.done, tc.total, tc.units, got, tc.want)
		}
	}
}

func TestETA(t *testing.T) {
	start := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	now := start.Add(10 * time.Minute)
	eta, ok := ETA(start, now, 25, 100)
	if !ok || !eta.Equal(now.Add(30*time.Minute)) {
		t.Errorf("ETA at a quarter after 10m = %v, %v; want %v", eta, ok, now.Add(30*time.Minute))
	}
	for _, tc := range []struct {
		started     time.Time
		done, total int64
	}{
		{time.Time{}, 1, 2}, {start, 0, 100}, {start, 100, 100}, {start, 5, 0},
	} {
		if _, ok := ETA(tc.started, now, tc.done, tc.total); ok {
			t.Errorf("ETA(%v, %d, %d) gave an estimate from nothing", tc.started, tc.done, tc.total)
		}
	}
}
