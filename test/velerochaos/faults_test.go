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

package velerochaos

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/replicas"
)

// The faults, in the order the results list them.
const (
	faultVeleroMidBackup   = "velero server killed (SIGKILL) while a backup runs, started again 1–3 s later"
	faultVeleroMidFinalize = "velero server killed (SIGKILL) while a backup finalizes, started again 1–3 s later"
	faultBucketIngest      = "the bucket unreachable (versitygw stopped) as a backup's operations are to be read"
	faultBucketWriteBack   = "the bucket unreachable as a backup's operations are to be written back"
	faultBucketUpload      = "the bucket unreachable while Velero backs up"
	faultObjectStoreKilled = "itemops' ObjectStore plugin processes killed (SIGKILL) as a write-back is due"
	faultDeleteWaiting     = "a DeleteBackupRequest for a backup waiting for its operations"
	faultDeleteFinalizing  = "a DeleteBackupRequest for a finalizing backup"
	faultNodeAgent         = "node-agent restarted (the transfers in flight cancelled)"
	faultReplicaKilled     = "an itemops replica killed (SIGKILL), restarted 0.5–2 s later"
	faultLeaderKilled      = "the leader killed (SIGKILL), restarted 0.5–2 s later"
	faultPluginsKilled     = "every plugin process of itemops killed (SIGKILL)"
	faultPluginErrors      = "the sample plugin answering errors for 2–4 s"
)

var faultOrder = []string{faultVeleroMidBackup, faultVeleroMidFinalize, faultBucketIngest, faultBucketWriteBack, faultBucketUpload,
	faultObjectStoreKilled, faultDeleteWaiting, faultDeleteFinalizing, faultNodeAgent, faultReplicaKilled, faultLeaderKilled,
	faultPluginsKilled, faultPluginErrors}

// faultCounts: how often each fault was drawn, and how often its moment
// came (a fault that waits for a backup in some phase is skipped when none
// gets there within the run's momentWait).
type faultCounts struct {
	drawn, injected map[string]int
}

// inject runs faults one after another, every 1–3 s, for cfg.duration, in
// an order drawn from rng. Everything a fault stopped is running again
// when it returns.
func inject(ctx context.Context, t testing.TB, cfg config, rng *rand.Rand, server *veleroServer, cl *replicas.Cluster, load *workload) faultCounts {
	t.Helper()
	counts := faultCounts{drawn: map[string]int{}, injected: map[string]int{}}
	end := time.Now().Add(cfg.duration)
	// The bucket is away 5–60 s, but never more than a quarter of the run.
	outage := func() time.Duration {
		hi := max(min(60*time.Second, cfg.duration/4), 6*time.Second)
		return 5*time.Second + time.Duration(rng.Int64N(int64(hi-5*time.Second)))
	}
	restartLater := func(i int) {
		pause(ctx, rng, 500*time.Millisecond, 2*time.Second)
		if err := cl.Start(i); err != nil {
			t.Errorf("restarting replica %d: %v", i, err)
		}
	}
	for time.Now().Before(end) && ctx.Err() == nil {
		fault := faultOrder[rng.IntN(len(faultOrder))]
		counts.drawn[fault]++
		injected := true
		switch fault {
		case faultVeleroMidBackup, faultVeleroMidFinalize:
			phase := velerov1api.BackupPhaseInProgress
			if fault == faultVeleroMidFinalize {
				phase = velerov1api.BackupPhaseFinalizing
			}
			if injected = waitForBackup(ctx, cfg.momentWait(), inPhase(phase)) != ""; injected {
				server.kill()
				// Velero v1.18 starts a ReadyToStart Backup only on the
				// change to that phase, and its start-up fails only
				// InProgress ones: one that was ReadyToStart as the server
				// died stays so for good. Read while no server runs.
				stranded, err := readyToStart(ctx)
				if err != nil {
					t.Fatalf("listing the Backups as velero server is down: %v", err)
				}
				load.strand(stranded)
				pause(ctx, rng, time.Second, 3*time.Second)
				server.start()
			}
		case faultBucketIngest, faultBucketWriteBack, faultBucketUpload:
			moment := map[string]func(*velerov1api.Backup, []itemopsv1alpha1.ItemOperation) bool{
				faultBucketIngest: ingestDue, faultBucketWriteBack: writeBackDue, faultBucketUpload: inPhase(velerov1api.BackupPhaseInProgress),
			}[fault]
			if injected = waitForBackup(ctx, cfg.momentWait(), moment) != ""; injected {
				if err := velero.StorageOutage(outage()); err != nil {
					t.Fatalf("starting versitygw again: %v", err)
				}
			}
		case faultObjectStoreKilled:
			if injected = waitForBackup(ctx, cfg.momentWait(), writeBackDue) != ""; injected {
				aws, err := filepath.EvalSymlinks(filepath.Join(itemopsPlugins, "velero-plugin-for-aws"))
				if err != nil {
					t.Fatal(err)
				}
				for _, pid := range childrenOf(cl.PIDs()) {
					if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && exe == aws {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
		case faultDeleteWaiting, faultDeleteFinalizing:
			moment := inPhase(velerov1api.BackupPhaseWaitingForPluginOperations)
			if fault == faultDeleteFinalizing {
				moment = inPhase(velerov1api.BackupPhaseFinalizing)
			}
			name := waitForBackup(ctx, cfg.momentWait(), moment)
			if injected = name != ""; injected {
				load.mu.Lock()
				load.deleteRequested[name] = true
				load.mu.Unlock()
				dbr := &velerov1api.DeleteBackupRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Namespace: envtest.VeleroNamespace},
					Spec: velerov1api.DeleteBackupRequestSpec{BackupName: name}}
				if err := retrying(ctx, func() error { return env.Client.Create(ctx, dbr) }); err != nil {
					t.Fatalf("requesting the deletion of Backup %s: %v", name, err)
				}
			}
		case faultNodeAgent:
			if _, err := cluster.RestartNodeAgent(ctx); err != nil {
				t.Fatalf("restarting node-agent: %v", err)
			}
		case faultReplicaKilled:
			i := rng.IntN(2)
			cl.Kill(i)
			restartLater(i)
		case faultLeaderKilled:
			i := cl.Leader()
			if injected = i >= 0; injected {
				cl.Kill(i)
				restartLater(i)
			}
		case faultPluginsKilled:
			for _, pid := range childrenOf(cl.PIDs()) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		case faultPluginErrors:
			path := filepath.Join(stateDir, sim.FaultFile)
			if err := os.WriteFile(path, []byte("error"), 0o644); err != nil {
				t.Fatal(err)
			}
			pause(ctx, rng, 2*time.Second, 4*time.Second)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}
		if injected {
			counts.injected[fault]++
		}
		pause(ctx, rng, time.Second, 3*time.Second)
	}
	// Whatever the last fault left behind is repaired.
	_ = os.Remove(filepath.Join(stateDir, sim.FaultFile))
	for i := range 2 {
		if err := cl.Start(i); err != nil {
			t.Fatal(err)
		}
	}
	return counts
}

// inPhase is the moment a Backup is in phase.
func inPhase(phase velerov1api.BackupPhase) func(*velerov1api.Backup, []itemopsv1alpha1.ItemOperation) bool {
	return func(b *velerov1api.Backup, _ []itemopsv1alpha1.ItemOperation) bool { return b.Status.Phase == phase }
}

// ingestDue: the Backup waits for operations none of which has an
// ItemOperation yet: its operations file is about to be read.
func ingestDue(b *velerov1api.Backup, ops []itemopsv1alpha1.ItemOperation) bool {
	return waiting(b.Status.Phase) && b.Status.BackupItemOperationsAttempted > 0 && len(ops) == 0
}

// writeBackDue: every operation of a waiting Backup has ended: the file
// is about to be written back.
func writeBackDue(b *velerov1api.Backup, ops []itemopsv1alpha1.ItemOperation) bool {
	if !waiting(b.Status.Phase) || len(ops) == 0 || len(ops) < b.Status.BackupItemOperationsAttempted {
		return false
	}
	for _, op := range ops {
		if !op.Status.Phase.IsTerminal() {
			return false
		}
	}
	return true
}

func waiting(phase velerov1api.BackupPhase) bool {
	return phase == velerov1api.BackupPhaseWaitingForPluginOperations || phase == velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed
}

// momentWait is how long a fault waits for its moment: a tenth of the
// run, from 10 s (the bounded run's 40 s) to 30 s (make test-chaos). Backups
// reach Finalizing a few times a minute and stay there about half a
// second: 10 s let a five-minute run draw it six times and meet it never.
func (c config) momentWait() time.Duration {
	return min(max(c.duration/10, 10*time.Second), 30*time.Second)
}

// waitForBackup waits up to wait for a Backup at the moment given,
// and returns its name, or "" if none got there. It looks at every change
// of a Backup as it is watched, and every 100 ms at all of them (an
// ItemOperation's change can bring the moment too).
func waitForBackup(ctx context.Context, wait time.Duration, moment func(*velerov1api.Backup, []itemopsv1alpha1.ItemOperation) bool) string {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	operationsOf := func(uid types.UID) []itemopsv1alpha1.ItemOperation {
		ops := &itemopsv1alpha1.ItemOperationList{}
		if env.Client.List(ctx, ops, client.InNamespace(envtest.VeleroNamespace), client.MatchingLabels{itemopsv1alpha1.LabelParentUID: string(uid)}) != nil {
			return nil
		}
		return ops.Items
	}
	var events <-chan watch.Event
	if w, err := env.WatchClient().Watch(ctx, &velerov1api.BackupList{}, client.InNamespace(envtest.VeleroNamespace)); err == nil {
		defer w.Stop()
		events = w.ResultChan()
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ""
		case ev, ok := <-events:
			if !ok {
				events = nil // the ticker goes on alone
				continue
			}
			if b, isBackup := ev.Object.(*velerov1api.Backup); isBackup && moment(b, operationsOf(b.UID)) {
				return b.Name
			}
		case <-tick.C:
			backups := &velerov1api.BackupList{}
			ops := &itemopsv1alpha1.ItemOperationList{}
			if env.Client.List(ctx, backups, client.InNamespace(envtest.VeleroNamespace)) != nil ||
				env.Client.List(ctx, ops, client.InNamespace(envtest.VeleroNamespace)) != nil {
				continue
			}
			byParent := map[string][]itemopsv1alpha1.ItemOperation{}
			for _, op := range ops.Items {
				byParent[op.Spec.Parent.UID] = append(byParent[op.Spec.Parent.UID], op)
			}
			for i := range backups.Items {
				if b := &backups.Items[i]; moment(b, byParent[string(b.UID)]) {
					return b.Name
				}
			}
		}
	}
}

// childrenOf lists the child processes of pids: the replicas' plugin processes.
func childrenOf(pids []int) []int {
	var out []int
	for _, pid := range pids {
		out = append(out, proc.Children(pid)...)
	}
	return out
}

// pause waits a time drawn between lo and hi.
func pause(ctx context.Context, rng *rand.Rand, lo, hi time.Duration) {
	select {
	case <-time.After(lo + time.Duration(rng.Int64N(int64(hi-lo)))):
	case <-ctx.Done():
	}
}
