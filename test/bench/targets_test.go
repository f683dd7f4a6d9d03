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
	"strings"
	"testing"
	"time"
)

func TestTargetsSayWhatIsMissedAndByHowMuch(t *testing.T) {
	cfg := config{ops: 10000, parents: 100, sync: 10 * time.Second, update: 30 * time.Second,
		minDuration: 20 * time.Second, maxDuration: 80 * time.Second}
	regular := &result{cfg: cfg, waitMax: 9900 * time.Millisecond, detectionP99: 9 * time.Second,
		parentP99: 1500 * time.Millisecond, pollsPerOp: 7, calls: 70000, polledShare: 1, callsPerSecond: 1100}
	regular.launches, regular.peakRSS = 2, 150<<20
	regular.writes = map[string]float64{"itemoperations/status": 12000}
	eta := &result{cfg: cfg, waitMax: 9900 * time.Millisecond, detectionP50: 100 * time.Millisecond,
		detectionP99: 900 * time.Millisecond, parentP99: 100 * time.Millisecond, pollsPerOp: 9, callsPerSecond: 900}
	eta.launches, eta.peakRSS = 3, 150<<20
	eta.writes = map[string]float64{"itemoperations/status": 12000}
	regular.cfg.polling, eta.cfg.polling = regularPolling, etaPolling

	// The new process polled all but one again, the last of them 75 s
	// after the kill.
	restart := &restartResult{cfg: cfg, repoll: []time.Duration{20 * time.Second, 30 * time.Second, 75 * time.Second}, notAgain: 1}

	// A smaller run that meets every target.
	smallCfg := cfg
	smallCfg.ops, smallCfg.polling = 1000, regularPolling
	small := &result{cfg: smallCfg, waitMax: 9 * time.Second, detectionP99: 9 * time.Second, parentP99: 50 * time.Millisecond,
		pollsPerOp: 7, calls: 7000, polledShare: 1, callsPerSecond: 150}
	small.launches, small.peakRSS = 2, 60<<20
	small.writes = map[string]float64{"itemoperations/status": 1200}

	var md strings.Builder
	writeTargets(&md, targets([]*result{small, regular, eta}, []*restartResult{restart}, nil), []int{1000, 10000})
	got := md.String()
	for _, want := range []string{
		"| 10000 operations, regular polling: parent latency p99 | ≤ 1s | 1.5s | **no**: 500ms over |",
		"| 10000 operations, ETA-aware polling: parent latency p99 | ≤ 1s | 100ms | yes |",
		"| 10000 operations, ETA-aware polling: plugin launches per poll |",
		"**no**: 1 restarts |",
		"extra Progress calls per operation | ≤ 20% | +29% (9.0 against 7.0) | **no**: 9 points more |",
		"| 10000 operations, ETA-aware polling: Progress calls per second, all operations running | ≥ 1000 (every operation once per 10s) | 900 | **no**: 100 short |",
		"| 10000 operations: after a kill -9 with all in flight, every operation polled again | ≤ 1m0s | 1m15s (p99 1m15s), 1 not polled again | **no**: 1 operations not polled again |",
		"| 1000 operations, regular polling: operator peak RSS | ≤ 300 MiB | 60 MiB | yes |",
		"5 of 24 targets missed",
		"The largest size with every target met: 1000 operations.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("targets lack %q:\n%s", want, got)
		}
	}
	if rssLimit(100000) != 1<<30 || rssLimit(10000) != 300<<20 {
		t.Errorf("peak RSS limits: %s at 10,000, %s at 100,000", mib(rssLimit(10000)), mib(rssLimit(100000)))
	}
}

func TestDataMoverTargetsHoldETAToRegularPolling(t *testing.T) {
	cfg := config{ops: 1000, parents: 100, sync: 10 * time.Second, polling: regularPolling}
	regular := &dataMoverResult{cfg: cfg, calls: 6000,
		detections: []time.Duration{4 * time.Second, 9 * time.Second}, parents: []time.Duration{50 * time.Millisecond}}
	cfg.polling = etaPolling
	// Progress read up to 10 s old: the estimates come late, and one
	// operation was never seen ending.
	eta := &dataMoverResult{cfg: cfg, calls: 7800, undetected: 1,
		detections: []time.Duration{4 * time.Second, 5 * time.Second}, parents: []time.Duration{2 * time.Second}}

	var md strings.Builder
	writeTargets(&md, dataMoverTargets([]*dataMoverResult{regular, eta}), nil)
	got := md.String()
	for _, want := range []string{
		"| data mover, 1000 operations, regular polling: detection latency p99 | ≤ 11s | 9s | yes |",
		"| data mover, 1000 operations, ETA-aware polling: detection latency p99 | ≤ 11s | 5s, 1 not seen ended | **no**: 1 operations not seen ended |",
		"| data mover, 1000 operations, ETA-aware polling: parent latency p99 | ≤ 1s | 2s | **no**: 1s over |",
		"| data mover, 1000 operations, ETA-aware polling: detection latency p50 | ≤ 2.5s | 5s | **no**: 2.5s over |",
		"| data mover, 1000 operations, ETA-aware polling: extra Progress calls per operation | ≤ 20% | +30% (7.8 against 6.0) | **no**: 10 points more |",
		"4 of 6 targets missed",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("targets lack %q:\n%s", want, got)
		}
	}
}
