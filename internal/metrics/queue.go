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

package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
)

// IndexQueuePhase indexes Backups by their phase when it is one of Velero's
// queue (queuePhases), so that a scrape reads the queue, not every Backup
// Velero keeps.
const IndexQueuePhase = "itemops.io/queue-phase"

// queuePhases are the phases of a Backup in Velero's queue (v1.18): waiting
// its turn (Queued), let go by the queue and not started yet
// (ReadyToStart), and running (InProgress), which holds a place of
// --concurrent-backups as ReadyToStart does.
var queuePhases = []velerov1api.BackupPhase{velerov1api.BackupPhaseQueued, velerov1api.BackupPhaseReadyToStart, velerov1api.BackupPhaseInProgress}

// QueuePhase is the IndexQueuePhase extractor.
func QueuePhase(obj client.Object) []string {
	b, ok := obj.(*velerov1api.Backup)
	if !ok {
		return nil
	}
	for _, p := range queuePhases {
		if b.Status.Phase == p {
			return []string{string(p)}
		}
	}
	return nil
}

var (
	queueBackupsDesc = prometheus.NewDesc("itemops_backup_queue_backups",
		"Backups in Velero's queue, by phase: Queued, ReadyToStart, InProgress.",
		[]string{"phase"}, nil)
	queueOldestDesc = prometheus.NewDesc("itemops_backup_queue_oldest_seconds",
		"How long the oldest Backup has been Queued (since its creation) or ReadyToStart (since itemops first saw it so), by phase; 0 when none is.",
		[]string{"phase"}, nil)
	queueScrapeErrorsDesc = prometheus.NewDesc("itemops_backup_queue_scrape_error",
		"1 when the Backups of Velero's queue could not be listed for this scrape.", nil, nil)
)

// queueCollector reports Velero's backup queue from the cache's Backups.
type queueCollector struct {
	reader    client.Reader
	namespace string
	clock     clock.PassiveClock

	mu sync.Mutex
	// ready holds when this process first saw each Backup ReadyToStart: a
	// Backup records no time of its move there.
	ready map[types.UID]time.Time
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueBackupsDesc
	ch <- queueOldestDesc
	ch <- queueScrapeErrorsDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ready == nil {
		c.ready = map[types.UID]time.Time{}
	}
	seen := map[types.UID]bool{}
	for _, phase := range queuePhases {
		list := &velerov1api.BackupList{}
		opts := []client.ListOption{client.UnsafeDisableDeepCopy, client.MatchingFields{IndexQueuePhase: string(phase)}}
		if c.namespace != "" {
			opts = append(opts, client.InNamespace(c.namespace))
		}
		if err := c.reader.List(ctx, list, opts...); err != nil {
			ch <- prometheus.MustNewConstMetric(queueScrapeErrorsDesc, prometheus.GaugeValue, 1)
			return
		}
		var oldest time.Duration
		n := 0
		for i := range list.Items {
			b := &list.Items[i]
			if b.Status.Phase != phase { // the index is the cache's: it may hold one that just moved on
				continue
			}
			n++
			since := b.CreationTimestamp.Time
			if phase == velerov1api.BackupPhaseReadyToStart {
				seen[b.UID] = true
				first, ok := c.ready[b.UID]
				if !ok {
					first = now
					c.ready[b.UID] = now
				}
				since = first
			}
			oldest = max(oldest, now.Sub(since))
		}
		ch <- prometheus.MustNewConstMetric(queueBackupsDesc, prometheus.GaugeValue, float64(n), string(phase))
		if phase != velerov1api.BackupPhaseInProgress {
			ch <- prometheus.MustNewConstMetric(queueOldestDesc, prometheus.GaugeValue, oldest.Seconds(), string(phase))
		}
	}
	for uid := range c.ready {
		if !seen[uid] {
			delete(c.ready, uid)
		}
	}
	ch <- prometheus.MustNewConstMetric(queueScrapeErrorsDesc, prometheus.GaugeValue, 0)
}
