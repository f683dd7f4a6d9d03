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
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/replicas"
	"github.com/itemops/itemops/test/s3"
	"github.com/itemops/itemops/test/scrape"
	"github.com/itemops/itemops/test/veleroenv"
)

// config is the size of a run, from the environment.
type config struct {
	// duration of the fault injection; operations last up to 80% of it.
	duration           time.Duration
	backups, perBackup int
	seed               uint64
	// results, when set, is the directory results.md is written to.
	results string
}

func configFromEnv(t testing.TB) config {
	t.Helper()
	cfg := config{duration: 40 * time.Second, backups: 6, perBackup: 8, seed: uint64(time.Now().UnixNano()),
		results: os.Getenv("ITEMOPS_CHAOS_RESULTS")}
	if v := os.Getenv("ITEMOPS_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Second {
			t.Fatalf("ITEMOPS_CHAOS_DURATION=%q: want a duration of at least 10s", v)
		}
		cfg.duration = d
	}
	for name, dst := range map[string]*int{"ITEMOPS_CHAOS_BACKUPS": &cfg.backups, "ITEMOPS_CHAOS_OPERATIONS": &cfg.perBackup} {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 2 {
				t.Fatalf("%s=%q: want a number of at least 2", name, v)
			}
			*dst = n
		}
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

// plugin is the sample data mover every operation is started by.
const plugin = "itemops.io/sample-datamover"

var _ = Describe("itemops under faults", func() {
	It("keeps every invariant while its processes, the API server, the plugins and the storage fail", func() {
		t := GinkgoTB()
		cfg := configFromEnv(t)
		t.Logf("chaos: seed %d (ITEMOPS_CHAOS_SEED to repeat), %s of faults, %d Backups × %d operations",
			cfg.seed, cfg.duration, cfg.backups, cfg.perBackup)
		rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed>>1|1))
		g := NewWithT(t)
		ctx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)

		w := newWatcher(env)
		go w.follow(ctx)

		metricsToken, err := scrape.ReaderToken(ctx, env.Config, envtest.VeleroNamespace)
		g.Expect(err).NotTo(HaveOccurred())
		cl := &replicas.Cluster{Binary: binary, Work: work, MetricsToken: metricsToken, Env: []string{sim.EnvStateDir + "=" + stateDir},
			Args: []string{"--kubeconfig=" + venv.Kubeconfig, "--mode=manage", "--velero-namespace=" + envtest.VeleroNamespace,
				"--plugin-dir=" + pluginDir, "--sync-frequency=1s", "--progress-update-interval=2s",
				"--plugin-call-timeout=2s", "--max-progress-failures=12", "--zap-log-level=debug"}}
		for i := range 2 {
			g.Expect(cl.Start(i)).To(Succeed())
		}
		DeferCleanup(func() { cl.StopAll() })

		load := newWorkload(t, env, venv.BucketDir, cfg, rng)
		start := time.Now()
		faults := inject(ctx, t, cfg, rng, env, cl, load, w)
		lastFault := time.Now()

		// Converged: every Backup not deleted has moved on, and every
		// operation it had is terminal.
		converge := 3 * time.Minute
		g.Eventually(func(g Gomega) {
			for _, b := range load.backups {
				if load.deleted[b.Name] {
					continue
				}
				got := &velerov1api.Backup{}
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(b), got)).To(Succeed())
				g.Expect(got.Status.Phase).To(BeElementOf(velerov1api.BackupPhaseFinalizing, velerov1api.BackupPhaseFinalizingPartiallyFailed),
					func() string { return env.DescribeBackup(ctx, got) })
			}
			ops := &itemopsv1alpha1.ItemOperationList{}
			g.Expect(env.Client.List(ctx, ops, client.InNamespace(envtest.VeleroNamespace))).To(Succeed())
			for _, op := range ops.Items {
				g.Expect(op.Status.Phase.IsTerminal()).To(BeTrue(), "ItemOperation %s is %q", op.Name, op.Status.Phase)
			}
		}, converge, time.Second).Should(Succeed())
		settled := time.Since(lastFault)
		// The checker's own watch may lag the API server (it lists again after
		// every kube-apiserver restart): let it see every Backup's last phase.
		g.Eventually(func(g Gomega) {
			for _, b := range load.backups {
				if load.deleted[b.Name] {
					continue
				}
				got := &velerov1api.Backup{}
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(b), got)).To(Succeed())
				g.Expect(w.lastPhase(b.Name)).To(Equal(got.Status.Phase), "Backup %s as the watch saw it", b.Name)
			}
		}, time.Minute, 100*time.Millisecond).Should(Succeed())

		inv := check(ctx, t, env, venv.BucketDir, load, w)
		inv.secretInEvents = eventsContaining(ctx, t, env, s3.SecretKey)
		idle := cl.StopAll()
		// Their plugin processes go with them (a moment later: killed, then reaped).
		waitFor(10*time.Second, func() bool { return len(pluginProcesses(pluginDir)) == 0 })
		inv.leftPlugins = pluginProcesses(pluginDir)
		inv.selfExits = cl.SelfExits()
		inv.secretInLogs = logsContaining(work, s3.SecretKey)
		inv.goroutines = idle

		report := result{cfg: cfg, faults: faults, inv: inv, settled: settled, ran: time.Since(start), operations: load.count()}
		t.Log("\n" + report.markdown())
		if cfg.results != "" {
			g.Expect(os.MkdirAll(cfg.results, 0o755)).To(Succeed())
			g.Expect(os.WriteFile(filepath.Join(cfg.results, "results.md"), []byte(report.markdown()), 0o644)).To(Succeed())
		}
		g.Expect(inv.failures()).To(BeEmpty())
	})
})

// waitFor polls cond until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) {
	deadline := time.Now().Add(timeout)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// workload is the Backups, their operations files and what the sample
// plugin was told of each operation.
type workload struct {
	backups []*velerov1api.Backup
	// records of each Backup, by name.
	records map[string][]*itemoperation.BackupOperation
	// cancelled: operation IDs whose ItemOperation was asked to cancel, and when.
	cancelled map[string]time.Time
	// deleted: Backups deleted during the run, and when.
	deleted   map[string]bool
	deletedAt map[string]time.Time
	// quietCancels: operation IDs asked to cancel outside any fault, and when.
	quietCancels map[string]time.Time
}

func (l *workload) count() int {
	n := 0
	for _, recs := range l.records {
		n += len(recs)
	}
	return n
}

// newWorkload writes the operations files and creates the Backups, as
// Velero does at the end of a backup: first the file, then the Backup in
// WaitingForPluginOperations with the operations it attempted.
func newWorkload(t testing.TB, env *envtest.Environment, bucketDir string, cfg config, rng *rand.Rand) *workload {
	t.Helper()
	store, err := sim.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	l := &workload{records: map[string][]*itemoperation.BackupOperation{}, cancelled: map[string]time.Time{},
		deleted: map[string]bool{}, deletedAt: map[string]time.Time{}, quietCancels: map[string]time.Time{}}
	const size = 100 << 20
	for i := range cfg.backups {
		name := fmt.Sprintf("chaos-%03d", i)
		b := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace},
			Spec: velerov1api.BackupSpec{StorageLocation: veleroenv.Location, IncludedNamespaces: []string{name}}}
		// The UID is the API server's: create first, then write the file,
		// then move the Backup to WaitingForPluginOperations.
		if err := env.Client.Create(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		var recs []*itemoperation.BackupOperation
		for j := range cfg.perBackup {
			// Operations last 3 s to 80% of the fault injection, so most
			// end while faults go on.
			last := 3*time.Second + time.Duration(rng.Int64N(int64(cfg.duration*8/10)))
			annotations := map[string]string{sim.AnnotationSize: strconv.Itoa(size),
				sim.AnnotationSpeed: strconv.FormatInt(int64(float64(size)/last.Seconds()), 10)}
			if rng.IntN(10) == 0 {
				annotations[sim.AnnotationFailAt] = "60"
			}
			id, err := store.Start("upload", fmt.Sprintf("%s/data-%03d", name, j), annotations)
			if err != nil {
				t.Fatal(err)
			}
			created := metav1.Now()
			recs = append(recs, &itemoperation.BackupOperation{
				Spec: itemoperation.BackupOperationSpec{BackupName: name, BackupUID: string(b.UID), BackupItemAction: plugin,
					ResourceIdentifier: velero.ResourceIdentifier{GroupResource: schema.GroupResource{Resource: "configmaps"}, Namespace: name,
						Name: fmt.Sprintf("data-%03d", j)},
					OperationID: id},
				Status: itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseNew, Created: &created},
			})
		}
		if err := veleroenv.WriteBackupOperations(bucketDir, name, recs); err != nil {
			t.Fatal(err)
		}
		b.Status = velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations,
			BackupItemOperationsAttempted: len(recs), StartTimestamp: &metav1.Time{Time: time.Now()}}
		if err := env.Client.Update(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		l.backups = append(l.backups, b)
		l.records[name] = recs
	}
	return l
}
