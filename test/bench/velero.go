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
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/veleroenv"
)

// sideConfig is the workload of the side-by-side run: real Velero Backups,
// each of perBackup ConfigMaps that the sample data mover starts an upload
// for, so that every Backup waits for perBackup operations.
type sideConfig struct {
	backups, perBackup       int
	sync                     time.Duration
	minDuration, maxDuration time.Duration
	// follow: the runs to make, of byVelero and byItemops.
	follow []string
	// keep: leave the work directory (logs, plugin state) in place.
	keep bool
	// extraArgs: more itemops flags.
	extraArgs []string
}

// Who follows the operations in a side-by-side run.
const (
	byVelero  = "velero"  // Velero's own backup-operations controller
	byItemops = "itemops" // itemops in manage mode, that controller disabled
)

// sideRun is one run of the side-by-side workload.
type sideRun struct {
	cfg  sideConfig
	mode string

	operations int
	// parent latency: the plugin-side completion of a Backup's last
	// operation → the Backup seen in Finalizing* (and in Completed).
	parent, completed []time.Duration
	unfinished        int
	// stuck: the unfinished Backups by their last phase.
	stuck map[velerov1api.BackupPhase]int
	// backedUp: Backups Velero had backed up (seen waiting for their
	// operations), the last of them lastBackedUp after the first was created.
	backedUp     int
	lastBackedUp time.Duration
	// queueStalls: waits of Velero's backup queue (see queueStall), and
	// their total.
	queueStalls  int
	queueStalled time.Duration
	// cpuSeconds: velero server, itemops and every plugin process they
	// started and reaped, over the whole run (backups included).
	cpuSeconds, itemopsCPU float64
	// itemopsOwnCPU is the itemops process alone, without the plugin
	// processes it started (read from /proc just before it stops).
	itemopsOwnCPU float64
	launches      int // of the sample plugin binary
	writes        map[string]float64
	duration      time.Duration
}

// sideBySide runs the same workload with Velero's controller, then with itemops.
func sideBySide(ctx context.Context, root string, cfg sideConfig) ([]*sideRun, error) {
	var runs []*sideRun
	for _, mode := range cfg.follow {
		fmt.Fprintf(os.Stderr, "bench: side by side, %d Backups × %d operations, followed by %s\n", cfg.backups, cfg.perBackup, mode)
		r, err := runSide(ctx, root, cfg, mode)
		if err != nil {
			return nil, fmt.Errorf("side by side (%s): %w", mode, err)
		}
		fmt.Fprintln(os.Stderr, r.summary())
		runs = append(runs, r)
	}
	return runs, nil
}

func runSide(ctx context.Context, root string, cfg sideConfig, mode string) (*sideRun, error) {
	work, err := os.MkdirTemp("", "itemops-bench-velero-")
	if err != nil {
		return nil, err
	}
	if cfg.keep {
		fmt.Fprintf(os.Stderr, "bench: %s run in %s\n", mode, work)
	} else {
		defer os.RemoveAll(work)
	}
	pluginDir := filepath.Join(work, "plugins")
	if err := envtest.BuildSamplePlugins(pluginDir, "sample"); err != nil {
		return nil, err
	}
	env, err := envtest.Start()
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Stop() }()
	ve, stopVelero, err := veleroenv.Setup(env, work, pluginDir, false)
	defer stopVelero()
	if err != nil {
		return nil, err
	}
	fast := rest.CopyConfig(env.Config)
	fast.QPS, fast.Burst = 5000, 10000
	c, err := client.NewWithWatch(fast, client.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, err
	}
	if err := sourceNamespaces(ctx, c, cfg); err != nil {
		return nil, err
	}

	stateDir := filepath.Join(work, "state")
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, err
	}
	launchLog := filepath.Join(work, "launches.log")
	pluginEnv := []string{sim.EnvStateDir + "=" + stateDir, sim.EnvFast + "=true", sim.EnvLaunchLog + "=" + launchLog}

	extra := []string{"--item-operation-sync-frequency", cfg.sync.String(),
		// Velero rewrites the location's credentials file in place (truncate,
		// then write) for every validation and every backup; at the default
		// of the tests (5s) a backup's object store plugin once read it empty
		// and the Backup failed. Validated once at the start is enough here.
		"--store-validation-frequency", "10m"}
	if mode == byItemops {
		extra = append(extra, veleroenv.ManageFlags...)
	}
	unlock, err := veleroenv.LockServer()
	if err != nil {
		return nil, err
	}
	defer unlock()
	velero, err := ve.ServerCommand(extra...)
	if err != nil {
		return nil, err
	}
	velero.Env = append(velero.Env, pluginEnv...)
	if err := startLogged(velero, filepath.Join(work, "velero.log")); err != nil {
		return nil, err
	}
	defer stopProcess(velero)
	if err := veleroenv.WaitForLocation(ctx, c); err != nil {
		return nil, err
	}

	var itemops *exec.Cmd
	if mode == byItemops {
		binary := filepath.Join(work, "itemops")
		build := exec.Command("go", "build", "-o", binary, ".")
		build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return nil, fmt.Errorf("building itemops: %w", err)
		}
		metricsAddr, err := freeAddress()
		if err != nil {
			return nil, err
		}
		probes, err := freeAddress()
		if err != nil {
			return nil, err
		}
		logLevel := "error"
		if cfg.keep {
			logLevel = "info"
		}
		itemops = exec.Command(binary, "--kubeconfig="+ve.Kubeconfig, "--mode=manage", "--velero-namespace="+envtest.VeleroNamespace,
			"--plugin-dir="+pluginDir, "--sync-frequency="+cfg.sync.String(), "--metrics-bind-address="+metricsAddr,
			"--health-probe-bind-address="+probes, "--credentials-dir="+filepath.Join(work, "credentials"), "--zap-log-level="+logLevel)
		itemops.Args = append(itemops.Args, cfg.extraArgs...)
		itemops.Env = append(os.Environ(), pluginEnv...)
		if cfg.keep {
			// Every Progress call of itemops' plugin processes, for a look at a kept run.
			itemops.Env = append(itemops.Env, sim.EnvPollLog+"="+filepath.Join(work, "polls.log"))
		}
		if err := startLogged(itemops, filepath.Join(work, "itemops.log")); err != nil {
			return nil, err
		}
		defer stopProcess(itemops)
	}

	writesBefore, err := apiWrites(ctx, fast)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	seen := watchBackups(ctx, c)
	backups := make([]string, cfg.backups)
	for i := range backups {
		backups[i] = fmt.Sprintf("side-%03d", i)
		b := &velerov1api.Backup{
			ObjectMeta: metav1.ObjectMeta{Name: backups[i], Namespace: envtest.VeleroNamespace},
			Spec: velerov1api.BackupSpec{IncludedNamespaces: []string{backups[i]}, StorageLocation: veleroenv.Location,
				ItemOperationTimeout: metav1.Duration{Duration: time.Hour}},
		}
		if err := c.Create(ctx, b); err != nil {
			return nil, err
		}
	}
	// Velero backs the Backups up one after another, and its backup queue
	// may wait a minute for its next recheck before each (on a slow
	// machine it did before a quarter of them); allow for that, then for
	// the operations and a Velero controller that falls far behind.
	deadline := t0.Add(time.Duration(cfg.backups)*(10*time.Second+time.Minute) + cfg.maxDuration + 20*cfg.sync + 5*time.Minute)
	for seen.done(backups) < len(backups) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	run := &sideRun{cfg: cfg, mode: mode, duration: time.Since(t0)}
	writesAfter, err := apiWrites(ctx, fast)
	if err != nil {
		return nil, err
	}
	run.writes = diff(writesAfter, writesBefore)
	if itemops != nil {
		run.itemopsOwnCPU = observe(itemops.Process.Pid).cpuSeconds
		run.itemopsCPU = stopProcess(itemops)
		run.cpuSeconds += run.itemopsCPU
	}
	run.cpuSeconds += stopProcess(velero)

	ends, err := lastCompletions(stateDir)
	if err != nil {
		return nil, err
	}
	times := seen.times()
	run.stuck = map[velerov1api.BackupPhase]int{}
	for _, name := range backups {
		end, ok := ends[name]
		t := times[name]
		if !t.waiting.IsZero() {
			run.backedUp++
			run.lastBackedUp = max(run.lastBackedUp, t.waiting.Sub(t0))
		}
		if !ok || t.finalizing.IsZero() {
			run.unfinished++
			run.stuck[t.phase]++
			continue
		}
		run.operations += end.operations
		run.parent = append(run.parent, t.finalizing.Sub(end.at))
		if !t.completed.IsZero() {
			run.completed = append(run.completed, t.completed.Sub(end.at))
		}
	}
	if cfg.keep {
		if err := writeParentTimes(filepath.Join(work, "backups.tsv"), backups, ends, times); err != nil {
			return nil, err
		}
	}
	if run.launches, err = countLines(launchLog); err != nil {
		return nil, err
	}
	if run.queueStalls, run.queueStalled, err = queueStalls(filepath.Join(work, "velero.log")); err != nil {
		return nil, err
	}
	return run, nil
}

// writeParentTimes writes, for a kept run, each Backup's times: when its
// last operation completed plugin side and when the Backup was first seen
// waiting, finalizing and completed, in Unix nanoseconds (0: never).
func writeParentTimes(path string, backups []string, ends map[string]backupEnd, times map[string]backupTimes) error {
	var b strings.Builder
	b.WriteString("backup\tlast_operation_end\twaiting\tfinalizing\tcompleted\n")
	nanos := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixNano()
	}
	for _, name := range backups {
		t := times[name]
		fmt.Fprintf(&b, "%s\t%d\t%d\t%d\t%d\n", name, nanos(ends[name].at), nanos(t.waiting), nanos(t.finalizing), nanos(t.completed))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// queueStall is a wait between the starts of two consecutive Backups long
// enough to be Velero's backup queue waiting for its periodic recheck (one
// minute) rather than for the backup before: its queue is woken by a Backup
// leaving InProgress, and a wake-up that races with the cache is missed.
const queueStall = 20 * time.Second

// queueStalls counts the waits of queueStall or more between Velero's
// starts of consecutive Backups ("Setting up backup log" in its log), and
// their total.
func queueStalls(logPath string) (int, time.Duration, error) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return 0, 0, err
	}
	var starts []time.Time
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, `msg="Setting up backup log"`) {
			continue
		}
		_, rest, ok := strings.Cut(line, `time="`)
		stamp, _, ok2 := strings.Cut(rest, `"`)
		if !ok || !ok2 {
			continue
		}
		if t, err := time.Parse(time.RFC3339, stamp); err == nil {
			starts = append(starts, t)
		}
	}
	n, total := 0, time.Duration(0)
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap >= queueStall {
			n, total = n+1, total+gap
		}
	}
	return n, total, nil
}

// sourceNamespaces creates one namespace per Backup with perBackup
// ConfigMaps, each an upload of its own duration.
func sourceNamespaces(ctx context.Context, c client.Client, cfg sideConfig) error {
	rng := rand.New(rand.NewPCG(2, uint64(cfg.backups*cfg.perBackup)))
	span := int64(cfg.maxDuration - cfg.minDuration)
	work := make(chan *corev1.ConfigMap)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cm := range work {
				if err := c.Create(ctx, cm); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range cfg.backups {
		ns := fmt.Sprintf("side-%03d", i)
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			close(work)
			return err
		}
		for j := range cfg.perBackup {
			d := cfg.minDuration + time.Duration(rng.Int64N(span+1))
			work <- &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("data-%03d", j), Namespace: ns,
					Labels: map[string]string{sim.LabelSelect: "yes"},
					// 1 KiB per ms at 1 MiB/s: the size is the duration.
					Annotations: map[string]string{sim.AnnotationSize: fmt.Sprintf("%dKi", d.Milliseconds()), sim.AnnotationSpeed: "1Mi"}},
				Data: map[string]string{"payload": "x"},
			}
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("creating ConfigMaps: %w", err)
	default:
		return nil
	}
}

// backupEnd is when the last operation of a Backup completed, plugin side.
type backupEnd struct {
	at         time.Time
	operations int
}

// lastCompletions reads the sample plugin's state files: the item of an
// upload is namespace/name, and each namespace is one Backup's.
func lastCompletions(stateDir string) (map[string]backupEnd, error) {
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		return nil, err
	}
	out := map[string]backupEnd{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(stateDir, e.Name()))
		if err != nil {
			return nil, err
		}
		st := &sim.State{}
		if err := json.Unmarshal(b, st); err != nil || st.Direction != "upload" {
			continue
		}
		ns, _, _ := strings.Cut(st.Item, "/")
		end := out[ns]
		end.at = maxTime(end.at, st.CompletesAt())
		end.operations++
		out[ns] = end
	}
	return out, nil
}

// backupTimes is when a Backup was first seen in Finalizing* and in a final phase.
type backupTimes struct {
	// waiting: first seen waiting for its operations (Velero has backed it up).
	waiting, finalizing, completed time.Time
	phase                          velerov1api.BackupPhase
}

type backupWatch struct {
	mu   sync.Mutex
	seen map[string]backupTimes
}

func (w *backupWatch) done(names []string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, name := range names {
		if !w.seen[name].completed.IsZero() {
			n++
		}
	}
	return n
}

func (w *backupWatch) times() map[string]backupTimes {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]backupTimes, len(w.seen))
	for k, v := range w.seen {
		out[k] = v
	}
	return out
}

func watchBackups(ctx context.Context, c client.WithWatch) *backupWatch {
	w := &backupWatch{seen: map[string]backupTimes{}}
	watcher, err := c.Watch(ctx, &velerov1api.BackupList{}, client.InNamespace(envtest.VeleroNamespace))
	if err != nil {
		fail(err)
	}
	go func() {
		for ev := range watcher.ResultChan() {
			b, ok := ev.Object.(*velerov1api.Backup)
			if !ok {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			t := w.seen[b.Name]
			t.phase = b.Status.Phase
			switch b.Status.Phase {
			case velerov1api.BackupPhaseWaitingForPluginOperations, velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed:
				if t.waiting.IsZero() {
					t.waiting = now
				}
			case velerov1api.BackupPhaseFinalizing, velerov1api.BackupPhaseFinalizingPartiallyFailed:
				if t.finalizing.IsZero() {
					t.finalizing = now
				}
			case velerov1api.BackupPhaseCompleted, velerov1api.BackupPhasePartiallyFailed, velerov1api.BackupPhaseFailed:
				if t.finalizing.IsZero() {
					t.finalizing = now
				}
				if t.completed.IsZero() {
					t.completed = now
				}
			}
			w.seen[b.Name] = t
			w.mu.Unlock()
		}
	}()
	return w
}

func startLogged(cmd *exec.Cmd, logPath string) error {
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	return cmd.Start()
}

// stopProcess ends a process with SIGTERM (SIGKILL after a minute) and
// returns the CPU seconds it and the children it reaped used.
func stopProcess(cmd *exec.Cmd) float64 {
	if cmd.ProcessState != nil {
		return 0
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
		}
	}()
	_ = cmd.Wait()
	close(done)
	if f, ok := cmd.Stdout.(*os.File); ok {
		_ = f.Close()
	}
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}

func (r *sideRun) summary() string {
	p50, p99, _ := percentiles(r.parent)
	return fmt.Sprintf("bench: %s: %d operations, parent latency p50 %s p99 %s, CPU %.1f s (itemops %.1f s, of which its plugins %.1f s), %d plugin launches, %.0f API writes, %d unfinished %v, %d backed up by Velero (the last after %s; its queue stalled %d times, %s in all), %s",
		r.mode, r.operations, round(p50), round(p99), r.cpuSeconds, r.itemopsCPU, r.itemopsCPU-r.itemopsOwnCPU, r.launches, sum(r.writes), r.unfinished, r.stuck,
		r.backedUp, round(r.lastBackedUp), r.queueStalls, round(r.queueStalled), round(r.duration))
}

func sum(m map[string]float64) float64 {
	total := 0.0
	for _, v := range m {
		total += v
	}
	return total
}
