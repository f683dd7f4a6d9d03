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
	"bufio"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/options"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/s3"
	"github.com/itemops/itemops/test/scrape"
)

type config struct {
	ops, parents             int
	sync, update             time.Duration
	minDuration, maxDuration time.Duration
	polling                  variant
	// shape is the sample plugin's shape of progress: sim.ShapeConstant or sim.ShapeReal.
	shape     string
	extraArgs []string
	// plugin follows the operations: the sample plugin's data mover unless set.
	plugin string
	// profileDir, when set, receives CPU and allocation profiles of itemops
	// over the run's polling (-profile).
	profileDir string
	// logDir, when set, keeps itemops' log of a run whose plugin was
	// launched more than discovery and one long-lived process need.
	logDir string
	// kept: finished DataUploads of earlier Backups in Velero's namespace
	// (Velero keeps them until their Backup is deleted), data-mover runs.
	kept int
	// noCauses runs itemops with --find-causes=false.
	noCauses bool
}

const datamover = "itemops.io/sample-datamover"

// pluginName is the plugin that follows the run's operations.
func (c config) pluginName() string {
	if c.plugin != "" {
		return c.plugin
	}
	return datamover
}

// operation is one benchmark operation as the plugin sees it.
type operation struct {
	id        string
	parent    int
	completes time.Time // plugin-side completion
}

// sample is one observation of the running operator.
type sample struct {
	at         time.Time
	cpuSeconds float64 // operator
	rssBytes   int64   // operator, current
	pluginCPU  float64
	pluginRSS  int64
	// controlPlane: the API server's and etcd's CPU seconds so far.
	controlPlane float64
	finalizing   int
	pluginProcs  int
}

// harness is what one run starts: a real API server (envtest), the itemops
// binary and the sample plugin built from this checkout, and a work
// directory for the plugin's state and logs.
type harness struct {
	work, binary, pluginDir, kubeconfig string
	stateDir, pollLog, launchLog        string
	env                                 *envtest.Environment
	// controlPlane: the process IDs of the API server and etcd.
	controlPlane []int
	// fast reaches the API server without client-side throttling, for the
	// bench's own requests.
	fast *rest.Config
	c    client.WithWatch
}

func newHarness(root string) (_ *harness, err error) {
	h := &harness{}
	if h.work, err = os.MkdirTemp("", "itemops-bench-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	h.binary = filepath.Join(h.work, "itemops")
	build := exec.Command("go", "build", "-o", h.binary, ".")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("building itemops: %w", err)
	}
	h.pluginDir = filepath.Join(h.work, "plugins")
	if err := envtest.BuildSamplePlugins(h.pluginDir, "sample"); err != nil {
		return nil, err
	}
	if h.env, err = envtest.Start(); err != nil {
		return nil, err
	}
	h.controlPlane = controlPlanePIDs()
	h.fast = rest.CopyConfig(h.env.Config)
	h.fast.QPS, h.fast.Burst = 5000, 10000
	if h.c, err = client.NewWithWatch(h.fast, client.Options{Scheme: h.env.Scheme}); err != nil {
		return nil, err
	}
	kubeconfig, err := h.env.Kubeconfig()
	if err != nil {
		return nil, err
	}
	h.kubeconfig = filepath.Join(h.work, "kubeconfig")
	if err := os.WriteFile(h.kubeconfig, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	h.stateDir = filepath.Join(h.work, "state")
	h.pollLog = filepath.Join(h.work, "polls.log")
	h.launchLog = filepath.Join(h.work, "launches.log")
	return h, nil
}

func (h *harness) close() {
	if h.env != nil {
		_ = h.env.Stop()
	}
	_ = os.RemoveAll(h.work)
}

// startTransfers writes the sample plugin's state of every operation, its
// transfer starting at t0, and sets each operation's plugin-side completion.
func (h *harness) startTransfers(ops []operation, shape string, t0 time.Time) error {
	store, err := storeIn(h.stateDir)
	if err != nil {
		return err
	}
	for i := range ops {
		d := ops[i].completes.Sub(time.Time{})
		size := int64(d / time.Millisecond) // 1 KiB per ms at 1 MiB/s: the size is the duration
		st := sim.NewState(ops[i].id, "upload", ops[i].id, size<<10, 1<<20, t0)
		st.Shape = shape
		if err := store.Put(st); err != nil {
			return err
		}
		ops[i].completes = st.CompletesAt()
	}
	return nil
}

// itemops is one itemops process of a run.
type itemops struct {
	cmd         *exec.Cmd
	metricsAddr string
	// metrics reads them as Prometheus would, with a reader's token.
	metrics *http.Client
	// pprofAddr serves itemops' profiles when the run is profiled.
	pprofAddr string
	log       *os.File
	started   time.Time
}

// startItemops starts the itemops binary in manage mode with the sample
// plugin in its fast mode, in a process group of its own with the plugin
// processes it starts, as a container holds them. Its log is appended to
// itemops.log.
func (h *harness) startItemops(cfg config, extra ...string) (*itemops, error) {
	metricsAddr, err := freeAddress()
	if err != nil {
		return nil, err
	}
	probes, err := freeAddress()
	if err != nil {
		return nil, err
	}
	token, err := scrape.ReaderToken(context.Background(), h.fast, envtest.VeleroNamespace)
	if err != nil {
		return nil, err
	}
	args := []string{"--kubeconfig=" + h.kubeconfig, "--mode=manage", "--velero-namespace=" + envtest.VeleroNamespace,
		"--plugin-dir=" + h.pluginDir, "--sync-frequency=" + cfg.sync.String(), "--progress-update-interval=" + cfg.update.String(),
		"--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=" + probes,
		"--credentials-dir=" + filepath.Join(h.work, "credentials"), "--zap-log-level=info"}
	var pprofAddr string
	if cfg.profileDir != "" {
		if pprofAddr, err = freeAddress(); err != nil {
			return nil, err
		}
		args = append(args, "--pprof-bind-address="+pprofAddr)
	}
	args = append(append(args, cfg.extraArgs...), extra...)
	cmd := exec.Command(h.binary, args...)
	cmd.Env = append(os.Environ(), sim.EnvStateDir+"="+h.stateDir, sim.EnvFast+"=true",
		sim.EnvPollLog+"="+h.pollLog, sim.EnvLaunchLog+"="+h.launchLog)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	log, err := os.OpenFile(filepath.Join(h.work, "itemops.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	return &itemops{cmd: cmd, metricsAddr: metricsAddr, metrics: scrape.Client(token), pprofAddr: pprofAddr, log: log, started: time.Now()}, nil
}

// lastEndOf is the last plugin-side completion of ops, t0 at the earliest.
func lastEndOf(ops []operation, t0 time.Time) time.Time {
	lastEnd := t0
	for _, op := range ops {
		lastEnd = maxTime(lastEnd, op.completes)
	}
	return lastEnd
}

// stop ends itemops with SIGTERM, as a rollout does, and waits for it.
func (p *itemops) stop() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
	}
	p.log.Close()
}

// kill ends itemops and its plugin processes with SIGKILL, as a node that
// dies or an OOM kill of its container does: nothing is released.
func (p *itemops) kill() {
	if p.cmd.ProcessState == nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
	p.log.Close()
}

func run(ctx context.Context, root string, cfg config) (*result, error) {
	h, err := newHarness(root)
	if err != nil {
		return nil, err
	}
	defer h.close()

	// The operations exist before itemops starts, and their transfers all
	// start when it does, so that every write the API server counts from
	// then on is itemops'.
	ops, backups, err := createOperations(ctx, h.c, cfg)
	if err != nil {
		return nil, err
	}
	writesBefore, err := apiWrites(ctx, h.fast)
	if err != nil {
		return nil, err
	}
	controlPlaneBefore := h.controlPlaneCPU()
	t0 := time.Now()
	if err := h.startTransfers(ops, cfg.shape, t0); err != nil {
		return nil, err
	}
	p, err := h.startItemops(cfg)
	if err != nil {
		return nil, err
	}
	defer p.kill()

	finalized := watchFinalizing(ctx, h.c, backups)
	prof := startProfiling(ctx, p, cfg, lastEndOf(ops, t0), nil)
	var samples []sample
	// Real-shaped transfers pause and outlast their nominal duration: the
	// run waits for the last plugin-side completion.
	lastEnd := lastEndOf(ops, t0)
	deadline := lastEnd.Add(10*cfg.sync + 2*time.Minute)
	var peakRSS, peakPluginRSS int64
	var last sample
	lastScrape := time.Now()
	// The queue's counts start at zero with itemops.
	queueCounts := []queueCounts{{at: p.started}}
	for {
		time.Sleep(time.Second)
		if time.Since(lastScrape) >= scrapeInterval {
			queueCounts = p.scrape(queueCounts)
			lastScrape = time.Now()
		}
		s := observe(p.cmd.Process.Pid)
		s.controlPlane = h.controlPlaneCPU()
		s.finalizing = finalized.count()
		peakRSS = max(peakRSS, s.rssBytes)
		peakPluginRSS = max(peakPluginRSS, s.pluginRSS)
		samples = append(samples, s)
		last = s
		if s.finalizing == len(backups) || time.Now().After(deadline) {
			break
		}
	}
	hwm := proc.HighWaterMark(p.cmd.Process.Pid)
	queueCounts = p.scrape(queueCounts)
	profiled, err := prof.finish(ctx)
	if err != nil {
		return nil, err
	}
	p.stop()
	controlPlane := h.controlPlaneCPU() - controlPlaneBefore
	writesAfter, err := apiWrites(ctx, h.fast)
	if err != nil {
		return nil, err
	}
	// Finalizers are released at a pace of their own, after the ends are
	// written: those still held are writes to come, counted with the rest.
	held, err := finalizersHeld(ctx, h.c)
	if err != nil {
		return nil, err
	}
	writes := diff(writesAfter, writesBefore)
	writes["itemoperations"] += float64(held)

	polls, err := readPolls(h.pollLog)
	if err != nil {
		return nil, err
	}
	launches, err := countLines(h.launchLog)
	if err != nil {
		return nil, err
	}
	if launches > 2 && cfg.logDir != "" {
		// Why: a restart of the plugin, or discovery asking it again.
		kept := filepath.Join(cfg.logDir, "itemops-"+cfg.profileName()+".log")
		if err := copyFile(filepath.Join(h.work, "itemops.log"), kept); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "bench: %d plugin launches; itemops' log is kept in %s\n", launches, kept)
	}
	return analyse(cfg, t0, ops, backups, finalized.times(), polls, samples, analysis{
		writes:        writes,
		releasesAfter: held,
		cpuSeconds:    last.cpuSeconds,
		pluginCPU:     last.pluginCPU,
		controlPlane:  controlPlane,
		peakRSS:       max(peakRSS, hwm),
		peakPluginRSS: peakPluginRSS,
		launches:      launches,
		timedOut:      last.finalizing < len(backups),
		queueCounts:   queueCounts,
		workers:       workers(cfg.extraArgs),
		profile:       profiled.row(polls, 0),
	}), nil
}

// finalizersHeld counts the ItemOperations that still hold itemops' finalizer.
func finalizersHeld(ctx context.Context, c client.Client) (int, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(itemopsv1alpha1.GroupVersion.WithKind("ItemOperationList"))
	if err := c.List(ctx, list, client.InNamespace(envtest.VeleroNamespace)); err != nil {
		return 0, err
	}
	held := 0
	for _, op := range list.Items {
		if slices.Contains(op.Finalizers, itemopsv1alpha1.Finalizer) {
			held++
		}
	}
	return held, nil
}

func storeIn(dir string) (*sim.Store, error) {
	if err := os.Setenv(sim.EnvStateDir, dir); err != nil {
		return nil, err
	}
	return sim.NewStore()
}

// createOperations creates the Backups and ItemOperations. An operation's
// completes holds its duration (as time since the zero time) until its
// transfer starts.
func createOperations(ctx context.Context, c client.Client, cfg config) ([]operation, []*velerov1api.Backup, error) {
	rng := rand.New(rand.NewPCG(1, uint64(cfg.ops)))
	per := cfg.ops / cfg.parents
	backups := make([]*velerov1api.Backup, cfg.parents)
	for i := range backups {
		b := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%03d", i), Namespace: envtest.VeleroNamespace}}
		if err := c.Create(ctx, b); err != nil {
			return nil, nil, err
		}
		patch := client.MergeFrom(b.DeepCopy())
		b.Status = velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations, BackupItemOperationsAttempted: per,
			StartTimestamp: &metav1.Time{Time: time.Now()}}
		if err := c.Patch(ctx, b, patch); err != nil {
			return nil, nil, err
		}
		backups[i] = b
	}
	ops := make([]operation, per*cfg.parents)
	span := cfg.maxDuration - cfg.minDuration
	for i := range ops {
		d := cfg.minDuration + time.Duration(rng.Int64N(int64(span)+1))
		ops[i] = operation{id: fmt.Sprintf("bench-op-%05d", i), parent: i % cfg.parents, completes: time.Time{}.Add(d)}
	}
	err := forEach(len(ops), func(i int) error {
		b := backups[ops[i].parent]
		op := &itemopsv1alpha1.ItemOperation{
			// As ingestion creates them: with the finalizer.
			ObjectMeta: metav1.ObjectMeta{Name: ops[i].id, Namespace: envtest.VeleroNamespace,
				Labels:     map[string]string{itemopsv1alpha1.LabelParentKind: "Backup", itemopsv1alpha1.LabelParentUID: string(b.UID)},
				Finalizers: []string{itemopsv1alpha1.Finalizer}},
			Spec: itemopsv1alpha1.ItemOperationSpec{
				Parent:      itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindBackup, Name: b.Name, UID: string(b.UID)},
				Plugin:      itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: cfg.pluginName()},
				OperationID: ops[i].id,
				Resource:    itemopsv1alpha1.ResourceIdentifier{Resource: "persistentvolumeclaims", Namespace: "bench", Name: ops[i].id},
				Timeout:     &metav1.Duration{Duration: time.Hour},
			},
		}
		return c.Create(ctx, op)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating operations: %w", err)
	}
	return ops, backups, nil
}

// forEach runs fn for 0..n-1 on 32 workers, and returns the first error.
func forEach(n int, fn func(int) error) error {
	work := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

// firstSeen records when a watch first saw each object, by name, in the
// state it waits for.
type firstSeen struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func newFirstSeen() *firstSeen { return &firstSeen{seen: map[string]time.Time{}} }

func (f *firstSeen) mark(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.seen[name]; !ok {
		f.seen[name] = time.Now()
	}
}

func (f *firstSeen) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seen)
}

func (f *firstSeen) times() map[string]time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.seen)
}

func watchFinalizing(ctx context.Context, c client.WithWatch, backups []*velerov1api.Backup) *firstSeen {
	f := newFirstSeen()
	list := &velerov1api.BackupList{}
	w, err := c.Watch(ctx, list, client.InNamespace(envtest.VeleroNamespace))
	if err != nil {
		fail(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			b, ok := ev.Object.(*velerov1api.Backup)
			if !ok {
				continue
			}
			if b.Status.Phase == velerov1api.BackupPhaseFinalizing || b.Status.Phase == velerov1api.BackupPhaseFinalizingPartiallyFailed {
				f.mark(b.Name)
			}
		}
	}()
	return f
}

// scrapeInterval is how often the run scrapes itemops' metrics, as the
// chart's ServiceMonitor has Prometheus do: the state gauges list every
// operation in the cache, which a scrape each second would make a tenth of
// itemops' CPU at 30,000 operations.
const scrapeInterval = 30 * time.Second

// scrape reads itemops' metrics as Prometheus would, and appends the work
// queue's counts to counts.
func (p *itemops) scrape(counts []queueCounts) []queueCounts {
	f, err := scrape.Get(p.metrics, "https://"+p.metricsAddr+"/metrics")
	if err != nil {
		return counts
	}
	if c, ok := readQueueCounts(f, time.Now()); ok {
		counts = append(counts, c)
	}
	return counts
}

// workers is the --max-concurrent-reconciles among args, else itemops' default.
func workers(args []string) int {
	n := options.New().MaxConcurrentReconciles
	for i, a := range args {
		value, ok := strings.CutPrefix(a, "--max-concurrent-reconciles=")
		if !ok && a == "--max-concurrent-reconciles" && i+1 < len(args) {
			value, ok = args[i+1], true
		}
		if v, err := strconv.Atoi(value); ok && err == nil {
			n = v
		}
	}
	return n
}

// observe samples the CPU and memory of the operator and of its plugin
// processes.
func observe(pid int) sample {
	s := sample{at: time.Now()}
	s.cpuSeconds, s.rssBytes = proc.Usage(pid)
	for _, child := range proc.Children(pid) {
		cpu, rss := proc.Usage(child)
		s.pluginCPU += cpu
		s.pluginRSS += rss
		s.pluginProcs++
	}
	return s
}

// controlPlanePIDs finds the API server and etcd that envtest started for
// this process.
func controlPlanePIDs() []int {
	var out []int
	for _, child := range proc.Children(os.Getpid()) {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child))
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(comm)) {
		case "kube-apiserver", "etcd":
			out = append(out, child)
		}
	}
	return out
}

// controlPlaneCPU is the CPU seconds the API server and etcd of this run
// have used so far.
func (h *harness) controlPlaneCPU() float64 {
	total := 0.0
	for _, pid := range h.controlPlane {
		cpu, _ := proc.Usage(pid)
		total += cpu
	}
	return total
}

// apiWrites reads the API server's count of write requests, by resource.
func apiWrites(ctx context.Context, cfg *rest.Config) (map[string]float64, error) {
	return apiRequests(ctx, cfg, "POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE")
}

// apiReads reads the API server's count of reads (gets and lists; not
// watches, which last), by resource.
func apiReads(ctx context.Context, cfg *rest.Config) (map[string]float64, error) {
	return apiRequests(ctx, cfg, "GET", "LIST")
}

// apiRequests reads the API server's count of requests of verbs, by
// resource.
func apiRequests(ctx context.Context, cfg *rest.Config, verbs ...string) (map[string]float64, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if !slices.Contains(verbs, labels["verb"]) {
			continue
		}
		key := labels["resource"]
		if labels["subresource"] != "" {
			key += "/" + labels["subresource"]
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out, nil
}

func diff(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// poll is one Progress call the plugin answered.
type poll struct {
	at        time.Time
	completed bool
}

func readPolls(path string) (map[string][]poll, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("no Progress call reached the plugin: %w", err)
	}
	defer f.Close()
	out := map[string][]poll{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) != 3 {
			continue
		}
		ns, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		out[fields[0]] = append(out[fields[0]], poll{at: time.Unix(0, ns), completed: fields[2] == "1"})
	}
	return out, s.Err()
}

func countLines(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), "\n"), nil
}

func freeAddress() (string, error) { return s3.FreeAddress() }

// copyFile copies the file at from to to, making to's directory.
func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}
