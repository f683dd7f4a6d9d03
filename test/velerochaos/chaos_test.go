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
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	"github.com/itemops/itemops/test/csisim"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/replicas"
	"github.com/itemops/itemops/test/scrape"
	"github.com/itemops/itemops/test/veleroenv"
)

// config is the size of a run, from the environment (the variables of the
// other chaos suite).
type config struct {
	// duration of the fault injection; Backups are started in its first
	// 60%, their operations last up to half of it.
	duration time.Duration
	backups  int
	seed     uint64
	// results, when set, is the directory velero.md is written to.
	results string
}

func configFromEnv(t testing.TB) config {
	t.Helper()
	cfg := config{duration: 40 * time.Second, backups: 6, seed: uint64(time.Now().UnixNano()), results: os.Getenv("ITEMOPS_CHAOS_RESULTS")}
	if v := os.Getenv("ITEMOPS_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 20*time.Second {
			t.Fatalf("ITEMOPS_CHAOS_DURATION=%q: want a duration of at least 20s", v)
		}
		cfg.duration = d
	}
	if v := os.Getenv("ITEMOPS_CHAOS_BACKUPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			t.Fatalf("ITEMOPS_CHAOS_BACKUPS=%q: want a number of at least 2", v)
		}
		cfg.backups = n
	}
	if v := os.Getenv("ITEMOPS_CHAOS_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("ITEMOPS_CHAOS_SEED=%q: %v", v, err)
		}
		cfg.seed = seed
	}
	return cfg
}

// timeout is every Backup's and Restore's item operation timeout: longer
// than any operation runs, short enough that a stuck one ends the run.
func (c config) timeout() time.Duration { return c.duration + 2*time.Minute }

var _ = Describe("itemops and the real Velero under faults", func() {
	It("ends every Backup and Restore as its operations decide while Velero, the bucket, the plugins and itemops fail", func() {
		t := GinkgoTB()
		cfg := configFromEnv(t)
		t.Logf("chaos with Velero: seed %d (ITEMOPS_CHAOS_SEED to repeat), %s of faults, %d Backups", cfg.seed, cfg.duration, cfg.backups)
		rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed>>1|1))
		g := NewWithT(t)
		ctx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)

		unlock, err := veleroenv.LockServer()
		g.Expect(err).NotTo(HaveOccurred())
		DeferCleanup(unlock) // after the server stopped: cleanups run last first
		server := &veleroServer{t: t}
		server.start()
		g.Expect(veleroenv.WaitForLocation(ctx, env.Client)).To(Succeed())

		metricsToken, err := scrape.ReaderToken(ctx, env.Config, envtest.VeleroNamespace)
		g.Expect(err).NotTo(HaveOccurred())
		cl := &replicas.Cluster{Binary: binary, Work: work, MetricsToken: metricsToken,
			Args: []string{"--kubeconfig=" + identity, "--mode=manage", "--velero-namespace=" + envtest.VeleroNamespace,
				"--plugin-dir=" + itemopsPlugins, "--plugin-args=--features=EnableCSI", "--sync-frequency=1s",
				"--progress-update-interval=2s", "--plugin-call-timeout=5s", "--max-progress-failures=12"}}
		for i := range 2 {
			g.Expect(cl.Start(i)).To(Succeed())
		}
		DeferCleanup(func() { cl.StopAll() })

		load := newWorkload(cfg, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())))
		loadCtx, stopLoad := context.WithTimeout(ctx, cfg.duration)
		defer stopLoad()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); load.run(loadCtx) }()
		start := time.Now()
		faults := inject(ctx, t, cfg, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), server, cl, load)
		stopLoad()
		wg.Wait()
		g.Expect(load.errs()).To(BeEmpty(), "creating the Backups and Restores")
		lastFault := time.Now()

		// Converged: every Backup and Restore has ended or is gone.
		g.Eventually(func(g Gomega) {
			for _, name := range load.backupNames() {
				b := &velerov1api.Backup{}
				if err := env.Client.Get(ctx, client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: name}, b); client.IgnoreNotFound(err) != nil {
					g.Expect(err).NotTo(HaveOccurred())
				} else if err == nil && !load.isStranded(b) {
					g.Expect(backupEnded(b.Status.Phase)).To(BeTrue(), "Backup %s is %s", name, b.Status.Phase)
				}
			}
			for _, name := range load.restoreNames() {
				r := &velerov1api.Restore{}
				g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: name}, r)).To(Succeed())
				g.Expect(restoreEnded(r.Status.Phase)).To(BeTrue(), "Restore %s is %s", name, r.Status.Phase)
			}
		}, cfg.timeout()+time.Minute, time.Second).Should(Succeed())
		settled := time.Since(lastFault)

		inv := check(ctx, t, load)
		// The replicas' plugin processes go with them (a moment later:
		// killed, then reaped).
		var plugins []int
		for _, pid := range cl.PIDs() {
			plugins = append(plugins, proc.Children(pid)...)
		}
		idle := cl.StopAll()
		waitFor(10*time.Second, func() bool { return len(alive(plugins)) == 0 })
		inv.leftPlugins = alive(plugins)
		inv.selfExits = cl.SelfExits()
		inv.goroutines = idle

		report := result{cfg: cfg, faults: faults, inv: inv, settled: settled, ran: time.Since(start), load: load}
		t.Log("\n" + report.markdown())
		if cfg.results != "" {
			g.Expect(os.MkdirAll(cfg.results, 0o755)).To(Succeed())
			g.Expect(os.WriteFile(filepath.Join(cfg.results, "velero.md"), []byte(report.markdown()), 0o644)).To(Succeed())
		}
		g.Expect(inv.failures()).To(BeEmpty())
	})
})

// veleroServer is the running `velero server`, killed and started again by
// faults.
type veleroServer struct {
	t  testing.TB
	mu sync.Mutex
	p  *proc.Process
}

func (v *veleroServer) start() {
	p := velero.StartServer(v.t, append([]string{"--features=EnableCSI"}, veleroenv.ManageFlags...)...)
	v.mu.Lock()
	v.p = p
	v.mu.Unlock()
}

// kill ends the server as the end of its container does: its plugin
// processes go with it.
func (v *veleroServer) kill() {
	v.mu.Lock()
	p := v.p
	v.mu.Unlock()
	plugins := proc.Children(p.Cmd.Process.Pid)
	p.Stop(syscall.SIGKILL)
	for _, pid := range plugins {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// workload starts Backups of application namespaces through the first 60%
// of the fault injection, and Restores of some of those that completed.
type workload struct {
	cfg config
	rng *rand.Rand

	mu       sync.Mutex
	backups  []string
	restores []string
	// restored: the Backups a Restore was made of.
	restored map[string]bool
	// deleteRequested: Backups a DeleteBackupRequest named.
	deleteRequested map[string]bool
	// uids: each Backup's UID as created, to tell it from a Backup of the
	// same name that Velero's backup sync makes from the bucket.
	uids map[string]types.UID
	// stranded: Backups that were ReadyToStart when velero server was
	// killed, which Velero v1.18 never starts again.
	stranded map[string]bool
	failures []error
}

func newWorkload(cfg config, rng *rand.Rand) *workload {
	return &workload{cfg: cfg, rng: rng, restored: map[string]bool{}, deleteRequested: map[string]bool{}, uids: map[string]types.UID{}, stranded: map[string]bool{}}
}

func (l *workload) run(ctx context.Context) {
	every := l.cfg.duration * 6 / 10 / time.Duration(l.cfg.backups)
	next := time.Now()
	created := 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if created < l.cfg.backups && time.Now().After(next) {
			if err := l.backup(ctx, created); err != nil {
				l.fail(err)
			}
			created++
			next = next.Add(every)
		}
		if err := l.restoreSome(ctx); err != nil {
			l.fail(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (l *workload) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = append(l.failures, err)
}

func (l *workload) errs() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failures
}

func (l *workload) backupNames() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.backups...)
}

// strand records Backups left ReadyToStart by a killed velero server.
func (l *workload) strand(names []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range names {
		l.stranded[n] = true
	}
}

// isStranded says whether Backup b is one a killed velero server left
// ReadyToStart, and still is.
func (l *workload) isStranded(b *velerov1api.Backup) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stranded[b.Name] && b.UID == l.uids[b.Name] && b.Status.Phase == velerov1api.BackupPhaseReadyToStart
}

// readyToStart lists the Backups in phase ReadyToStart.
func readyToStart(ctx context.Context) ([]string, error) {
	var names []string
	err := retrying(ctx, func() error {
		list := &velerov1api.BackupList{}
		if err := env.Client.List(ctx, list, client.InNamespace(envtest.VeleroNamespace)); err != nil {
			return err
		}
		names = nil
		for _, b := range list.Items {
			if b.Status.Phase == velerov1api.BackupPhaseReadyToStart {
				names = append(names, b.Name)
			}
		}
		return nil
	})
	return names, err
}

func (l *workload) restoreNames() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.restores...)
}

// backup creates namespace vc-<i>, with two ConfigMaps the sample data
// mover moves (one in eight failing part way) and a CSI PVC Velero's data
// mover moves, each for 5 s to half the fault injection, and a Backup of it.
func (l *workload) backup(ctx context.Context, i int) error {
	ns := fmt.Sprintf("vc-%02d", i)
	if err := retrying(ctx, func() error {
		return client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}); err != nil {
		return err
	}
	lifetime := func() time.Duration {
		return 5*time.Second + time.Duration(l.rng.Int64N(int64(l.cfg.duration/2)))
	}
	for j := range 2 {
		const size = 64 << 20
		annotations := map[string]string{sim.AnnotationSize: strconv.Itoa(size),
			sim.AnnotationSpeed: strconv.FormatInt(int64(size/lifetime().Seconds()), 10)}
		if l.rng.IntN(8) == 0 {
			annotations[sim.AnnotationFailAt] = "50"
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("data-%d", j), Namespace: ns,
			Labels: map[string]string{sim.LabelSelect: "yes"}, Annotations: annotations}, Data: map[string]string{"payload": "x"}}
		if err := retrying(ctx, func() error { return client.IgnoreAlreadyExists(env.Client.Create(ctx, cm)) }); err != nil {
			return err
		}
	}
	rate := strconv.FormatInt(int64(float64(1<<30)/lifetime().Seconds()), 10)
	if err := retrying(ctx, func() error {
		return client.IgnoreAlreadyExists(cluster.BoundPVC(ctx, ns, "volume-0", "1Gi", map[string]string{csisim.AnnotationRate: rate}))
	}); err != nil {
		return err
	}
	b := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Name: ns, Namespace: envtest.VeleroNamespace},
		Spec: velerov1api.BackupSpec{IncludedNamespaces: []string{ns}, StorageLocation: veleroenv.Location,
			SnapshotMoveData: ptr.To(true), ItemOperationTimeout: metav1.Duration{Duration: l.cfg.timeout()}}}
	if err := retrying(ctx, func() error { return client.IgnoreAlreadyExists(env.Client.Create(ctx, b)) }); err != nil {
		return err
	}
	if b.UID == "" { // created by an attempt whose answer was lost
		if err := retrying(ctx, func() error { return env.Client.Get(ctx, client.ObjectKeyFromObject(b), b) }); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.backups = append(l.backups, ns)
	l.uids[ns] = b.UID
	l.mu.Unlock()
	return nil
}

// restoreSome restores, into vc-<i>-restored, about half the Backups that
// completed (or partially failed), once each.
func (l *workload) restoreSome(ctx context.Context) error {
	list := &velerov1api.BackupList{}
	if err := env.Client.List(ctx, list, client.InNamespace(envtest.VeleroNamespace)); err != nil {
		return nil // the API server may be away a moment: next round
	}
	for _, b := range list.Items {
		if b.Status.Phase != velerov1api.BackupPhaseCompleted && b.Status.Phase != velerov1api.BackupPhasePartiallyFailed {
			continue
		}
		l.mu.Lock()
		seen := l.restored[b.Name]
		l.restored[b.Name] = true
		l.mu.Unlock()
		if seen || l.rng.IntN(2) == 0 {
			continue
		}
		r := &velerov1api.Restore{ObjectMeta: metav1.ObjectMeta{Name: b.Name + "-restore", Namespace: envtest.VeleroNamespace},
			Spec: velerov1api.RestoreSpec{BackupName: b.Name, NamespaceMapping: map[string]string{b.Name: b.Name + "-restored"},
				ItemOperationTimeout: metav1.Duration{Duration: l.cfg.timeout()}}}
		if err := retrying(ctx, func() error { return client.IgnoreAlreadyExists(env.Client.Create(ctx, r)) }); err != nil {
			return err
		}
		l.mu.Lock()
		l.restores = append(l.restores, r.Name)
		l.mu.Unlock()
	}
	return nil
}

// retrying calls fn until it succeeds or 30 s have passed: the API server
// may be busy, or Velero's webhooks-free API away a moment.
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

// waitFor polls cond until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) {
	deadline := time.Now().Add(timeout)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// alive are the processes of pids that have not exited.
func alive(pids []int) []int {
	var out []int
	for _, pid := range pids {
		if proc.Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}
