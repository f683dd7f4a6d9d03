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
	"fmt"
	"strings"
	"time"
)

// target is one of the performance targets and what a run measured of it.
type target struct {
	name, want, got string
	met             bool
	// by: how far a missed target is from what it asks.
	by string
}

// sideRatio: how many times lower than Velero's own controller's the parent
// latency p99 with itemops must be, side by side.
const sideRatio = 40

// targets measures the runs of the most operations, and the side-by-side
// run, against the targets itemops is held to (2 cores, 10 s sync):
//
//   - every operation polled at least once per interval (at 10,000
//     operations and a 10 s interval, ≥ 1,000 Progress calls/s);
//   - detection latency p99 ≤ interval + 1 s; with ETA-aware polling p50 ≤
//     25% of the interval, for at most 20% more Progress calls;
//   - parent latency p99 ≤ 1 s;
//   - at most one status write per operation per progress-update interval,
//     plus its phase changes;
//   - peak RSS ≤ 300 MiB up to 10,000 operations, ≤ 1 GiB beyond;
//   - no plugin launch per poll;
//   - after a kill -9 with every operation in flight, every operation
//     polled again within 60 s;
//   - against Velero's own controller, ≥ 40× lower parent latency p99, and
//     the CPU of the run with itemops no more than of Velero's alone.
func targets(results []*result, restarts []*restartResult, sides []*sideRun) []target {
	regular, eta := map[int]*result{}, map[int]*result{}
	var sizes []int
	var out []target
	for _, r := range results {
		switch r.cfg.polling {
		case regularPolling:
			regular[r.cfg.ops] = r
			sizes = append(sizes, r.cfg.ops)
		case etaPolling:
			eta[r.cfg.ops] = r
		}
		run := fmt.Sprintf("%d operations, %s polling: ", r.cfg.ops, r.cfg.polling)
		sync := r.cfg.sync
		need := float64(r.cfg.ops) / sync.Seconds()
		made := fmt.Sprintf("%.0f", r.callsPerSecond)
		if r.busy != (cores{}) {
			made += fmt.Sprintf(" (cores busy meanwhile: %s)", r.busy)
		}
		out = append(out,
			atMost(run+"longest wait between two polls of a running operation", r.waitMax, sync,
				fmt.Sprintf("%.2f%% of waits within the interval", 100*r.polledShare)),
			target{name: run + "Progress calls per second, all operations running", want: fmt.Sprintf("≥ %.0f (every operation once per %s)", need, sync),
				got: made, met: r.callsPerSecond >= need, by: fmt.Sprintf("%.0f short", need-r.callsPerSecond)},
			atMost(run+"detection latency p99", r.detectionP99, sync+time.Second, ""),
			atMost(run+"parent latency p99", r.parentP99, time.Second, ""))
		// Every write the API server counted while itemops ran, plus each
		// operation's creation: the run creates the operations before
		// itemops starts, as ingestion would have.
		n := float64(r.cfg.ops)
		perOp := r.writesPerOp + 1
		// An operation may write once per progress-update interval it
		// runs: real-shaped transfers pause and run past their nominal
		// duration.
		mean, of := r.meanRun, "its mean run"
		if mean <= 0 {
			mean, of = (r.cfg.minDuration+r.cfg.maxDuration)/2, "a nominal"
		}
		budget := 3 + mean.Seconds()/r.cfg.update.Seconds()
		out = append(out, target{
			name: run + "API writes per operation",
			want: fmt.Sprintf("≤ %.2f (3, and one per %s of %s %s)", budget, r.cfg.update, of, mean.Round(time.Second)),
			got: fmt.Sprintf("%.2f (creation 1, status %.2f, finalizer release %.2f%s, Events %.2f, Backups %.2f, leases %.2f)", perOp,
				r.writes["itemoperations/status"]/n, r.writes["itemoperations"]/n, releasedAfter(r), r.writes["events"]/n, r.writes["backups"]/n, r.writes["leases"]/n),
			met: perOp <= budget,
			by:  fmt.Sprintf("%.2f more", perOp-budget),
		})
		rss := rssLimit(r.cfg.ops)
		out = append(out, target{
			name: run + "operator peak RSS", want: "≤ " + mib(rss), got: mib(r.peakRSS),
			met: r.peakRSS <= rss, by: fmt.Sprintf("%s more", mib(r.peakRSS-rss)),
		})
		// Discovery starts the binary once, then one long-lived process
		// answers every call.
		out = append(out, target{
			name: run + "plugin launches per poll", want: "0 (2 launches: discovery, then one long-lived process)",
			got: fmt.Sprintf("%d launches for %d Progress calls", r.launches, r.calls),
			met: r.launches <= 2, by: fmt.Sprintf("%d restarts", r.launches-2),
		})
	}
	for _, size := range sizes {
		base, withETA := regular[size], eta[size]
		if withETA == nil {
			continue
		}
		quarter := withETA.cfg.sync / 4
		out = append(out, atMost(fmt.Sprintf("%d operations, ETA-aware polling: detection latency p50", size), withETA.detectionP50, quarter, ""))
		extra := withETA.pollsPerOp/base.pollsPerOp - 1
		out = append(out, target{
			name: fmt.Sprintf("%d operations, ETA-aware polling: extra Progress calls per operation", size),
			want: "≤ 20%", got: fmt.Sprintf("%+.0f%% (%.1f against %.1f)", 100*extra, withETA.pollsPerOp, base.pollsPerOp),
			met: extra <= 0.20, by: fmt.Sprintf("%.0f points more", 100*(extra-0.20)),
		})
	}
	out = append(out, costTargets(regular)...)
	for _, r := range restarts {
		_, p99, maximum := percentiles(r.repoll)
		t := atMost(fmt.Sprintf("%d operations: after a kill -9 with all in flight, every operation polled again", r.cfg.ops), maximum, restartTarget,
			fmt.Sprintf("p99 %s", round(p99)))
		if r.notAgain > 0 {
			t.got += fmt.Sprintf(", %d not polled again", r.notAgain)
			t.met, t.by = false, fmt.Sprintf("%d operations not polled again", r.notAgain)
		}
		out = append(out, t)
	}
	if len(sides) == 2 {
		_, vp99, _ := percentiles(sides[0].parent)
		_, ip99, _ := percentiles(sides[1].parent)
		r := 0.0
		if ip99 > 0 {
			r = vp99.Seconds() / ip99.Seconds()
		}
		// A Backup that did not end has no parent latency: a ratio without
		// it is not the ratio of the run.
		unfinished := sides[0].unfinished + sides[1].unfinished
		by := fmt.Sprintf("%.1f× short", sideRatio-r)
		if unfinished > 0 && r >= sideRatio {
			by = fmt.Sprintf("%d Backups not ended at the run's deadline", unfinished)
		}
		out = append(out, target{
			name: fmt.Sprintf("side by side, %d Backups × %d operations: parent latency p99, Velero ÷ itemops", sides[0].cfg.backups, sides[0].cfg.perBackup),
			want: fmt.Sprintf("≥ %d×", sideRatio), got: fmt.Sprintf("%.1f× (%s against %s)", r, round(vp99), round(ip99)),
			met: r >= sideRatio && unfinished == 0, by: by,
		})
		// Everything each run started: velero server and its plugins, and
		// in the second also itemops and its plugins.
		velero, itemops := sides[0].cpuSeconds, sides[1].cpuSeconds
		// What following the operations cost each: itemops and its
		// plugins; for Velero, its run less what velero server and its
		// plugins used in the run where they did not follow them.
		veleroFollowing := velero - (itemops - sides[1].itemopsCPU)
		// Runs that did not back up the same Backups to the end did not do
		// the same work: their CPU is no comparison.
		cpuBy := fmt.Sprintf("%.0f s more", itemops-velero)
		if unfinished > 0 {
			cpuBy = fmt.Sprintf("unequal runs: %d Backups not ended at the run's deadline", unfinished)
		}
		out = append(out, target{
			name: fmt.Sprintf("side by side, %d Backups × %d operations: CPU of the run with itemops ÷ Velero's alone", sides[0].cfg.backups, sides[0].cfg.perBackup),
			want: "≤ 1×", got: fmt.Sprintf("%.2f× (%.0f s against %.0f s; following the operations: itemops and its plugins %.0f s, of which itemops %.0f s; Velero about %.0f s)",
				itemops/max(velero, 1), itemops, velero, sides[1].itemopsCPU, sides[1].itemopsOwnCPU, veleroFollowing),
			met: itemops <= velero && unfinished == 0, by: cpuBy,
		})
	}
	return out
}

// dataMoverTargets holds the runs of Velero's data mover to the same
// detection targets: p99 ≤ interval + 1 s with either polling, and with
// ETA-aware polling p50 ≤ 25% of the interval for at most 20% more calls.
// Sizes at which itemops' CPU per Progress call must not exceed the
// plugin's: the client half of a call against the whole server half.
var costSizes = []int{10000, 100000}

// minCallsAt100k is the Progress calls a second one replica must make at
// 100,000 operations on two cores, where every one of them once per sync
// interval (10,000 a second) does not fit beside the plugin and the API
// server.
const minCallsAt100k = 6000

// costTargets are the targets of what a poll costs, from the runs of
// regular polling by size.
func costTargets(regular map[int]*result) []target {
	var out []target
	for _, size := range costSizes {
		r := regular[size]
		if r == nil || r.pluginCPU <= 0 {
			continue
		}
		ratio := r.cpuSeconds / r.pluginCPU
		calls := max(float64(r.calls), 1)
		steady := ""
		if plugin := pollCost(r.busy.plugin, r); plugin > 0 {
			steady = fmt.Sprintf("; while every operation ran %.0f µs against %.0f µs, %.2f×", pollCost(r.busy.itemops, r), plugin,
				pollCost(r.busy.itemops, r)/plugin)
		}
		out = append(out, target{
			name: fmt.Sprintf("%d operations, regular polling: itemops CPU per Progress call, against the plugin's", size),
			want: "≤ 1.0×",
			got:  fmt.Sprintf("%.2f× (over the run %.2f ms against %.2f ms%s)", ratio, 1000*r.cpuSeconds/calls, 1000*r.pluginCPU/calls, steady),
			met:  ratio <= 1.0, by: fmt.Sprintf("%.2f× more", ratio-1.0),
		})
	}
	if r := regular[100000]; r != nil {
		out = append(out, target{
			name: "100000 operations, regular polling: Progress calls per second one replica makes on two cores",
			want: fmt.Sprintf("≥ %d", minCallsAt100k), got: fmt.Sprintf("%.0f", r.callsPerSecond),
			met: r.callsPerSecond >= minCallsAt100k, by: fmt.Sprintf("%.0f short", minCallsAt100k-r.callsPerSecond),
		})
	}
	return out
}

func dataMoverTargets(movers []*dataMoverResult) []target {
	var out []target
	var regular, without *dataMoverResult
	for _, r := range movers {
		if r.cfg.kept > 0 {
			// Finding causes against not, with history kept.
			if r.cfg.noCauses {
				without = r
				continue
			}
			if without == nil || without.profiledCPUPerPoll() == 0 || r.calls == 0 {
				continue
			}
			run := fmt.Sprintf("data mover, %d operations, %d finished DataUploads kept: finding causes, ", r.cfg.ops, r.cfg.kept)
			extra := float64(r.causeCPUPerPoll()) / float64(without.profiledCPUPerPoll())
			more := (r.itemopsReads - without.itemopsReads) / r.calls
			out = append(out, target{
				name: run + "extra CPU per poll",
				want: "≤ 10%", got: fmt.Sprintf("+%.1f%% (%s of %s per poll; the whole run's CPU %.1f s against %.1f s)", 100*extra,
					perPoll(r.causeCPUPerPoll()), perPoll(without.profiledCPUPerPoll()), r.cpu, without.cpu),
				met: extra <= 0.10, by: fmt.Sprintf("%.1f points more", 100*(extra-0.10)),
			}, target{
				name: run + "extra API reads per poll (itemops' own client)",
				want: "none per operation (≤ 0.01)", got: fmt.Sprintf("%+.4f (%.0f reads against %.0f, over %.0f polls)", more, r.itemopsReads, without.itemopsReads, r.calls),
				met: more <= 0.01, by: fmt.Sprintf("%.4f more", more-0.01),
			})
			continue
		}
		run := fmt.Sprintf("data mover, %d operations, %s polling: ", r.cfg.ops, r.cfg.polling)
		p50, p99, _ := percentiles(r.detections)
		_, pp99, _ := percentiles(r.parents)
		detection := atMost(run+"detection latency p99", p99, r.cfg.sync+time.Second, "")
		if r.undetected > 0 {
			detection.got += fmt.Sprintf(", %d not seen ended", r.undetected)
			detection.met, detection.by = false, fmt.Sprintf("%d operations not seen ended", r.undetected)
		}
		out = append(out, detection, atMost(run+"parent latency p99", pp99, time.Second, ""))
		switch r.cfg.polling {
		case regularPolling:
			regular = r
		case etaPolling:
			out = append(out, atMost(run+"detection latency p50", p50, r.cfg.sync/4, ""))
			if regular != nil && regular.calls > 0 {
				extra := r.calls/regular.calls - 1
				out = append(out, target{
					name: run + "extra Progress calls per operation",
					want: "≤ 20%", got: fmt.Sprintf("%+.0f%% (%.1f against %.1f)", 100*extra, r.calls/float64(r.cfg.ops), regular.calls/float64(regular.cfg.ops)),
					met: extra <= 0.20, by: fmt.Sprintf("%.0f points more", 100*(extra-0.20)),
				})
			}
		}
	}
	return out
}

// rssLimit is the peak RSS a run of n operations may reach.
func rssLimit(n int) int64 {
	if n <= 10000 {
		return 300 << 20
	}
	return 1 << 30
}

// largestMet is the largest size whose every target row is met, 0 if none.
func largestMet(ts []target, sizes []int) int {
	best := 0
	for _, size := range sizes {
		prefix := fmt.Sprintf("%d operations", size)
		met, rows := true, 0
		for _, t := range ts {
			if strings.HasPrefix(t.name, prefix+",") || strings.HasPrefix(t.name, prefix+":") {
				rows++
				met = met && t.met
			}
		}
		if rows > 0 && met {
			best = max(best, size)
		}
	}
	return best
}

// atMost is a target that a duration stays within limit.
func atMost(name string, got, limit time.Duration, detail string) target {
	t := target{name: name, want: "≤ " + limit.String(), got: round(got), met: got <= limit, by: round(got-limit) + " over"}
	if detail != "" {
		t.got += " (" + detail + ")"
	}
	return t
}

// writeTargets adds the targets table to results.md, and the largest of
// sizes whose every target is met.
func writeTargets(md *strings.Builder, ts []target, sizes []int) {
	if len(ts) == 0 {
		return
	}
	missed := 0
	md.WriteString("## Targets\n\n| target | asked | measured | met |\n|---|---|---|---|\n")
	for _, t := range ts {
		verdict := "yes"
		if !t.met {
			verdict, missed = "**no**: "+t.by, missed+1
		}
		fmt.Fprintf(md, "| %s | %s | %s | %s |\n", t.name, t.want, t.got, verdict)
	}
	if missed == 0 {
		md.WriteString("\nEvery target is met.\n\n")
		return
	}
	fmt.Fprintf(md, "\n%d of %d targets missed; what limits each is in docs/performance.md.\n\n", missed, len(ts))
	if len(sizes) > 1 {
		if best := largestMet(ts, sizes); best > 0 {
			fmt.Fprintf(md, "The largest size with every target met: %d operations.\n\n", best)
		} else {
			md.WriteString("No size has every target met.\n\n")
		}
	}
}

// releasedAfter says how many of the finalizer releases were still to come
// when the run ended, if any.
func releasedAfter(r *result) string {
	if r.releasesAfter == 0 {
		return ""
	}
	return fmt.Sprintf(" of which %.2f after the last Backup moved on", float64(r.releasesAfter)/float64(r.cfg.ops))
}
