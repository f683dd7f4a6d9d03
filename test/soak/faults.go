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
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
)

// The faults of a soak. itemops itself is not killed: a new process would
// start every resource from zero, and what a soak looks for is growth in
// one process that lives through everything else failing around it (the
// chaos suite kills replicas).
const (
	faultPluginsKilled = "every plugin process killed (SIGKILL)"
	faultPluginErrors  = "the sample plugin answering errors for 5–20 s"
	faultPluginHangs   = "the sample plugin hanging for 5–20 s"
	faultAPIServerDown = "the kube-apiserver stopped, started again 1–5 s later"
	faultCancels       = "5 running operations asked to cancel (spec.cancel)"
	faultBackupDeleted = "a Backup deleted while its operations run"
)

// faultOrder is the order the results list them in.
var faultOrder = []string{faultPluginsKilled, faultPluginErrors, faultPluginHangs, faultAPIServerDown, faultCancels, faultBackupDeleted}

type faults struct {
	w *world
	// pid is itemops': its children are the plugin processes.
	pid int
	rng *rand.Rand

	mu     sync.Mutex
	counts map[string]int
}

// run injects a fault drawn at random every half to one and a half times
// every, until ctx ends; whatever the last one left behind is repaired.
func (f *faults) run(ctx context.Context, every time.Duration) {
	defer func() { _ = os.Remove(filepath.Join(f.w.stateDir, sim.FaultFile)) }()
	for {
		wait := every/2 + time.Duration(f.rng.Int64N(int64(every)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		fault := faultOrder[f.rng.IntN(len(faultOrder))]
		if err := f.inject(ctx, fault); err != nil {
			if ctx.Err() == nil {
				fmt.Printf("soak: %s: %v\n", fault, err)
			}
			continue
		}
		f.mu.Lock()
		f.counts[fault]++
		f.mu.Unlock()
	}
}

func (f *faults) inject(ctx context.Context, fault string) error {
	switch fault {
	case faultPluginsKilled:
		for _, pid := range proc.Children(f.pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	case faultPluginErrors, faultPluginHangs:
		kind := "error"
		if fault == faultPluginHangs {
			kind = "hang"
		}
		path := filepath.Join(f.w.stateDir, sim.FaultFile)
		if err := os.WriteFile(path, []byte(kind), 0o644); err != nil {
			return err
		}
		f.pause(ctx, 5*time.Second, 20*time.Second)
		return os.Remove(path)
	case faultAPIServerDown:
		down := time.Second + time.Duration(f.rng.Int64N(int64(4*time.Second)))
		return f.w.env.RestartAPIServer(ctx, down)
	case faultCancels:
		ops := &itemopsv1alpha1.ItemOperationList{}
		if err := f.w.c.List(ctx, ops, client.InNamespace(envtest.VeleroNamespace)); err != nil {
			return err
		}
		asked := 0
		for _, i := range f.rng.Perm(len(ops.Items)) {
			op := &ops.Items[i]
			if asked == 5 || op.Spec.Cancel || op.Status.Phase.IsTerminal() {
				continue
			}
			patch := client.MergeFrom(op.DeepCopy())
			op.Spec.Cancel = true
			if err := client.IgnoreNotFound(f.w.c.Patch(ctx, op, patch)); err != nil {
				return err
			}
			asked++
		}
	case faultBackupDeleted:
		backups := &velerov1api.BackupList{}
		if err := f.w.c.List(ctx, backups, client.InNamespace(envtest.VeleroNamespace)); err != nil {
			return err
		}
		for _, i := range f.rng.Perm(len(backups.Items)) {
			b := &backups.Items[i]
			if b.Status.Phase == velerov1api.BackupPhaseWaitingForPluginOperations {
				return client.IgnoreNotFound(f.w.c.Delete(ctx, b))
			}
		}
		return fmt.Errorf("no Backup waiting for its operations")
	}
	return nil
}

func (f *faults) pause(ctx context.Context, lo, hi time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(lo + time.Duration(f.rng.Int64N(int64(hi-lo)))):
	}
}
