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
	"testing"
	"time"
)

func TestProgressAt(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	canceledAt := start.Add(2 * time.Second)
	cases := []struct {
		name          string
		st            State
		at            time.Duration
		wantDone      int64
		wantCompleted bool
		wantErr       string
	}{
		{"halfway", State{Size: 100, Speed: 10, FailAt: -1, StallAt: -1}, 5 * time.Second, 50, false, ""},
		{"stuck", State{Size: 100, Speed: 10, FailAt: -1, StallAt: 30}, 9 * time.Second, 30, false, ""},
		{"done", State{Size: 100, Speed: 10, FailAt: -1, StallAt: -1}, 11 * time.Second, 100, true, ""},
		{"before the failure", State{Size: 100, Speed: 10, FailAt: 50, StallAt: -1}, 4 * time.Second, 40, false, ""},
		{"at the failure", State{Size: 100, Speed: 10, FailAt: 50, StallAt: -1}, 9 * time.Second, 50, true, "simulated failure at 50%"},
		{"canceled", State{Size: 100, Speed: 10, FailAt: -1, StallAt: -1, Canceled: &canceledAt}, 9 * time.Second, 20, true, "operation canceled"},
		{"cancel ignored", State{Size: 100, Speed: 10, FailAt: -1, StallAt: -1, Canceled: &canceledAt, IgnoreCancel: true}, 9 * time.Second, 90, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.st.Started = start
			p := tc.st.progressAt(start.Add(tc.at))
			if p.NCompleted != tc.wantDone || p.Completed != tc.wantCompleted || p.Err != tc.wantErr {
				t.Fatalf("got done=%d completed=%v err=%q, want %d %v %q", p.NCompleted, p.Completed, p.Err,
					tc.wantDone, tc.wantCompleted, tc.wantErr)
			}
		})
	}
}

func TestStartRejectsBadAnnotations(t *testing.T) {
	t.Setenv(EnvStateDir, t.TempDir())
	s, err := NewStore()
	if err != nil {
		t.Fatal(err)
	}
	for _, annotations := range []map[string]string{
		{AnnotationSize: "lots"},
		{AnnotationSpeed: "0"},
		{AnnotationFailAt: "150"},
		{AnnotationHangProgress: "sometimes"},
	} {
		if _, err := s.Start("upload", "ns/x", annotations); err == nil {
			t.Errorf("Start accepted %v", annotations)
		}
	}
	if _, err := s.Load("../../etc/passwd"); err == nil {
		t.Error("Load accepted a path as an operation ID")
	}
}
