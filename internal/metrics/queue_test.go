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
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
)

// Velero's queue is counted by phase, with how long its oldest Backup has
// been Queued (since its creation) and ReadyToStart (since itemops first saw
// it so); Backups that left the queue, and other namespaces', are not.
func TestQueueIsCountedByPhaseWithItsOldest(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := velerov1api.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	backup := func(name, namespace string, phase velerov1api.BackupPhase, age time.Duration) *velerov1api.Backup {
		return &velerov1api.Backup{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-" + name),
				CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Status: velerov1api.BackupStatus{Phase: phase},
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&velerov1api.Backup{}, IndexQueuePhase, QueuePhase).WithObjects(
		backup("q1", "velero", velerov1api.BackupPhaseQueued, 10*time.Minute),
		backup("q2", "velero", velerov1api.BackupPhaseQueued, 5*time.Minute),
		backup("ready", "velero", velerov1api.BackupPhaseReadyToStart, time.Hour),
		backup("running", "velero", velerov1api.BackupPhaseInProgress, 2*time.Hour),
		backup("done", "velero", velerov1api.BackupPhaseCompleted, 3*time.Hour),
		backup("elsewhere", "other", velerov1api.BackupPhaseQueued, 9*time.Hour),
	).Build()
	clock := clocktesting.NewFakeClock(now)
	collector := &queueCollector{reader: c, namespace: "velero", clock: clock}
	want := func(queued, ready string) string {
		return `
# HELP itemops_backup_queue_backups Backups in Velero's queue, by phase: Queued, ReadyToStart, InProgress.
# TYPE itemops_backup_queue_backups gauge
itemops_backup_queue_backups{phase="InProgress"} 1
itemops_backup_queue_backups{phase="Queued"} 2
itemops_backup_queue_backups{phase="ReadyToStart"} 1
# HELP itemops_backup_queue_oldest_seconds How long the oldest Backup has been Queued (since its creation) or ReadyToStart (since itemops first saw it so), by phase; 0 when none is.
# TYPE itemops_backup_queue_oldest_seconds gauge
itemops_backup_queue_oldest_seconds{phase="Queued"} ` + queued + `
itemops_backup_queue_oldest_seconds{phase="ReadyToStart"} ` + ready + `
# HELP itemops_backup_queue_scrape_error 1 when the Backups of Velero's queue could not be listed for this scrape.
# TYPE itemops_backup_queue_scrape_error gauge
itemops_backup_queue_scrape_error 0
`
	}
	if err := testutil.CollectAndCompare(collector, strings.NewReader(want("600", "0"))); err != nil {
		t.Fatal(err)
	}
	clock.Step(7 * time.Minute)
	if err := testutil.CollectAndCompare(collector, strings.NewReader(want("1020", "420"))); err != nil {
		t.Fatal("seven minutes later:", err)
	}

	// The ReadyToStart one starts: it is forgotten.
	ready := &velerov1api.Backup{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "velero", Name: "ready"}, ready); err != nil {
		t.Fatal(err)
	}
	ready.Status.Phase = velerov1api.BackupPhaseInProgress
	if err := c.Update(context.Background(), ready); err != nil {
		t.Fatal(err)
	}
	none := `
# HELP itemops_backup_queue_oldest_seconds How long the oldest Backup has been Queued (since its creation) or ReadyToStart (since itemops first saw it so), by phase; 0 when none is.
# TYPE itemops_backup_queue_oldest_seconds gauge
itemops_backup_queue_oldest_seconds{phase="Queued"} 1020
itemops_backup_queue_oldest_seconds{phase="ReadyToStart"} 0
`
	if err := testutil.CollectAndCompare(collector, strings.NewReader(none), "itemops_backup_queue_oldest_seconds"); err != nil {
		t.Error("once none is ReadyToStart:", err)
	}
	if len(collector.ready) != 0 {
		t.Errorf("Backups remembered ReadyToStart once none is: %v", collector.ready)
	}
}
