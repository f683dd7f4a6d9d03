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

// readQueue reads the figures from one scrape of itemops' metrics, taken
// after it ran for ran with workers reconciles at once; ok is false when
// the scrape holds none.
func readQueue(f scrape.Families, ran time.Duration, workers int) (queueFigures, bool) {
	match := map[string]string{"name": queueController}
	wait, ok := f.Histogram("workqueue_queue_duration_seconds", match)
	if !ok || wait.GetSampleCount() == 0 {
		return queueFigures{}, false
	}
	q := queueFigures{handedOut: float64(wait.GetSampleCount()), ran: ran, workers: workers}
	q.meanWait = seconds(wait.GetSampleSum() / q.handedOut)
	q.over100ms = 1 - below(wait, 0.1)/q.handedOut
	q.over1s = 1 - below(wait, 1)/q.handedOut
	if work, ok := f.Histogram("workqueue_work_duration_seconds", match); ok && work.GetSampleCount() > 0 {
		q.meanWork = seconds(work.GetSampleSum() / float64(work.GetSampleCount()))
		if ran > 0 {
			q.busyWorkers = work.GetSampleSum() / ran.Seconds()
		}
	}
	return q, true
}

// String says it in one line.
func (q queueFigures) String() string {
	return fmt.Sprintf("%.0f reconciles/s, waited %s on average for a worker (%.2f%% over 100ms, %.2f%% over 1s), held it %s, %.1f of %d workers busy",
		q.handedOut/max(q.ran.Seconds(), 1), round(q.meanWait), 100*q.over100ms, 100*q.over1s, round(q.meanWork), q.busyWorkers, q.workers)
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
