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
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/veleroenv"
)

// watcher sees every change of the Backups and ItemOperations, through
// kube-apiserver restarts (it lists and watches again).
type watcher struct {
	c client.WithWatch

	mu sync.Mutex
	// backupPhases: each Backup's phases in the order seen, repeats dropped.
	backupPhases map[string][]velerov1api.BackupPhase
	// finished: when each operation (by ID) was first seen terminal, and in which phase.
	finished map[string]time.Time
	// reconnects: watches re-established.
	reconnects int
	// written is signalled on every change of an ItemOperation.
	written chan struct{}
}

func newWatcher(env *envtest.Environment) *watcher {
	return &watcher{c: env.WatchClient(), backupPhases: map[string][]velerov1api.BackupPhase{}, finished: map[string]time.Time{},
		written: make(chan struct{}, 1)}
}

func (w *watcher) follow(ctx context.Context) {
	go w.loop(ctx, &velerov1api.BackupList{}, func(obj client.Object) {
		b := obj.(*velerov1api.Backup)
		w.mu.Lock()
		defer w.mu.Unlock()
		seen := w.backupPhases[b.Name]
		if b.Status.Phase != "" && (len(seen) == 0 || seen[len(seen)-1] != b.Status.Phase) {
			w.backupPhases[b.Name] = append(seen, b.Status.Phase)
		}
	})
	w.loop(ctx, &itemopsv1alpha1.ItemOperationList{}, func(obj client.Object) {
		op := obj.(*itemopsv1alpha1.ItemOperation)
		select {
		case w.written <- struct{}{}:
		default:
		}
		if !op.Status.Phase.IsTerminal() {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.finished[op.Spec.OperationID]; !ok {
			w.finished[op.Spec.OperationID] = time.Now()
		}
	})
}

// lastPhase is the last phase the watch saw of a Backup.
func (w *watcher) lastPhase(name string) velerov1api.BackupPhase {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := w.backupPhases[name]
	if len(seen) == 0 {
		return ""
	}
	return seen[len(seen)-1]
}

// loop lists and watches list's kind until ctx ends, calling seen for every
// object listed or changed.
func (w *watcher) loop(ctx context.Context, list client.ObjectList, seen func(client.Object)) {
	for ctx.Err() == nil {
		if err := w.c.List(ctx, list, client.InNamespace(envtest.VeleroNamespace)); err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		items, _ := meta.ExtractList(list)
		for _, obj := range items {
			if o, ok := obj.(client.Object); ok {
				seen(o)
			}
		}
		rv := list.GetResourceVersion()
		wi, err := w.c.Watch(ctx, list, client.InNamespace(envtest.VeleroNamespace), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range wi.ResultChan() {
			if obj, ok := ev.Object.(client.Object); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				seen(obj)
			}
		}
		wi.Stop()
		w.mu.Lock()
		w.reconnects++
		w.mu.Unlock()
	}
}

// invariants are what the run is checked against at the end.
type invariants struct {
	lost, duplicated, wrongPhase, regressions, missingCancels, cancelsOfFinished, notWrittenBack, slowCancels int
	// cancelDelays: from spec.cancel (or the Backup's deletion) to the
	// Cancel the plugin recorded, for every operation it reached;
	// quietDelays: those of the cancels asked outside any fault.
	cancelDelays, quietDelays []time.Duration
	// cancelledTwice: operations whose Cancel came more than once (a
	// replica killed between Cancel and its status write): allowed, Cancel
	// is idempotent, but counted.
	cancelledTwice int
	leftPlugins    []int
	secretInLogs   []string
	secretInEvents int
	goroutines     []string
	reconnects     int
	selfExits      int
	// details say which operation or Backup broke an invariant.
	details []string
}

func (inv *invariants) failures() []string {
	out := append([]string{}, inv.details...)
	if len(inv.leftPlugins) > 0 {
		out = append(out, fmt.Sprintf("plugin processes left after shutdown: %v", inv.leftPlugins))
	}
	if len(inv.secretInLogs) > 0 {
		out = append(out, fmt.Sprintf("the S3 secret key is in %v", inv.secretInLogs))
	}
	if inv.secretInEvents > 0 {
		out = append(out, fmt.Sprintf("the S3 secret key is in %d Events", inv.secretInEvents))
	}
	return out
}

func (inv *invariants) fail(counter *int, format string, args ...any) {
	*counter++
	inv.details = append(inv.details, fmt.Sprintf(format, args...))
}

// allowedTransitions are the moves of a parent itemops may make.
var allowedTransitions = map[[2]velerov1api.BackupPhase]bool{
	{velerov1api.BackupPhaseWaitingForPluginOperations, velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed}: true,
	{velerov1api.BackupPhaseWaitingForPluginOperations, velerov1api.BackupPhaseFinalizing}:                                true,
	{velerov1api.BackupPhaseWaitingForPluginOperations, velerov1api.BackupPhaseFinalizingPartiallyFailed}:                 true,
	{velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed, velerov1api.BackupPhaseFinalizingPartiallyFailed}:  true,
}

// check compares the end state with what the plugin knows of every operation.
func check(ctx context.Context, t testing.TB, env *envtest.Environment, bucketDir string, load *workload, w *watcher) *invariants {
	t.Helper()
	inv := &invariants{}
	store, err := sim.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	list := &itemopsv1alpha1.ItemOperationList{}
	if err := env.Client.List(ctx, list, client.InNamespace(envtest.VeleroNamespace)); err != nil {
		t.Fatal(err)
	}
	byID := map[string][]itemopsv1alpha1.ItemOperation{}
	for _, op := range list.Items {
		byID[op.Spec.OperationID] = append(byID[op.Spec.OperationID], op)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	inv.reconnects = w.reconnects

	for _, b := range load.backups {
		failed := false
		for _, rec := range load.records[b.Name] {
			id := rec.Spec.OperationID
			ops := byID[id]
			switch {
			case len(ops) == 0 && load.deleted[b.Name]:
				continue // deleted before its file was read: nothing to follow
			case len(ops) == 0:
				inv.fail(&inv.lost, "operation %s of Backup %s has no ItemOperation", id, b.Name)
				continue
			case len(ops) > 1:
				inv.fail(&inv.duplicated, "operation %s of Backup %s has %d ItemOperations", id, b.Name, len(ops))
			}
			op := ops[0]
			if !op.Status.Phase.IsTerminal() {
				inv.fail(&inv.lost, "operation %s of Backup %s never ended (%q)", id, b.Name, op.Status.Phase)
				continue
			}
			st, err := store.Load(id)
			if err != nil {
				t.Fatal(err)
			}
			natural := itemopsv1alpha1.OperationPhaseCompleted
			if st.FailAt >= 0 {
				natural = itemopsv1alpha1.OperationPhaseFailed
			}
			// Asked to cancel (or its parent deleted) at stop. Cancel is
			// best effort: the plugin's own record of when Cancel reached
			// it decides. Before the operation's own end: Canceled. After
			// it (itemops had not seen the end yet): either. Never: the
			// natural end, which itemops saw before it could cancel.
			stop, stopped := load.cancelled[id]
			if at, ok := load.deletedAt[b.Name]; ok && (!stopped || at.Before(stop)) {
				stop, stopped = at, true
			}
			want := []itemopsv1alpha1.OperationPhase{natural}
			switch {
			case st.Canceled != nil && st.Canceled.Before(st.CompletesAt()):
				want = []itemopsv1alpha1.OperationPhase{itemopsv1alpha1.OperationPhaseCanceled}
			case st.Canceled != nil:
				want = append(want, itemopsv1alpha1.OperationPhaseCanceled)
			}
			if !phaseIn(op.Status.Phase, want) {
				inv.fail(&inv.wrongPhase, "operation %s of Backup %s ended %s, want %v (plugin-side end %s, Cancel reached the plugin %s, stop %v)",
					id, b.Name, op.Status.Phase, want, st.CompletesAt().Format(time.StampMilli), stamp(st.Canceled), stop.Format(time.StampMilli))
			}
			if stopped && st.Canceled != nil {
				delay := st.Canceled.Sub(stop)
				inv.cancelDelays = append(inv.cancelDelays, delay)
				if at, quiet := load.quietCancels[id]; quiet && at.Equal(stop) {
					inv.quietDelays = append(inv.quietDelays, delay)
					if delay > quietCancelBound {
						inv.fail(&inv.slowCancels, "operation %s: spec.cancel, set outside any fault, reached the plugin after %s (bound %s)",
							id, delay.Round(time.Millisecond), quietCancelBound)
					}
				}
			}
			if at, quiet := load.quietCancels[id]; quiet && st.Canceled == nil && st.CompletesAt().After(at.Add(quietCancelBound)) {
				inv.fail(&inv.slowCancels, "operation %s: spec.cancel, set outside any fault at %s, never reached the plugin before its end at %s",
					id, at.Format(time.StampMilli), st.CompletesAt().Format(time.StampMilli))
			}
			if op.Status.Phase != itemopsv1alpha1.OperationPhaseCompleted {
				failed = true
			}
			// Cancel: for every operation that ended Canceled, and for none
			// that had already been seen finished when it was asked to stop.
			switch {
			case op.Status.Phase == itemopsv1alpha1.OperationPhaseCanceled && st.Cancels == 0:
				inv.fail(&inv.missingCancels, "operation %s ended Canceled without a Cancel call", id)
			case stopped && st.Cancels > 0 && w.finished[id].Before(stop) && !w.finished[id].IsZero():
				inv.fail(&inv.cancelsOfFinished, "operation %s was cancelled after it was seen %s", id, op.Status.Phase)
			case !stopped && st.Cancels > 0:
				inv.fail(&inv.cancelsOfFinished, "operation %s was cancelled though nothing asked for it", id)
			}
			if st.Cancels > 1 {
				inv.cancelledTwice++
			}
		}
		// The Backup's phases, each transition allowed, ending as its
		// operations did.
		phases := w.backupPhases[b.Name]
		for i := 1; i < len(phases); i++ {
			if !allowedTransitions[[2]velerov1api.BackupPhase{phases[i-1], phases[i]}] {
				inv.fail(&inv.regressions, "Backup %s moved %s -> %s (phases seen: %v)", b.Name, phases[i-1], phases[i], phases)
			}
		}
		if load.deleted[b.Name] {
			continue
		}
		want := velerov1api.BackupPhaseFinalizing
		if failed {
			want = velerov1api.BackupPhaseFinalizingPartiallyFailed
		}
		if len(phases) == 0 || phases[len(phases)-1] != want {
			inv.fail(&inv.regressions, "Backup %s ended in %v, want %s", b.Name, phases, want)
		}
		// Velero's finalizer reads the operations file: it must hold every
		// operation's end.
		recs, err := veleroenv.ReadBackupOperations(bucketDir, b.Name)
		if err != nil {
			inv.fail(&inv.notWrittenBack, "the operations file of Backup %s cannot be read: %v", b.Name, err)
			continue
		}
		for _, rec := range recs {
			ops := byID[rec.Spec.OperationID]
			if len(ops) == 0 || !veleroenv.WrittenAs(rec.Status.Phase, ops[0].Status.Phase) {
				inv.fail(&inv.notWrittenBack, "Backup %s: the file records operation %s as %q", b.Name, rec.Spec.OperationID, rec.Status.Phase)
			}
		}
	}
	return inv
}

// quietCancelBound is how long spec.cancel, set while nothing fails, may
// take to reach the plugin: a watch event, a reconcile that reads the
// operation from the API server, and the Cancel call, on a loaded machine.
const quietCancelBound = 15 * time.Second

// stamp is a time for the report, or "never".
func stamp(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.Format(time.StampMilli)
}

// spread is the median and the largest of delays, for the report.
func spread(delays []time.Duration) string {
	if len(delays) == 0 {
		return "none"
	}
	sorted := append([]time.Duration(nil), delays...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return fmt.Sprintf("%d, median %s, longest %s", len(sorted), sorted[len(sorted)/2].Round(time.Millisecond),
		sorted[len(sorted)-1].Round(time.Millisecond))
}

func phaseIn(p itemopsv1alpha1.OperationPhase, in []itemopsv1alpha1.OperationPhase) bool {
	for _, q := range in {
		if p == q {
			return true
		}
	}
	return false
}

// pluginProcesses are the sample plugin processes still running.
func pluginProcesses(pluginDir string) []int { return pluginPIDs(pluginDir) }

// logsContaining lists the files under dir whose content holds secret.
func logsContaining(dir, secret string) []string {
	var found []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err == nil && bytes.Contains(data, []byte(secret)) {
			found = append(found, filepath.Base(path))
		}
		return nil
	})
	return found
}

// eventsContaining counts the Events in Velero's namespace whose message
// holds secret.
func eventsContaining(ctx context.Context, t testing.TB, env *envtest.Environment, secret string) int {
	t.Helper()
	list := &corev1.EventList{}
	if err := env.Client.List(ctx, list, client.InNamespace(envtest.VeleroNamespace)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if strings.Contains(e.Message, secret) {
			n++
		}
	}
	return n
}

// result is a run's report.
type result struct {
	cfg        config
	faults     map[string]int
	inv        *invariants
	settled    time.Duration
	ran        time.Duration
	operations int
}

func (r result) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# itemops chaos run\n\nGenerated by `make test-chaos` on %s (seed %d).\n\n", time.Now().UTC().Format("2006-01-02"), r.cfg.seed)
	fmt.Fprintf(&b, "%d Backups × %d operations (%d in all), read from their operations files on versitygw through velero-plugin-for-aws, "+
		"followed by two itemops replicas (leader election, manage mode, sync 1 s) against a real kube-apiserver and etcd and the sample plugin; "+
		"%s of faults, one every 1–3 s, then %s until every Backup had moved on and every operation had ended.\n\n",
		r.cfg.backups, r.cfg.perBackup, r.operations, r.cfg.duration, r.settled.Round(time.Second))
	b.WriteString("## Faults injected\n\n| fault | times |\n|---|---|\n")
	for _, f := range faultOrder {
		fmt.Fprintf(&b, "| %s | %d |\n", f, r.faults[f])
	}
	inv := r.inv
	b.WriteString("\n## Invariants\n\n| invariant | found |\n|---|---|\n")
	rows := []struct {
		name string
		n    int
	}{
		{"operations lost (no ItemOperation, or never ended)", inv.lost},
		{"operations duplicated", inv.duplicated},
		{"operations in a wrong terminal phase (against the plugin's own record)", inv.wrongPhase},
		{"parent phase regressions or wrong end phase (every transition watched)", inv.regressions},
		{"operations Canceled without a Cancel call", inv.missingCancels},
		{"Cancel calls for an operation already finished, or not asked to stop", inv.cancelsOfFinished},
		{"operations files not written back with every end", inv.notWrittenBack},
		{fmt.Sprintf("spec.cancel set outside any fault that did not reach the plugin within %s", quietCancelBound), inv.slowCancels},
		{"plugin processes left after shutdown", len(inv.leftPlugins)},
		{"logs holding the S3 secret key (every replica at debug level)", len(inv.secretInLogs)},
		{"Events holding the S3 secret key", inv.secretInEvents},
	}
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s | %d |\n", row.name, row.n)
	}
	b.WriteString("\n## Figures\n\n")
	fmt.Fprintf(&b, "- operations cancelled twice (a replica killed between Cancel and its status write; Cancel is idempotent): %d\n", inv.cancelledTwice)
	fmt.Fprintf(&b, "- spec.cancel (or the Backup's deletion) to the Cancel the plugin recorded, every operation it reached: %s\n", spread(inv.cancelDelays))
	fmt.Fprintf(&b, "- the same, asked outside any fault (a quiet window with a leader): %s\n", spread(inv.quietDelays))
	fmt.Fprintf(&b, "- watches of the checker re-established (kube-apiserver restarts): %d\n", inv.reconnects)
	fmt.Fprintf(&b, "- replicas that exited on their own (a Lease lost while the kube-apiserver was down) and were started again: %d\n", inv.selfExits)
	fmt.Fprintf(&b, "- goroutines of each replica at the end, idle: %s\n", strings.Join(inv.goroutines, ", "))
	fmt.Fprintf(&b, "- run time: %s\n", r.ran.Round(time.Second))
	if len(inv.details) > 0 {
		b.WriteString("\n## Broken invariants\n\n")
		sort.Strings(inv.details)
		for _, d := range inv.details {
			fmt.Fprintf(&b, "- %s\n", d)
		}
	}
	return b.String()
}
