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
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// restartResult is how long itemops took to poll every running operation
// again after a kill -9 with all of them in flight.
type restartResult struct {
	cfg config
	// firstRound is from itemops' first start until every operation had
	// been polled once.
	firstRound time.Duration
	// repoll is, for each operation polled again, the time from the kill to
	// its first Progress call by the new process.
	repoll []time.Duration
	// notAgain counts operations not polled again before the deadline.
	notAgain int
}

// restartTarget is the longest a kill -9 may keep an operation unpolled.
const restartTarget = 60 * time.Second

// restartRun starts itemops on cfg.ops operations that outlast the run,
// waits until every one has been polled and one more sync interval, kills
// itemops and its plugin processes with SIGKILL, starts it again at once
// and measures when each operation is polled again. Both processes run
// with leader election, as the chart deploys itemops: the new one first
// waits for the Lease the killed one could not release.
func restartRun(ctx context.Context, root string, cfg config) (*restartResult, error) {
	h, err := newHarness(root)
	if err != nil {
		return nil, err
	}
	defer h.close()
	// Nothing completes while the run lasts.
	cfg.minDuration, cfg.maxDuration = 24*time.Hour, 24*time.Hour
	ops, _, err := createOperations(ctx, h.c, cfg)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := h.startTransfers(ops, "", t0); err != nil {
		return nil, err
	}
	first, err := h.startItemops(cfg, "--leader-elect=true")
	if err != nil {
		return nil, err
	}
	defer first.kill()

	tail := &pollTail{path: h.pollLog, after: t0, first: map[string]time.Time{}}
	if err := tail.waitFor(len(ops), t0.Add(15*time.Minute)); err != nil {
		return nil, fmt.Errorf("before the kill: %w", err)
	}
	res := &restartResult{cfg: cfg, firstRound: time.Since(t0)}
	time.Sleep(cfg.sync) // polling as it does all day

	first.kill()
	killed := time.Now()
	tail.since(killed)
	second, err := h.startItemops(cfg, "--leader-elect=true")
	if err != nil {
		return nil, err
	}
	defer second.stop()
	waitErr := tail.waitFor(len(ops), killed.Add(10*time.Minute))
	for _, at := range tail.first {
		res.repoll = append(res.repoll, at.Sub(killed))
	}
	res.notAgain = len(ops) - len(res.repoll)
	if waitErr != nil && len(res.repoll) == 0 {
		return nil, fmt.Errorf("after the kill: %w", waitErr)
	}
	return res, nil
}

func (r *restartResult) summary() string {
	p50, p99, maximum := percentiles(r.repoll)
	return fmt.Sprintf("bench: kill -9 with %d operations in flight: every one polled once %s after the first start; after the kill polled again in p50 %s / p99 %s / max %s, %d not polled again",
		r.cfg.ops, round(r.firstRound), round(p50), round(p99), round(maximum), r.notAgain)
}

// pollTail follows the sample plugin's poll log while it is written,
// keeping each operation's first Progress call after a time.
type pollTail struct {
	path   string
	offset int64
	// partial is the end of the log not yet ended by a newline.
	partial []byte
	after   time.Time
	first   map[string]time.Time
}

// since starts counting again from the Progress calls made after t.
func (t *pollTail) since(at time.Time) {
	t.after, t.first = at, map[string]time.Time{}
}

// read takes in what was appended to the log since the last read.
func (t *pollTail) read() error {
	f, err := os.Open(t.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no Progress call yet
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(t.offset, io.SeekStart); err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	t.offset += int64(len(b))
	b = append(t.partial, b...)
	end := bytes.LastIndexByte(b, '\n')
	t.partial = append([]byte(nil), b[end+1:]...)
	for line := range strings.SplitSeq(string(b[:end+1]), "\n") {
		// A line a killed plugin left half written is skipped.
		fields := strings.Fields(line)
		if len(fields) != 3 {
			continue
		}
		ns, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		at := time.Unix(0, ns)
		if _, seen := t.first[fields[0]]; !seen && !at.Before(t.after) {
			t.first[fields[0]] = at
		}
	}
	return nil
}

// waitFor reads the log every second until n operations were polled since
// the time of since, or deadline passes.
func (t *pollTail) waitFor(n int, deadline time.Time) error {
	for {
		if err := t.read(); err != nil {
			return err
		}
		if len(t.first) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d operations polled by %s", len(t.first), n, deadline.Format(time.TimeOnly))
		}
		time.Sleep(time.Second)
	}
}
