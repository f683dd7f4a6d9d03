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
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/itemops/itemops/test/scrape"
)

// queueFigures is what itemops' own work queue of ItemOperations says of a
// run (controller-runtime's workqueue metrics, controller "itemoperation"):
// how many reconciles it handed out, how long they waited in line once due,
// and how busy its workers were. A poll that comes after the interval while
// cores are idle waited here.
type queueFigures struct {
	// handedOut: reconciles handed to a worker.
	handedOut float64
	// ran: how long itemops ran until the figures were read.
	ran time.Duration
	// meanWait: the mean time a due reconcile waited for a worker.
	meanWait time.Duration
	// over100ms, over1s: the shares of reconciles that waited longer.
	over100ms, over1s float64
	// meanWork: the mean time a reconcile held its worker.
	meanWork time.Duration
	// busyWorkers: workers busy on average, of workers.
	busyWorkers float64
	workers     int
}

// queueController is the work queue whose figures a run reads.
const queueController = "itemoperation"

// queueCounts are the work queue's cumulative counts at one scrape.
type queueCounts struct {
	at                 time.Time
	handedOut, waitSum float64
	waitedUpTo100ms    float64
	waitedUpTo1s       float64
	workSum, workCount float64
}

// readQueueCounts reads the counts from one scrape of itemops' metrics
// taken at; ok is false when the scrape holds none.
func readQueueCounts(f scrape.Families, at time.Time) (queueCounts, bool) {
	match := map[string]string{"name": queueController}
	wait, ok := f.Histogram("workqueue_queue_duration_seconds", match)
	if !ok {
		return queueCounts{}, false
	}
	c := queueCounts{at: at, handedOut: float64(wait.GetSampleCount()), waitSum: wait.GetSampleSum(),
		waitedUpTo100ms: below(wait, 0.1), waitedUpTo1s: below(wait, 1)}
	if work, ok := f.Histogram("workqueue_work_duration_seconds", match); ok {
		c.workSum, c.workCount = work.GetSampleSum(), float64(work.GetSampleCount())
	}
	return c, true
}

// between is what the queue did from the counts from to the counts to
// (those of a later scrape), with workers reconciles at once.
func between(from, to queueCounts, workers int) queueFigures {
	q := queueFigures{handedOut: to.handedOut - from.handedOut, ran: to.at.Sub(from.at), workers: workers}
	if q.handedOut <= 0 {
		return q
	}
	q.meanWait = seconds((to.waitSum - from.waitSum) / q.handedOut)
	q.over100ms = 1 - (to.waitedUpTo100ms-from.waitedUpTo100ms)/q.handedOut
	q.over1s = 1 - (to.waitedUpTo1s-from.waitedUpTo1s)/q.handedOut
	if n := to.workCount - from.workCount; n > 0 {
		q.meanWork = seconds((to.workSum - from.workSum) / n)
	}
	if q.ran > 0 {
		q.busyWorkers = (to.workSum - from.workSum) / q.ran.Seconds()
	}
	return q
}

// queueRun is what the queue did over a run and in its worst stretch.
type queueRun struct {
	// whole: from itemops' start to the last scrape.
	whole queueFigures
	// worst: between two successive scrapes after every operation was
	// polled once, the stretch whose reconciles waited longest on average;
	// worstStart is its start, since itemops started.
	worst      queueFigures
	worstStart time.Duration
}

// analyseQueue sums up the counts of successive scrapes, the first taken
// when itemops started (all zero), with workers reconciles at once; the
// worst stretch is looked for among those that begin at or after from.
func analyseQueue(counts []queueCounts, from time.Time, workers int) (queueRun, bool) {
	if len(counts) < 2 {
		return queueRun{}, false
	}
	run := queueRun{whole: between(counts[0], counts[len(counts)-1], workers)}
	for i := 1; i < len(counts); i++ {
		if counts[i-1].at.Before(from) {
			continue
		}
		q := between(counts[i-1], counts[i], workers)
		if q.handedOut > 0 && (run.worst.handedOut == 0 || q.meanWait > run.worst.meanWait) {
			run.worst, run.worstStart = q, counts[i-1].at.Sub(counts[0].at)
		}
	}
	return run, true
}

// String says it in one line.
func (q queueFigures) String() string {
	return fmt.Sprintf("%.0f reconciles/s, waited %s on average for a worker (%.2f%% over 100ms, %.2f%% over 1s), held it %s, %.1f of %d workers busy",
		q.handedOut/max(q.ran.Seconds(), 1), round(q.meanWait), 100*q.over100ms, 100*q.over1s, round(q.meanWork), q.busyWorkers, q.workers)
}

// String says it in one line.
func (r queueRun) String() string {
	if r.worst.ran == 0 {
		return r.whole.String()
	}
	return fmt.Sprintf("%s; its worst %s (from %s): %s", r.whole, round(r.worst.ran), r.worstStart.Round(time.Second), r.worst)
}

// below is the count of the histogram's bucket with upper bound le, which
// holds the observations of at most le; the whole count when no bucket has
// that bound.
func below(h *dto.Histogram, le float64) float64 {
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == le {
			return float64(b.GetCumulativeCount())
		}
	}
	return float64(h.GetSampleCount())
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
