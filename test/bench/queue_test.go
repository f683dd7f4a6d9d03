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

	. "github.com/onsi/gomega"

	"github.com/itemops/itemops/test/scrape"
)

// queueExposition is controller-runtime's workqueue histograms as itemops
// serves them (buckets 1e-8 × 10^i): the ItemOperation queue handed out
// 1,000 reconciles, 900 of which waited at most 10 ms, 80 at most 100 ms,
// 15 at most 1 s and 5 longer; another queue's figures must not count.
const queueExposition = `# TYPE workqueue_queue_duration_seconds histogram
workqueue_queue_duration_seconds_bucket{controller="itemoperation",name="itemoperation",le="0.01"} 900
workqueue_queue_duration_seconds_bucket{controller="itemoperation",name="itemoperation",le="0.1"} 980
workqueue_queue_duration_seconds_bucket{controller="itemoperation",name="itemoperation",le="1"} 995
workqueue_queue_duration_seconds_bucket{controller="itemoperation",name="itemoperation",le="10"} 1000
workqueue_queue_duration_seconds_bucket{controller="itemoperation",name="itemoperation",le="+Inf"} 1000
workqueue_queue_duration_seconds_sum{controller="itemoperation",name="itemoperation"} 20
workqueue_queue_duration_seconds_count{controller="itemoperation",name="itemoperation"} 1000
workqueue_queue_duration_seconds_bucket{controller="backup",name="backup",le="+Inf"} 7
workqueue_queue_duration_seconds_sum{controller="backup",name="backup"} 700
workqueue_queue_duration_seconds_count{controller="backup",name="backup"} 7
# TYPE workqueue_work_duration_seconds histogram
workqueue_work_duration_seconds_bucket{controller="itemoperation",name="itemoperation",le="+Inf"} 1000
workqueue_work_duration_seconds_sum{controller="itemoperation",name="itemoperation"} 50
workqueue_work_duration_seconds_count{controller="itemoperation",name="itemoperation"} 1000
`

// queueAt is queueExposition's counts scaled by k, as a scrape at.
func queueAt(t *testing.T, at time.Time, k float64) queueCounts {
	f, err := scrape.Parse(strings.NewReader(queueExposition))
	if err != nil {
		t.Fatal(err)
	}
	c, ok := readQueueCounts(f, at)
	if !ok {
		t.Fatal("no counts in queueExposition")
	}
	c.handedOut, c.waitSum, c.waitedUpTo100ms, c.waitedUpTo1s, c.workSum, c.workCount =
		k*c.handedOut, k*c.waitSum, k*c.waitedUpTo100ms, k*c.waitedUpTo1s, k*c.workSum, k*c.workCount
	return c
}

func TestQueueFigures(t *testing.T) {
	g := NewWithT(t)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := queueAt(t, start.Add(10*time.Second), 1)
	g.Expect(c.handedOut).To(Equal(1000.0), "only the ItemOperation queue counts")

	q := between(queueCounts{at: start}, c, 10)
	g.Expect(q.meanWait).To(Equal(20 * time.Millisecond))
	g.Expect(q.over100ms).To(BeNumerically("~", 0.02, 1e-9))
	g.Expect(q.over1s).To(BeNumerically("~", 0.005, 1e-9))
	g.Expect(q.meanWork).To(Equal(50 * time.Millisecond))
	g.Expect(q.busyWorkers).To(BeNumerically("~", 5, 1e-9))
	g.Expect(q.String()).To(Equal("100 reconciles/s, waited 20ms on average for a worker (2.00% over 100ms, 0.50% over 1s), held it 50ms, 5.0 of 10 workers busy"))

	// Three scrapes after the start: the first stretch (the start, when
	// every operation is due) waited longest but comes before from; of the
	// two after it (each 1,000 reconciles over 30 s), the second waited
	// longer (20 ms a reconcile), the first not at all.
	counts := []queueCounts{{at: start}, queueAt(t, start.Add(10*time.Second), 1), queueAt(t, start.Add(40*time.Second), 2), queueAt(t, start.Add(70*time.Second), 3)}
	counts[1].waitSum = 100 // 100 ms a reconcile
	counts[2].waitSum = 100
	counts[3].waitSum = 120
	run, ok := analyseQueue(counts, start.Add(10*time.Second), 10)
	g.Expect(ok).To(BeTrue())
	g.Expect(run.whole.handedOut).To(Equal(3000.0))
	g.Expect(run.whole.meanWait).To(Equal(40 * time.Millisecond))
	g.Expect(run.worstStart).To(Equal(40 * time.Second))
	g.Expect(run.worst.handedOut).To(Equal(1000.0))
	g.Expect(run.worst.meanWait).To(Equal(20 * time.Millisecond))
	g.Expect(run.worst.ran).To(Equal(30 * time.Second))

	_, ok = analyseQueue(counts[:1], start, 10)
	g.Expect(ok).To(BeFalse(), "one scrape says nothing of a stretch")

	empty, err := scrape.Parse(strings.NewReader("# TYPE itemops_progress_calls_total counter\nitemops_progress_calls_total 1\n"))
	g.Expect(err).NotTo(HaveOccurred())
	_, ok = readQueueCounts(empty, start)
	g.Expect(ok).To(BeFalse(), "a scrape without the queue's figures has none")
}
