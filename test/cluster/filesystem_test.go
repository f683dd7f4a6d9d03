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
	"context"
	"fmt"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/localcluster"
	"github.com/itemops/itemops/test/stack"
)

// podWithVolumes runs a pod that holds the claims mounted, as an
// application does while Velero backs its volumes up from the node: a
// file-system backup reads the volumes of running pods.
func podWithVolumes(ctx context.Context, namespace, name string, claims ...string) {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext:              stack.RestrictedPod(),
			Containers: []corev1.Container{{
				Name: "app", Image: localcluster.SandboxImage, ImagePullPolicy: corev1.PullNever,
				SecurityContext: stack.RestrictedContainer(),
			}},
		},
	}
	for _, claim := range claims {
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: claim, MountPath: "/" + claim})
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: claim, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	}
	Eventually(func() error { return s.Client.Create(ctx, pod) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	Eventually(func(g Gomega) corev1.PodPhase {
		g.Expect(s.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		return pod.Status.Phase
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Equal(corev1.PodRunning),
		func() string { return s.Diagnose(context.WithoutCancel(ctx), namespace) })
}

// fsApp creates a namespace whose pod holds a volume of each size (MiB),
// named data-0, data-1…, written with files first.
func fsApp(ctx context.Context, namespace string, mib ...int) {
	GinkgoHelper()
	Expect(s.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
	var claims []string
	for i, n := range mib {
		claim := fmt.Sprintf("data-%d", i)
		filledVolume(ctx, namespace, claim, n)
		claims = append(claims, claim)
	}
	podWithVolumes(ctx, namespace, "app", claims...)
}

// slowLocation makes the location behind the slow link, once.
func slowLocation(ctx context.Context) {
	GinkgoHelper()
	bsl := &velerov1api.BackupStorageLocation{}
	err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "slow"}, bsl)
	if apierrors.IsNotFound(err) {
		run(ctx, fmt.Sprintf("velero backup-location create slow --provider aws --bucket %s --config region=%s,s3ForcePathStyle=true,s3Url=%s",
			stack.SlowBucket, stack.Region, stack.SlowS3URL))
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	Eventually(func(g Gomega) velerov1api.BackupStorageLocationPhase {
		g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "slow"}, bsl)).To(Succeed())
		return bsl.Status.Phase
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal(velerov1api.BackupStorageLocationPhaseAvailable))
}

// mirrorsOf are a parent's mirrors of file-system backups or restores, by
// the pod volume each moves (its claim).
func mirrorsOf(g Gomega, kind, parent string) map[string]itemopsv1alpha1.ItemOperation {
	out := map[string]itemopsv1alpha1.ItemOperation{}
	for item, op := range operationsOf(g, kind, parent) {
		g.Expect(op.Spec.Mirror).NotTo(BeNil(), "ItemOperation %s of %s %s is a mirror", op.Name, kind, parent)
		g.Expect(op.Spec.Plugin).To(BeZero())
		g.Expect(item).To(Equal("app:"+op.Spec.Mirror.Volume), "ItemOperation %s mirrors a volume of the pod app", op.Name)
		out[op.Spec.Mirror.Volume] = op
	}
	return out
}

// mirrorsMoving waits until a parent has n mirrors and one of them is seen
// part-way.
func mirrorsMoving(ctx context.Context, kind, parent string, n int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		ops := mirrorsOf(g, kind, parent)
		g.Expect(ops).To(HaveLen(n))
		progress := map[string]string{}
		for volume, op := range ops {
			progress[volume] = fmt.Sprintf("%s %d/%d", op.Status.Phase, op.Status.NCompleted, op.Status.NTotal)
			if op.Status.Phase == itemopsv1alpha1.OperationPhaseInProgress && op.Status.NCompleted > 0 && op.Status.NCompleted < op.Status.NTotal {
				return
			}
		}
		g.Expect(progress).To(BeNil(), "no file-system backup seen part-way")
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

// mirrorEnds are a parent's mirrors as "phase done/total", by volume.
func mirrorEnds(g Gomega, kind, parent string) map[string]string {
	out := map[string]string{}
	for volume, op := range mirrorsOf(g, kind, parent) {
		out[volume] = fmt.Sprintf("%s %d/%d", op.Status.Phase, op.Status.NCompleted, op.Status.NTotal)
	}
	return out
}

// podVolumeBackups are a Backup's PodVolumeBackups, their phases by name.
func podVolumeBackups(g Gomega, backup string) map[string]string {
	list := &velerov1api.PodVolumeBackupList{}
	g.Expect(s.Client.List(context.Background(), list, client.InNamespace(s.Namespace),
		client.MatchingLabels{velerov1api.BackupNameLabel: backup})).To(Succeed())
	out := map[string]string{}
	for _, p := range list.Items {
		out[p.Name] = string(p.Status.Phase)
	}
	return out
}

// onlyPodVolumeBackup is the one PodVolumeBackup of a Backup.
func onlyPodVolumeBackup(g Gomega, backup string) *velerov1api.PodVolumeBackup {
	list := &velerov1api.PodVolumeBackupList{}
	g.Expect(s.Client.List(context.Background(), list, client.InNamespace(s.Namespace),
		client.MatchingLabels{velerov1api.BackupNameLabel: backup})).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1))
	return &list.Items[0]
}

// waitingMessage is an operation's Waiting condition's message, empty
// when it has none.
func waitingMessage(op itemopsv1alpha1.ItemOperation) string {
	if c := apimeta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionWaiting); c != nil {
		return c.Message
	}
	return ""
}

// fileSystemBackups runs Velero's file-system backup and restore, through
// its real node-agent and kopia, and what itemops shows of them.
func fileSystemBackups() {
	It("file-system backup: each PodVolumeBackup an ItemOperation moving its bytes, ended as Velero ended it; its restore gives back the same files", func(ctx SpecContext) {
		fsApp(ctx, "fs-shop", 40, 24)
		slowLocation(ctx)
		run(ctx, "velero backup create fs-observed --include-namespaces fs-shop --default-volumes-to-fs-backup --storage-location slow")
		By("the PodVolumeBackups mirrored, their bytes moving over the slow link")
		// Held part-way for a moment, so that itemops, which writes moving
		// progress once per progress interval, shows it part-way however
		// fast the link is today.
		DeferCleanup(func() { _ = os.Remove(s.SlowLinkPause()) })
		// kopia counts bytes before it knows the total: held once one is
		// known to be part-way.
		Eventually(func(g Gomega) []string {
			list := &velerov1api.PodVolumeBackupList{}
			g.Expect(s.Client.List(ctx, list, client.InNamespace(s.Namespace), client.MatchingLabels{velerov1api.BackupNameLabel: "fs-observed"})).To(Succeed())
			var partWay []string
			for _, p := range list.Items {
				if done, total := p.Status.Progress.BytesDone, p.Status.Progress.TotalBytes; done > 0 && done < total {
					partWay = append(partWay, p.Name)
				}
			}
			return partWay
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(200 * time.Millisecond).ShouldNot(BeEmpty())
		Expect(os.WriteFile(s.SlowLinkPause(), nil, 0o644)).To(Succeed())
		mirrorsMoving(ctx, "Backup", "fs-observed", 2)
		Expect(os.Remove(s.SlowLinkPause())).To(Succeed())
		Expect(run(ctx, "kubectl get itemoperations -n velero -l itemops.io/parent-name=fs-observed")).To(MatchRegexp(`MIRRORS[\s\S]*PodVolumeBackup`))
		Eventually(backupPhase("fs-observed")).WithContext(ctx).WithTimeout(5 * time.Minute).Should(Equal(velerov1api.BackupPhaseCompleted))
		Eventually(func(g Gomega) map[string]string { return mirrorEnds(g, "Backup", "fs-observed") }).WithContext(ctx).WithTimeout(time.Minute).
			Should(Equal(map[string]string{"data-0": fmt.Sprintf("Completed %d/%d", 40<<20, 40<<20), "data-1": fmt.Sprintf("Completed %d/%d", 24<<20, 24<<20)}))
		Expect(counters(Default, "fs-observed")).To(Equal([]int{0, 0, 0, 0}), "no mirror among Velero's plugin operations, and no error")

		By("the restore into another namespace: each PodVolumeRestore an ItemOperation, the same files back")
		run(ctx, "velero restore create fs-restored --from-backup fs-observed --namespace-mappings fs-shop:fs-shop-restored")
		Eventually(func(g Gomega) string { return parentPhase(g, "Restore", "fs-restored") }).WithContext(ctx).WithTimeout(6 * time.Minute).
			Should(Equal(string(velerov1api.RestorePhaseCompleted)))
		Eventually(func(g Gomega) map[string]string { return mirrorEnds(g, "Restore", "fs-restored") }).WithContext(ctx).WithTimeout(time.Minute).
			Should(Equal(map[string]string{"data-0": fmt.Sprintf("Completed %d/%d", 40<<20, 40<<20), "data-1": fmt.Sprintf("Completed %d/%d", 24<<20, 24<<20)}))
		// The restored pod starts once its restore helper has found the
		// restores done and removed their marks (.velero/) from the volumes.
		Eventually(func(g Gomega) corev1.PodPhase {
			pod := &corev1.Pod{}
			g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: "fs-shop-restored", Name: "app"}, pod)).To(Succeed())
			return pod.Status.Phase
		}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Equal(corev1.PodRunning),
			func() string { return s.Diagnose(context.WithoutCancel(ctx), "fs-shop-restored") })
		Expect(run(ctx, "kubectl -n fs-shop-restored logs app -c restore-wait")).To(ContainSubstring("All restic restores are done"),
			"Velero's restore helper found each volume restored")
		for _, claim := range []string{"data-0", "data-1"} {
			Expect(restoredVolumeSum(ctx, "fs-shop-restored", claim)).To(Equal(volumeSums["fs-shop/"+claim]), "restored volume %s", claim)
		}
	})

	It("why a file-system backup waits: the ConfigMap node-agent's pods take their environment from, deleted, is PodNotRunning, until it is back", func(ctx SpecContext) {
		fsApp(ctx, "fs-env", 8)
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
		run(ctx, "velero backup create fs-env --include-namespaces fs-env --default-volumes-to-fs-backup")
		op := causeShown(ctx, "Backup", "fs-env", "app:data-0", itemopsv1alpha1.WaitingPodNotRunning, `does not run: CreateContainerConfigError: configmap "node-agent-env" not found`,
			func(g Gomega) {
				pod := dataMoverPod(g, onlyPodVolumeBackup(g, "fs-env").Name)
				g.Expect(pod.Status.ContainerStatuses).NotTo(BeEmpty())
				g.Expect(pod.Status.ContainerStatuses[0].State.Waiting).NotTo(BeNil())
				g.Expect(pod.Status.ContainerStatuses[0].State.Waiting.Reason).To(Equal("CreateContainerConfigError"))
			})
		Expect(run(ctx, "kubectl itemops why backup fs-env -n velero")).To(And(ContainSubstring("is InProgress"), ContainSubstring("waiting for PodNotRunning"),
			ContainSubstring("PodVolumeBackup/")))
		run(ctx, envConfig)
		waitEnds(ctx, "Backup", "fs-env", string(velerov1api.BackupPhaseCompleted), map[string][]string{op.Name: {itemopsv1alpha1.WaitingPodNotRunning}})
	})

	It("why a file-system backup waits: node-agent's loadConcurrency of 1 with two volumes is NodeAgentBusy, naming the one ahead", func(ctx SpecContext) {
		fsApp(ctx, "fs-busy", 24, 24)
		nodeAgentConfig(ctx, `{"loadConcurrency":{"globalConfig":1}}`)
		DeferCleanup(func(ctx SpecContext) { nodeAgentConfig(ctx, `{}`) })
		slowLocation(ctx)
		run(ctx, "velero backup create fs-busy --include-namespaces fs-busy --default-volumes-to-fs-backup --storage-location slow")
		op := causeShown(ctx, "Backup", "fs-busy", "", itemopsv1alpha1.WaitingNodeAgentBusy, `loadConcurrency of 1 data path\(s\): 1 ahead \(PodVolumeBackup/fs-busy-`,
			func(g Gomega) {
				phases := map[string]int{}
				for _, phase := range podVolumeBackups(g, "fs-busy") {
					phases[phase]++
				}
				g.Expect(phases).To(And(HaveKeyWithValue("InProgress", 1), HaveKey("Prepared")))
			})
		itemopsShows(ctx, "kubectl itemops get backup fs-busy -n velero", MatchRegexp(`NodeAgentBusy`))
		waitEnds(ctx, "Backup", "fs-busy", string(velerov1api.BackupPhaseCompleted),
			map[string][]string{op.Name: {itemopsv1alpha1.WaitingNodeAgentBusy}})
		Eventually(func(g Gomega) map[string]string { return mirrorEnds(g, "Backup", "fs-busy") }).WithContext(ctx).WithTimeout(time.Minute).
			Should(Equal(map[string]string{"data-0": fmt.Sprintf("Completed %d/%d", 24<<20, 24<<20), "data-1": fmt.Sprintf("Completed %d/%d", 24<<20, 24<<20)}))
	})

	It("why a file-system backup waits: a link to the bucket that passes nothing is NotMoving; kubectl itemops cancel has node-agent cancel it, and the Backup ends PartiallyFailed", func(ctx SpecContext) {
		fsApp(ctx, "fs-stall", 32)
		slowLocation(ctx)
		DeferCleanup(func() { _ = os.Remove(s.SlowLinkPause()) })
		run(ctx, "velero backup create fs-stall --include-namespaces fs-stall --default-volumes-to-fs-backup --storage-location slow")
		By("bytes moving, then the link paused")
		Eventually(func(g Gomega) int64 { return onlyPodVolumeBackup(g, "fs-stall").Status.Progress.BytesDone }).
			WithContext(ctx).WithTimeout(3 * time.Minute).Should(BeNumerically(">", 0))
		Expect(os.WriteFile(s.SlowLinkPause(), nil, 0o644)).To(Succeed())
		// Shown once the PodVolumeBackup's bytes have stood still for the
		// not-moving window and one progress write interval more (itemops'
		// clock starts at the last progress it wrote).
		notMoving := managerDuration(Default, "not-moving-after") + managerDuration(Default, "progress-update-interval")
		last, changed := int64(-1), time.Now()
		op := causeShown(ctx, "Backup", "fs-stall", "app:data-0", itemopsv1alpha1.WaitingNotMoving, `no progress since .*checked: PodVolumeBackup fs-stall-\w+ \(InProgress\)`,
			func(g Gomega) {
				pvb := onlyPodVolumeBackup(g, "fs-stall")
				g.Expect(pvb.Status.Phase).To(Equal(velerov1api.PodVolumeBackupPhaseInProgress))
				if done := pvb.Status.Progress.BytesDone; done != last {
					last, changed = done, time.Now()
				}
				g.Expect(time.Since(changed)).To(BeNumerically(">=", notMoving), "PodVolumeBackup %s's bytes (%d) standing still", pvb.Name, last)
			})
		itemopsShows(ctx, "kubectl itemops why backup fs-stall -n velero", ContainSubstring("waiting for NotMoving"))

		By("kubectl itemops cancel, naming the PodVolumeBackup")
		pvb := onlyPodVolumeBackup(Default, "fs-stall")
		Expect(run(ctx, "kubectl itemops cancel backup fs-stall -n velero --operation "+pvb.Name)).To(ContainSubstring("cancel requested"))
		Eventually(func(g Gomega) bool {
			g.Expect(s.Client.Get(ctx, client.ObjectKeyFromObject(pvb), pvb)).To(Succeed())
			return pvb.Spec.Cancel
		}).WithContext(ctx).WithTimeout(2*pollInterval+settle).Should(BeTrue(), "spec.cancel set on PodVolumeBackup %s", pvb.Name)
		// kopia, its upload held by the link, stops once its request
		// returns: the link passes bytes again.
		Eventually(func(g Gomega) string {
			got := operationsOf(g, "Backup", "fs-stall")["app:data-0"]
			return fmt.Sprintf("%s %s", got.Status.Phase, onlyPodVolumeBackup(g, "fs-stall").Status.Phase)
		}).WithContext(ctx).WithTimeout(2*pollInterval+settle).Should(Equal("Canceling Canceling"), "node-agent cancelling it, and the mirror Canceling")
		// The message is written at the mirror's next reconcile after
		// node-agent's write: waited for, not read once.
		Eventually(func(g Gomega) string { return waitingMessage(operationsOf(g, "Backup", "fs-stall")["app:data-0"]) }).
			WithContext(ctx).WithTimeout(2*pollInterval + settle).Should(And(
			HavePrefix("itemops requested the cancel of PodVolumeBackup "+pvb.Name+" at "),
			ContainSubstring("spec.cancel is set on PodVolumeBackup "+pvb.Name+", which is Canceling")))
		Expect(os.Remove(s.SlowLinkPause())).To(Succeed())
		Eventually(func(g Gomega) string {
			got := operationsOf(g, "Backup", "fs-stall")["app:data-0"]
			return fmt.Sprintf("%s %s", got.Status.Phase, onlyPodVolumeBackup(g, "fs-stall").Status.Phase)
		}).WithContext(ctx).WithTimeout(5*time.Minute).Should(Equal("Canceled Canceled"), "node-agent cancels it, and the mirror ends as it ended")
		Eventually(backupPhase("fs-stall")).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Equal(velerov1api.BackupPhasePartiallyFailed))
		historyShows(ctx, op.Name, ContainElement(HavePrefix("Waiting NotMoving")))
	})
}
