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
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/controllers"
	"github.com/itemops/itemops/test/localcluster"
	"github.com/itemops/itemops/test/stack"
)

// settle is what the status write, the caches and the test's own reads add
// to the two polls (pollInterval) within which a cause shows once the
// cluster shows it, on a loaded machine.
const settle = 30 * time.Second

// managerDuration is the duration flag name of itemops' running manager,
// as the chart's values rendered it.
func managerDuration(g Gomega, name string) time.Duration {
	pods := managers(g)
	g.Expect(pods).NotTo(BeEmpty())
	args := pods[0].Spec.Containers[0].Args
	for _, arg := range args {
		if value, ok := strings.CutPrefix(arg, "--"+name+"="); ok {
			d, err := time.ParseDuration(value)
			g.Expect(err).NotTo(HaveOccurred())
			return d
		}
	}
	g.Expect(args).To(ContainElement(HavePrefix("--" + name + "=")))
	return 0
}

// causeShown waits until the cluster itself shows what holds a parent's
// data movement (held, the test's own reading of the objects, while an
// ItemOperation of the parent exists), then until one of the parent's
// operations (the one of item, or any when item is "") says it waits for
// reason with evidence matching: within two polls. It returns that
// operation. The cluster is given six minutes: a scheduler retries a pod it
// found unschedulable at the latest after five.
func causeShown(ctx context.Context, kind, parent, item, reason, evidence string, held func(g Gomega)) itemopsv1alpha1.ItemOperation {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		ops := operationsOf(g, kind, parent)
		g.Expect(ops).NotTo(BeEmpty(), "the %s's ItemOperations", kind)
		if item != "" {
			g.Expect(ops).To(HaveKey(item))
		}
		held(g)
	}).WithContext(ctx).WithTimeout(6*time.Minute).WithPolling(time.Second).Should(Succeed(), "the cluster showing what holds %s %s", kind, parent)
	since := time.Now()
	var waiting itemopsv1alpha1.ItemOperation
	Eventually(func(g Gomega) {
		var shown []string
		for name, op := range operationsOf(g, kind, parent) {
			c := apimeta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionWaiting)
			if item != "" && name != item {
				continue
			}
			if c == nil {
				shown = append(shown, name+": no Waiting condition")
				continue
			}
			shown = append(shown, fmt.Sprintf("%s: %s %s: %s", name, c.Status, c.Reason, c.Message))
			if c.Status == metav1.ConditionTrue && c.Reason == reason && op.Status.WaitingFor == reason && regexp.MustCompile(evidence).MatchString(c.Message) {
				waiting = op
				return
			}
		}
		g.Expect(shown).To(BeNil(), "no operation waits for %s (%s) yet", reason, evidence)
		g.Expect(shown).NotTo(BeNil(), "no operation of %s %s", kind, parent)
	}).WithContext(ctx).WithTimeout(2*pollInterval+settle).WithPolling(time.Second).Should(Succeed(),
		"an operation of %s %s waiting for %s within two polls", kind, parent, reason)
	GinkgoWriter.Printf("%s shown on %s %s after the cluster showed it (the guarantee: %s)\n", reason, waiting.Name,
		time.Since(since).Round(time.Second), 2*pollInterval)
	return waiting
}

// waitEnds waits until the operations that waited no longer wait and
// completed, and the parent ended as want; then checks that each
// operation had a Waiting Event for each cause the spec made it wait for
// (waited, by operation; a cause may be listed more than once), and for no
// other but a passing one once, one Event each time a cause began (not
// one per poll).
func waitEnds(ctx context.Context, kind, parent string, want string, waited map[string][]string) {
	GinkgoHelper()
	Eventually(func(g Gomega) map[string]string {
		out := map[string]string{}
		for _, op := range operationsOf(g, kind, parent) {
			if _, ok := waited[op.Name]; !ok {
				continue
			}
			c := apimeta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionWaiting)
			g.Expect(c).NotTo(BeNil(), op.Name)
			out[op.Name] = fmt.Sprintf("%s %s waitingFor=%q", op.Status.Phase, c.Status, op.Status.WaitingFor)
		}
		return out
	}).WithContext(ctx).WithTimeout(4 * time.Minute).Should(And(HaveLen(len(waited)),
		HaveEach(Equal(`Completed False waitingFor=""`))))
	Eventually(func(g Gomega) string { return parentPhase(g, kind, parent) }).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal(want))
	// The Events are recorded after the status: the last ones are waited for.
	Eventually(func(g Gomega) {
		for name, reasons := range waited {
			history := waitingHistory(g, name)
			began := map[string]int{}
			ends := 0
			for _, h := range history {
				if _, ended := strings.CutPrefix(h, string(controllers.EventWaitEnded)+" "); ended {
					ends++
					continue
				}
				began[strings.TrimPrefix(h, string(controllers.EventWaiting)+" ")]++
			}
			// One Event each time a cause began: after a wait ended or another
			// cause held the operation, never one per poll. How often a cause
			// begins is the cluster's (a transfer that starts slowly on a
			// loaded machine stalls before the spec pauses its link, too), and
			// the order of Events recorded more than once (their count) is
			// lost: a cause began at most once more than the changes that
			// could have ended it.
			for cause, n := range began {
				others := 0
				for c, m := range began {
					if c != cause {
						others += m
					}
				}
				g.Expect(n).To(BeNumerically("<=", 1+ends+others),
					"%s's Waiting Events: %v: more Events for %s than changes between, one per poll", name, history, cause)
			}
			for cause := range passing {
				if !slices.Contains(reasons, cause) && began[cause] == 1 {
					delete(began, cause)
				}
			}
			g.Expect(slices.Sorted(maps.Keys(began))).To(Equal(slices.Compact(slices.Sorted(slices.Values(reasons)))),
				"a Waiting Event for each of %s's causes, and no other: %v", name, history)
		}
	}).WithContext(ctx).WithTimeout(settle).Should(Succeed())
}

// passing are the causes that a movement may show on its own, without the
// spec making them, for as long as one poll can catch: every movement waits
// while the CSI driver cuts its snapshot (SnapshotNotReady), and a
// namespace's first movement to a location while Velero initializes its
// repository (RepositoryNotReady); and on a loaded machine a transfer
// whose bytes stand still for --not-moving-after while kopia prepares it
// (NotMoving: a first make test, building beside the suite, showed it
// once on a DataUpload that waited its turn of loadConcurrency). waitEnds
// accepts one Event of such a cause beside the ones made, never more.
var passing = map[string]bool{
	itemopsv1alpha1.WaitingSnapshotNotReady:   true,
	itemopsv1alpha1.WaitingRepositoryNotReady: true,
	itemopsv1alpha1.WaitingNotMoving:          true,
}

func parentPhase(g Gomega, kind, name string) string {
	if kind == "Restore" {
		r := &velerov1api.Restore{}
		g.Expect(s.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: name}, r)).To(Succeed())
		return string(r.Status.Phase)
	}
	return string(getBackup(g, name).Status.Phase)
}

// historyShows waits until an ItemOperation's waitingHistory matches:
// client-go's recorder writes Events after the status that caused them.
func historyShows(ctx context.Context, operation string, matcher types.GomegaMatcher) {
	GinkgoHelper()
	Eventually(func(g Gomega) []string { return waitingHistory(g, operation) }).WithContext(ctx).WithTimeout(settle).
		Should(matcher, "the Waiting Events of ItemOperation %s", operation)
}

// waitingHistory lists an ItemOperation's Waiting and WaitEnded Events in
// the order they were recorded, each as its reason and cause ("Waiting
// NoProgress", "WaitEnded NoProgress"); an Event recorded n times (the
// same message again) is listed n times.
func waitingHistory(g Gomega, operation string) []string {
	events := &corev1.EventList{}
	g.Expect(s.Client.List(context.Background(), events, client.InNamespace(s.Namespace))).To(Succeed())
	var mine []corev1.Event
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "ItemOperation" && e.InvolvedObject.Name == operation &&
			(e.Reason == string(controllers.EventWaiting) || e.Reason == string(controllers.EventWaitEnded)) {
			mine = append(mine, e)
		}
	}
	// client-go's recorder names an Event after its object and the
	// nanosecond it was first recorded, in hexadecimal: finer than its
	// timestamps' seconds.
	recorded := func(e corev1.Event) (time.Time, uint64) {
		_, suffix, _ := strings.Cut(strings.TrimPrefix(e.Name, operation), ".")
		nanos, _ := strconv.ParseUint(suffix, 16, 64)
		return e.FirstTimestamp.Time, nanos
	}
	slices.SortStableFunc(mine, func(a, b corev1.Event) int {
		at, an := recorded(a)
		bt, bn := recorded(b)
		if c := at.Compare(bt); c != 0 && (an == 0 || bn == 0) {
			return c
		}
		return cmp.Compare(an, bn)
	})
	var out []string
	for _, e := range mine {
		cause := strings.TrimPrefix(e.Message, "no longer waits on ")
		cause, _, _ = strings.Cut(cause, ":")
		for range max(int(e.Count), 1) {
			out = append(out, e.Reason+" "+cause)
		}
	}
	return out
}

// movements are the DataUploads of a Backup, or the DataDownloads of a
// Restore, as Velero labels them: phase by name.
func movements(g Gomega, kind, parent string) map[string]string {
	out := map[string]string{}
	if kind == "Restore" {
		list := &velerov2alpha1.DataDownloadList{}
		g.Expect(s.Client.List(context.Background(), list, client.InNamespace(s.Namespace),
			client.MatchingLabels{velerov1api.RestoreNameLabel: parent})).To(Succeed())
		for _, d := range list.Items {
			out[d.Name] = string(d.Status.Phase)
		}
		return out
	}
	list := &velerov2alpha1.DataUploadList{}
	g.Expect(s.Client.List(context.Background(), list, client.InNamespace(s.Namespace),
		client.MatchingLabels{velerov1api.BackupNameLabel: parent})).To(Succeed())
	for _, d := range list.Items {
		out[d.Name] = string(d.Status.Phase)
	}
	return out
}

// nodeAgentConfigured is whether node-agent's DaemonSet was given the
// ConfigMap nodeAgentConfig writes.
var nodeAgentConfigured bool

// nodeAgentConfig writes node-agent's ConfigMap as an administrator does
// and restarts node-agent, which reads it at start; the first time it
// names the ConfigMap in node-agent's arguments (velero install
// --node-agent-configmap).
func nodeAgentConfig(ctx context.Context, config string) {
	GinkgoHelper()
	run(ctx, fmt.Sprintf("kubectl -n velero create configmap node-agent-config --from-literal=config.json='%s' --dry-run=client -o yaml | kubectl apply -f -", config))
	if !nodeAgentConfigured {
		run(ctx, `kubectl -n velero patch daemonset node-agent --type json -p '[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--node-agent-configmap=node-agent-config"}]'`)
		nodeAgentConfigured = true
	} else {
		run(ctx, "kubectl -n velero rollout restart daemonset/node-agent")
	}
	run(ctx, "kubectl -n velero rollout status daemonset/node-agent --timeout=3m")
}

// dataMoverPod is the data mover's pod of a movement: node-agent names it
// after the DataUpload or DataDownload.
func dataMoverPod(g Gomega, name string) *corev1.Pod {
	pod := &corev1.Pod{}
	g.Expect(s.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: name}, pod)).To(Succeed())
	return pod
}

// onlyMovement is the one movement of a parent.
func onlyMovement(g Gomega, kind, parent string) (string, string) {
	m := movements(g, kind, parent)
	g.Expect(m).To(HaveLen(1))
	for name, phase := range m {
		return name, phase
	}
	return "", ""
}

// whyOperationsWait reproduces, for real, each cause of waiting of
// Velero's data mover that itemops names, and its end.
func whyOperationsWait() {
	It("why an operation waits: a taint the data mover's pod does not tolerate is PodUnschedulable, until it is removed", func(ctx SpecContext) {
		leaves(backupWhyTaint)
		appNamespace(ctx, "why-taint", item{name: "tainted", mib: 16})
		taintNode(ctx)
		run(ctx, "velero backup create why-taint --include-namespaces why-taint --snapshot-move-data")
		// The scheduler may first find the pod's volume not yet bound
		// (Velero makes both at once) and say so; it tries again once the
		// volume binds, at the latest when it retries every unschedulable
		// pod (five minutes): the cluster shows the taint from then on.
		op := causeShown(ctx, "Backup", "why-taint", "tainted", itemopsv1alpha1.WaitingPodUnschedulable, `cannot be scheduled: .*untolerated taint`,
			func(g Gomega) {
				name, _ := onlyMovement(g, "Backup", "why-taint")
				c := podCondition(dataMoverPod(g, name), corev1.PodScheduled)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Reason).To(Equal(corev1.PodReasonUnschedulable))
				g.Expect(c.Message).To(ContainSubstring("untolerated taint"))
			})
		itemopsShows(ctx, "kubectl itemops why backup why-taint -n velero", ContainSubstring("waiting for PodUnschedulable"))
		run(ctx, "kubectl taint node "+localcluster.NodeName+" itemops.io/maintenance-")
		waitEnds(ctx, "Backup", "why-taint", string(velerov1api.BackupPhaseCompleted), map[string][]string{op.Name: {itemopsv1alpha1.WaitingPodUnschedulable}})
	})

	It("why an operation waits: a snapshot the CSI driver is still copying is SnapshotNotReady, then SnapshotFailed with the driver's error, until the driver makes it", func(ctx SpecContext) {
		appNamespace(ctx, "why-snapshot", item{name: "reserve", mib: 16})
		failFile := filepath.Join(s.CSIDataDir(), "fail-snapshot", volumeHandle(ctx, "why-snapshot", "reserve"))
		Expect(os.WriteFile(failFile, nil, 0o644)).To(Succeed())
		DeferCleanup(func() { _ = os.Remove(failFile) })
		run(ctx, "velero backup create why-snapshot --include-namespaces why-snapshot --snapshot-move-data")
		snapshotOf := func(g Gomega) snapshotv1.VolumeSnapshot {
			list := &snapshotv1.VolumeSnapshotList{}
			g.Expect(s.Client.List(ctx, list, client.InNamespace("why-snapshot"))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			g.Expect(list.Items[0].Status).NotTo(BeNil())
			g.Expect(movements(g, "Backup", "why-snapshot")).To(HaveLen(1))
			return list.Items[0]
		}
		op := causeShown(ctx, "Backup", "why-snapshot", "reserve", itemopsv1alpha1.WaitingSnapshotNotReady, `velero-reserve-\w+ of DataUpload why-snapshot-\w+ is not ready to use`,
			func(g Gomega) {
				vs := snapshotOf(g)
				g.Expect(vs.Status.BoundVolumeSnapshotContentName).NotTo(BeNil())
				g.Expect(vs.Status.ReadyToUse).To(HaveValue(BeFalse()))
				g.Expect(vs.Status.Error).To(BeNil())
			})
		By("the driver's copy fails")
		Expect(os.WriteFile(failFile, []byte("snapshot reserve of pool p1 exhausted"), 0o644)).To(Succeed())
		causeShown(ctx, "Backup", "why-snapshot", "reserve", itemopsv1alpha1.WaitingSnapshotFailed, `snapshot reserve of pool p1 exhausted`,
			func(g Gomega) { g.Expect(snapshotOf(g).Status.Error).NotTo(BeNil()) })
		itemopsShows(ctx, "kubectl itemops why backup why-snapshot -n velero", ContainSubstring("waiting for SnapshotFailed"))
		Expect(os.Remove(failFile)).To(Succeed())
		waitEnds(ctx, "Backup", "why-snapshot", string(velerov1api.BackupPhaseCompleted),
			map[string][]string{op.Name: {itemopsv1alpha1.WaitingSnapshotNotReady, itemopsv1alpha1.WaitingSnapshotFailed}})
	})

	It("why an operation waits: a ConfigMap node-agent's pods take their environment from, deleted, is PodNotRunning, until it is back", func(ctx SpecContext) {
		// Velero fails a data movement whose pod cannot pull its image
		// (IsPodUnrecoverable), so a pod that cannot start is one whose
		// container cannot be made: it inherits node-agent's envFrom.
		appNamespace(ctx, "why-env", item{name: "envless", mib: 8})
		const envConfig = `kubectl -n velero create configmap node-agent-env --from-literal=ITEMOPS_EXAMPLE=1`
		run(ctx, envConfig)
		run(ctx, `kubectl -n velero patch daemonset node-agent --type json -p '[{"op":"add","path":"/spec/template/spec/containers/0/envFrom","value":[{"configMapRef":{"name":"node-agent-env"}}]}]'`)
		DeferCleanup(func(ctx SpecContext) {
			run(ctx, `kubectl -n velero patch daemonset node-agent --type json -p '[{"op":"remove","path":"/spec/template/spec/containers/0/envFrom"}]'`)
			run(ctx, "kubectl -n velero delete configmap node-agent-env --ignore-not-found")
			run(ctx, "kubectl -n velero rollout status daemonset/node-agent --timeout=3m")
		})
		run(ctx, "kubectl -n velero rollout status daemonset/node-agent --timeout=3m")
		run(ctx, "kubectl -n velero delete configmap node-agent-env")
		run(ctx, "velero backup create why-env --include-namespaces why-env --snapshot-move-data")
		op := causeShown(ctx, "Backup", "why-env", "envless", itemopsv1alpha1.WaitingPodNotRunning, `does not run: CreateContainerConfigError: configmap "node-agent-env" not found`,
			func(g Gomega) {
				name, _ := onlyMovement(g, "Backup", "why-env")
				pod := dataMoverPod(g, name)
				g.Expect(pod.Status.ContainerStatuses).NotTo(BeEmpty())
				g.Expect(pod.Status.ContainerStatuses[0].State.Waiting).NotTo(BeNil())
				g.Expect(pod.Status.ContainerStatuses[0].State.Waiting.Reason).To(Equal("CreateContainerConfigError"))
			})
		itemopsShows(ctx, "kubectl itemops why backup why-env -n velero", ContainSubstring("waiting for PodNotRunning"))
		run(ctx, envConfig)
		waitEnds(ctx, "Backup", "why-env", string(velerov1api.BackupPhaseCompleted), map[string][]string{op.Name: {itemopsv1alpha1.WaitingPodNotRunning}})
	})

	It("why an operation waits: node-agent's backupPVC StorageClass missing is VolumeNotProvisioned, until the class exists", func(ctx SpecContext) {
		appNamespace(ctx, "why-class", item{name: "classless", mib: 16})
		nodeAgentConfig(ctx, `{"backupPVC":{"`+stack.StorageClass+`":{"storageClass":"csi-itemops-backup"}}}`)
		DeferCleanup(func(ctx SpecContext) { nodeAgentConfig(ctx, `{}`) })
		run(ctx, "velero backup create why-class --include-namespaces why-class --snapshot-move-data")
		op := causeShown(ctx, "Backup", "why-class", "classless", itemopsv1alpha1.WaitingVolumeNotProvisioned, `csi-itemops-backup.*not found`,
			func(g Gomega) {
				name, _ := onlyMovement(g, "Backup", "why-class")
				pvc := &corev1.PersistentVolumeClaim{}
				g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, pvc)).To(Succeed())
				g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimPending))
			})
		itemopsShows(ctx, "kubectl itemops why backup why-class -n velero", ContainSubstring("waiting for VolumeNotProvisioned"))
		run(ctx, `kubectl apply -f - <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: csi-itemops-backup
provisioner: `+stack.Driver+`
EOF`)
		waitEnds(ctx, "Backup", "why-class", string(velerov1api.BackupPhaseCompleted), map[string][]string{op.Name: {itemopsv1alpha1.WaitingVolumeNotProvisioned}})
	})

	It("why an operation waits: node-agent's loadConcurrency of 1 with three volumes is NodeAgentBusy, naming the one ahead", func(ctx SpecContext) {
		appNamespace(ctx, "why-busy", item{name: "first", mib: 24}, item{name: "second", mib: 24}, item{name: "third", mib: 24})
		nodeAgentConfig(ctx, `{"loadConcurrency":{"globalConfig":1}}`)
		DeferCleanup(func(ctx SpecContext) { nodeAgentConfig(ctx, `{}`) })
		By("a location behind a slow link, so that each transfer lasts")
		run(ctx, fmt.Sprintf("velero backup-location create slow --provider aws --bucket %s --config region=%s,s3ForcePathStyle=true,s3Url=%s",
			stack.SlowBucket, stack.Region, stack.SlowS3URL))
		Eventually(func(g Gomega) velerov1api.BackupStorageLocationPhase {
			bsl := &velerov1api.BackupStorageLocation{}
			g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "slow"}, bsl)).To(Succeed())
			return bsl.Status.Phase
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal(velerov1api.BackupStorageLocationPhaseAvailable))
		run(ctx, "velero backup create why-busy --include-namespaces why-busy --snapshot-move-data --storage-location slow")
		op := causeShown(ctx, "Backup", "why-busy", "", itemopsv1alpha1.WaitingNodeAgentBusy, `loadConcurrency of 1 data path\(s\): 1 ahead \(DataUpload/why-busy-`,
			func(g Gomega) {
				phases := map[string]int{}
				for _, phase := range movements(g, "Backup", "why-busy") {
					phases[phase]++
				}
				g.Expect(phases).To(And(HaveKeyWithValue("InProgress", 1), HaveKey("Prepared")))
			})
		itemopsShows(ctx, "kubectl itemops why backup why-busy -n velero", ContainSubstring("waiting for NodeAgentBusy"))
		itemopsShows(ctx, "kubectl itemops get backup why-busy -n velero", MatchRegexp(`NodeAgentBusy`))
		// Behind the first volume, and again behind the other if node-agent
		// takes that one next: between the two nothing holds it for a moment.
		waitEnds(ctx, "Backup", "why-busy", string(velerov1api.BackupPhaseCompleted),
			map[string][]string{op.Name: {itemopsv1alpha1.WaitingNodeAgentBusy, itemopsv1alpha1.WaitingNodeAgentBusy}})
		By("the bytes moved over the slow link, as node-agent counted them")
		for name, op := range operationsOf(Default, "Backup", "why-busy") {
			Expect([]any{op.Status.NCompleted, op.Status.NTotal}).To(Equal([]any{int64(24 << 20), int64(24 << 20)}), name)
		}
	})

	It("why an operation waits: a transfer whose link to the bucket passes nothing is NoProgress after the stall period, until bytes move again", func(ctx SpecContext) {
		const stallAfter = 30 * time.Second
		run(ctx, fmt.Sprintf("helm upgrade itemops charts/itemops -n velero --reuse-values --set stallAfter=%s --wait", stallAfter))
		DeferCleanup(func(ctx SpecContext) {
			_ = os.Remove(s.SlowLinkPause())
			run(ctx, "helm upgrade itemops charts/itemops -n velero --reuse-values --set stallAfter=15m --wait")
		})
		appNamespace(ctx, "why-stall", item{name: "stuck", mib: 32})
		run(ctx, "velero backup create why-stall --include-namespaces why-stall --snapshot-move-data --storage-location slow")
		By("bytes moving, then the link paused")
		Eventually(func(g Gomega) int64 {
			list := &velerov2alpha1.DataUploadList{}
			g.Expect(s.Client.List(ctx, list, client.InNamespace(s.Namespace),
				client.MatchingLabels{velerov1api.BackupNameLabel: "why-stall"})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			return list.Items[0].Status.Progress.BytesDone
		}).WithContext(ctx).WithTimeout(3 * time.Minute).Should(BeNumerically(">", 0))
		Expect(os.WriteFile(s.SlowLinkPause(), nil, 0o644)).To(Succeed())
		// The cluster shows the stall once the DataUpload's bytes have not
		// moved for the stall period (kopia counts what it has read, not
		// what reached the bucket: they stop a moment after the link does)
		// and one progress write interval more: itemops' stall clock starts
		// at the last progress it wrote, and it writes moving progress at
		// most once per progress update interval (the chart's
		// progressUpdateInterval).
		progressUpdateInterval := managerDuration(Default, "progress-update-interval")
		last, changed := int64(-1), time.Now()
		op := causeShown(ctx, "Backup", "why-stall", "stuck", itemopsv1alpha1.WaitingNoProgress, `progress has not moved since`,
			func(g Gomega) {
				name, phase := onlyMovement(g, "Backup", "why-stall")
				g.Expect(phase).To(Equal("InProgress"))
				du := &velerov2alpha1.DataUpload{}
				g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, du)).To(Succeed())
				if done := du.Status.Progress.BytesDone; done != last {
					last, changed = done, time.Now()
				}
				g.Expect(time.Since(changed)).To(BeNumerically(">=", stallAfter+progressUpdateInterval), "DataUpload %s's bytes (%d) standing still", name, last)
			})
		itemopsShows(ctx, "kubectl itemops why backup why-stall -n velero", ContainSubstring("waiting for NoProgress"))
		Expect(os.Remove(s.SlowLinkPause())).To(Succeed())
		waitEnds(ctx, "Backup", "why-stall", string(velerov1api.BackupPhaseCompleted), map[string][]string{op.Name: {itemopsv1alpha1.WaitingNoProgress}})
	})

	It("why an operation waits: a BackupRepository still being made is RepositoryNotReady, until Velero has made it", func(ctx SpecContext) {
		appNamespace(ctx, "why-repo", item{name: "first-of-its-kind", mib: 8})
		By("the Backup's own files in the bucket first, the data mover's pod held by a taint; then the link paused and the pod let run")
		taintNode(ctx)
		DeferCleanup(func() { _ = os.Remove(s.SlowLinkPause()) })
		run(ctx, "velero backup create why-repo --include-namespaces why-repo --snapshot-move-data --storage-location slow")
		Eventually(backupPhase("why-repo")).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal(velerov1api.BackupPhaseWaitingForPluginOperations))
		// itemops reads the Backup's operations from its record in the
		// bucket, through the link too: the link is paused once it has.
		causeShown(ctx, "Backup", "why-repo", "first-of-its-kind", itemopsv1alpha1.WaitingPodUnschedulable, `untolerated taint`,
			func(g Gomega) {
				_, phase := onlyMovement(g, "Backup", "why-repo")
				g.Expect(phase).To(Equal("Accepted"))
			})
		Expect(os.WriteFile(s.SlowLinkPause(), nil, 0o644)).To(Succeed())
		run(ctx, "kubectl taint node "+localcluster.NodeName+" itemops.io/maintenance-")
		op := causeShown(ctx, "Backup", "why-repo", "first-of-its-kind", itemopsv1alpha1.WaitingRepositoryNotReady, `BackupRepository velero/why-repo-slow-kopia\S* that DataUpload why-repo-\w+ moves data through is (New|NotReady)`,
			func(g Gomega) {
				_, phase := onlyMovement(g, "Backup", "why-repo")
				g.Expect(phase).To(Equal("InProgress"))
				repos := &velerov1api.BackupRepositoryList{}
				g.Expect(s.Client.List(ctx, repos, client.InNamespace(s.Namespace))).To(Succeed())
				var phases []velerov1api.BackupRepositoryPhase
				for _, r := range repos.Items {
					if r.Spec.VolumeNamespace == "why-repo" {
						phases = append(phases, r.Status.Phase)
					}
				}
				g.Expect(phases).To(HaveLen(1))
				g.Expect(phases).NotTo(ContainElement(velerov1api.BackupRepositoryPhaseReady))
			})
		itemopsShows(ctx, "kubectl itemops why backup why-repo -n velero", ContainSubstring("waiting for RepositoryNotReady"))
		Expect(os.Remove(s.SlowLinkPause())).To(Succeed())
		waitEnds(ctx, "Backup", "why-repo", string(velerov1api.BackupPhaseCompleted),
			map[string][]string{op.Name: {itemopsv1alpha1.WaitingPodUnschedulable, itemopsv1alpha1.WaitingRepositoryNotReady}})
	})

	It("why a Backup waits: queued behind a Backup whose snapshot the driver refuses, it shows its place and the one running, until it runs", func(ctx SpecContext) {
		appNamespace(ctx, "why-first", item{name: "refused", mib: 8})
		appNamespace(ctx, "why-queued", item{name: "behind", mib: 8})
		refuseFile := filepath.Join(s.CSIDataDir(), "refuse-snapshot", volumeHandle(ctx, "why-first", "refused"))
		Expect(os.WriteFile(refuseFile, []byte("the array is read-only"), 0o644)).To(Succeed())
		DeferCleanup(func() { _ = os.Remove(refuseFile) })
		run(ctx, "velero backup create why-first --include-namespaces why-first --snapshot-move-data")
		Eventually(backupPhase("why-first")).WithContext(ctx).WithTimeout(time.Minute).Should(Equal(velerov1api.BackupPhaseInProgress))
		run(ctx, "velero backup create why-queued --include-namespaces why-queued --snapshot-move-data")
		Eventually(func(g Gomega) []any {
			b := getBackup(g, "why-queued")
			return []any{b.Status.Phase, b.Status.QueuePosition}
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Equal([]any{velerov1api.BackupPhaseQueued, 1}))
		itemopsShows(ctx, "kubectl itemops get backup why-queued -n velero", ContainSubstring("Queued (#1)"))
		itemopsShows(ctx, "kubectl itemops why backup why-queued -n velero", MatchRegexp(`waiting for Queued: it is #1 in Velero's backup queue.*running now: why-first \(InProgress\)`))
		By("the queue in the metrics, as Prometheus scrapes them: one Queued, growing older, behind one InProgress")
		var first float64
		Eventually(func(g Gomega) {
			body := scrape(g)
			g.Expect(body).To(ContainSubstring(`itemops_backup_queue_backups{phase="Queued"} 1`))
			g.Expect(body).To(MatchRegexp(`itemops_backup_queue_backups\{phase="InProgress"\} [1-9]`))
			first = gaugeValue(g, body, `itemops_backup_queue_oldest_seconds{phase="Queued"}`)
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		Eventually(func(g Gomega) float64 {
			return gaugeValue(g, scrape(g), `itemops_backup_queue_oldest_seconds{phase="Queued"}`)
		}).WithContext(ctx).WithTimeout(time.Minute).Should(BeNumerically(">", first))
		By("the queue in a real Prometheus with the chart's alerts (waitingInQueueFor: 20): ItemOpsBackupWaitingInQueue fires behind the Backup that does not end, ItemOpsBackupQueueStuck does not")
		prom := startPrometheus(ctx, "--set metrics.prometheusRule.waitingInQueueFor=20")
		Eventually(func(g Gomega) []float64 {
			return queryValues(ctx, g, prom, `itemops_backup_queue_backups{namespace="velero",phase="Queued"}`)
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Equal([]float64{1}))
		Eventually(func(g Gomega) map[string]string {
			return alertStates(ctx, g, prom)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(HaveKeyWithValue("ItemOpsBackupWaitingInQueue", "firing"))
		Expect(alertStates(ctx, Default, prom)).NotTo(HaveKey("ItemOpsBackupQueueStuck"), "a Backup runs: the queue is not stuck")
		Expect(os.Remove(refuseFile)).To(Succeed())
		for _, name := range []string{"why-first", "why-queued"} {
			Eventually(backupPhase(name)).WithContext(ctx).WithTimeout(4*time.Minute).Should(Equal(velerov1api.BackupPhaseCompleted), name)
		}
		By("resolved once the queue let it go")
		Eventually(func(g Gomega) map[string]string {
			return alertStates(ctx, g, prom)
		}).WithContext(ctx).WithTimeout(time.Minute).ShouldNot(HaveKey("ItemOpsBackupWaitingInQueue"))
		Expect(queryValues(ctx, Default, prom, `itemops_backup_queue_oldest_seconds{namespace="velero",phase="Queued"}`)).To(Equal([]float64{0}))
	})

	It("why an operation waits: no node-agent on the node is NoNodeAgent, until its DaemonSet runs there again", func(ctx SpecContext) {
		needs(backupWhyTaint)
		run(ctx, `kubectl -n velero patch daemonset node-agent -p '{"spec":{"template":{"spec":{"nodeSelector":{"itemops.io/no-such-node":"true"}}}}}'`)
		DeferCleanup(func(ctx SpecContext) {
			_, _ = s.Run(ctx, `kubectl -n velero patch daemonset node-agent -p '{"spec":{"template":{"spec":{"nodeSelector":null}}}}'`)
		})
		Eventually(func(g Gomega) []corev1.Pod {
			pods := &corev1.PodList{}
			g.Expect(s.Client.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabels{"role": "node-agent"})).To(Succeed())
			return pods.Items
		}).WithContext(ctx).WithTimeout(2*time.Minute).Should(BeEmpty(), "node-agent's pod gone")
		run(ctx, "velero restore create why-taint-back --from-backup why-taint --namespace-mappings why-taint:why-taint-restored")
		op := causeShown(ctx, "Restore", "why-taint-back", "tainted", itemopsv1alpha1.WaitingNoNodeAgent, `waits to be accepted, and no node-agent pod runs`,
			func(g Gomega) {
				_, phase := onlyMovement(g, "Restore", "why-taint-back")
				g.Expect(phase).To(BeElementOf("", "New"))
			})
		itemopsShows(ctx, "kubectl itemops why restore why-taint-back -n velero", ContainSubstring("waiting for NoNodeAgent"))
		run(ctx, `kubectl -n velero patch daemonset node-agent -p '{"spec":{"template":{"spec":{"nodeSelector":null}}}}'`)
		waitEnds(ctx, "Restore", "why-taint-back", string(velerov1api.RestorePhaseCompleted), map[string][]string{op.Name: {itemopsv1alpha1.WaitingNoNodeAgent}})
		Expect(volumeSum(ctx, "why-taint-restored", "tainted")).To(Equal(volumeSums["why-taint/tainted"]), "the restored volume's files")
	})

	veleroStuckManaged()
}

// gaugeValue is the value of one series in a scrape's body.
func gaugeValue(g Gomega, body, series string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if value, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(value, 64)
			g.Expect(err).NotTo(HaveOccurred(), line)
			return v
		}
	}
	g.Expect(body).To(ContainSubstring(series))
	return 0
}

// volumeHandle is the CSI volume of a PVC: the driver's ID of it.
func volumeHandle(ctx context.Context, namespace, claim string) string {
	GinkgoHelper()
	pvc := &corev1.PersistentVolumeClaim{}
	Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: claim}, pvc)).To(Succeed())
	pv := &corev1.PersistentVolume{}
	Expect(s.Client.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv)).To(Succeed())
	return pv.Spec.CSI.VolumeHandle
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// taintNode taints the one node against the data mover's pods
// (itemops.io/maintenance, NoSchedule) until the spec ends. node-agent
// tolerates the taint, as an administrator lets it on nodes under
// maintenance; the data mover's pods do not inherit it (Velero passes on
// only some cloud providers' tolerations). Without it Velero finds no
// node-agent ready on this one node (its DaemonSet counts no pod on a node
// it may not schedule to) and fails the volume at once.
func taintNode(ctx SpecContext) {
	const tolerate = `[{"op":"add","path":"/spec/template/spec/tolerations","value":[{"key":"itemops.io/maintenance","operator":"Exists","effect":"NoSchedule"}]}]`
	run(ctx, "kubectl -n velero patch daemonset node-agent --type json -p '"+tolerate+"'")
	DeferCleanup(func(ctx SpecContext) {
		run(ctx, `kubectl -n velero patch daemonset node-agent --type json -p '[{"op":"remove","path":"/spec/template/spec/tolerations"}]'`)
		run(ctx, "kubectl -n velero rollout status daemonset/node-agent --timeout=3m")
	})
	run(ctx, "kubectl -n velero rollout status daemonset/node-agent --timeout=3m")
	run(ctx, "kubectl taint node "+localcluster.NodeName+" itemops.io/maintenance=now:NoSchedule")
	DeferCleanup(func(ctx SpecContext) {
		_, _ = s.Run(ctx, "kubectl taint node "+localcluster.NodeName+" itemops.io/maintenance- || true")
	})
	Eventually(func(g Gomega) int32 {
		ds := &appsv1.DaemonSet{}
		g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "node-agent"}, ds)).To(Succeed())
		return ds.Status.NumberReady
	}).WithContext(ctx).WithTimeout(time.Minute).Should(BeNumerically(">", 0), "node-agent ready on the tainted node, as Velero checks it")
}
