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
	small.writes = map[string]float64{"itemoperations/status": 1200, "itemoperations": 1000}
	// 400 of its 1,000 finalizers were still held at the end: counted.
	small.releasesAfter = 400

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
		"(creation 1, status 1.20, finalizer release 1.00 of which 0.40 after the last Backup moved on, Events 0.00",
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

func TestCallsPerSecondSayWhatKeptTheCoresBusy(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// Every second itemops uses 0.9 s of CPU, the plugin 0.5 s and the
	// API server and etcd 0.6 s; the samples before 1 s and after 11 s
	// fall outside the window.
	var samples []sample
	for i := range 13 {
		samples = append(samples, sample{at: at(float64(i)), cpuSeconds: 0.9 * float64(i), pluginCPU: 0.5 * float64(i), controlPlane: 0.6 * float64(i)})
	}
	samples[0].cpuSeconds, samples[12].controlPlane = 100, 100
	busy := busyBetween(samples, at(0.5), at(11.5))
	if d := busy.itemops + busy.plugin + busy.controlPlane - 2; d < -1e-9 || d > 1e-9 || busy.itemops < 0.899 || busy.itemops > 0.901 {
		t.Fatalf("busy between 0.5 s and 11.5 s: %+v, want itemops 0.9, plugin 0.5, API server and etcd 0.6", busy)
	}
	if got := busyBetween(samples, at(0.5), at(1.5)); got != (cores{}) {
		t.Errorf("one sample in the window gave %+v, want nothing", got)
	}

	cfg := config{ops: 100000, parents: 1000, sync: 10 * time.Second, update: 30 * time.Second, polling: regularPolling,
		minDuration: 20 * time.Second, maxDuration: 80 * time.Second}
	// Real-shaped transfers ran 1m35s on average, not the nominal 50s:
	// the write budget follows what they ran.
	r := &result{cfg: cfg, callsPerSecond: 7000, busy: busy, meanRun: 95 * time.Second, writesPerOp: 4.5}
	r.writes = map[string]float64{}
	var md strings.Builder
	writeTargets(&md, targets([]*result{r}, nil, nil), nil)
	want := "| 100000 operations, regular polling: Progress calls per second, all operations running | ≥ 10000 (every operation once per 10s) | " +
		"7000 (cores busy meanwhile: itemops 0.90, plugin 0.50, API server and etcd 0.60: 2.00 of "
	if !strings.Contains(md.String(), want) || !strings.Contains(md.String(), "**no**: 3000 short |") {
		t.Errorf("targets lack %q:\n%s", want, md.String())
	}
	writes := "| 100000 operations, regular polling: API writes per operation | ≤ 6.17 (3, and one per 30s of its mean run 1m35s) | 5.50 "
	if !strings.Contains(md.String(), writes) {
		t.Errorf("targets lack %q:\n%s", writes, md.String())
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

func TestSideBySideRowsNeedEveryBackupEnded(t *testing.T) {
	cfg := sideConfig{backups: 100, perBackup: 100}
	veleroRun := &sideRun{cfg: cfg, mode: byVelero, parent: []time.Duration{15 * time.Second}, cpuSeconds: 470}
	itemopsRun := &sideRun{cfg: cfg, mode: byItemops, parent: []time.Duration{200 * time.Millisecond}, cpuSeconds: 420, itemopsCPU: 80}
	rows := func() string {
		var md strings.Builder
		writeTargets(&md, targets(nil, nil, []*sideRun{veleroRun, itemopsRun}), nil)
		return md.String()
	}
	if got := rows(); !strings.Contains(got, "Velero ÷ itemops | ≥ 40× | 75.0× (15s against 200ms) | yes |") ||
		!strings.Contains(got, "| ≤ 1× | 0.89× (420 s against 470 s;") || strings.Contains(got, "**no**") {
		t.Errorf("every Backup ended, both rows met; got:\n%s", got)
	}
	// 30× lower is not enough.
	itemopsRun.parent = []time.Duration{500 * time.Millisecond}
	if got, want := rows(), "30.0× (15s against 500ms) | **no**: 10.0× short |"; !strings.Contains(got, want) {
		t.Errorf("rows lack %q:\n%s", want, got)
	}
	itemopsRun.parent = []time.Duration{200 * time.Millisecond}
	// Ten Backups of the itemops run did not end: the ratio leaves them
	// out and the runs did not do the same work.
	itemopsRun.unfinished = 10
	got := rows()
	for _, want := range []string{
		"75.0× (15s against 200ms) | **no**: 10 Backups not ended at the run's deadline |",
		"**no**: unequal runs: 10 Backups not ended at the run's deadline |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rows lack %q:\n%s", want, got)
		}
	}
}

func TestCostTargetsComparePollsWithThePlugins(t *testing.T) {
	cfg := config{ops: 10000, parents: 100, sync: 10 * time.Second, update: 30 * time.Second, polling: regularPolling,
		minDuration: 20 * time.Second, maxDuration: 80 * time.Second}
	// 100,000 calls: itemops 40 s against the plugin's 20 s over the run;
	// while every operation ran, 2,000 calls a second on 0.30 and 0.24 cores.
	ten := &result{cfg: cfg, calls: 100000, callsPerSecond: 2000, busy: cores{itemops: 0.30, plugin: 0.24},
		analysis: analysis{cpuSeconds: 40, pluginCPU: 20, writes: map[string]float64{}}}
	bigCfg := cfg
	bigCfg.ops = 100000
	big := &result{cfg: bigCfg, calls: 1000000, callsPerSecond: 5500, analysis: analysis{cpuSeconds: 150, pluginCPU: 200, writes: map[string]float64{}}}
	var md strings.Builder
	writeTargets(&md, targets([]*result{ten, big}, nil, nil), nil)
	for _, want := range []string{
		"| 10000 operations, regular polling: itemops CPU per Progress call, against the plugin's | ≤ 1.0× | " +
			"2.00× (over the run 0.40 ms against 0.20 ms; while every operation ran 150 µs against 120 µs, 1.25×) | **no**: 1.00× more |",
		"| 100000 operations, regular polling: itemops CPU per Progress call, against the plugin's | ≤ 1.0× | 0.75× (over the run 0.15 ms against 0.20 ms) | yes |",
		"| 100000 operations, regular polling: Progress calls per second one replica makes on two cores | ≥ 6000 | 5500 | **no**: 500 short |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("targets lack %q:\n%s", want, md.String())
		}
	}
	var cost strings.Builder
	writeCost(&cost, []*result{ten, big})
	if want := "| 10000 | 2000 / 1000 | itemops 0.30, plugin 0.24, API server and etcd 0.00: 0.54 of"; !strings.Contains(cost.String(), want) {
		t.Errorf("the cost table lacks %q:\n%s", want, cost.String())
	}
	if want := "| 0.40 ms / 150 µs | 0.20 ms / 120 µs | 0.00 ms / 0.0 ms |"; !strings.Contains(cost.String(), want) {
		t.Errorf("the cost table lacks %q:\n%s", want, cost.String())
	}
}
