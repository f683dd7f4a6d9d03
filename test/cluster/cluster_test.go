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

package cluster

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/compat"
	"github.com/itemops/itemops/test/plugins/sim"
	scrapepkg "github.com/itemops/itemops/test/scrape"
	"github.com/itemops/itemops/test/stack"
	"github.com/itemops/itemops/test/veleroenv"
)

// The plugins whose operations the Backups hold.
const (
	sampleDatamover = "itemops.io/sample-datamover"
	sampleRestorer  = "itemops.io/sample-restorer"
	csiBackupper    = "velero.io/csi-pvc-backupper"
	csiRestorer     = "velero.io/csi-pvc-restorer"
)

// leaseName is the manager's leader election Lease, in Velero's namespace.
const leaseName = "itemops.itemops.io"

// managerPods selects itemops' pods.
var managerPods = client.MatchingLabels{"app.kubernetes.io/name": "itemops", "app.kubernetes.io/component": "manager"}

// item is one object of an application namespace whose backup is an
// asynchronous operation: a ConfigMap the sample data mover uploads, or a
// PVC (mib > 0) holding that many MiB of files, which Velero's CSI data
// mover moves.
type item struct {
	name        string
	mib         int
	size, speed string
	failAt      int
	// crashUnder makes the plugin process that this program (velero)
	// started exit during its first Progress call after the end.
	crashUnder string
}

// appNamespace creates a namespace holding the items.
func appNamespace(ctx context.Context, name string, items ...item) {
	Expect(s.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	for _, it := range items {
		if it.mib > 0 {
			filledVolume(ctx, name, it.name, it.mib)
			continue
		}
		annotations := map[string]string{sim.AnnotationSize: it.size, sim.AnnotationSpeed: it.speed}
		if it.failAt > 0 {
			annotations[sim.AnnotationFailAt] = fmt.Sprint(it.failAt)
		}
		if it.crashUnder != "" {
			annotations[sim.AnnotationCrashOnceUnder] = it.crashUnder
		}
		Expect(s.Client.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: it.name, Namespace: name, Labels: map[string]string{sim.LabelSelect: "yes"}, Annotations: annotations},
			Data:       map[string]string{"item": it.name},
		})).To(Succeed())
	}
}

// run runs a command line as a user types it, in the stack's working
// directory, and returns its output.
func run(ctx context.Context, script string) string {
	out, err := s.Run(ctx, script)
	Expect(err).NotTo(HaveOccurred())
	return out
}

func getBackup(g Gomega, name string) *velerov1api.Backup {
	b := &velerov1api.Backup{}
	g.Expect(s.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: name}, b)).To(Succeed())
	return b
}

func backupPhase(name string) func(g Gomega) velerov1api.BackupPhase {
	return func(g Gomega) velerov1api.BackupPhase { return getBackup(g, name).Status.Phase }
}

// operationsOf lists a parent's ItemOperations by the name of the item
// each moves (a mirror's: pod:volume).
func operationsOf(g Gomega, kind, parent string) map[string]itemopsv1alpha1.ItemOperation {
	list := &itemopsv1alpha1.ItemOperationList{}
	g.Expect(s.Client.List(context.Background(), list, client.InNamespace(s.Namespace),
		client.MatchingLabels{itemopsv1alpha1.LabelParentKind: kind, itemopsv1alpha1.LabelParentName: parent})).To(Succeed())
	out := map[string]itemopsv1alpha1.ItemOperation{}
	for _, op := range list.Items {
		key := op.Spec.Resource.Name
		if op.Spec.Mirror != nil {
			// A pod's volume, as Velero names it.
			key += ":" + op.Spec.Mirror.Volume
		}
		out[key] = op
	}
	return out
}

// summary is what matters of each operation: its plugin and phase.
func summary(ops map[string]itemopsv1alpha1.ItemOperation) map[string]string {
	out := map[string]string{}
	for item, op := range ops {
		out[item] = op.Spec.Plugin.Name + " " + string(op.Status.Phase)
	}
	return out
}

// waitMoving waits until a parent has its n ItemOperations and one of
// them is seen part-way. An operation's first status is written once a
// progress interval (the chart's 30s) after itemops began to watch it,
// so the suite's operations run for a minute or more.
func waitMoving(ctx context.Context, kind, parent string, n int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		ops := operationsOf(g, kind, parent)
		g.Expect(ops).To(HaveLen(n))
		progress := map[string]string{}
		for item, op := range ops {
			progress[item] = fmt.Sprintf("%s %d/%d", op.Status.Phase, op.Status.NCompleted, op.Status.NTotal)
			if op.Status.Phase == itemopsv1alpha1.OperationPhaseInProgress && op.Status.NCompleted > 0 && op.Status.NCompleted < op.Status.NTotal {
				return
			}
		}
		g.Expect(progress).To(BeNil(), "no operation seen part-way")
	}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())
}

// cancelled lists the operations that were ever asked to cancel: by
// itemops' record (the Canceled condition) and by the sample plugins' own
// (every Cancel call they received).
func cancelled(g Gomega, ops map[string]itemopsv1alpha1.ItemOperation) []string {
	var out []string
	for item, op := range ops {
		if apimeta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionCanceled) != nil {
			out = append(out, item+" (condition Canceled)")
		}
		if !strings.HasPrefix(op.Spec.Plugin.Name, "itemops.io/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(s.SampleStateDir(), op.Spec.OperationID+".json"))
		g.Expect(err).NotTo(HaveOccurred())
		st := &sim.State{}
		g.Expect(json.Unmarshal(data, st)).To(Succeed())
		if st.Cancels > 0 {
			out = append(out, fmt.Sprintf("%s (%d Cancel calls)", item, st.Cancels))
		}
	}
	return out
}

// counters are a Backup's operation counters and errors: attempted,
// completed, failed, errors.
func counters(g Gomega, name string) []int {
	st := getBackup(g, name).Status
	return []int{st.BackupItemOperationsAttempted, st.BackupItemOperationsCompleted, st.BackupItemOperationsFailed, st.Errors}
}

// describedPhases counts the operation phases `velero <kind> describe
// --details` prints for a parent.
func describedPhases(ctx context.Context, kind, name string) map[string]int {
	out := run(ctx, fmt.Sprintf("velero %s describe %s --details", kind, name))
	phases := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^\s+Phase:\s+(\w+)\s*$`).FindAllStringSubmatch(out, -1) {
		phases[m[1]]++
	}
	return phases
}

// veleroRecord describes, for a failure message, what Velero recorded of
// a Backup (its phase, counters and errors, and `velero backup describe
// --details`) and what the sample plugin's processes say they answered.
func veleroRecord(ctx context.Context, backup string) func() string {
	return func() string {
		b := getBackup(Default, backup)
		describe, err := s.Run(ctx, fmt.Sprintf("velero backup describe %s --details", backup))
		if err != nil {
			describe += err.Error()
		}
		return fmt.Sprintf("Velero recorded Backup %s %s: operations attempted %d, completed %d, failed %d; errors %d\n"+
			"velero backup describe --details:\n%s\nthe sample plugin's account of the calls it took:\n%s",
			backup, b.Status.Phase, b.Status.BackupItemOperationsAttempted, b.Status.BackupItemOperationsCompleted,
			b.Status.BackupItemOperationsFailed, b.Status.Errors, describe, s.SampleCalls(specStart))
	}
}

// inFlight starts a Backup of a new namespace with one sample operation
// that fails at once and one that runs for a minute, and waits until the
// failure is counted (by whoever follows the operations now): a Backup
// waiting for its operations, one failure counted, at a switch.
func inFlight(ctx context.Context, namespace, backup string) {
	GinkgoHelper()
	appNamespace(ctx, namespace,
		item{name: "a-fails", size: "1Gi", speed: "64Mi", failAt: 10},
		item{name: "b-runs", size: "4Gi", speed: "64Mi"},
	)
	run(ctx, fmt.Sprintf("velero backup create %s --include-namespaces %s", backup, namespace))
	Eventually(func(g Gomega) []any { return []any{counters(g, backup), backupPhase(backup)(g)} }).WithContext(ctx).WithTimeout(2*time.Minute).
		Should(Equal([]any{[]int{2, 0, 1, 1}, velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed}),
			"the failure counted, the other operation running")
}

// endsCountedOnce waits for a Backup made by inFlight to end and checks
// that its failure was counted once, everywhere: counters, errors,
// Velero's own describe --details and, while itemops runs (followed), the
// ItemOperations. Without itemops they stay as it last saw them.
func endsCountedOnce(ctx context.Context, backup string, followed bool) {
	GinkgoHelper()
	Eventually(backupPhase(backup)).WithContext(ctx).WithTimeout(4 * time.Minute).Should(Equal(velerov1api.BackupPhasePartiallyFailed))
	// An ended Backup's counters and files no longer change.
	Expect(counters(Default, backup)).To(Equal([]int{2, 1, 1, 1}), "attempted, completed, failed, errors")
	if followed {
		Eventually(func(g Gomega) map[string]string { return summary(operationsOf(g, "Backup", backup)) }).
			WithContext(ctx).WithTimeout(time.Minute).Should(Equal(map[string]string{
			"a-fails": sampleDatamover + " Failed",
			"b-runs":  sampleDatamover + " Completed",
		}))
	}
	Expect(describedPhases(ctx, "backup", backup)).To(Equal(map[string]int{"Failed": 1, "Completed": 1}))
	Expect(cancelled(Default, operationsOf(Default, "Backup", backup))).To(BeEmpty())
}

// veleroControllers reports whether Velero runs its own operations controllers.
func veleroControllers(g Gomega) bool {
	velero := &appsv1.Deployment{}
	g.Expect(s.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: "velero"}, velero)).To(Succeed())
	return !slices.Contains(velero.Spec.Template.Spec.Containers[0].Args, "--disable-controllers=backup-operations,restore-operations")
}

// managers returns itemops' pods.
func managers(g Gomega) []corev1.Pod {
	pods := &corev1.PodList{}
	g.Expect(s.Client.List(context.Background(), pods, client.InNamespace(s.Namespace), managerPods)).To(Succeed())
	return pods.Items
}

func ready(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyManagers returns the names and images of itemops' Ready pods that
// are not being deleted.
func readyManagers(g Gomega) map[string]string {
	out := map[string]string{}
	for _, p := range managers(g) {
		if ready(p) && p.DeletionTimestamp == nil {
			out[p.Name] = p.Spec.Containers[0].Image
		}
	}
	return out
}

// leader is the pod holding the manager's Lease (its identity is the pod's
// name followed by a unique suffix).
func leader(g Gomega) string {
	lease := &coordinationv1.Lease{}
	g.Expect(s.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: leaseName}, lease)).To(Succeed())
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	name, _, _ := strings.Cut(holder, "_")
	return name
}

// watchExit runs `kubectl itemops watch` from the host and returns its
// exit code.
func watchExit(ctx context.Context, kind, name string) int {
	_, err := s.Run(ctx, fmt.Sprintf("kubectl itemops watch %s %s -n %s -o plain", kind, name, s.Namespace))
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	Expect(errors.As(err, &exit)).To(BeTrue(), "kubectl itemops watch did not run: %v", err)
	return exit.ExitCode()
}

// metricsToken is the token of the ServiceAccount docs/metrics.md binds to
// the chart's metrics-reader ClusterRole, as Prometheus' would be.
var metricsToken string

// scrape reads itemops' metrics through the metrics Service, from the
// host, as Prometheus does: over HTTPS with a metrics reader's token.
func scrape(g Gomega) string {
	code, body := scrapeAs(g, metricsToken)
	g.Expect(code).To(Equal(http.StatusOK), body)
	return body
}

// scrapeAs reads the metrics with a token (none when empty) and returns
// the status and the body.
func scrapeAs(g Gomega, token string) (int, string) {
	svc := &corev1.Service{}
	g.Expect(s.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: stack.Release + "-metrics"}, svc)).To(Succeed())
	return scrapeURL(g, fmt.Sprintf("https://%s:%d/metrics", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port), token)
}

// scrapePod reads one manager pod's own metrics, by its pod IP, with the
// metrics reader's token.
func scrapePod(g Gomega, pod corev1.Pod) scrapepkg.Families {
	var port int32
	for _, p := range pod.Spec.Containers[0].Ports {
		if p.Name == "metrics" {
			port = p.ContainerPort
		}
	}
	g.Expect(port).NotTo(BeZero(), "pod %s has no metrics port", pod.Name)
	code, body := scrapeURL(g, fmt.Sprintf("https://%s:%d/metrics", pod.Status.PodIP, port), metricsToken)
	g.Expect(code).To(Equal(http.StatusOK), body)
	families, err := scrapepkg.Parse(strings.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	return families
}

func scrapeURL(g Gomega, url, token string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	g.Expect(err).NotTo(HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// The chart's certificate is self-signed, as the ServiceMonitor takes it.
	httpClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed, on this node
	resp, err := httpClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, string(body)
}

// EnvContinue set to 1 runs every spec after one that failed, where the
// suite otherwise stops at its first failure (its specs build on each
// other): one run then shows the state of all of them, and a spec that
// needs what the failed one was to leave is skipped, naming it (needs).
// hack/test.sh, and so make test, sets it (docs/testing.md).
const EnvContinue = "ITEMOPS_CLUSTER_CONTINUE"

// ordered are the decorators of the suite's container, and then body.
func ordered(body func()) []any {
	if os.Getenv(EnvContinue) == "1" {
		return []any{Ordered, ContinueOnFailure, body}
	}
	return []any{Ordered, body}
}

var _ = Describe("itemops installed by the README beside velero install", ordered(func() {
	It("starts with the chart's defaults: one pod Ready through its probes, holding the lease, meeting restricted", func(ctx SpecContext) {
		Eventually(readyManagers).WithContext(ctx).WithTimeout(2 * time.Minute).Should(HaveLen(1))
		pods := managers(Default)
		Expect(pods).To(HaveLen(1))
		pod := pods[0]
		Expect(pod.Spec.Containers[0].Image).To(Equal(stack.ItemopsRepository + ":" + firstTag))
		var inits []string
		for _, st := range pod.Status.InitContainerStatuses {
			Expect(st.State.Terminated).NotTo(BeNil(), "init container %s", st.Name)
			Expect(st.State.Terminated.ExitCode).To(BeZero(), "init container %s", st.Name)
			inits = append(inits, st.Name)
		}
		Expect(inits).To(Equal([]string{"cp-plugin", "velero-builtin-plugins", "velero-plugin-for-aws", "itemops-sample-plugins"}))
		By("the token in the manager only, as the API server admitted the pod")
		const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
		for _, c := range pod.Spec.InitContainers {
			Expect(c.VolumeMounts).NotTo(ContainElement(HaveField("MountPath", tokenDir)), "init container %s", c.Name)
		}
		Expect(pod.Spec.Containers[0].VolumeMounts).To(ContainElement(HaveField("MountPath", tokenDir)))
		By("a plugin binary cannot be swapped from inside the manager")
		out, err := s.Run(ctx, "kubectl exec -n velero "+pod.Name+" -c manager -- /cp-plugin /cp-plugin /plugins/velero")
		Expect(err).To(HaveOccurred(), "the copy over /plugins/velero succeeded: %s", out)
		Expect(out).To(ContainSubstring("read-only file system"))
		Eventually(leader).WithContext(ctx).WithTimeout(time.Minute).Should(Equal(pod.Name))
		By("itemops' pods meet restricted in Velero's privileged namespace: only node-agent's do not")
		install, err := os.ReadFile(filepath.Join(s.Root, "docs", "install.md"))
		Expect(err).NotTo(HaveOccurred())
		dryRun, err := stack.READMEBlock(install, "restricted-dry-run")
		Expect(err).NotTo(HaveOccurred())
		warnings := run(ctx, dryRun)
		Expect(warnings).To(ContainSubstring(`violate the new PodSecurity enforce level "restricted`))
		Expect(warnings).To(MatchRegexp(`node-agent-\w+`), "node-agent's pod (root, host paths) fails restricted")
		Expect(warnings).NotTo(ContainSubstring(pod.Name))
		Expect(warnings).NotTo(ContainSubstring("itemops"))

		// The leader read Velero's release from its Deployment and ran the
		// built-in plugins' velero binary inside its own container.
		Eventually(func() string { return s.Logs(ctx, s.Namespace, "app.kubernetes.io/name=itemops", 2000) }).
			WithContext(ctx).WithTimeout(time.Minute).Should(MatchRegexp(
			`Velero's release.*"image":\s*"velero/velero:v1\.18\.3".*"support":\s*"Supported".*"builtinPlugins":\s*"v1\.18\.3"`))
		Eventually(func() string { return s.Logs(ctx, s.Namespace, "app.kubernetes.io/name=itemops", 2000) }).
			WithContext(ctx).WithTimeout(time.Minute).Should(MatchRegexp(
			`Kubernetes' release.*"version":\s*"v1\.\d+\.\d+".*"support":\s*"Supported"`))
		events := &corev1.EventList{}
		Expect(s.Client.List(ctx, events, client.InNamespace(s.Namespace))).To(Succeed())
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "Deployment" && e.InvolvedObject.Name == compat.VeleroDeployment {
				Expect(e.Reason).NotTo(BeElementOf(compat.ReasonVeleroUnsupported, compat.ReasonVeleroUntested,
					compat.ReasonBuiltinPluginsRelease), e.Message)
			}
		}
	})

	It("observe mode: mirrors a Backup's operations while Velero's own controllers end it", func(ctx SpecContext) {
		leaves(backupObserved)
		appNamespace(ctx, "shop",
			item{name: "orders", size: "8Gi", speed: "128Mi"},
			item{name: "payments", size: "2Gi", speed: "64Mi", failAt: 50},
			item{name: "data-0", mib: 24},
			item{name: "data-1", mib: 40},
		)
		run(ctx, "velero backup create observed --include-namespaces shop --snapshot-move-data")
		By("following the operations as they move")
		waitMoving(ctx, "Backup", "observed", 4)
		Eventually(backupPhase("observed")).WithContext(ctx).WithTimeout(4 * time.Minute).
			Should(Equal(velerov1api.BackupPhasePartiallyFailed))
		Eventually(func(g Gomega) map[string]string { return summary(operationsOf(g, "Backup", "observed")) }).
			WithContext(ctx).WithTimeout(time.Minute).Should(Equal(map[string]string{
			"orders":   sampleDatamover + " Completed",
			"payments": sampleDatamover + " Failed",
			"data-0":   csiBackupper + " Completed",
			"data-1":   csiBackupper + " Completed",
		}))
		Expect(cancelled(Default, operationsOf(Default, "Backup", "observed"))).To(BeEmpty())
		By("the data mover's operations moved the volumes' bytes, as node-agent counted them")
		// An operation's last progress may be written after its end.
		Eventually(func(g Gomega) map[string][]any {
			out := map[string][]any{}
			for _, name := range []string{"data-0", "data-1"} {
				op := operationsOf(g, "Backup", "observed")[name]
				out[name] = []any{op.Status.NCompleted, op.Status.NTotal, op.Status.OperationUnits}
			}
			return out
		}).WithContext(ctx).WithTimeout(settle).Should(Equal(map[string][]any{
			"data-0": {int64(24 << 20), int64(24 << 20), "Bytes"}, "data-1": {int64(40 << 20), int64(40 << 20), "Bytes"},
		}))
		By("velero backup describe --details")
		describe := run(ctx, "velero backup describe observed --details")
		Expect(describe).To(And(
			MatchRegexp(`Backup Item Action Plugin:\s+`+csiBackupper),
			MatchRegexp(`Backup Item Action Plugin:\s+`+sampleDatamover),
			MatchRegexp(`Phase:\s+Failed`),
			Not(MatchRegexp(`Phase:\s+(New|InProgress)`)),
		))
		By("scraping the metrics through the metrics Service: nothing without a token, all with a reader's")
		Eventually(func(g Gomega) int {
			code, body := scrapeAs(g, "")
			g.Expect(body).NotTo(ContainSubstring("itemops_"))
			return code
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Equal(http.StatusUnauthorized))
		By("a bearer token that is not a token: 401 within the client's 5 seconds, and a burst of 50 answered 401 or 429 without a log line")
		code, _ := scrapeAs(Default, "not-a-token")
		Expect(code).To(Equal(http.StatusUnauthorized))
		codes := make([]int, 50)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() {
				defer GinkgoRecover()
				codes[i], _ = scrapeAs(Default, fmt.Sprintf("not-a-token-%d", i))
			})
		}
		wg.Wait()
		for _, code := range codes {
			Expect(code).To(BeElementOf(http.StatusUnauthorized, http.StatusTooManyRequests))
		}
		Expect(run(ctx, "kubectl logs -n velero -l app.kubernetes.io/name=itemops,app.kubernetes.io/component=manager --tail=-1")).
			NotTo(ContainSubstring("Authentication failed"))
		Expect(s.RunDoc(ctx, "docs/metrics.md", "metrics-reader")).To(Succeed())
		metricsToken = strings.TrimSpace(run(ctx, "kubectl create token metrics-reader -n velero"))
		Eventually(scrape).WithContext(ctx).WithTimeout(time.Minute).Should(And(
			MatchRegexp(`itemops_operations\{[^}]*phase="Failed"[^}]*plugin="`+sampleDatamover+`"[^}]*\} 1`),
			MatchRegexp(`itemops_operations\{[^}]*phase="Completed"[^}]*plugin="`+csiBackupper+`"[^}]*\} 2`),
		))
		By("kubectl itemops watch, from the host")
		Expect(watchExit(ctx, "backup", "observed")).To(Equal(1), "the exit code of a PartiallyFailed backup")
	})

	It("observe mode: a plugin process that exits during Velero's Progress ends the ItemOperation as Velero recorded it", func(ctx SpecContext) {
		appNamespace(ctx, "ledger", item{name: "entries", size: "1Gi", speed: "64Mi", crashUnder: "velero"})
		run(ctx, "velero backup create verdict --include-namespaces ledger")
		By("Velero's record: the operation Failed, as its plugin process exited during its Progress call")
		Eventually(backupPhase("verdict")).WithContext(ctx).WithTimeout(3*time.Minute).Should(BeElementOf(
			velerov1api.BackupPhaseCompleted, velerov1api.BackupPhasePartiallyFailed, velerov1api.BackupPhaseFailed), "the Backup ends")
		recorded := veleroRecord(ctx, "verdict")
		// An ended Backup's phase, counters and files no longer change.
		Expect(backupPhase("verdict")(Default)).To(Equal(velerov1api.BackupPhasePartiallyFailed), recorded)
		Expect(counters(Default, "verdict")).To(Equal([]int{1, 0, 1, 1}), func() string {
			return "Velero's verdict: attempted, completed, failed, errors\n" + recorded()
		})
		Expect(describedPhases(ctx, "backup", "verdict")).To(Equal(map[string]int{"Failed": 1}), recorded)
		var op itemopsv1alpha1.ItemOperation
		Eventually(func(g Gomega) {
			op = operationsOf(g, "Backup", "verdict")["entries"]
			g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseFailed))
			differs := apimeta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionDiffersFromVelero)
			g.Expect(differs).NotTo(BeNil(), "conditions %+v", op.Status.Conditions)
			g.Expect(differs.Reason).To(Equal(itemopsv1alpha1.ReasonPolledCompleted))
			g.Expect(differs.Message).To(MatchRegexp(`^Velero recorded Failed \(.+\); (a retry of Progress answered|itemops' own Progress calls saw it) Completed`))
			g.Expect(op.Status.Error).NotTo(BeEmpty())
			g.Expect(differs.Message).To(ContainSubstring(op.Status.Error))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		// Events reach the API server after the status does.
		Eventually(func(g Gomega) []string {
			events := &corev1.EventList{}
			g.Expect(s.Client.List(ctx, events, client.InNamespace(s.Namespace))).To(Succeed())
			var reasons []string
			for _, e := range events.Items {
				if e.InvolvedObject.Name == op.Name && e.Type == corev1.EventTypeWarning {
					reasons = append(reasons, e.Reason)
				}
			}
			return reasons
		}).WithContext(ctx).WithTimeout(time.Minute).Should(ContainElement(itemopsv1alpha1.ConditionDiffersFromVelero))
		Expect(watchExit(ctx, "backup", "verdict")).To(Equal(1), "kubectl itemops shows Velero's verdict")
	})

	It("observe mode: a plugin binary swapped from the node shows PluginBinaryChanged on its operations, and is never run", func(ctx SpecContext) {
		var pod string
		Eventually(func(g Gomega) map[string]string {
			ready := readyManagers(g)
			for name := range ready {
				pod = name
			}
			return ready
		}).WithContext(ctx).WithTimeout(time.Minute).Should(HaveLen(1))
		binaryChangedAfterSwap(ctx, pod, "swap-observed", "swap-observed")
	})

	It("moves to manage mode with two replicas by the README's commands, a Backup counted by Velero in flight", func(ctx SpecContext) {
		needs(theMode)
		leaves(theMode)
		inFlight(ctx, "switch-1", "to-manage")
		Expect(s.RunREADME(ctx, "manage")).To(Succeed())
		Expect(s.WaitAvailable(ctx, s.Namespace, "velero", 3*time.Minute)).To(Succeed())
		velero := &appsv1.Deployment{}
		Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "velero"}, velero)).To(Succeed())
		Expect(velero.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--disable-controllers=backup-operations,restore-operations"))
		Eventually(readyManagers).WithContext(ctx).WithTimeout(2 * time.Minute).Should(HaveLen(2))
		Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: stack.Release}, &policyv1.PodDisruptionBudget{})).To(Succeed())
		By("one of them leading")
		Eventually(func(g Gomega) {
			l := leader(g)
			g.Expect(l).NotTo(BeEmpty(), "the Lease has a holder")
			g.Expect(readyManagers(g)).To(HaveKey(l), "the holder is one of the Ready pods")
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		By("the Backup Velero had counted a failure of ends with it counted once")
		endsCountedOnce(ctx, "to-manage", true)
	})

	// A gzip bomb in the bucket (a megabyte that inflates to a gigabyte:
	// Velero's own decoder would hold all of it) is measured, not read: its
	// Backup says why and ends PartiallyFailed, itemops stays Ready without
	// a restart, and a Backup beside it ends as usual. In manage mode, where
	// Velero does not read operations files itself.
	It("manage mode: a gzip bomb as a Backup's operations file leaves itemops Ready and the other Backups going", func(ctx SpecContext) {
		needs(theMode)
		restarts := func(g Gomega) map[string]int32 {
			out := map[string]int32{}
			for _, p := range managers(g) {
				for _, st := range p.Status.ContainerStatuses {
					out[p.Name] += st.RestartCount
				}
			}
			return out
		}
		before := restarts(Default)
		appNamespace(ctx, "beside", item{name: "papers", size: "2Gi", speed: "64Mi"})
		run(ctx, "velero backup create beside --include-namespaces beside")

		// Created waiting for its operations (Velero's Backup has no status
		// subresource), so that Velero's backup controller never runs it.
		bomb := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Name: "bomb", Namespace: s.Namespace},
			Spec: velerov1api.BackupSpec{StorageLocation: "default"},
			Status: velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations, BackupItemOperationsAttempted: 1,
				StartTimestamp: &metav1.Time{Time: time.Now()}}}
		var raw bytes.Buffer
		zw := gzip.NewWriter(&raw)
		_, err := zw.Write([]byte(`[`))
		Expect(err).NotTo(HaveOccurred())
		chunk := bytes.Repeat([]byte(" "), 1<<20)
		for range 1024 {
			_, err = zw.Write(chunk)
			Expect(err).NotTo(HaveOccurred())
		}
		_, err = zw.Write([]byte(`]`))
		Expect(err).NotTo(HaveOccurred())
		Expect(zw.Close()).To(Succeed())
		file := veleroenv.BackupOperationsFile(filepath.Join(s.Work, "volumes", "s3", stack.Bucket), bomb.Name)
		Expect(os.MkdirAll(filepath.Dir(file), 0o755)).To(Succeed())
		Expect(os.WriteFile(file, raw.Bytes(), 0o644)).To(Succeed())
		Expect(s.Client.Create(ctx, bomb)).To(Succeed())

		Eventually(backupPhase("bomb")).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal(velerov1api.BackupPhasePartiallyFailed))
		// The Event reaches the API server after the status its
		// controller wrote first (client-go sends Events from a queue of
		// its own): waited for.
		Eventually(func(g Gomega) []string {
			events := &corev1.EventList{}
			g.Expect(s.Client.List(ctx, events, client.InNamespace(s.Namespace))).To(Succeed())
			var reasons []string
			for _, e := range events.Items {
				if e.InvolvedObject.Kind == "Backup" && e.InvolvedObject.Name == "bomb" {
					reasons = append(reasons, e.Reason+": "+e.Message)
				}
			}
			return reasons
		}).WithContext(ctx).WithTimeout(time.Minute).Should(ContainElement(And(HavePrefix("OperationsFileTooLarge: "), ContainSubstring("--max-operations-file-inflated-bytes"))))
		Eventually(backupPhase("beside")).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Equal(velerov1api.BackupPhaseCompleted))
		Expect(readyManagers(Default)).To(HaveLen(2))
		Expect(restarts(Default)).To(Equal(before), "no itemops container restarted (out of memory)")
		// The Go runtime never gives its heap's address space back, so the
		// memory it obtained is the most it ever held: a decoder that had
		// read the gigabyte would show it here, or have been killed.
		for _, pod := range managers(Default) {
			limit := pod.Spec.Containers[0].Resources.Limits.Memory().Value()
			Expect(limit).To(BeNumerically(">", 0), "the chart sets a memory limit")
			obtained := scrapePod(Default, pod).Sum("go_memstats_sys_bytes", nil)
			Expect(obtained).To(And(BeNumerically(">", 0), BeNumerically("<", limit)),
				"pod %s obtained %.0f bytes, its limit is %d", pod.Name, obtained, limit)
		}
	})

	It("manage mode: a Backup ends right after its leader pod is force-deleted mid-flight", func(ctx SpecContext) {
		needs(theMode)
		appNamespace(ctx, "inventory",
			item{name: "stock", size: "6Gi", speed: "64Mi"},
			item{name: "volume-0", mib: 32},
		)
		run(ctx, "velero backup create managed --include-namespaces inventory --snapshot-move-data")
		waitMoving(ctx, "Backup", "managed", 2)
		old := leader(Default)
		By("force-deleting the leader " + old)
		Expect(s.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: old}},
			client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func(g Gomega) string {
			l := leader(g)
			g.Expect(l).NotTo(Equal(old))
			return l
		}).WithContext(ctx).WithTimeout(time.Minute).ShouldNot(BeEmpty())
		Eventually(backupPhase("managed")).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Equal(velerov1api.BackupPhaseCompleted))
		// In manage mode itemops ends a Backup only after it wrote each of
		// its operations' end: read once, they no longer change.
		ops := operationsOf(Default, "Backup", "managed")
		Expect(summary(ops)).To(Equal(map[string]string{"stock": sampleDatamover + " Completed", "volume-0": csiBackupper + " Completed"}))
		Expect(cancelled(Default, ops)).To(BeEmpty())
		b := getBackup(Default, "managed")
		Expect([]int{b.Status.BackupItemOperationsAttempted, b.Status.BackupItemOperationsCompleted, b.Status.BackupItemOperationsFailed}).To(Equal([]int{2, 2, 0}))
		Expect(run(ctx, "velero backup describe managed --details")).To(And(
			MatchRegexp(`Backup Item Action Plugin:\s+`+sampleDatamover),
			MatchRegexp(`Phase:\s+Completed`),
			Not(MatchRegexp(`Phase:\s+(New|InProgress|Failed)`)),
		))
		Expect(watchExit(ctx, "backup", "managed")).To(Equal(0), "the exit code of a Completed backup")
		Eventually(readyManagers).WithContext(ctx).WithTimeout(2 * time.Minute).Should(HaveLen(2))
	})

	It("manage mode: a plugin binary swapped from the node under the leader shows PluginBinaryChanged, and is never run", func(ctx SpecContext) {
		needs(theMode)
		var pod string
		Eventually(func(g Gomega) string {
			pod = leader(g)
			g.Expect(readyManagers(g)).To(HaveKey(pod))
			return pod
		}).WithContext(ctx).WithTimeout(2 * time.Minute).ShouldNot(BeEmpty())
		binaryChangedAfterSwap(ctx, pod, "swap-managed", "swap-managed")
	})

	It("helm upgrade to a second image tag mid-flight rolls the pods, and the operations end right", func(ctx SpecContext) {
		needs(theMode)
		leaves(theMode)
		appNamespace(ctx, "billing",
			item{name: "invoices", size: "6Gi", speed: "64Mi"},
			item{name: "ledger", mib: 32},
		)
		run(ctx, "velero backup create upgraded --include-namespaces billing --snapshot-move-data")
		waitMoving(ctx, "Backup", "upgraded", 2)
		run(ctx, "helm upgrade itemops charts/itemops -n velero --reuse-values --set image.tag="+secondTag+" --wait")
		By("every pod rolled to the second tag")
		Eventually(func(g Gomega) []string {
			var images []string
			for _, p := range managers(g) {
				g.Expect(ready(p)).To(BeTrue(), "pod %s Ready", p.Name)
				images = append(images, p.Spec.Containers[0].Image)
			}
			return images
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal([]string{
			stack.ItemopsRepository + ":" + secondTag, stack.ItemopsRepository + ":" + secondTag,
		}))
		Expect(readyManagers(Default)).To(HaveLen(2))
		Eventually(backupPhase("upgraded")).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Equal(velerov1api.BackupPhaseCompleted))
		// Manage mode: the operations ended before the Backup did.
		ops := operationsOf(Default, "Backup", "upgraded")
		Expect(summary(ops)).To(Equal(map[string]string{"invoices": sampleDatamover + " Completed", "ledger": csiBackupper + " Completed"}))
		Expect(cancelled(Default, ops)).To(BeEmpty())
	})

	It("restores a Backup: its operations end and decide the Restore's phase", func(ctx SpecContext) {
		needs(theMode, backupObserved)
		run(ctx, "velero restore create restored --from-backup observed --namespace-mappings shop:shop-restored")
		Eventually(func(g Gomega) velerov1api.RestorePhase {
			r := &velerov1api.Restore{}
			g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "restored"}, r)).To(Succeed())
			return r.Status.Phase
		}).WithContext(ctx).WithTimeout(4 * time.Minute).Should(Equal(velerov1api.RestorePhasePartiallyFailed))
		// Manage mode: the operations ended before the Restore did.
		Expect(summary(operationsOf(Default, "Restore", "restored"))).To(Equal(map[string]string{
			"orders":   sampleRestorer + " Completed",
			"payments": sampleRestorer + " Failed",
			"data-0":   csiRestorer + " Completed",
			"data-1":   csiRestorer + " Completed",
		}))
		By("the restored volumes hold the files written into the backed-up ones")
		for _, name := range []string{"data-0", "data-1"} {
			pvc := &corev1.PersistentVolumeClaim{}
			Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: "shop-restored", Name: name}, pvc)).To(Succeed())
			Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound), "restored PVC %s", name)
			Expect(volumeSum(ctx, "shop-restored", name)).To(Equal(volumeSums["shop/"+name]), "restored volume %s", name)
		}
		Expect(watchExit(ctx, "restore", "restored")).To(Equal(1), "the exit code of a PartiallyFailed restore")
	})

	whyOperationsWait()

	fileSystemBackups()

	It("manage -> observe by docs/velero.md's commands, a Backup counted by itemops in flight", func(ctx SpecContext) {
		needs(theMode)
		leaves(theMode)
		inFlight(ctx, "switch-2", "to-observe")
		Expect(s.RunDoc(ctx, "docs/velero.md", "to-observe")).To(Succeed())
		Expect(veleroControllers(Default)).To(BeTrue())
		Eventually(readyManagers).WithContext(ctx).WithTimeout(2 * time.Minute).Should(HaveLen(1))
		endsCountedOnce(ctx, "to-observe", true)
	})

	veleroStuckObserved()

	It("observe -> manage by docs/velero.md's commands, a Backup counted by Velero in flight", func(ctx SpecContext) {
		needs(theMode)
		leaves(theMode)
		inFlight(ctx, "switch-3", "to-manage-again")
		Expect(s.RunDoc(ctx, "docs/velero.md", "to-manage")).To(Succeed())
		Expect(s.WaitAvailable(ctx, s.Namespace, "velero", 3*time.Minute)).To(Succeed())
		Expect(veleroControllers(Default)).To(BeFalse())
		endsCountedOnce(ctx, "to-manage-again", true)
	})

	It("manage -> Velero alone by docs/velero.md's commands, a Backup and a Restore counted by itemops in flight", func(ctx SpecContext) {
		needs(theMode, backupObserved)
		leaves(theMode)
		run(ctx, "velero restore create rolled-back --from-backup observed --namespace-mappings shop:shop-rolled-back")
		var restoreErrors int
		Eventually(func(g Gomega) int {
			r := &velerov1api.Restore{}
			g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "rolled-back"}, r)).To(Succeed())
			restoreErrors = r.Status.Errors
			return r.Status.RestoreItemOperationsFailed
		}).WithContext(ctx).WithTimeout(3*time.Minute).Should(Equal(1), "itemops counted the failed download")
		inFlight(ctx, "switch-4", "to-velero")
		Expect(s.RunDoc(ctx, "docs/velero.md", "to-velero")).To(Succeed())
		Expect(managers(Default)).To(BeEmpty())
		Expect(veleroControllers(Default)).To(BeTrue())
		endsCountedOnce(ctx, "to-velero", false)
		restore := &velerov1api.Restore{}
		Eventually(func(g Gomega) velerov1api.RestorePhase {
			g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "rolled-back"}, restore)).To(Succeed())
			return restore.Status.Phase
		}).WithContext(ctx).WithTimeout(4 * time.Minute).Should(Equal(velerov1api.RestorePhasePartiallyFailed))
		Expect([]int{restore.Status.RestoreItemOperationsAttempted, restore.Status.RestoreItemOperationsCompleted,
			restore.Status.RestoreItemOperationsFailed, restore.Status.Errors}).To(Equal([]int{4, 3, 1, restoreErrors}),
			"attempted, completed, failed, errors: the failure itemops counted is not counted again")
		Expect(describedPhases(ctx, "restore", "rolled-back")).To(Equal(map[string]int{"Completed": 3, "Failed": 1}))
	})

	It("Velero alone -> manage by docs/velero.md's commands, a Backup counted by Velero in flight", func(ctx SpecContext) {
		needs(theMode)
		leaves(theMode)
		inFlight(ctx, "switch-5", "from-velero")
		Expect(s.RunDoc(ctx, "docs/velero.md", "from-velero-to-manage")).To(Succeed())
		Expect(veleroControllers(Default)).To(BeFalse())
		Eventually(readyManagers).WithContext(ctx).WithTimeout(2 * time.Minute).Should(HaveLen(1))
		endsCountedOnce(ctx, "from-velero", true)
	})

	It("helm uninstall keeps the CRD and the ItemOperations", func(ctx SpecContext) {
		needs(theMode)
		list := &itemopsv1alpha1.ItemOperationList{}
		Expect(s.Client.List(ctx, list, client.InNamespace(s.Namespace))).To(Succeed())
		before := len(list.Items)
		Expect(before).To(BeNumerically(">=", 10))
		run(ctx, "helm uninstall itemops -n velero --wait")
		Eventually(func(g Gomega) []corev1.Pod { return managers(g) }).WithContext(ctx).WithTimeout(time.Minute).Should(BeEmpty())
		Expect(s.Client.Get(ctx, client.ObjectKey{Name: "itemoperations.itemops.io"}, &apiextensionsv1.CustomResourceDefinition{})).To(Succeed())
		Expect(s.Client.List(ctx, list, client.InNamespace(s.Namespace))).To(Succeed())
		Expect(list.Items).To(HaveLen(before))
	})

	openshiftPass()
})...)
