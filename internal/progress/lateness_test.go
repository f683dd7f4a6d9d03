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

func TestLatenessLeadsByWhatAPluginsEstimatesRanLate(t *testing.T) {
	// stale: estimates from readings 0 to 9.9 s old, as a data mover that
	// writes progress every 10 s gives them.
	stale := func(l *Lateness) {
		for i := range 100 {
			l.Add("velero.io/csi-pvc-backupper", time.Duration(i)*100*time.Millisecond)
		}
	}
	cases := []struct {
		name   string
		learn  func(*Lateness)
		plugin string
		q      float64
		want   time.Duration
	}{
		{"nothing learned", func(*Lateness) {}, "p", 0.5, 0},
		{"too few ends", func(l *Lateness) {
			for range MinLatenessSamples - 1 {
				l.Add("p", 5*time.Second)
			}
		}, "p", 0.5, 0},
		{"stale readings, median", stale, "velero.io/csi-pvc-backupper", 0.5, 5 * time.Second},
		{"stale readings, two thirds", stale, "velero.io/csi-pvc-backupper", 2.0 / 3, 6600 * time.Millisecond},
		{"stale readings, highest", stale, "velero.io/csi-pvc-backupper", 1, 9900 * time.Millisecond},
		{"another plugin learns nothing from them", stale, "example.io/fresh", 0.5, 0},
		{"estimates that come early never delay a poll", func(l *Lateness) {
			for range 50 {
				l.Add("p", -3*time.Second)
			}
		}, "p", 0.9, 0},
		{"a pause says nothing beyond the bound", func(l *Lateness) {
			for range 50 {
				l.Add("p", time.Hour)
			}
		}, "p", 0.5, 10 * time.Second},
		{"only the latest ends count", func(l *Lateness) {
			for range LatenessSamples {
				l.Add("p", 8*time.Second)
			}
			for range LatenessSamples {
				l.Add("p", time.Second)
			}
		}, "p", 1, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := &Lateness{Max: 10 * time.Second}
			tc.learn(l)
			if got := l.Lead(tc.plugin, tc.q); got != tc.want {
				t.Errorf("Lead(%q, %.2f) = %s, want %s", tc.plugin, tc.q, got, tc.want)
			}
		})
	}
}
