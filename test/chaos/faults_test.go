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

package chaos

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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
	faultReplicaKilled   = "an itemops replica killed (SIGKILL), restarted 0.5–2 s later"
	faultLeaderKilled    = "the leader killed (SIGKILL), restarted 0.5–2 s later"
	faultKilledMidWrites = "the leader killed (SIGKILL) the moment one of its ItemOperation writes is seen, amid the others"
	faultPluginsKilled   = "every plugin process killed (SIGKILL)"
	faultPluginErrors    = "the plugin answering errors for 2–4 s"
	faultPluginHangs     = "the plugin hanging for 2–4 s"
	faultAPIServerDown   = "the kube-apiserver stopped, started again 1–3 s later"
	eventCancelRequested = "operations asked to cancel (spec.cancel)"
	eventBackupDeleted   = "a Backup deleted while its operations run"
	eventQuietCancels    = "operations asked to cancel outside any fault (a quiet window with a leader)"
)

var faultOrder = []string{faultReplicaKilled, faultLeaderKilled, faultKilledMidWrites, faultPluginsKilled, faultPluginErrors, faultPluginHangs,
	faultAPIServerDown, eventCancelRequested, eventBackupDeleted, eventQuietCancels}

// inject runs faults one after another, every 1–3 s, for cfg.duration, in
// an order drawn from rng; a third of the way in it asks some operations to
// cancel, and half way it deletes a Backup. Before the first fault, in a
// quiet window, it asks a few operations to cancel and waits for their
// Cancel to reach the plugin (the window is added to the duration). It
// returns how often each happened.
func inject(ctx context.Context, t testing.TB, cfg config, rng *rand.Rand, env *envtest.Environment, cl *replicas.Cluster, load *workload, w *watcher) map[string]int {
	t.Helper()
	counts := map[string]int{}
	end := time.Now().Add(cfg.duration)
	cancelAt, deleteAt, quietAt := time.Now().Add(cfg.duration/3), time.Now().Add(cfg.duration/2), time.Now()
	faults := faultOrder[:7]
	restartLater := func(i int) {
		pause(ctx, rng, 500*time.Millisecond, 2*time.Second)
		if err := cl.Start(i); err != nil {
			t.Errorf("restarting replica %d: %v", i, err)
		}
	}
	for time.Now().Before(end) && ctx.Err() == nil {
		if !cancelAt.IsZero() && time.Now().After(cancelAt) {
			counts[eventCancelRequested] += requestCancels(ctx, t, env, load, rng)
			cancelAt = time.Time{}
		}
		if !deleteAt.IsZero() && time.Now().After(deleteAt) {
			deleteBackup(ctx, t, env, load)
			counts[eventBackupDeleted]++
			deleteAt = time.Time{}
		}
		if !quietAt.IsZero() && time.Now().After(quietAt) {
			began := time.Now()
			counts[eventQuietCancels] += quietCancels(ctx, t, env, cl, load, rng)
			end = end.Add(time.Since(began))
			quietAt = time.Time{}
		}
		fault := faults[rng.IntN(len(faults))]
		switch fault {
		case faultReplicaKilled:
			i := rng.IntN(2)
			cl.Kill(i)
			restartLater(i)
		case faultLeaderKilled:
			i := cl.Leader()
			if i < 0 {
				continue // no leader this moment: an election is under way
			}
			cl.Kill(i)
			restartLater(i)
		case faultKilledMidWrites:
			select {
			case <-w.written: // an old one
			default:
			}
			select {
			case <-w.written:
			case <-time.After(5 * time.Second):
				continue // nothing written now
			}
			i := cl.Leader()
			if i < 0 {
				continue
			}
			cl.Kill(i)
			restartLater(i)
		case faultPluginsKilled:
			for _, pid := range pluginPIDs(pluginDir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		case faultPluginErrors, faultPluginHangs:
			kind := "error"
			if fault == faultPluginHangs {
				kind = "hang"
			}
			path := filepath.Join(stateDir, sim.FaultFile)
			if err := os.WriteFile(path, []byte(kind), 0o644); err != nil {
				t.Fatal(err)
			}
			pause(ctx, rng, 2*time.Second, 4*time.Second)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		case faultAPIServerDown:
			down := 1*time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
			if err := env.RestartAPIServer(ctx, down); err != nil {
				t.Fatalf("restarting the kube-apiserver: %v", err)
			}
		}
		counts[fault]++
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

// pause waits a time drawn between lo and hi: how long a fault lasts, or
// the time between two faults.
func pause(ctx context.Context, rng *rand.Rand, lo, hi time.Duration) {
	select {
	case <-time.After(lo + time.Duration(rng.Int64N(int64(hi-lo)))):
	case <-ctx.Done():
	}
}

// requestCancels sets spec.cancel on about a tenth of the ItemOperations
// that exist (at least one), as an administrator would, and returns how many.
func requestCancels(ctx context.Context, t testing.TB, env *envtest.Environment, load *workload, rng *rand.Rand) int {
	t.Helper()
	ops := &itemopsv1alpha1.ItemOperationList{}
	if err := retrying(ctx, func() error { return env.Client.List(ctx, ops, client.InNamespace(envtest.VeleroNamespace)) }); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, op := range ops.Items {
		if n > 0 && rng.IntN(10) != 0 || op.Spec.Cancel {
			continue
		}
		patch := client.MergeFrom(op.DeepCopy())
		ops.Items[i].Spec.Cancel = true
		// Asked from this moment: anything seen ending later may have been cancelled.
		load.cancelled[op.Spec.OperationID] = time.Now()
		if err := retrying(ctx, func() error { return client.IgnoreNotFound(env.Client.Patch(ctx, &ops.Items[i], patch)) }); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// quietCancels waits, with no fault injected, for a leader and then for
// it to have settled in (its caches, its plugin processes), asks about a
// tenth of the operations that will run for longer than quietCancelBound
// (at least one) to cancel, and waits until the Cancel of each has reached
// the plugin, at most quietCancelBound and a little more. It returns how
// many it asked.
func quietCancels(ctx context.Context, t testing.TB, env *envtest.Environment, cl *replicas.Cluster, load *workload, rng *rand.Rand) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); cl.Leader() < 0 && time.Now().Before(deadline); {
		pause(ctx, rng, 100*time.Millisecond, 200*time.Millisecond)
	}
	pause(ctx, rng, 5*time.Second, 6*time.Second)
	ops := &itemopsv1alpha1.ItemOperationList{}
	if err := retrying(ctx, func() error { return env.Client.List(ctx, ops, client.InNamespace(envtest.VeleroNamespace)) }); err != nil {
		t.Fatal(err)
	}
	store, err := sim.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	for i, op := range ops.Items {
		if op.Status.Phase.IsTerminal() || op.Spec.Cancel || len(asked) > 0 && rng.IntN(10) != 0 {
			continue
		}
		if st, err := store.Load(op.Spec.OperationID); err != nil || st.CompletesAt().Before(time.Now().Add(quietCancelBound+time.Second)) {
			continue // it may end on its own before a Cancel must have come
		}
		patch := client.MergeFrom(op.DeepCopy())
		ops.Items[i].Spec.Cancel = true
		load.cancelled[op.Spec.OperationID] = time.Now()
		load.quietCancels[op.Spec.OperationID] = load.cancelled[op.Spec.OperationID]
		if err := retrying(ctx, func() error { return client.IgnoreNotFound(env.Client.Patch(ctx, &ops.Items[i], patch)) }); err != nil {
			t.Fatal(err)
		}
		asked = append(asked, op.Spec.OperationID)
	}
	waitFor(quietCancelBound+2*time.Second, func() bool {
		for _, id := range asked {
			st, err := store.Load(id)
			if err == nil && st.Canceled == nil && time.Now().Before(st.CompletesAt()) {
				return false
			}
		}
		return true
	})
	return len(asked)
}

// deleteBackup deletes the last Backup, as `kubectl delete backup` would.
func deleteBackup(ctx context.Context, t testing.TB, env *envtest.Environment, load *workload) {
	t.Helper()
	b := load.backups[len(load.backups)-1]
	load.deletedAt[b.Name] = time.Now()
	if err := retrying(ctx, func() error { return env.Client.Delete(ctx, &velerov1api.Backup{ObjectMeta: b.ObjectMeta}) }); err != nil {
		t.Fatal(err)
	}
	load.deleted[b.Name] = true
}

// retrying calls fn until it succeeds or 30 s have passed: the API server
// may be busy catching up after a restart.
func retrying(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pluginPIDs are the running processes of the sample plugin binary.
func pluginPIDs(pluginDir string) []int {
	return proc.Running(filepath.Join(pluginDir, "sample"))
}
