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
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/s3"
	"github.com/itemops/itemops/test/veleroenv"
)

// world is what a soak starts.
type world struct {
	work, binary, pluginDir, stateDir, kubeconfig string
	env                                           *envtest.Environment
	velero                                        *veleroenv.Env
	c                                             client.Client
	store                                         *sim.Store
}

// itemops is the running manager.
type itemops struct {
	cmd     *exec.Cmd
	metrics string
	log     *os.File
	done    chan struct{}

	mu sync.Mutex
	// stopping: the soak ended it; exitedEarly: it exited before that.
	stopping, exitedEarly bool
}

// stop ends itemops with SIGTERM, as a rollout does, and waits for it
// (SIGKILL after 30 s).
func (m *itemops) stop() {
	m.mu.Lock()
	m.stopping = true
	m.mu.Unlock()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	m.log.Close()
}

func soak(ctx context.Context, root string, cfg config) (*result, error) {
	w, stop, err := setUp(ctx, root)
	defer stop()
	if err != nil {
		return nil, err
	}
	m, err := w.startItemops()
	if err != nil {
		return nil, err
	}
	defer m.stop()

	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed>>1|1))
	res := &result{cfg: cfg, cores: runtime.NumCPU(), faults: map[string]int{}, started: time.Now()}
	s := &stream{w: w, cfg: cfg, rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))}
	p := &player{w: w, cfg: cfg}
	f := &faults{w: w, pid: m.cmd.Process.Pid, rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), counts: res.faults}
	sampler, err := newSampler(w.env.Config, m)
	if err != nil {
		return nil, err
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){s.run, p.run} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(runCtx) }()
	}
	if cfg.faultEvery > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); f.run(runCtx, cfg.faultEvery) }()
	}

	tick := time.NewTicker(cfg.sampleEvery)
	defer tick.Stop()
	lastLine := time.Now()
	for runCtx.Err() == nil {
		select {
		case <-runCtx.Done():
		case <-tick.C:
			sm := sampler.sample(time.Since(res.started))
			res.samples = append(res.samples, sm)
			if time.Since(lastLine) >= time.Minute {
				lastLine = time.Now()
				fmt.Printf("soak: %s of %s: %.0f operations in flight, RSS %d MiB, %.0f goroutines, %d open files, %d plugin processes, %.0f watches, queue %.0f\n",
					sm.at.Round(time.Second), cfg.duration, sm.inFlight, sm.rss>>20, sm.goroutines, sm.files, sm.plugins, sm.watches, sm.queue)
			}
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted after %s", time.Since(res.started).Round(time.Second))
	}
	res.ran = time.Since(res.started)
	res.created, res.operations = s.counts()
	res.completed, res.deleted, res.lost = p.counts()

	// As a rollout ends the pod: SIGTERM. Its plugin processes go with it.
	m.stop()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && len(pluginProcesses(w.pluginDir)) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	res.leftPlugins = len(pluginProcesses(w.pluginDir))
	res.exitedOnItsOwn = m.exitedEarly
	return res, nil
}

// setUp starts the API server, versitygw with Velero's storage location,
// and builds itemops and the sample plugin; stop undoes it, even after an
// error.
func setUp(ctx context.Context, root string) (_ *world, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	w := &world{}
	if w.work, err = os.MkdirTemp("", "itemops-soak-"); err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { _ = os.RemoveAll(w.work) })
	w.binary = filepath.Join(w.work, "itemops")
	build := exec.Command("go", "build", "-o", w.binary, ".")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, stop, fmt.Errorf("building itemops: %w", err)
	}
	w.pluginDir = filepath.Join(w.work, "plugins")
	if err := envtest.BuildSamplePlugins(w.pluginDir, "sample"); err != nil {
		return nil, stop, err
	}
	if w.env, err = envtest.Start(); err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { _ = w.env.Stop() })
	w.c = w.env.Client
	v, stopVelero, err := veleroenv.Setup(w.env, w.work, w.pluginDir, false)
	stops = append(stops, stopVelero)
	if err != nil {
		return nil, stop, err
	}
	w.velero = v
	identity, err := w.env.ChartIdentity(ctx, "itemops", "--set", "mode=manage")
	if err != nil {
		return nil, stop, err
	}
	w.kubeconfig = filepath.Join(w.work, "itemops.kubeconfig")
	if err := os.WriteFile(w.kubeconfig, identity, 0o600); err != nil {
		return nil, stop, err
	}
	// The sample plugin keeps each operation's state here; the plugin
	// processes itemops starts inherit it.
	w.stateDir = filepath.Join(w.work, "state")
	if err := os.Setenv(sim.EnvStateDir, w.stateDir); err != nil {
		return nil, stop, err
	}
	if w.store, err = sim.NewStore(); err != nil {
		return nil, stop, err
	}
	return w, stop, nil
}

// startItemops runs itemops in manage mode as the chart's ServiceAccount,
// with the chart's defaults, logging to itemops.log in the work directory.
func (w *world) startItemops() (*itemops, error) {
	metrics, err := s3.FreeAddress()
	if err != nil {
		return nil, err
	}
	probes, err := s3.FreeAddress()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(w.binary, "--kubeconfig="+w.kubeconfig, "--mode=manage", "--velero-namespace="+envtest.VeleroNamespace,
		"--plugin-dir="+w.pluginDir, "--credentials-dir="+filepath.Join(w.work, "credentials"),
		"--metrics-bind-address="+metrics, "--health-probe-bind-address="+probes)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	log, err := os.OpenFile(filepath.Join(w.work, "itemops.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	m := &itemops{cmd: cmd, metrics: metrics, log: log, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		m.mu.Lock()
		m.exitedEarly = !m.stopping
		m.mu.Unlock()
		close(m.done)
	}()
	return m, nil
}

// pluginProcesses are the running processes of the binaries in the plugin
// directory (the sample plugin and velero-plugin-for-aws), whoever started them.
func pluginProcesses(pluginDir string) []int {
	var pids []int
	entries, _ := os.ReadDir(pluginDir)
	for _, e := range entries {
		path := filepath.Join(pluginDir, e.Name())
		if target, err := filepath.EvalSymlinks(path); err == nil {
			path = target
		}
		pids = append(pids, proc.Running(path)...)
	}
	return pids
}
