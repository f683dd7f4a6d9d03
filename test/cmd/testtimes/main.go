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

// Command testtimes prints where a run of make test spent its time: each
// build make test started (the ones a warm machine skips take no time and
// are left out), each of hack/test.sh's lanes, each Ginkgo suite's setup
// (its BeforeSuite), specs and total, and the real node's slowest specs.
// It reads the record the Makefile and hack/test.sh keep (lines of
// `build|lane NAME start|end SECONDS`) and the Ginkgo suites' JSON reports.
//
//	go run ./test/cmd/testtimes -times FILE [-began SECONDS] REPORT.json...
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// slowest is how many of the real node's specs the table names.
const slowest = 10

// builtAfter is the least time a build takes when it built anything: one
// whose result was in the cache returns sooner.
const builtAfter = 5 * time.Second

func main() {
	times := flag.String("times", "", "the record of builds and lanes: lines of `build|lane NAME start|end SECONDS`")
	began := flag.Int64("began", 0, "when make test began (seconds since the epoch)")
	flag.Parse()
	var reports []types.Report
	for _, path := range flag.Args() {
		rs, err := readReports(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testtimes: %s: %v\n", path, err)
			continue
		}
		reports = append(reports, rs...)
	}
	var steps []step
	if *times != "" {
		f, err := os.Open(*times)
		if err == nil {
			steps, err = readSteps(f)
			f.Close()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "testtimes: %s: %v\n", *times, err)
		}
	}
	var start time.Time
	if *began > 0 {
		start = time.Unix(*began, 0)
	}
	write(os.Stdout, start, time.Now(), steps, reports)
}

func readReports(path string) ([]types.Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rs []types.Report
	return rs, json.Unmarshal(data, &rs)
}

// step is a build or a lane: its kind, name, start and end (zero while it
// has not ended).
type step struct {
	kind, name string
	start, end time.Time
}

func readSteps(r io.Reader) ([]step, error) {
	var out []step
	index := map[string]int{}
	scan := bufio.NewScanner(r)
	for scan.Scan() {
		fields := strings.Fields(scan.Text())
		if len(fields) != 4 {
			continue
		}
		secs, err := strconv.ParseInt(fields[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", scan.Text(), err)
		}
		key := fields[0] + " " + fields[1]
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, step{kind: fields[0], name: fields[1]})
		}
		switch fields[2] {
		case "start":
			out[i].start = time.Unix(secs, 0)
		case "end":
			out[i].end = time.Unix(secs, 0)
		}
	}
	return out, scan.Err()
}

// suiteTimes are a suite's setup (its BeforeSuite), its specs' time
// summed over its processes, and its total.
type suiteTimes struct {
	name                string
	setup, specs, total time.Duration
}

func suiteOf(r types.Report) suiteTimes {
	t := suiteTimes{name: suiteName(r), total: r.RunTime}
	for _, sr := range r.SpecReports {
		switch {
		case sr.LeafNodeType.Is(types.NodeTypeBeforeSuite | types.NodeTypeSynchronizedBeforeSuite):
			t.setup = max(t.setup, sr.RunTime)
		case sr.LeafNodeType.Is(types.NodeTypeIt) && sr.State != types.SpecStateSkipped && sr.State != types.SpecStatePending:
			t.specs += sr.RunTime
		}
	}
	return t
}

func suiteName(r types.Report) string {
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, r.SuitePath); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return filepath.Base(r.SuitePath)
}

// minutes is a duration as minutes and seconds, "-" for none.
func minutes(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return offset(d)
}

// offset is a duration as minutes and seconds.
func offset(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

func isRealNode(r types.Report) bool {
	return slices.Contains(r.SuiteLabels, "cluster")
}

// write prints the table of a run that began at began (zero: at its first
// step) and is printed at now.
func write(w io.Writer, began, now time.Time, steps []step, reports []types.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	for _, s := range steps {
		if began.IsZero() || s.start.Before(began) {
			began = s.start
		}
	}
	fmt.Fprintln(tw, "=== where the time went\t\t\t\t")
	if !began.IsZero() {
		fmt.Fprintf(tw, "the whole run\t\t\t%s\t\n", offset(now.Sub(began)))
	}
	var builds, lanes []step
	for _, s := range steps {
		switch {
		case s.kind == "lane":
			lanes = append(lanes, s)
		case s.kind == "build" && (s.end.IsZero() || s.end.Sub(s.start) >= builtAfter):
			builds = append(builds, s)
		}
	}
	row := func(s step) {
		end, took := "running", "-"
		if !s.end.IsZero() {
			end, took = "+"+offset(s.end.Sub(began)), minutes(s.end.Sub(s.start))
		}
		fmt.Fprintf(tw, "%s\t+%s\t%s\t%s\t\n", s.name, offset(s.start.Sub(began)), end, took)
	}
	if len(steps) > 0 {
		fmt.Fprintln(tw, "\t\t\t\t")
		if len(builds) == 0 {
			fmt.Fprintln(tw, "build: none (all were in this machine's cache)\t\t\t\t")
		} else {
			fmt.Fprintln(tw, "build\tbegan\tended\ttook\t")
			// In the order they ended; those still running last.
			ended := func(s step) int64 {
				if s.end.IsZero() {
					return 1<<63 - 1
				}
				return s.end.Unix()
			}
			slices.SortStableFunc(builds, func(a, b step) int { return cmp.Compare(ended(a), ended(b)) })
			for _, s := range builds {
				row(s)
			}
		}
	}
	if len(lanes) > 0 {
		fmt.Fprintln(tw, "\t\t\t\t")
		fmt.Fprintln(tw, "lane\tbegan\tended\ttook\t")
		for _, s := range lanes {
			row(s)
		}
	}
	if len(reports) > 0 {
		fmt.Fprintln(tw, "\t\t\t\t")
		fmt.Fprintln(tw, "Ginkgo suite\tsetup\tspecs (summed)\ttotal\t")
		for _, r := range reports {
			t := suiteOf(r)
			if t.specs == 0 && t.setup == 0 {
				// A suite whose specs a filter left out.
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", t.name, minutes(t.setup), minutes(t.specs), minutes(t.total))
		}
	}
	for _, r := range reports {
		if !isRealNode(r) {
			continue
		}
		specs := slices.DeleteFunc(slices.Clone(r.SpecReports), func(sr types.SpecReport) bool {
			return !sr.LeafNodeType.Is(types.NodeTypeIt) || sr.State == types.SpecStateSkipped
		})
		slices.SortStableFunc(specs, func(a, b types.SpecReport) int { return cmp.Compare(b.RunTime, a.RunTime) })
		fmt.Fprintln(tw, "\t\t\t\t")
		fmt.Fprintf(tw, "the real node's %d slowest specs\tstate\t\ttook\t\n", min(slowest, len(specs)))
		for _, sr := range specs[:min(slowest, len(specs))] {
			text := sr.LeafNodeText
			if len(text) > 100 {
				text = text[:97] + "..."
			}
			fmt.Fprintf(tw, "%s\t%s\t\t%s\t\n", text, sr.State, minutes(sr.RunTime))
		}
	}
}
