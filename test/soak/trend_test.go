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

package main

import (
	"math"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// series samples a resource every 10 s for an hour, by a function of the
// minutes since the start.
func series(f func(minutes float64) int) []sample {
	var out []sample
	for at := time.Duration(0); at <= time.Hour; at += 10 * time.Second {
		out = append(out, sample{at: at, goroutines: float64(f(at.Minutes()))})
	}
	return out
}

var goroutines = resource{name: "goroutines", value: func(s sample) float64 { return s.goroutines }, rel: 0.05, abs: 20}

func TestTrend(t *testing.T) {
	cases := []struct {
		name       string
		samples    []sample
		wantChange float64
		wantFlat   bool
	}{
		{"flat, with a wobble", series(func(m float64) int { return 500 + int(m)%7 }), 0, true},
		{"a leak of 2 a minute", series(func(m float64) int { return 500 + 2*int(m) }), 60, false},
		{"a leak of 2 a minute in the first half only", series(func(m float64) int { return 500 + 2*int(min(m, 30)) }), 0, true},
		// Every tenth sample drops to zero (watches while the API server
		// restarts) and every seventh doubles: the line stays level.
		{"flat with spikes both ways", func() []sample {
			s := series(func(float64) int { return 400 })
			for i := range s {
				switch {
				case i%10 == 0:
					s[i].goroutines = 0
				case i%7 == 0:
					s[i].goroutines = 800
				}
			}
			return s
		}(), 0, true},
		{"a slow rise within 5%", series(func(m float64) int { return 1000 + int(m/2) }), 15, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := trendOf(goroutines, tc.samples, time.Hour)
			g.Expect(got.change).To(BeNumerically("~", tc.wantChange, 1.5))
			g.Expect(got.flat).To(Equal(tc.wantFlat), "change %.1f, tolerance %.1f", got.change, got.tolerance)
			g.Expect(got.points).To(Equal(181))
		})
	}
}

func TestTrendLeavesOutWhatWasNotRead(t *testing.T) {
	g := NewWithT(t)
	s := series(func(float64) int { return 300 })
	for i := range s {
		if i%3 == 0 {
			s[i].goroutines = -1
		}
	}
	got := trendOf(goroutines, s, time.Hour)
	g.Expect(got.median).To(Equal(300.0))
	g.Expect(got.points).To(Equal(120))
	g.Expect(got.flat).To(BeTrue())
	g.Expect(math.IsNaN(trendOf(goroutines, nil, time.Hour).median)).To(BeTrue())
	g.Expect(trendOf(goroutines, nil, time.Hour).flat).To(BeFalse(), "no samples prove nothing")
}

func TestInterval(t *testing.T) {
	g := NewWithT(t)
	cfg := config{duration: time.Hour, peak: 10000, perBackup: 20}
	lo, hi := cfg.lifetimes()
	g.Expect(lo).To(Equal(15 * time.Minute))
	g.Expect(hi).To(Equal(25 * time.Minute))
	// 20 operations of 20 minutes on average every 2.4 s: 10,000 in flight.
	g.Expect(cfg.interval()).To(Equal(2400 * time.Millisecond))
}
