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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmware-tanzu/velero/pkg/apis/velero/shared"
	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/scrape"
	"github.com/itemops/itemops/test/veleroenv"
)

// dataMoverPlugin is Velero's CSI data mover, served by the velero binary
// (velero run-plugins): its Progress lists the operation's DataUpload from
// the API server, its Cancel sets the DataUpload's spec.cancel.
const dataMoverPlugin = "velero.io/csi-pvc-backupper"

// nodeAgentProgressInterval is how often node-agent writes a running
// DataUpload's progress: Velero v1.18's kopia uploader reports it at most
// every 10 s (pkg/uploader/provider, backupProgressCheckInterval).
const nodeAgentProgressInterval = 10 * time.Second

// dataMoverResult is what a run of the CSI data mover measured. The velero
// plugin keeps no record of its calls, so detection is timed by a watch
// seeing the ItemOperation end, and calls are itemops' own count.
type dataMoverResult struct {
	cfg config
	// calls: Progress calls itemops made (itemops_progress_calls_total).
	calls      float64
	detections []time.Duration
	undetected int
	parents    []time.Duration
	unfinished int
	// writes: what the API server counted, the stand-in's DataUpload
	// writes left out (standIn); reads: the gets and lists it counted
	// (the velero plugin's list of the operation's DataUpload at each
	// Progress call among them).
	writes  map[string]float64
	reads   map[string]float64
	standIn float64
	// itemopsReads and itemopsWrites are the requests itemops' own client
	// made (its rest_client_requests_total: gets, lists and watches, and
	// the rest), the plugin process's and the API server's own left out.
	itemopsReads, itemopsWrites float64
	// profile is where itemops' CPU went over the polling, and causeCPU
	// the part of it under finding why operations wait (kept runs).
	profile   *profileRow
	causeCPU  time.Duration
	cpu       float64
	pluginCPU float64
	peakRSS   int64
	duration  time.Duration
	timedOut  bool
}

// upload is one DataUpload the node-agent stand-in moves.
type upload struct {
	name  string
	op    int
	state *sim.State
	// completed is when the stand-in's write of Completed returned: from
	// then on a Progress call finds it done.
	completed time.Time
}

// dataMoverRun runs cfg.ops operations of Velero's CSI data mover, each a
// DataUpload in progress (as the PVC action leaves it, node-agent running
// it), followed by itemops through the velero binary in its plugin
// directory. A stand-in of node-agent moves every upload's bytes in the
// run's shape and writes its progress as node-agent does: every 10 s, and
// Completed at the end.
func dataMoverRun(ctx context.Context, root string, cfg config) (*dataMoverResult, error) {
	h, err := newHarness(root)
	if err != nil {
		return nil, err
	}
	defer h.close()
	velero, err := veleroenv.Binary(root, "velero")
	if err != nil {
		return nil, err
	}
	h.pluginDir = filepath.Join(h.work, "datamover-plugins")
	if err := os.MkdirAll(h.pluginDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Symlink(velero, filepath.Join(h.pluginDir, "velero")); err != nil {
		return nil, err
	}
	cfg.plugin = dataMoverPlugin
	ops, backups, err := createOperations(ctx, h.c, cfg)
	if err != nil {
		return nil, err
	}
	if err := createKeptUploads(ctx, h.c, cfg.kept); err != nil {
		return nil, err
	}
	t0 := time.Now()
	uploads, err := createDataUploads(ctx, h.c, cfg, ops, backups, t0)
	if err != nil {
		return nil, err
	}
	writesBefore, err := apiWrites(ctx, h.fast)
	if err != nil {
		return nil, err
	}
	readsBefore, err := apiReads(ctx, h.fast)
	if err != nil {
		return nil, err
	}
	agent := startNodeAgent(ctx, h.c, uploads)
	defer agent.stop()
	p, err := h.startItemops(cfg)
	if err != nil {
		return nil, err
	}
	defer p.kill()

	ended := watchEnded(ctx, h.c)
	finalized := watchFinalizing(ctx, h.c, backups)
	res := &dataMoverResult{cfg: cfg}
	lastEnd := t0
	for _, u := range uploads {
		lastEnd = maxTime(lastEnd, u.state.CompletesAt())
	}
	prof := startProfiling(ctx, p, cfg, lastEnd, func() (float64, error) { return progressCalls(p, dataMoverPlugin) })
	deadline := lastEnd.Add(10*cfg.sync + 2*time.Minute)
	var last sample
	for {
		time.Sleep(time.Second)
		s := observe(p.cmd.Process.Pid)
		res.peakRSS = max(res.peakRSS, s.rssBytes)
		last = s
		if finalized.count() == len(backups) || time.Now().After(deadline) {
			break
		}
	}
	res.timedOut = finalized.count() < len(backups)
	res.peakRSS = max(res.peakRSS, proc.HighWaterMark(p.cmd.Process.Pid))
	res.cpu, res.pluginCPU = last.cpuSeconds, last.pluginCPU
	if res.calls, err = progressCalls(p, dataMoverPlugin); err != nil {
		return nil, err
	}
	if res.itemopsReads, res.itemopsWrites, err = clientRequests(p); err != nil {
		return nil, err
	}
	profiled, err := prof.finish(ctx)
	if err != nil {
		return nil, err
	}
	res.profile = profiled.row(nil, int(res.calls))
	if profiled != nil {
		res.causeCPU = cpuUnder(profiled.cpu, causeFrames)
	}
	p.stop()
	agent.stop()
	writesAfter, err := apiWrites(ctx, h.fast)
	if err != nil {
		return nil, err
	}
	readsAfter, err := apiReads(ctx, h.fast)
	if err != nil {
		return nil, err
	}
	res.reads = diff(readsAfter, readsBefore)
	res.writes = diff(writesAfter, writesBefore)
	res.standIn = res.writes["datauploads"]
	delete(res.writes, "datauploads")

	seen := ended.times()
	lastDetection := map[int]time.Time{}
	for _, u := range uploads {
		at, ok := seen[ops[u.op].id]
		if !ok || u.completed.IsZero() {
			res.undetected++
			continue
		}
		res.detections = append(res.detections, max(0, at.Sub(u.completed)))
		parent := ops[u.op].parent
		lastDetection[parent] = maxTime(lastDetection[parent], at)
	}
	done := finalized.times()
	for i, b := range backups {
		at, ok := done[b.Name]
		if !ok {
			res.unfinished++
			continue
		}
		res.duration = max(res.duration, at.Sub(t0))
		if d, ok := lastDetection[i]; ok {
			res.parents = append(res.parents, max(0, at.Sub(d)))
		}
	}
	return res, nil
}

// createDataUploads creates a DataUpload for each operation as Velero's PVC
// action creates it (labels, owner, spec), in the state node-agent has it
// in once the data path runs: InProgress since t0, nothing moved yet.
func createDataUploads(ctx context.Context, c client.Client, cfg config, ops []operation, backups []*velerov1api.Backup, t0 time.Time) ([]*upload, error) {
	uploads := make([]*upload, len(ops))
	return uploads, forEach(len(ops), func(i int) error {
		op, b := ops[i], backups[ops[i].parent]
		d := op.completes.Sub(time.Time{})
		st := sim.NewState(op.id, "upload", op.id, int64(d/time.Millisecond)<<10, 1<<20, t0)
		st.Shape = cfg.shape
		uploads[i] = &upload{name: op.id, op: i, state: st}
		du := &velerov2alpha1.DataUpload{
			ObjectMeta: metav1.ObjectMeta{Name: op.id, Namespace: envtest.VeleroNamespace,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: velerov1api.SchemeGroupVersion.String(), Kind: "Backup",
					Name: b.Name, UID: b.UID, Controller: new(true)}},
				Labels: map[string]string{velerov1api.BackupNameLabel: b.Name, velerov1api.BackupUIDLabel: string(b.UID),
					velerov1api.PVCUIDLabel: "pvc-" + op.id, velerov1api.AsyncOperationIDLabel: op.id}},
			Spec: velerov2alpha1.DataUploadSpec{
				SnapshotType: velerov2alpha1.SnapshotTypeCSI,
				CSISnapshot:  &velerov2alpha1.CSISnapshotSpec{VolumeSnapshot: "velero-" + op.id, StorageClass: "csi-sim", Driver: "csi.itemops.test"},
				SourcePVC:    op.id, SourceNamespace: "bench", BackupStorageLocation: "default",
				OperationTimeout: metav1.Duration{Duration: 10 * time.Minute},
			},
			Status: velerov2alpha1.DataUploadStatus{Phase: velerov2alpha1.DataUploadPhaseInProgress, StartTimestamp: &metav1.Time{Time: t0},
				Node: "worker-1", AcceptedByNode: "worker-1", NodeOS: velerov2alpha1.NodeOSLinux},
		}
		du.Status.Progress.TotalBytes = st.Size
		return c.Create(ctx, du)
	})
}

// createKeptUploads creates n DataUploads of earlier Backups, Completed,
// as Velero keeps them until their Backup is deleted: 100 a Backup.
func createKeptUploads(ctx context.Context, c client.Client, n int) error {
	done := metav1.NewTime(time.Now().Add(-time.Hour))
	return forEach(n, func(i int) error {
		backup := fmt.Sprintf("earlier-%d", i/100)
		name := fmt.Sprintf("%s-%d", backup, i%100)
		du := &velerov2alpha1.DataUpload{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace,
				Labels: map[string]string{velerov1api.BackupNameLabel: backup, velerov1api.PVCUIDLabel: "pvc-" + name,
					velerov1api.AsyncOperationIDLabel: "du-" + name}},
			Spec: velerov2alpha1.DataUploadSpec{
				SnapshotType: velerov2alpha1.SnapshotTypeCSI,
				CSISnapshot:  &velerov2alpha1.CSISnapshotSpec{VolumeSnapshot: "velero-" + name, StorageClass: "csi-sim", Driver: "csi.itemops.test"},
				SourcePVC:    name, SourceNamespace: "bench", BackupStorageLocation: "default",
			},
			// As createDataUploads: Velero's DataUpload has no status
			// subresource.
			Status: velerov2alpha1.DataUploadStatus{Phase: velerov2alpha1.DataUploadPhaseCompleted, Node: "worker-1",
				StartTimestamp: &done, CompletionTimestamp: &done,
				Progress: shared.DataMoveOperationProgress{TotalBytes: 1 << 20, BytesDone: 1 << 20}},
		}
		return c.Create(ctx, du)
	})
}

// nodeAgent plays node-agent's data path for many DataUploads at once:
// each upload's progress is written every nodeAgentProgressInterval from a
// moment of its own (its first progress callback), and Completed as soon as
// its bytes have moved.
type nodeAgent struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func startNodeAgent(ctx context.Context, c client.Client, uploads []*upload) *nodeAgent {
	ctx, cancel := context.WithCancel(ctx)
	a := &nodeAgent{cancel: cancel, done: make(chan struct{})}
	type job struct {
		u   *upload
		end bool
	}
	jobs := make(chan job, len(uploads))
	next := make([]time.Time, len(uploads))
	for i, u := range uploads {
		// Spread over the interval, as the uploads' first callbacks are.
		next[i] = u.state.Started.Add(time.Duration(i) * nodeAgentProgressInterval / time.Duration(len(uploads)))
	}
	var workers sync.WaitGroup
	for range 16 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for j := range jobs {
				// Errors are an API server under load: the next write says it again.
				if j.end {
					if writeUpload(ctx, c, j.u, true) == nil {
						j.u.completed = time.Now()
					}
					continue
				}
				_ = writeUpload(ctx, c, j.u, false)
			}
		}()
	}
	go func() {
		defer close(a.done)
		defer workers.Wait()
		defer close(jobs)
		ended := make([]bool, len(uploads))
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now := time.Now()
			for i, u := range uploads {
				switch {
				case ended[i]:
				case !now.Before(u.state.CompletesAt()):
					ended[i] = true
					jobs <- job{u: u, end: true}
				case !now.Before(next[i]):
					next[i] = next[i].Add(nodeAgentProgressInterval)
					jobs <- job{u: u}
				}
			}
		}
	}()
	return a
}

func (a *nodeAgent) stop() {
	a.cancel()
	<-a.done
}

// writeUpload writes an upload's progress, or its end, as node-agent's
// DataUpload controller does (status.progress; then phase Completed with
// its completion time, snapshot ID and path).
func writeUpload(ctx context.Context, c client.Client, u *upload, end bool) error {
	now := time.Now()
	done := u.state.MovedAt(now)
	body := fmt.Sprintf(`{"status":{"progress":{"totalBytes":%d,"bytesDone":%d}}}`, u.state.Size, done)
	if end {
		body = fmt.Sprintf(`{"status":{"phase":%q,"completionTimestamp":%q,"progress":{"totalBytes":%d,"bytesDone":%d},"snapshotID":%q,"path":%q}}`,
			velerov2alpha1.DataUploadPhaseCompleted, now.UTC().Format(time.RFC3339), u.state.Size, u.state.Size, "kopia-"+u.name, "/host_pods/"+u.name)
	}
	du := &velerov2alpha1.DataUpload{ObjectMeta: metav1.ObjectMeta{Name: u.name, Namespace: envtest.VeleroNamespace}}
	return c.Patch(ctx, du, client.RawPatch(types.MergePatchType, []byte(body)))
}

// watchEnded records when a watch first saw each ItemOperation in a terminal phase.
func watchEnded(ctx context.Context, c client.WithWatch) *firstSeen {
	e := newFirstSeen()
	w, err := c.Watch(ctx, &itemopsv1alpha1.ItemOperationList{}, client.InNamespace(envtest.VeleroNamespace))
	if err != nil {
		fail(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			op, ok := ev.Object.(*itemopsv1alpha1.ItemOperation)
			if !ok || !op.Status.Phase.IsTerminal() {
				continue
			}
			e.mark(op.Name)
		}
	}()
	return e
}

// progressCalls reads from itemops' metrics how many Progress calls it made
// to a plugin.
func progressCalls(p *itemops, plugin string) (float64, error) {
	families, err := scrape.Get(p.metrics, "https://"+p.metricsAddr+"/metrics")
	if err != nil {
		return 0, fmt.Errorf("reading itemops' metrics: %w", err)
	}
	return families.Sum("itemops_progress_calls_total", map[string]string{"plugin": plugin}), nil
}

// clientRequests are the requests itemops' own client has made: reads
// (GET: gets, lists and watches) and writes (every other method).
func clientRequests(p *itemops) (reads, writes float64, err error) {
	families, err := scrape.Get(p.metrics, "https://"+p.metricsAddr+"/metrics")
	if err != nil {
		return 0, 0, fmt.Errorf("reading itemops' metrics: %w", err)
	}
	all := families.Sum("rest_client_requests_total", nil)
	if all < 0 {
		return 0, 0, fmt.Errorf("itemops' metrics have no rest_client_requests_total")
	}
	reads = families.Sum("rest_client_requests_total", map[string]string{"method": "GET"})
	return reads, all - reads, nil
}

func (r *dataMoverResult) summary() string {
	p50, p99, _ := percentiles(r.detections)
	pp50, pp99, _ := percentiles(r.parents)
	return fmt.Sprintf("bench: %d data-mover operations, %s, %s-shaped progress, %s polling: %.1f Progress calls per operation, detection p50 %s p99 %s (%d undetected), parent p50 %s p99 %s, %.2f API writes/op, per poll: itemops' client %.4f reads and %.3f writes, %.2f ms of CPU, CPU %.1fs (velero plugin %.1fs), peak RSS %s%s",
		r.cfg.ops, r.variant(), shapeName(r.cfg.shape), r.cfg.polling, r.calls/float64(r.cfg.ops), round(p50), round(p99), r.undetected, round(pp50), round(pp99),
		sum(r.writes)/float64(r.cfg.ops), r.itemopsReads/max(r.calls, 1), r.itemopsWrites/max(r.calls, 1), r.cpuPerPoll(), r.cpu, r.pluginCPU, mib(r.peakRSS), timedOut(r.timedOut))
}

// pollingLabel is the run's polling, and for a run with DataUploads kept
// what it kept and found.
func (r *dataMoverResult) pollingLabel() string {
	if r.cfg.kept == 0 {
		return string(r.cfg.polling)
	}
	return fmt.Sprintf("%s (%s)", r.cfg.polling, r.variant())
}

// variant names what the run kept and found.
func (r *dataMoverResult) variant() string {
	causes := "finding causes"
	if r.cfg.noCauses {
		causes = "not finding causes"
	}
	return fmt.Sprintf("%d finished DataUploads kept, %s", r.cfg.kept, causes)
}

// pluginReads are the reads the velero plugin makes itself: a list of the
// operation's DataUpload at each Progress call.
func (r *dataMoverResult) pluginReads() float64 {
	return r.reads["datauploads"]
}

// profiledCPUPerPoll is itemops' CPU per Progress call over its profile;
// zero when it was not profiled.
func (r *dataMoverResult) profiledCPUPerPoll() time.Duration {
	if r.profile == nil || r.profile.calls == 0 {
		return 0
	}
	return r.profile.total / time.Duration(r.profile.calls)
}

// causeCPUPerPoll is the part of profiledCPUPerPoll under finding why
// operations wait.
func (r *dataMoverResult) causeCPUPerPoll() time.Duration {
	if r.profile == nil || r.profile.calls == 0 {
		return 0
	}
	return r.causeCPU / time.Duration(r.profile.calls)
}

// cpuPerPoll is itemops' CPU per Progress call, in milliseconds.
func (r *dataMoverResult) cpuPerPoll() float64 {
	if r.calls == 0 {
		return 0
	}
	return 1000 * r.cpu / r.calls
}

// shapeName names a shape of progress in results.
func shapeName(shape string) string {
	if shape == sim.ShapeConstant {
		return "constant"
	}
	return strings.ToLower(shape)
}
