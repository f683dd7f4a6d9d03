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
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// The parts of itemops' CPU that a profile is broken into, in the order
// results.md lists them.
const (
	partReconcile = "the reconcile (itemops' own code)"
	partCache     = "cache reads and deep copies"
	partAPI       = "API requests (status patches, finalizers, Events)"
	partJSON      = "JSON"
	partQueue     = "the workqueue and controller"
	partLogging   = "logging and metrics"
	partGRPC      = "gRPC (the client half of Progress)"
	partGC        = "allocation and GC"
	partOther     = "other (scheduler, syscalls, timers)"
)

var profileParts = []string{partReconcile, partCache, partAPI, partJSON, partQueue, partLogging, partGRPC, partGC, partOther}

// partRules decide a frame's part by its function's full name; the first
// rule whose prefix or fragment matches wins.
var partRules = []struct {
	part      string
	fragments []string
}{
	{partGC, []string{"runtime.gcBgMarkWorker", "runtime.gcDrain", "runtime.gcAssistAlloc", "runtime.mallocgc", "runtime.bgsweep",
		"runtime.bgscavenge", "runtime.scanobject", "runtime.markroot", "runtime.gcStart", "runtime.sweepone", "runtime.newobject",
		"runtime.makeslice", "runtime.growslice", "runtime.makemap", "runtime.mapassign"}},
	{partJSON, []string{"encoding/json.", "sigs.k8s.io/json", "github.com/json-iterator", "k8s.io/apimachinery/pkg/util/json",
		"k8s.io/apimachinery/pkg/runtime/serializer", "sigs.k8s.io/structured-merge-diff", "k8s.io/apimachinery/pkg/util/strategicpatch",
		"github.com/evanphx/json-patch", "gomodules.xyz/jsonpatch"}},
	{partGRPC, []string{"google.golang.org/grpc", "google.golang.org/protobuf", "github.com/golang/protobuf", "github.com/hashicorp/go-plugin",
		"golang.org/x/net/http2", "github.com/vmware-tanzu/velero/pkg/plugin"}},
	{partLogging, []string{"github.com/go-logr", "go.uber.org/zap", "k8s.io/klog", "github.com/prometheus", "github.com/itemops/itemops/internal/metrics",
		"github.com/itemops/itemops/internal/kube.(*deferred", "k8s.io/client-go/tools/record"}},
	{partCache, []string{"DeepCopy", "sigs.k8s.io/controller-runtime/pkg/cache", "k8s.io/client-go/tools/cache", "sigs.k8s.io/controller-runtime/pkg/client.(*typedClient).Get",
		"k8s.io/apimachinery/pkg/runtime.(*Scheme).Convert", "k8s.io/apimachinery/pkg/runtime.DefaultUnstructuredConverter"}},
	{partAPI, []string{"k8s.io/client-go/rest", "net/http.", "crypto/tls", "k8s.io/client-go/util/flowcontrol", "golang.org/x/time/rate"}},
	{partQueue, []string{"k8s.io/client-go/util/workqueue", "sigs.k8s.io/controller-runtime/pkg/internal/controller", "sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"}},
	{partReconcile, []string{"github.com/itemops/itemops/"}},
}

// partOf is the part of one sample: that of the frame nearest the leaf
// that any rule knows, so that JSON encoding under a status patch under a
// reconcile counts as JSON; a sample no rule knows is other.
func partOf(stack []string) string {
	for _, fn := range stack { // leaf first
		for _, r := range partRules {
			for _, f := range r.fragments {
				if strings.Contains(fn, f) {
					return r.part
				}
			}
		}
	}
	return partOther
}

// cpuValue is the index of a CPU profile's sample values that holds CPU
// nanoseconds (after the samples' count).
func cpuValue(p *profile.Profile) int {
	value := len(p.SampleType) - 1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			value = i
		}
	}
	return value
}

// cpuParts sums a CPU profile's samples by part.
func cpuParts(p *profile.Profile) (map[string]time.Duration, time.Duration) {
	value := cpuValue(p)
	parts := map[string]time.Duration{}
	var total time.Duration
	for _, s := range p.Sample {
		var stack []string
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function != nil {
					stack = append(stack, line.Function.Name)
				}
			}
		}
		d := time.Duration(s.Value[value])
		parts[partOf(stack)] += d
		total += d
	}
	return parts, total
}

// causeFrames are the frames of finding why an operation waits: itemops'
// internal/why and the reconciler's calls into it. A sample with one of
// them anywhere in its stack is cause finding's CPU, whatever its leaf
// (a deep copy or a request under the Gatherer counts too).
var causeFrames = []string{"github.com/itemops/itemops/internal/why.",
	"controllers.(*ItemOperationReconciler).dataMoverCause", "controllers.(*ItemOperationReconciler).veleroServer"}

// cpuUnder is the CPU of a profile's samples with a frame matching one of
// fragments anywhere in their stack.
func cpuUnder(p *profile.Profile, fragments []string) time.Duration {
	if p == nil {
		return 0
	}
	value := cpuValue(p)
	var total time.Duration
	for _, s := range p.Sample {
		if stackHas(s, fragments) {
			total += time.Duration(s.Value[value])
		}
	}
	return total
}

func stackHas(s *profile.Sample, fragments []string) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			for _, f := range fragments {
				if strings.Contains(line.Function.Name, f) {
					return true
				}
			}
		}
	}
	return false
}

// profileRow is one run's CPU by part, per Progress call.
type profileRow struct {
	label  string
	calls  int
	total  time.Duration
	parts  map[string]time.Duration
	allocs int64 // bytes allocated over the run, per Progress call
}

// fetchProfile saves one of itemops' pprof profiles and parses it.
func fetchProfile(ctx context.Context, addr, path, file string) (*profile.Profile, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", path, resp.Status, body)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, body, 0o644); err != nil {
		return nil, err
	}
	return profile.ParseData(body)
}

// allocatedBytes is the alloc_space total of a heap profile.
func allocatedBytes(p *profile.Profile) int64 {
	i := -1
	for j, st := range p.SampleType {
		if st.Type == "alloc_space" {
			i = j
		}
	}
	if i < 0 {
		return 0
	}
	var n int64
	for _, s := range p.Sample {
		n += s.Value[i]
	}
	return n
}

// writeProfileTable writes the "where itemops' CPU goes" table: per
// Progress call, each part's CPU, from the profile of each run.
func writeProfileTable(w io.Writer, rows []profileRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Where itemops' CPU goes\n\n")
	fmt.Fprintf(w, "From a CPU profile of itemops over each run's polling (`-profile`; the profiles are in profiles/), "+
		"each sample counted in the part of the frame nearest its leaf that is known (test/bench/profile.go); "+
		"microseconds of itemops CPU per Progress call.\n\n")
	fmt.Fprintf(w, "| part |")
	for _, r := range rows {
		fmt.Fprintf(w, " %s |", r.label)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|", len(rows)))
	for _, part := range profileParts {
		fmt.Fprintf(w, "| %s |", part)
		for _, r := range rows {
			fmt.Fprintf(w, " %s |", perCall(r.parts[part], r.calls))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "| **total** |")
	for _, r := range rows {
		fmt.Fprintf(w, " **%s** |", perCall(r.total, r.calls))
	}
	fmt.Fprintf(w, "\n| Progress calls in the profile |")
	for _, r := range rows {
		fmt.Fprintf(w, " %d |", r.calls)
	}
	fmt.Fprintf(w, "\n| bytes allocated per call |")
	for _, r := range rows {
		fmt.Fprintf(w, " %d |", r.allocs)
	}
	fmt.Fprintln(w)
}

func perCall(d time.Duration, calls int) string {
	if calls == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f µs", float64(d.Microseconds())/float64(calls))
}

// profiling is a CPU profile of itemops being taken during a run.
type profiling struct {
	cfg         config
	p           *itemops
	from, until time.Time
	done        chan error
	cpu         *profile.Profile
	allocs      int64
	// calls, when set, counts the Progress calls made so far: read as the
	// CPU profile starts and as it ends, for runs whose plugin records
	// no polls of its own (the velero binary).
	calls          func() (float64, error)
	callsInProfile float64
}

// startProfiling takes a CPU profile of itemops from two sync intervals
// after its start (the operations ingested, polling steady) until the last
// transfer's end, when cfg asks for profiles; nil otherwise.
func startProfiling(ctx context.Context, p *itemops, cfg config, lastEnd time.Time, calls func() (float64, error)) *profiling {
	if cfg.profileDir == "" {
		return nil
	}
	pr := &profiling{cfg: cfg, p: p, done: make(chan error, 1), calls: calls}
	pr.from = p.started.Add(2 * cfg.sync)
	seconds := max(5, int(lastEnd.Sub(pr.from).Seconds()))
	pr.until = pr.from.Add(time.Duration(seconds) * time.Second)
	go func() {
		select {
		case <-time.After(time.Until(pr.from)):
		case <-ctx.Done():
			pr.done <- ctx.Err()
			return
		}
		var before float64
		if pr.calls != nil {
			var err error
			if before, err = pr.calls(); err != nil {
				pr.done <- err
				return
			}
		}
		var err error
		pr.cpu, err = fetchProfile(ctx, p.pprofAddr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds),
			filepath.Join(cfg.profileDir, cfg.profileName()+"-cpu.pb.gz"))
		if err == nil && pr.calls != nil {
			var after float64
			after, err = pr.calls()
			pr.callsInProfile = after - before
		}
		pr.done <- err
	}()
	return pr
}

// finish waits for the CPU profile and takes the allocation profile.
func (pr *profiling) finish(ctx context.Context) (*profiling, error) {
	if pr == nil {
		return nil, nil
	}
	if err := <-pr.done; err != nil {
		return nil, fmt.Errorf("profiling itemops: %w", err)
	}
	allocs, err := fetchProfile(ctx, pr.p.pprofAddr, "/debug/pprof/allocs", filepath.Join(pr.cfg.profileDir, pr.cfg.profileName()+"-allocs.pb.gz"))
	if err != nil {
		return nil, fmt.Errorf("profiling itemops: %w", err)
	}
	pr.allocs = allocatedBytes(allocs)
	return pr, nil
}

// row is the profile's table row: its parts per Progress call made while
// it was taken, and the bytes allocated per call over the whole run (all
// calls: the polls, or the calls counted when the run records no polls).
func (pr *profiling) row(polls map[string][]poll, all int) *profileRow {
	if pr == nil {
		return nil
	}
	inWindow := int(pr.callsInProfile)
	for _, ps := range polls {
		for _, q := range ps {
			all++
			if !q.at.Before(pr.from) && q.at.Before(pr.until) {
				inWindow++
			}
		}
	}
	parts, total := cpuParts(pr.cpu)
	r := &profileRow{label: pr.cfg.profileLabel(), calls: inWindow, total: total, parts: parts}
	if all > 0 {
		r.allocs = pr.allocs / int64(all)
	}
	return r
}

// profileName names a run's profile files.
func (c config) profileName() string {
	name := fmt.Sprintf("%d-%s", c.ops, strings.ReplaceAll(strings.ToLower(string(c.polling)), "-aware", ""))
	if c.plugin != "" {
		name = "datamover-" + name
	}
	if c.kept > 0 {
		name += fmt.Sprintf("-kept%d-causes-%t", c.kept, !c.noCauses)
	}
	return name
}

// profileLabel names a run in the profile table.
func (c config) profileLabel() string {
	label := fmt.Sprintf("%d ops, %s", c.ops, c.polling)
	if c.plugin != "" {
		label = "data mover " + label
	}
	if c.kept > 0 {
		label += fmt.Sprintf(", %d kept, finding causes %t", c.kept, !c.noCauses)
	}
	return label
}
