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
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
)

// analysis holds what run measured besides the polls.
type analysis struct {
	// profile is where itemops' CPU went, when the run was profiled.
	profile    *profileRow
	writes     map[string]float64
	cpuSeconds float64
	pluginCPU  float64
	// controlPlane: the CPU seconds of the API server and etcd while
	// itemops ran.
	controlPlane  float64
	peakRSS       int64
	peakPluginRSS int64
	launches      int
	timedOut      bool
	// releasesAfter: finalizers still held when the run ended, each one
	// release write still to come; counted in writes["itemoperations"].
	releasesAfter int
	// queueCounts: itemops' work queue at each scrape, the first all zero
	// at its start; workers: its --max-concurrent-reconciles.
	queueCounts []queueCounts
	workers     int
}

// result is one run's figures.
type result struct {
	cfg config
	analysis

	duration time.Duration // t0 to the last Backup in Finalizing
	// meanRun: how long the operations' transfers ran on average, pauses
	// included, by their plugin-side completions.
	meanRun        time.Duration
	calls          int
	callsPerSecond float64 // while every operation was running
	// busy: the cores each part used while every operation was running.
	busy            cores
	polledShare     float64 // of the waits between two polls of a running operation, those within the sync interval
	firstPollP99    time.Duration
	waitP99         time.Duration // between two polls of a running operation
	waitMax         time.Duration
	firstPollMax    time.Duration
	detectionP50    time.Duration
	detectionP99    time.Duration
	detectionMax    time.Duration
	undetected      int
	parentP50       time.Duration
	parentP99       time.Duration
	parentMax       time.Duration
	unfinished      int
	writesPerOp     float64
	pollsPerOp      float64
	callsPerSecondT []float64 // per second since t0
	// late says when the polls that came after the interval came, and how
	// many operations completed then; empty when none did.
	late string
	// queue: what itemops' work queue did, when queueRead.
	queue      queueRun
	queueRead  bool
	detections []time.Duration
	parents    []time.Duration
}

func analyse(cfg config, t0 time.Time, ops []operation, backups []*velerov1api.Backup, finalized map[string]time.Time,
	polls map[string][]poll, samples []sample, a analysis) *result {
	r := &result{cfg: cfg, analysis: a}

	// Detection: the first poll that saw the operation completed, after the
	// plugin completed it.
	detected := make(map[string]time.Time, len(ops))
	var detections []time.Duration
	lastDetection := map[int]time.Time{}
	firstCompletion := ops[0].completes
	var ran time.Duration
	for _, op := range ops {
		firstCompletion = minTime(firstCompletion, op.completes)
		ran += op.completes.Sub(t0)
		for _, p := range polls[op.id] {
			if p.completed {
				detected[op.id] = p.at
				detections = append(detections, max(0, p.at.Sub(op.completes)))
				if p.at.After(lastDetection[op.parent]) {
					lastDetection[op.parent] = p.at
				}
				break
			}
		}
		r.calls += len(polls[op.id])
	}
	r.meanRun = ran / time.Duration(len(ops))
	r.undetected = len(ops) - len(detections)
	r.detectionP50, r.detectionP99, r.detectionMax = percentiles(detections)
	r.detections = detections
	r.pollsPerOp = float64(r.calls) / float64(len(ops))

	// Coverage: between its first poll (itemops has started and listed it)
	// and the poll that saw it complete, an operation should never wait
	// longer than the sync interval.
	gaps, onTime, firstPolls, waits := 0, 0, []time.Duration{}, []time.Duration{}
	var late []time.Duration // since t0, of the polls that came after the interval
	for _, op := range ops {
		ps := polls[op.id]
		if len(ps) == 0 {
			continue
		}
		firstPolls = append(firstPolls, ps[0].at.Sub(t0))
		for i := 1; i < len(ps); i++ {
			if ps[i-1].completed {
				break
			}
			gaps++
			waits = append(waits, ps[i].at.Sub(ps[i-1].at))
			if ps[i].at.Sub(ps[i-1].at) <= cfg.sync {
				onTime++
			} else {
				late = append(late, ps[i].at.Sub(t0))
			}
		}
	}
	if gaps > 0 {
		r.polledShare = float64(onTime) / float64(gaps)
	}
	_, r.firstPollP99, r.firstPollMax = percentiles(firstPolls)
	_, r.waitP99, r.waitMax = percentiles(waits)
	r.late = describeLate(late, ops, t0)
	// Its worst stretch is looked for once every operation has been
	// polled: until then all are due at once.
	r.queue, r.queueRead = analyseQueue(a.queueCounts, t0.Add(r.firstPollMax), a.workers)

	// Parent latency: from the detection of its last operation to Finalizing.
	var parents []time.Duration
	last := t0
	for i, b := range backups {
		at, ok := finalized[b.Name]
		if !ok {
			r.unfinished++
			continue
		}
		last = maxTime(last, at)
		if d, ok := lastDetection[i]; ok {
			parents = append(parents, max(0, at.Sub(d)))
		}
	}
	r.parentP50, r.parentP99, r.parentMax = percentiles(parents)
	r.parents = parents
	r.duration = last.Sub(t0)

	// Calls in each second since t0, up to the last sample.
	if len(samples) > 0 {
		r.callsPerSecondT = make([]float64, int(samples[len(samples)-1].at.Sub(t0).Seconds())+1)
		for _, ps := range polls {
			for _, p := range ps {
				if second := int(p.at.Sub(t0).Seconds()); second >= 0 && second < len(r.callsPerSecondT) {
					r.callsPerSecondT[second]++
				}
			}
		}
	}
	// Sustained rate: from the first poll (itemops up) until the first
	// operation completes, every operation is running and due.
	calls, firstPoll := 0, firstCompletion
	for _, ps := range polls {
		for _, p := range ps {
			if p.at.Before(firstCompletion) {
				calls++
				firstPoll = minTime(firstPoll, p.at)
			}
		}
	}
	if d := firstCompletion.Sub(firstPoll).Seconds(); d > 0 {
		r.callsPerSecond = float64(calls) / d
	}
	r.busy = busyBetween(samples, firstPoll, firstCompletion)

	total := 0.0
	for _, v := range a.writes {
		total += v
	}
	r.writesPerOp = total / float64(len(ops))
	return r
}

// cores is how many of the machine's cores each part kept busy.
type cores struct{ itemops, plugin, controlPlane float64 }

func (c cores) String() string {
	return fmt.Sprintf("itemops %.2f, plugin %.2f, API server and etcd %.2f: %.2f of %d", c.itemops, c.plugin, c.controlPlane,
		c.itemops+c.plugin+c.controlPlane, runtime.NumCPU())
}

// busyBetween is the cores each part used from the first sample at or after
// from to the last at or before to, zero if fewer than two fall between.
func busyBetween(samples []sample, from, to time.Time) cores {
	first, last := -1, -1
	for i, s := range samples {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		if first < 0 {
			first = i
		}
		last = i
	}
	if first < 0 || last == first {
		return cores{}
	}
	a, b := samples[first], samples[last]
	d := b.at.Sub(a.at).Seconds()
	return cores{itemops: (b.cpuSeconds - a.cpuSeconds) / d, plugin: (b.pluginCPU - a.pluginCPU) / d, controlPlane: (b.controlPlane - a.controlPlane) / d}
}

func percentiles(ds []time.Duration) (p50, p99, maximum time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return at(0.50), at(0.99), ds[len(ds)-1]
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (r *result) summary() string {
	shape := ""
	if r.cfg.shape != "" {
		shape = ", " + r.cfg.shape + "-shaped progress"
	}
	return fmt.Sprintf("bench: %d ops%s, %s polling: %.0f Progress calls/s (%.1f per operation), %.1f%% of polls within the interval (wait p99 %s, max %s), detection p50 %s p99 %s, parent p50 %s p99 %s, %.2f API writes/op, CPU %.1fs (API server and etcd %.1fs), cores busy while all ran: %s, peak RSS %s, %d plugin launches%s",
		r.cfg.ops, shape, r.cfg.polling, r.callsPerSecond, float64(r.calls)/float64(r.cfg.ops), 100*r.polledShare, round(r.waitP99), round(r.waitMax), round(r.detectionP50), round(r.detectionP99), round(r.parentP50), round(r.parentP99),
		r.writesPerOp, r.cpuSeconds, r.controlPlane, r.busy, mib(r.peakRSS), r.launches, timedOut(r.timedOut)) + r.late + r.queueLine()
}

// queueLine is the work queue's figures for the summary, if read.
func (r *result) queueLine() string {
	if !r.queueRead {
		return ""
	}
	return "; work queue: " + r.queue.String()
}

// lateWindow is the span describeLate looks for the most late polls in.
const lateWindow = 10 * time.Second

// describeLate says when the late polls (since t0) came: how many, from
// when to when, and the lateWindow holding most of them with the number of
// operations that completed in it, for the reader to tell a wave of ends
// from a steady shortfall.
func describeLate(late []time.Duration, ops []operation, t0 time.Time) string {
	if len(late) == 0 {
		return ""
	}
	slices.Sort(late)
	best, from := 0, late[0]
	for i, j := 0, 0; i < len(late); i++ {
		for late[i]-late[j] > lateWindow {
			j++
		}
		if i-j+1 > best {
			best, from = i-j+1, late[j]
		}
	}
	ended := 0
	for _, op := range ops {
		if at := op.completes.Sub(t0); at >= from && at <= from+lateWindow {
			ended++
		}
	}
	return fmt.Sprintf("; %d polls came after the interval, from %s to %s after the start, most (%d) within %s of %s, while %d operations completed",
		len(late), late[0].Round(time.Second), late[len(late)-1].Round(time.Second), best, lateWindow, from.Round(time.Second), ended)
}

func timedOut(b bool) string {
	if b {
		return " (TIMED OUT: not every Backup reached Finalizing)"
	}
	return ""
}

func round(d time.Duration) string { return d.Round(time.Millisecond).String() }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// machine describes where the run happened.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		fields := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		if len(fields) >= 2 {
			kb, _ := strconv.ParseFloat(fields[1], 64)
			mem = fmt.Sprintf(", %.0f GiB RAM", kb/(1<<20))
		}
	}
	return fmt.Sprintf("%d CPUs (%s)%s, %s/%s, %s", runtime.NumCPU(), model, mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// runName names a run in file names: its size and polling.
func (r *result) runName() string {
	if r.cfg.polling == etaPolling {
		return fmt.Sprintf("%d-eta", r.cfg.ops)
	}
	return strconv.Itoa(r.cfg.ops)
}

// write puts the results in dir: results.md, results.csv, the Progress
// calls per second of every run, the side-by-side figures and the plots.
func write(dir string, capa *capacity, results []*result, restarts []*restartResult, movers []*dataMoverResult, sides []*sideRun) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# itemops benchmark\n\nGenerated by `make bench` on %s.\n\n", time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&md, "Machine: %s.\n\n", machine())
	if capa != nil {
		fmt.Fprintf(&md, "The API server of this machine (envtest's kube-apiserver and etcd, nothing else running) takes %.0f ItemOperation status writes a second from %d writers: "+
			"every run below shares the same cores with it.\n\n", capa.statusPerSecond, capa.writers)
	}
	var sizes []int
	for _, r := range results {
		if r.cfg.polling == regularPolling {
			sizes = append(sizes, r.cfg.ops)
		}
	}
	writeTargets(&md, append(targets(results, restarts, sides), dataMoverTargets(movers)...), sizes)
	if len(results) > 0 {
		fmt.Fprintf(&md, "## itemops at scale\n\nA real kube-apiserver and etcd (envtest), the itemops binary in manage mode, and the sample plugin in its fast mode; ")
		md.WriteString("operations of the durations given spread over the Backups, all started when itemops starts.\n\n")
		md.WriteString("| operations | durations | Backups | sync | polling | Progress calls/s (all running) | polled within the interval | first poll p99 / max | detection p50 / p99 / max | parent latency p50 / p99 / max | API writes / operation | operator CPU | operator peak RSS | plugin CPU / peak RSS | plugin launches | Progress calls / operation |\n")
		md.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range results {
			fmt.Fprintf(&md, "| %d | %s–%s | %d | %s | %s | %.0f | %.2f%% | %s / %s | %s / %s / %s | %s / %s / %s | %.2f | %.1f s | %s | %.1f s / %s | %d | %.1f |\n",
				r.cfg.ops, r.cfg.minDuration, r.cfg.maxDuration, r.cfg.parents, r.cfg.sync, r.cfg.polling, r.callsPerSecond, 100*r.polledShare, round(r.firstPollP99), round(r.firstPollMax),
				round(r.detectionP50), round(r.detectionP99), round(r.detectionMax),
				round(r.parentP50), round(r.parentP99), round(r.parentMax),
				r.writesPerOp, r.cpuSeconds, mib(r.peakRSS), r.pluginCPU, mib(r.peakPluginRSS), r.launches, r.pollsPerOp)
		}
		md.WriteString("\nAPI writes by resource:\n\n")
		for _, r := range results {
			fmt.Fprintf(&md, "- %d operations, %s polling: %s\n", r.cfg.ops, r.cfg.polling, byResource(r.writes))
			if r.undetected > 0 || r.unfinished > 0 || r.timedOut {
				fmt.Fprintf(&md, "  - not seen completed: %d operations; not Finalizing: %d Backups\n", r.undetected, r.unfinished)
			}
		}
		writeQueues(&md, results)
		md.WriteString("\n![detection latency](detection-latency-cdf.png)\n\n![Progress calls per second](progress-calls-per-second.png)\n")
		writeCost(&md, results)
		var rows []profileRow
		for _, r := range results {
			if r.profile != nil {
				rows = append(rows, *r.profile)
			}
		}
		writeProfileTable(&md, rows)
	}
	writeRestarts(&md, restarts)
	writeDataMover(&md, movers)
	if len(sides) == 2 {
		writeSideBySide(&md, sides)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	if err := writeCSV(dir, results, sides); err != nil {
		return err
	}
	for _, r := range results {
		var b strings.Builder
		b.WriteString("second,progress_calls_per_second\n")
		for i, v := range r.callsPerSecondT {
			fmt.Fprintf(&b, "%d,%.1f\n", i+1, v)
		}
		if err := os.WriteFile(filepath.Join(dir, "calls-per-second-"+r.runName()+".csv"), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return plots(dir, results, sides)
}

// writeQueues adds what itemops' work queue of ItemOperations says of each
// run: a poll that comes after the interval while cores are idle waited
// there for a worker.
func writeQueues(md *strings.Builder, results []*result) {
	md.WriteString("\nitemops' work queue of ItemOperations (controller-runtime's workqueue metrics, scraped every 30 s): a reconcile that is due (a poll, an end's write, a finalizer's release) waits in line until one of the workers (`--max-concurrent-reconciles`) takes it. The whole run includes its start, when every operation is due at once; the worst 30 s are those whose reconciles waited longest on average.\n\n")
	md.WriteString("| operations | polling | stretch | reconciles / s | wait for a worker: mean / share over 100ms / over 1s | time a reconcile held its worker | workers busy |\n|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if !r.queueRead {
			continue
		}
		for _, s := range []struct {
			name string
			q    queueFigures
		}{{"whole run", r.queue.whole}, {fmt.Sprintf("worst 30 s (from %s)", r.queue.worstStart.Round(time.Second)), r.queue.worst}} {
			q := s.q
			if q.ran == 0 {
				continue
			}
			fmt.Fprintf(md, "| %d | %s | %s | %.0f | %s / %.2f%% / %.2f%% | %s | %.1f of %d |\n", r.cfg.ops, r.cfg.polling, s.name, q.handedOut/max(q.ran.Seconds(), 1),
				round(q.meanWait), 100*q.over100ms, 100*q.over1s, round(q.meanWork), q.busyWorkers, q.workers)
		}
	}
}

// pollCost is the microseconds of CPU per Progress call of a part that kept
// cores busy while every operation of r ran.
func pollCost(cores float64, r *result) float64 {
	if r.callsPerSecond <= 0 {
		return 0
	}
	return 1e6 * cores / r.callsPerSecond
}

// writeCost adds what one replica spends against the number of operations,
// from the runs of regular polling, when there are two sizes or more.
func writeCost(md *strings.Builder, results []*result) {
	var runs []*result
	for _, r := range results {
		if r.cfg.polling == regularPolling {
			runs = append(runs, r)
		}
	}
	if len(runs) < 2 {
		return
	}
	md.WriteString("\n## Cost against size\n\nRegular polling. The API server and etcd share the two cores: a size whose calls made fall short of those needed is the size where they, itemops and the plugin together run out of CPU.\n\n")
	md.WriteString("Per call over the run: each process's CPU from itemops' start to its stop, over the Progress calls made; itemops' includes what each operation costs besides its polls (its end's status write, the release of its finalizer, its parent's rollup and the watch events of all of them). While every operation ran: the cores busy then, over the calls a second made then, the cost of a poll alone.\n\n")
	md.WriteString("| operations | Progress calls/s made / needed | cores busy while every operation ran | itemops CPU per call: over the run / while every operation ran | plugin CPU per call: over the run / while every operation ran | API server and etcd CPU per call / per operation | itemops peak RSS (per operation) | API writes / operation |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		calls := max(float64(r.calls), 1)
		fmt.Fprintf(md, "| %d | %.0f / %.0f | %s | %.2f ms / %.0f µs | %.2f ms / %.0f µs | %.2f ms / %.1f ms | %s (%.1f KiB) | %.2f |\n", r.cfg.ops, r.callsPerSecond, float64(r.cfg.ops)/r.cfg.sync.Seconds(),
			r.busy, 1000*r.cpuSeconds/calls, pollCost(r.busy.itemops, r), 1000*r.pluginCPU/calls, pollCost(r.busy.plugin, r),
			1000*r.controlPlane/calls, 1000*r.controlPlane/float64(r.cfg.ops), mib(r.peakRSS), float64(r.peakRSS)/1024/float64(r.cfg.ops), r.writesPerOp+1)
	}
	md.WriteString("\n![cost against size](cost-against-size.png)\n")
}

// writeRestarts adds the kill -9 runs to results.md.
func writeRestarts(md *strings.Builder, restarts []*restartResult) {
	if len(restarts) == 0 {
		return
	}
	md.WriteString("## A kill -9 with every operation in flight\n\n")
	md.WriteString("Operations that outlast the run, itemops with leader election as the chart deploys it. Once every operation has been polled, and one sync interval more, " +
		"itemops and its plugin processes get SIGKILL (nothing is released: not the Lease, not the plugin connections), and itemops starts again at once. " +
		"Re-poll: from the kill to each operation's first Progress call by the new process; it includes the wait for the killed process's Lease to expire " +
		"(15 s), the start, plugin discovery and the initial list.\n\n")
	md.WriteString("| operations | every operation polled once after the first start | re-poll p50 / p99 / max | not polled again |\n|---|---|---|---|\n")
	for _, r := range restarts {
		p50, p99, maximum := percentiles(r.repoll)
		fmt.Fprintf(md, "| %d | %s | %s / %s / %s | %d |\n", r.cfg.ops, round(r.firstRound), round(p50), round(p99), round(maximum), r.notAgain)
	}
	md.WriteString("\n")
}

// writeDataMover adds the runs of Velero's CSI data mover to results.md.
func writeDataMover(md *strings.Builder, movers []*dataMoverResult) {
	if len(movers) == 0 {
		return
	}
	md.WriteString("## Velero's CSI data mover\n\n")
	md.WriteString("Operations of `velero.io/csi-pvc-backupper`, served by the velero binary (v1.18.3) in itemops' plugin directory, " +
		"each a DataUpload running on node-agent: a stand-in moves each upload's bytes in the shape given and writes its progress " +
		"as node-agent does, every 10 s, and Completed at the end. Each Progress call of the plugin lists the operation's DataUpload " +
		"from the API server, so it reads progress up to 10 s old and ETA-aware polling estimates from that. " +
		"The velero plugin records nothing of its calls: detection is from the stand-in's write of Completed to a watch seeing the " +
		"ItemOperation end (its status write included), calls are itemops' own `itemops_progress_calls_total`, and the plugin " +
		"process runs with `--client-qps`/`--client-burst` raised as `velero server`'s are for that many operations " +
		"(Velero's default of 20 lists a second caps one process at 200 operations every 10 s).\n\n")
	md.WriteString("| operations | durations | shape | Backups | sync | polling | Progress calls / operation | detection p50 / p99 / max | parent latency p50 / p99 | API writes / operation (the stand-in's left out) | operator CPU | velero plugin CPU | operator peak RSS |\n")
	md.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range movers {
		p50, p99, pmax := percentiles(r.detections)
		pp50, pp99, _ := percentiles(r.parents)
		fmt.Fprintf(md, "| %d | %s–%s | %s | %d | %s | %s | %.1f | %s / %s / %s | %s / %s | %.2f | %.1f s | %.1f s | %s |\n",
			r.cfg.ops, r.cfg.minDuration, r.cfg.maxDuration, shapeName(r.cfg.shape), r.cfg.parents, r.cfg.sync, r.pollingLabel(),
			r.calls/float64(r.cfg.ops), round(p50), round(p99), round(pmax), round(pp50), round(pp99),
			sum(r.writes)/float64(r.cfg.ops)+1, r.cpu, r.pluginCPU, mib(r.peakRSS))
	}
	writeCauseCost(md, movers)
	md.WriteString("\nAPI writes by resource:\n\n")
	for _, r := range movers {
		fmt.Fprintf(md, "- %s polling: %s; the node-agent stand-in's DataUpload writes: %.0f\n", r.pollingLabel(), byResource(r.writes), r.standIn)
		if r.undetected > 0 || r.unfinished > 0 {
			fmt.Fprintf(md, "  - not seen ended: %d operations; not Finalizing: %d Backups\n", r.undetected, r.unfinished)
		}
	}
	md.WriteString("\n")
}

// writeCauseCost adds the runs with finished DataUploads kept, without and
// with finding why operations wait, side by side.
func writeCauseCost(md *strings.Builder, movers []*dataMoverResult) {
	var kept []*dataMoverResult
	for _, r := range movers {
		if r.cfg.kept > 0 {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		return
	}
	md.WriteString("\nWhat finding why operations wait costs: the same operations again, regular polling, each run on a fresh API server " +
		"with finished DataUploads of earlier Backups kept in Velero's namespace (Velero keeps them until their Backup is deleted), " +
		"once with `--find-causes=false` and once with cause finding. Per poll: per Progress call. Requests: those of itemops' own client " +
		"(its `rest_client_requests_total`; reads are gets, lists and the cache's watches), the plugin process's and the API server's own apart. " +
		"CPU per poll: from a CPU profile of itemops over the polling (profiles/), divided by the Progress calls made meanwhile; " +
		"finding causes is every sample with a frame of internal/why or of the reconciler's calls into it in its stack.\n\n")
	md.WriteString("| DataUploads kept | finding causes | Progress calls | itemops' reads / poll | itemops' writes / poll | the plugin's reads / poll | itemops' CPU / poll | of which finding causes | operator CPU, whole run | peak RSS | the API server's reads by resource |\n")
	md.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range kept {
		reads := map[string]float64{}
		for k, v := range r.reads {
			if k != "datauploads" {
				reads[k] = v
			}
		}
		calls := max(r.calls, 1)
		fmt.Fprintf(md, "| %d | %t | %.0f | %.4f | %.3f | %.2f | %s | %s | %.1f s | %s | %s |\n", r.cfg.kept, !r.cfg.noCauses, r.calls,
			r.itemopsReads/calls, r.itemopsWrites/calls, r.pluginReads()/calls, perPoll(r.profiledCPUPerPoll()), perPoll(r.causeCPUPerPoll()),
			r.cpu, mib(r.peakRSS), byResource(reads))
	}
}

func perPoll(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f µs", float64(d.Nanoseconds())/1000)
}

func byResource(writes map[string]float64) string {
	keys := make([]string, 0, len(writes))
	for k := range writes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, writes[k]))
	}
	return strings.Join(parts, ", ")
}

func writeSideBySide(md *strings.Builder, sides []*sideRun) {
	v, i := sides[0], sides[1]
	fmt.Fprintf(md, "\n## Side by side with Velero's own controller\n\n")
	fmt.Fprintf(md, "The same workload twice, each on a fresh API server: %d real Velero Backups (the real `velero server`, "+
		"versitygw as the bucket, velero-plugin-for-aws), each of %d ConfigMaps that the sample data mover starts an upload of %s to %s for, "+
		"created together; Velero backs them up one after another. First Velero's own `backup-operations` controller follows the operations; "+
		"then it is disabled (`--disable-controllers=backup-operations,restore-operations`) and itemops in manage mode does. "+
		"Both at `--item-operation-sync-frequency` = itemops `--sync-frequency` = %s. "+
		"Parent latency: from the plugin-side completion of a Backup's last operation to the Backup seen in `Finalizing` (and in `Completed`). "+
		"CPU: `velero server`, itemops and every plugin process they started, over the whole run (the backups themselves included, the same in both). "+
		"API writes: every write the API server counted during the run. "+
		"Velero backs the Backups up one at a time through its backup queue, which starts the next Backup when one leaves InProgress "+
		"and otherwise rechecks once a minute: the time it waited for that recheck (gaps of 20 s or more between two Backups' starts in its log) "+
		"is given, since it, not the CPU, decides when the last Backup is backed up.\n\n",
		v.cfg.backups, v.cfg.perBackup, v.cfg.minDuration, v.cfg.maxDuration, v.cfg.sync)
	md.WriteString("| followed by | operations | parent latency p50 / p99 / max | to Completed p50 / p99 | CPU (all processes) | of which itemops | sample plugin launches | API writes | last Backup backed up by Velero after | of which Velero's queue stalled | run time | Backups unfinished |\n")
	md.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range sides {
		p50, p99, pmax := percentiles(r.parent)
		c50, c99, _ := percentiles(r.completed)
		itemopsCPU := "–"
		if r.mode == byItemops {
			itemopsCPU = fmt.Sprintf("%.1f s (itemops %.1f s, its plugins %.1f s)", r.itemopsCPU, r.itemopsOwnCPU, r.itemopsCPU-r.itemopsOwnCPU)
		}
		fmt.Fprintf(md, "| %s | %d | %s / %s / %s | %s / %s | %.1f s | %s | %d | %.0f | %s | %s (%d times) | %s | %d |\n",
			r.mode, r.operations, round(p50), round(p99), round(pmax), round(c50), round(c99), r.cpuSeconds, itemopsCPU,
			r.launches, sum(r.writes), r.lastBackedUp.Round(time.Second), r.queueStalled.Round(time.Second), r.queueStalls,
			r.duration.Round(time.Second), r.unfinished)
	}
	_, vp99, _ := percentiles(v.parent)
	_, ip99, _ := percentiles(i.parent)
	fmt.Fprintf(md, "| **Velero ÷ itemops** | | **%s** (p99) | | %s | | %s | %s | | | | |\n",
		ratio(vp99.Seconds(), ip99.Seconds()), ratio(v.cpuSeconds, i.cpuSeconds), ratio(float64(v.launches), float64(i.launches)),
		ratio(sum(v.writes), sum(i.writes)))
	fmt.Fprintf(md, "\nAPI writes by resource:\n\n")
	for _, r := range sides {
		fmt.Fprintf(md, "- %s: %s\n", r.mode, byResource(r.writes))
	}
	md.WriteString("\n![parent latency, Velero and itemops](side-by-side-parent-latency-cdf.png)\n")
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f×", a/b)
}

func writeCSV(dir string, results []*result, sides []*sideRun) error {
	f, err := os.Create(filepath.Join(dir, "results.csv"))
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"operations", "backups", "sync_seconds", "polling", "progress_calls_per_second", "polled_share", "detection_p50_seconds",
		"detection_p99_seconds", "parent_p50_seconds", "parent_p99_seconds", "api_writes_per_operation", "operator_cpu_seconds",
		"operator_peak_rss_bytes", "plugin_launches", "progress_calls_per_operation", "undetected", "unfinished"})
	for _, r := range results {
		_ = w.Write([]string{strconv.Itoa(r.cfg.ops), strconv.Itoa(r.cfg.parents), fmt.Sprint(r.cfg.sync.Seconds()), string(r.cfg.polling),
			fmt.Sprintf("%.1f", r.callsPerSecond), fmt.Sprintf("%.4f", r.polledShare),
			fmt.Sprintf("%.3f", r.detectionP50.Seconds()), fmt.Sprintf("%.3f", r.detectionP99.Seconds()),
			fmt.Sprintf("%.3f", r.parentP50.Seconds()), fmt.Sprintf("%.3f", r.parentP99.Seconds()),
			fmt.Sprintf("%.2f", r.writesPerOp), fmt.Sprintf("%.1f", r.cpuSeconds), strconv.FormatInt(r.peakRSS, 10),
			strconv.Itoa(r.launches), fmt.Sprintf("%.2f", r.pollsPerOp), strconv.Itoa(r.undetected), strconv.Itoa(r.unfinished)})
	}
	w.Flush()
	if err := f.Close(); err != nil {
		return err
	}
	if len(sides) == 0 {
		return nil
	}
	f, err = os.Create(filepath.Join(dir, "side-by-side.csv"))
	if err != nil {
		return err
	}
	w = csv.NewWriter(f)
	_ = w.Write([]string{"followed_by", "backups", "operations", "sync_seconds", "parent_p50_seconds", "parent_p99_seconds",
		"parent_max_seconds", "completed_p50_seconds", "completed_p99_seconds", "cpu_seconds", "itemops_cpu_seconds", "itemops_own_cpu_seconds",
		"plugin_launches", "api_writes", "last_backed_up_seconds", "velero_queue_stalls", "velero_queue_stalled_seconds", "run_seconds", "unfinished"})
	for _, r := range sides {
		p50, p99, pmax := percentiles(r.parent)
		c50, c99, _ := percentiles(r.completed)
		_ = w.Write([]string{r.mode, strconv.Itoa(r.cfg.backups), strconv.Itoa(r.operations), fmt.Sprint(r.cfg.sync.Seconds()),
			fmt.Sprintf("%.3f", p50.Seconds()), fmt.Sprintf("%.3f", p99.Seconds()), fmt.Sprintf("%.3f", pmax.Seconds()),
			fmt.Sprintf("%.3f", c50.Seconds()), fmt.Sprintf("%.3f", c99.Seconds()),
			fmt.Sprintf("%.1f", r.cpuSeconds), fmt.Sprintf("%.1f", r.itemopsCPU), fmt.Sprintf("%.1f", r.itemopsOwnCPU), strconv.Itoa(r.launches),
			fmt.Sprintf("%.0f", sum(r.writes)), fmt.Sprintf("%.0f", r.lastBackedUp.Seconds()), strconv.Itoa(r.queueStalls),
			fmt.Sprintf("%.0f", r.queueStalled.Seconds()), fmt.Sprintf("%.0f", r.duration.Seconds()), strconv.Itoa(r.unfinished)})
	}
	w.Flush()
	return f.Close()
}
