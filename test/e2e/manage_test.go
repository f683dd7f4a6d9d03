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

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/monitoring"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/scrape"
)

// manager runs the itemops binary with the sample plugins until stopped.
type manager struct {
	cmd    *exec.Cmd
	output *proc.Buffer
}

func startManager(t testing.TB, pluginDir string, args ...string) *manager {
	t.Helper()
	kubeconfig, err := env.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	return startManagerAs(t, kubeconfig, pluginDir, args...)
}

// startManagerAs starts the manager with kubeconfig's identity.
func startManagerAs(t testing.TB, kubeconfig []byte, pluginDir string, args ...string) *manager {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	m := &manager{output: &proc.Buffer{}}
	m.cmd = exec.Command(binary, append([]string{"--kubeconfig=" + path, "--velero-namespace=" + envtest.VeleroNamespace,
		"--plugin-dir=" + pluginDir, "--sync-frequency=200ms", "--progress-update-interval=1s",
		"--metrics-bind-address=0", "--health-probe-bind-address=" + freeAddress(t)}, args...)...)
	m.cmd.Stdout, m.cmd.Stderr = m.output, m.output
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.stop(syscall.SIGTERM) })
	return m
}

func (m *manager) stop(sig syscall.Signal) {
	if m.cmd.ProcessState != nil {
		return
	}
	_ = m.cmd.Process.Signal(sig)
	_ = m.cmd.Wait()
}

// buildPlugins builds the sample plugins once, into the suite's own
// directory (removed at its end).
var buildPlugins = sync.OnceValues(func() (string, error) {
	dir := filepath.Join(suiteDir, "plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, envtest.BuildSamplePlugins(dir, "sample")
})

// waitingBackup creates a Backup waiting for n uploads and their ItemOperations.
func waitingBackup(t testing.TB, name string, annotations []map[string]string) (*velerov1api.Backup, []string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	b := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace},
		Status: velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations,
			BackupItemOperationsAttempted: len(annotations)},
	}
	g.Expect(env.Client.Create(ctx, b)).To(Succeed())
	store, err := sim.NewStore()
	g.Expect(err).NotTo(HaveOccurred())
	var ids []string
	for i, a := range annotations {
		id, err := store.Start("upload", fmt.Sprintf("shop/pvc-%d", i), a)
		g.Expect(err).NotTo(HaveOccurred())
		ids = append(ids, id)
		g.Expect(env.Client.Create(ctx, &itemopsv1alpha1.ItemOperation{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: b.Namespace,
				Labels: map[string]string{itemopsv1alpha1.LabelParentUID: string(b.UID)}},
			Spec: itemopsv1alpha1.ItemOperationSpec{
				Parent:      itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindBackup, Name: b.Name, UID: string(b.UID)},
				Plugin:      itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: "itemops.io/sample-datamover"},
				OperationID: id,
				Resource:    itemopsv1alpha1.ResourceIdentifier{Resource: "persistentvolumeclaims", Namespace: "shop", Name: fmt.Sprintf("pvc-%d", i)},
			},
		})).To(Succeed())
	}
	return b, ids
}

// removeBackup deletes a Backup and its ItemOperations, finalizers and
// all, and waits until they are gone.
func removeBackup(t testing.TB, b *velerov1api.Backup) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	list := &itemopsv1alpha1.ItemOperationList{}
	g.Expect(env.Client.List(ctx, list, client.InNamespace(b.Namespace),
		client.MatchingLabels{itemopsv1alpha1.LabelParentUID: string(b.UID)})).To(Succeed())
	for i := range list.Items {
		op := &list.Items[i]
		if len(op.Finalizers) > 0 {
			patch := client.MergeFrom(op.DeepCopy())
			op.Finalizers = nil
			g.Expect(client.IgnoreNotFound(env.Client.Patch(ctx, op, patch))).To(Succeed())
		}
		g.Expect(client.IgnoreNotFound(env.Client.Delete(ctx, op))).To(Succeed())
	}
	g.Expect(client.IgnoreNotFound(env.Client.Delete(ctx, b))).To(Succeed())
	g.Eventually(func(g Gomega) []itemopsv1alpha1.OperationPhase { return operationPhases(g, b) }, 30*time.Second, 100*time.Millisecond).
		Should(BeEmpty())
}

func operationPhases(g Gomega, b *velerov1api.Backup) []itemopsv1alpha1.OperationPhase {
	list := &itemopsv1alpha1.ItemOperationList{}
	g.Expect(env.Client.List(context.Background(), list, client.InNamespace(b.Namespace),
		client.MatchingLabels{itemopsv1alpha1.LabelParentUID: string(b.UID)})).To(Succeed())
	var phases []itemopsv1alpha1.OperationPhase
	for _, op := range list.Items {
		phases = append(phases, op.Status.Phase)
	}
	return phases
}

// oneOfEachEnd starts a manager with its metrics served at address, for a
// Backup of three operations, and waits until one has completed, one failed
// and the third (10Gi at 1Mi/s) still runs.
func oneOfEachEnd(t testing.TB, name, mode string) (*velerov1api.Backup, *manager, string) {
	t.Helper()
	g := NewWithT(t)
	pluginDir, err := buildPlugins()
	g.Expect(err).NotTo(HaveOccurred())
	t.Setenv(sim.EnvStateDir, filepath.Join(t.TempDir(), "state"))
	b, _ := waitingBackup(t, name, []map[string]string{
		{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi"},
		{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi", sim.AnnotationFailAt: "10"},
		{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"},
	})
	address := freeAddress(t)
	m := startManager(t, pluginDir, mode, "--metrics-bind-address="+address)
	// The third runs on: no later spec's manager may see it.
	t.Cleanup(func() { removeBackup(t, b) })
	g.Eventually(func(g Gomega) []itemopsv1alpha1.OperationPhase { return operationPhases(g, b) }, 20*time.Second, 100*time.Millisecond).
		Should(ConsistOf(itemopsv1alpha1.OperationPhaseCompleted, itemopsv1alpha1.OperationPhaseFailed, itemopsv1alpha1.OperationPhaseInProgress),
			"manager output:\n%s", m.output.String())
	return b, m, address
}

var _ = Describe("itemops beside a simulated Velero", func() {
	// Whoever can write the plugin directory could swap a binary for one
	// of theirs, which would run with itemops' identity: after its process
	// dies, the swapped file is refused, and its operations and Events say so.
	It("a plugin binary swapped after discovery is never run", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		built, err := buildPlugins()
		g.Expect(err).NotTo(HaveOccurred())
		pluginDir := t.TempDir()
		data, err := os.ReadFile(filepath.Join(built, "sample"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(pluginDir, "sample"), data, 0o755)).To(Succeed())
		t.Setenv(sim.EnvStateDir, filepath.Join(t.TempDir(), "state"))
		b, _ := waitingBackup(t, "swapped", []map[string]string{{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"}})
		m := startManager(t, pluginDir, "--mode=observe")
		// Its operation is left running, and its ID is known only to this
		// spec's plugin state: a later spec's manager would fail it (and
		// count that end in its metrics).
		t.Cleanup(func() { removeBackup(t, b) })
		g.Eventually(func(g Gomega) []itemopsv1alpha1.OperationPhase { return operationPhases(g, b) }, 20*time.Second, 100*time.Millisecond).
			Should(ConsistOf(itemopsv1alpha1.OperationPhaseInProgress), "manager output:\n%s", m.output.String())

		ran := filepath.Join(t.TempDir(), "ran")
		g.Expect(os.WriteFile(filepath.Join(pluginDir, "sample.new"), []byte("#!/bin/sh\ntouch "+ran+"\n"), 0o755)).To(Succeed())
		g.Expect(os.Rename(filepath.Join(pluginDir, "sample.new"), filepath.Join(pluginDir, "sample"))).To(Succeed())
		children := proc.Children(m.cmd.Process.Pid)
		g.Expect(children).NotTo(BeEmpty())
		for _, pid := range children {
			g.Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
		}

		op := &itemopsv1alpha1.ItemOperation{}
		g.Eventually(func(g Gomega) {
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: "swapped-0"}, op)).To(Succeed())
			c := meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionProgressing)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(itemopsv1alpha1.ReasonPluginBinaryChanged))
			g.Expect(c.Message).To(ContainSubstring(filepath.Join(pluginDir, "sample") + " is not the binary itemops discovered"))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed(), "manager output:\n%s", m.output.String())
		g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseInProgress), "not the operation's failure")
		g.Eventually(func(g Gomega) []string {
			events := &corev1.EventList{}
			g.Expect(env.Client.List(ctx, events, client.InNamespace(b.Namespace))).To(Succeed())
			var reasons []string
			for _, e := range events.Items {
				if e.InvolvedObject.Name == op.Name && e.Type == corev1.EventTypeWarning {
					reasons = append(reasons, e.Reason)
				}
			}
			return reasons
		}, 10*time.Second, 200*time.Millisecond).Should(ContainElement(itemopsv1alpha1.ReasonPluginBinaryChanged))
		g.Expect(ran).NotTo(BeAnExistingFile(), "the swapped file ran")
		g.Expect(proc.Children(m.cmd.Process.Pid)).To(BeEmpty(), "no plugin process runs")
	})

	It("observe mode never writes to the backup", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		pluginDir, err := buildPlugins()
		g.Expect(err).NotTo(HaveOccurred())
		t.Setenv(sim.EnvStateDir, filepath.Join(t.TempDir(), "state"))
		b, _ := waitingBackup(t, "observed", []map[string]string{
			{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi"},
			{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi", sim.AnnotationFailAt: "10"},
		})
		before := b.ResourceVersion
		m := startManager(t, pluginDir, "--mode=observe")
		g.Eventually(func(g Gomega) []itemopsv1alpha1.OperationPhase { return operationPhases(g, b) }, 20*time.Second, 100*time.Millisecond).
			Should(ConsistOf(itemopsv1alpha1.OperationPhaseCompleted, itemopsv1alpha1.OperationPhaseFailed), "manager output:\n%s", m.output.String())
		g.Consistently(func(g Gomega) string {
			got := &velerov1api.Backup{}
			g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), got)).To(Succeed())
			return got.ResourceVersion
		}, 2*time.Second, 200*time.Millisecond).Should(Equal(before))
	})

	It("metrics count operations and plugin calls", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		_, _, address := oneOfEachEnd(t, "measured", "--mode=observe")

		const bia = `plugin="itemops.io/sample-datamover",plugin_kind="BackupItemAction"`
		// Other tests of the suite leave finished operations of the same plugin
		// behind: the gauges count them too.
		phases := map[itemopsv1alpha1.OperationPhase]int{}
		list := &itemopsv1alpha1.ItemOperationList{}
		g.Expect(env.Client.List(context.Background(), list, client.InNamespace(envtest.VeleroNamespace))).To(Succeed())
		for _, op := range list.Items {
			if op.Spec.Plugin.Name == "itemops.io/sample-datamover" {
				phases[op.Status.Phase]++
			}
		}
		g.Expect(phases[itemopsv1alpha1.OperationPhaseInProgress]).To(Equal(1))
		reader := metricsReader(t)
		g.Eventually(func(g Gomega) string {
			_, body, err := getWith(reader, "https://"+address+"/metrics")
			g.Expect(err).NotTo(HaveOccurred())
			// Only itemops' own series, so that a failure shows them.
			var own []string
			for _, line := range strings.Split(body, "\n") {
				if strings.HasPrefix(line, "itemops_") && !strings.Contains(line, "_bucket{") {
					own = append(own, line)
				}
			}
			return strings.Join(own, "\n")
		}, 10*time.Second, 200*time.Millisecond).Should(And(
			ContainSubstring(fmt.Sprintf(`itemops_operations{parent_kind="Backup",phase="Completed",`+bia+`} %d`, phases[itemopsv1alpha1.OperationPhaseCompleted])),
			ContainSubstring(fmt.Sprintf(`itemops_operations{parent_kind="Backup",phase="Failed",`+bia+`} %d`, phases[itemopsv1alpha1.OperationPhaseFailed])),
			ContainSubstring(`itemops_operations{parent_kind="Backup",phase="InProgress",`+bia+`} 1`),
			ContainSubstring(`itemops_operation_bytes_total{`+bia+`} 1.073741824e+10`),
			ContainSubstring(`itemops_operations_stalled{`+bia+`} 0`),
			MatchRegexp(`itemops_progress_calls_total\{`+bia+`,result="ok"\} [1-9]`),
			MatchRegexp(`itemops_progress_calls_total\{`+bia+`,result="operation_failed"\} [1-9]`),
			ContainSubstring(`itemops_operation_duration_seconds_count{`+bia+`,result="Completed"} 1`),
			ContainSubstring(`itemops_operation_duration_seconds_count{`+bia+`,result="Failed"} 1`),
			MatchRegexp(`itemops_progress_call_duration_seconds_count\{`+bia+`\} [1-9]`),
			ContainSubstring(`itemops_operations_scrape_error 0`),
		))
	})

	// It checks the queries of the dashboard and the alerts against a
	// running itemops: once operations have completed, failed and been
	// cancelled, every metric they read is exported.
	It("exports every metric the dashboard and the alerts read", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		root, err := envtest.RepoRoot()
		g.Expect(err).NotTo(HaveOccurred())
		queries, err := monitoring.Queries(root)
		g.Expect(err).NotTo(HaveOccurred())
		names, err := monitoring.MetricNames(root, queries)
		g.Expect(err).NotTo(HaveOccurred())

		b, m, address := oneOfEachEnd(t, "dashboarded", "--mode=manage")
		ctx := context.Background()
		long := &itemopsv1alpha1.ItemOperation{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: "dashboarded-2"}, long)).To(Succeed())
		// A patch: itemops writes the operation too, and an update of what
		// was read may meet its write.
		patch := client.MergeFrom(long.DeepCopy())
		long.Spec.Cancel = true
		g.Expect(env.Client.Patch(ctx, long, patch)).To(Succeed())
		g.Eventually(func(g Gomega) []itemopsv1alpha1.OperationPhase { return operationPhases(g, b) }, 20*time.Second, 100*time.Millisecond).
			Should(ContainElement(itemopsv1alpha1.OperationPhaseCanceled), "manager output:\n%s", m.output.String())

		reader := metricsReader(t)
		g.Eventually(func(g Gomega) []string {
			families, err := scrape.Get(reader, "https://"+address+"/metrics")
			g.Expect(err).NotTo(HaveOccurred())
			var missing []string
			for i, q := range queries {
				for _, name := range names[i] {
					if !families.Exports(name) {
						missing = append(missing, fmt.Sprintf("%s (%s)", name, q.Where))
					}
				}
			}
			return missing
		}, 10*time.Second, 200*time.Millisecond).Should(BeEmpty(), "metrics the dashboard or the alerts read that itemops does not export")
	})

	// It runs two replicas
	// against one API server: only the leader reconciles; killed without a
	// chance to let go of the Lease, the other takes over once the lease
	// expires, and the backup completes.
	It("leader election hands over and the backup still completes", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		pluginDir, err := buildPlugins()
		g.Expect(err).NotTo(HaveOccurred())
		t.Setenv(sim.EnvStateDir, filepath.Join(t.TempDir(), "state"))

		first := startManager(t, pluginDir, "--mode=manage", "--leader-elect")
		g.Eventually(first.output.String, 30*time.Second, 100*time.Millisecond).Should(MatchRegexp("(?i)successfully acquired lease"), "client-go's leaderelection says it, capitalised since v0.35")
		second := startManager(t, pluginDir, "--mode=manage", "--leader-elect")
		g.Eventually(second.output.String, 30*time.Second, 100*time.Millisecond).Should(MatchRegexp("(?i)attempting to acquire leader lease"))

		// Long enough to outlive the first leader.
		b, _ := waitingBackup(t, "handover", []map[string]string{
			{sim.AnnotationSize: "20Mi", sim.AnnotationSpeed: "1Mi"},
			{sim.AnnotationSize: "20Mi", sim.AnnotationSpeed: "1Mi"},
		})
		g.Eventually(func(g Gomega) []itemopsv1alpha1.OperationPhase { return operationPhases(g, b) }, 20*time.Second, 100*time.Millisecond).
			Should(HaveEach(itemopsv1alpha1.OperationPhaseInProgress), "first:\n%s", first.output.String())
		g.Expect(first.output.String()).To(ContainSubstring("Starting workers"))
		g.Consistently(second.output.String, 2*time.Second, 200*time.Millisecond).ShouldNot(ContainSubstring("Starting workers"),
			"the standby reconciles nothing")

		first.stop(syscall.SIGKILL)
		killed := time.Now()
		g.Eventually(second.output.String, 40*time.Second, 100*time.Millisecond).Should(MatchRegexp("(?i)successfully acquired lease"), "client-go's leaderelection says it, capitalised since v0.35")
		took := time.Since(killed)
		t.Logf("the standby took over %s after the leader was killed", took.Round(100*time.Millisecond))
		g.Expect(took).To(BeNumerically("<", 15*time.Second+10*time.Second), "within the lease duration (15s) and a renewal round")

		g.Eventually(func(g Gomega) velerov1api.BackupPhase {
			got := &velerov1api.Backup{}
			g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), got)).To(Succeed())
			return got.Status.Phase
		}, 60*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhaseFinalizing), "second:\n%s", second.output.String())
		g.Expect(operationPhases(g, b)).To(HaveEach(itemopsv1alpha1.OperationPhaseCompleted))
	})
})
