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

package controllers

import (
	"context"
	"fmt"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
	"github.com/itemops/itemops/internal/why"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
)

// waiting is an operation's Waiting condition as "status/reason", and its waitingFor.
func waiting(op *itemopsv1alpha1.ItemOperation) func(g Gomega) string {
	return func(g Gomega) string {
		got := get(g, op)
		c := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionWaiting)
		if c == nil {
			return "none, waitingFor=" + got.Status.WaitingFor
		}
		return fmt.Sprintf("%s/%s, waitingFor=%s", c.Status, c.Reason, got.Status.WaitingFor)
	}
}

// waitingMessage is the message of an operation's Waiting condition.
func waitingMessage(g Gomega, op *itemopsv1alpha1.ItemOperation) string {
	c := meta.FindStatusCondition(get(g, op).Status.Conditions, itemopsv1alpha1.ConditionWaiting)
	g.Expect(c).NotTo(BeNil())
	return c.Message
}

// eventMessages returns the messages of the Events of reason about op.
func eventMessages(g Gomega, op *itemopsv1alpha1.ItemOperation, reason kube.EventReason) []string {
	list := &corev1.EventList{}
	g.Expect(env.Client.List(context.Background(), list, client.InNamespace(op.Namespace))).To(Succeed())
	var messages []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == op.Name && e.InvolvedObject.Kind == "ItemOperation" && e.Reason == string(reason) {
			messages = append(messages, e.Message)
		}
	}
	return messages
}

var _ = Describe("Why an operation waits", Label("envtest"), func() {
	It("progress standing still is NotMoving after the short window, then NoProgress once stalled, each said once", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "10Mi", sim.AnnotationStallAt: "40"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)
		g.Eventually(waiting(op), 10*time.Second, 100*time.Millisecond).Should(Equal("True/NoProgress, waitingFor=NoProgress"))
		g.Expect(waitingMessage(g, op)).To(ContainSubstring("progress has not moved since"))
		g.Eventually(func(g Gomega) []string { return eventMessages(g, op, EventWaiting) }, 5*time.Second).Should(
			ConsistOf(HavePrefix("NotMoving: no progress since"), HavePrefix("NoProgress: progress has not moved since")))
		g.Expect(eventMessages(g, op, EventWaiting)).To(ContainElement(ContainSubstring("checked: the plugin's progress")))
		// Polled on, it says so once.
		g.Consistently(func(g Gomega) []string { return eventMessages(g, op, EventWaiting) }, 10*testSync, testSync).Should(HaveLen(2))
	})

	// Every cause of Velero's data mover, read by the real gatherer from
	// the objects Velero and the cluster write, as the API server keeps
	// them. The plugin is not installed in this suite: the cause is all
	// that moves.
	It("each cause of a data movement is read from the cluster, and clears", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		ns := envtest.VeleroNamespace
		backup := newBackup(t)
		id := fmt.Sprintf("du-wait-%d", seq.Add(1))
		op := newOperation(t, backup, itemopsv1alpha1.DataUploadPlugin, id)
		name := fmt.Sprintf("%s-x7k2p", backup.Name)
		within := 5 * time.Second

		du := &velerov2alpha1.DataUpload{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{velerov1api.AsyncOperationIDLabel: id}},
			Spec: velerov2alpha1.DataUploadSpec{SnapshotType: velerov2alpha1.SnapshotTypeCSI, SourcePVC: "data", SourceNamespace: "shop",
				BackupStorageLocation: "default", CSISnapshot: &velerov2alpha1.CSISnapshotSpec{VolumeSnapshot: "velero-data-abc", StorageClass: "fast"}},
		}
		g.Expect(env.Client.Create(ctx, du)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(ctx, du) })
		setPhase := func(edit func(*velerov2alpha1.DataUploadStatus)) {
			g.Eventually(func() error {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(du), du); err != nil {
					return err
				}
				edit(&du.Status)
				return env.Client.Update(ctx, du)
			}, within).Should(Succeed())
		}

		By("New, and no node-agent runs")
		g.Eventually(waiting(op), within, testSync).Should(Equal("True/NoNodeAgent, waitingFor=NoNodeAgent"))
		g.Expect(waitingMessage(g, op)).To(ContainSubstring("no node-agent pod runs"))

		By("node-agent runs: the cause clears, and the plugin that is not installed is what holds the operation")
		agent := runningPod(g, ns, "node-agent-abcde", "node-1", map[string]string{"role": "node-agent"})
		g.Eventually(waiting(op), within, testSync).Should(Equal("False/NotWaiting, waitingFor=" + itemopsv1alpha1.ReasonPluginNotFound))

		By("Accepted, its snapshot not ready yet, then failed")
		setPhase(func(s *velerov2alpha1.DataUploadStatus) {
			s.Phase, s.AcceptedByNode = velerov2alpha1.DataUploadPhaseAccepted, "node-1"
		})
		g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})).To(Or(Succeed(), MatchError(ContainSubstring("already exists"))))
		vs := &snapshotv1.VolumeSnapshot{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "velero-data-abc"},
			Spec:       snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("data")}},
		}
		g.Expect(env.Client.Create(ctx, vs)).To(Succeed())
		g.Eventually(waiting(op), within, testSync).Should(Equal("True/SnapshotNotReady, waitingFor=SnapshotNotReady"))
		vs.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(false),
			Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("Failed to check and update snapshot content: the disk is full")}}
		g.Expect(env.Client.Status().Update(ctx, vs)).To(Succeed())
		g.Eventually(waiting(op), within, testSync).Should(Equal("True/SnapshotFailed, waitingFor=SnapshotFailed"))
		g.Expect(waitingMessage(g, op)).To(ContainSubstring("the disk is full"))

		By("the snapshot ready and exposed: the backup volume cannot be provisioned")
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("missing"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
		g.Expect(env.Client.Create(ctx, pvc)).To(Succeed())
		pvc.Status.Phase = corev1.ClaimPending
		g.Expect(env.Client.Status().Update(ctx, pvc)).To(Succeed())
		g.Expect(env.Client.Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name + ".provisioning"},
			InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name, UID: pvc.UID, APIVersion: "v1"},
			Type:           corev1.EventTypeWarning, Reason: "ProvisioningFailed", Message: `storageclass.storage.k8s.io "missing" not found`,
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Source: corev1.EventSource{Component: "persistentvolume-controller"},
		})).To(Succeed())
		vs.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}
		g.Expect(env.Client.Status().Update(ctx, vs)).To(Succeed())
		g.Eventually(waiting(op), within, testSync).Should(Equal("True/VolumeNotProvisioned, waitingFor=VolumeNotProvisioned"))
		g.Expect(waitingMessage(g, op)).To(And(ContainSubstring("StorageClass missing"), ContainSubstring(`"missing" not found`)))

		By("the volume bound, the data mover's pod cannot be scheduled")
		// The pod's state is there, as the reconcilers read it (their
		// cache), before the volume binds, so that no poll sees the
		// movement between two causes.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "velero/velero:v1.18.3"}}}}
		g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/1 nodes are available: 1 node(s) had untolerated taint {itemops.io/hold: }."}}}
		g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
		// The status written, not the Pending the API server gives a new pod:
		// a poll between the two saw a pod with no reason to wait.
		g.Eventually(func(g Gomega) []corev1.PodCondition {
			seen := &corev1.Pod{}
			g.Expect(cached.Get(ctx, client.ObjectKeyFromObject(pod), seen)).To(Succeed())
			return seen.Status.Conditions
		}, within).Should(ContainElement(HaveField("Reason", corev1.PodReasonUnschedulable)))
		pvc.Status.Phase = corev1.ClaimBound
		g.Expect(env.Client.Status().Update(ctx, pvc)).To(Succeed())
		g.Eventually(waiting(op), within, testSync).Should(Equal("True/PodUnschedulable, waitingFor=PodUnschedulable"))
		g.Expect(waitingMessage(g, op)).To(ContainSubstring("untolerated taint"))

		By("Prepared, behind another data path on its node")
		// The one ahead runs before this one is Prepared, as node-agent
		// orders them.
		ahead := &velerov2alpha1.DataUpload{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-ahead"},
			Spec:   velerov2alpha1.DataUploadSpec{SnapshotType: velerov2alpha1.SnapshotTypeCSI, SourcePVC: "other", SourceNamespace: "shop"},
			Status: velerov2alpha1.DataUploadStatus{Phase: velerov2alpha1.DataUploadPhaseInProgress, Node: "node-1"}}
		g.Expect(env.Client.Create(ctx, ahead)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(ctx, ahead) })
		setPhase(func(s *velerov2alpha1.DataUploadStatus) {
			s.Phase, s.Node = velerov2alpha1.DataUploadPhasePrepared, "node-1"
		})
		g.Eventually(waiting(op), within, testSync).Should(Equal("True/NodeAgentBusy, waitingFor=NodeAgentBusy"))
		g.Expect(waitingMessage(g, op)).To(And(ContainSubstring("loadConcurrency of 1"), ContainSubstring("1 ahead (DataUpload/"+ahead.Name+")")))

		By("node-agent started with a loadConcurrency of 2: its turn")
		config := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-agent-config"},
			Data: map[string]string{"node-agent-config.json": `{"loadConcurrency": {"globalConfig": 2}}`}}
		g.Expect(env.Client.Create(ctx, config)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(ctx, config) })
		labels := map[string]string{"name": "node-agent"}
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-agent"},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "node-agent", Image: "velero/velero:v1.18.3",
					Command: []string{"/velero"}, Args: []string{"node-agent", "server", "--node-agent-configmap=node-agent-config"}}}}}}}
		g.Expect(env.Client.Create(ctx, ds)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(ctx, ds) })
		g.Eventually(waiting(op), within, testSync).Should(Equal("False/NotWaiting, waitingFor=" + itemopsv1alpha1.ReasonPluginNotFound))

		By("InProgress through a repository that is not ready, then ready")
		setPhase(func(s *velerov2alpha1.DataUploadStatus) { s.Phase = velerov2alpha1.DataUploadPhaseInProgress })
		repo := &velerov1api.BackupRepository{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop-default-kopia-x1", Labels: map[string]string{
				velerov1api.VolumeNamespaceLabel: "shop", velerov1api.StorageLocationLabel: "default", velerov1api.RepositoryTypeLabel: "kopia"}},
			Spec: velerov1api.BackupRepositorySpec{VolumeNamespace: "shop", BackupStorageLocation: "default", RepositoryType: "kopia",
				ResticIdentifier: "s3:http://127.0.0.1/velero/kopia/shop"},
			Status: velerov1api.BackupRepositoryStatus{Phase: velerov1api.BackupRepositoryPhaseNotReady, Message: "error to connect to storage"},
		}
		g.Expect(env.Client.Create(ctx, repo)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(ctx, repo) })
		g.Eventually(waiting(op), within, testSync).Should(Equal("True/RepositoryNotReady, waitingFor=RepositoryNotReady"))
		g.Expect(waitingMessage(g, op)).To(ContainSubstring("NotReady: error to connect to storage"))
		repo.Status = velerov1api.BackupRepositoryStatus{Phase: velerov1api.BackupRepositoryPhaseReady}
		g.Expect(env.Client.Update(ctx, repo)).To(Succeed())
		g.Eventually(waiting(op), within, testSync).Should(Equal("False/NotWaiting, waitingFor=" + itemopsv1alpha1.ReasonPluginNotFound))

		By("one Event per cause, and one per end of a wait")
		g.Eventually(func(g Gomega) []string { return eventMessages(g, op, EventWaiting) }, within).Should(ConsistOf(
			HavePrefix("NoNodeAgent: "), HavePrefix("SnapshotNotReady: "), HavePrefix("SnapshotFailed: "), HavePrefix("VolumeNotProvisioned: "),
			HavePrefix("PodUnschedulable: "), HavePrefix("NodeAgentBusy: "), HavePrefix("RepositoryNotReady: ")))
		g.Expect(eventMessages(g, op, EventWaitEnded)).To(ConsistOf(
			"no longer waits on NoNodeAgent", "no longer waits on NodeAgentBusy", "no longer waits on RepositoryNotReady"))
		_ = agent
	})
})

// Where Velero itself is stuck, read by the real gatherer from the objects
// as Velero, node-agent and the cluster leave them.
var _ = Describe("Why an operation waits where Velero is stuck", Label("envtest"), func() {
	It("node-agent restarted before exposing it, then its pod gone, then a cancel pending, each with when Velero ends it", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		ns := envtest.VeleroNamespace
		backup := newBackup(t)
		id := fmt.Sprintf("du-stuck-%d", seq.Add(1))
		op := newOperation(t, backup, itemopsv1alpha1.DataUploadPlugin, id)
		name := fmt.Sprintf("%s-stuck", backup.Name)
		within := 5 * time.Second
		agent := runningPod(g, ns, fmt.Sprintf("node-agent-stuck-%d", seq.Add(1)), "node-stuck", map[string]string{"role": "node-agent"})

		By("Accepted a minute before node-agent's pod started, and no pod exposed")
		accepted := agent.CreationTimestamp.Add(-time.Minute)
		du := &velerov2alpha1.DataUpload{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{velerov1api.AsyncOperationIDLabel: id}},
			Spec: velerov2alpha1.DataUploadSpec{SnapshotType: velerov2alpha1.SnapshotTypeCSI, SourcePVC: "data", SourceNamespace: "shop",
				BackupStorageLocation: "default", CSISnapshot: &velerov2alpha1.CSISnapshotSpec{VolumeSnapshot: "velero-data-stuck", StorageClass: "fast"}},
			Status: velerov2alpha1.DataUploadStatus{Phase: velerov2alpha1.DataUploadPhaseAccepted, AcceptedByNode: "node-stuck",
				AcceptedTimestamp: &metav1.Time{Time: accepted}},
		}
		g.Expect(env.Client.Create(ctx, du)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(ctx, du) })
		g.Eventually(waiting(op), within, testSync).Should(Equal("True/NodeAgentRestarted, waitingFor=NodeAgentRestarted"))
		g.Expect(waitingMessage(g, op)).To(And(ContainSubstring("by node-agent on node-stuck, whose pod "+agent.Name+" started again"),
			ContainSubstring("not busy: 0 of its 1 data path(s)"),
			ContainSubstring(fmt.Sprintf("prepare timeout (30m0s, --data-mover-prepare-timeout) at %s", accepted.Add(30*time.Minute).UTC().Format(time.RFC3339)))))

		By("accepted again after node-agent started, its volume exposed and its pod gone: PodGone once the pod's grace has passed")
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("fast"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
		g.Expect(env.Client.Create(ctx, pvc)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(ctx, pvc) })
		g.Eventually(func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(du), du); err != nil {
				return err
			}
			du.Status.AcceptedTimestamp = &metav1.Time{Time: pvc.CreationTimestamp.Time}
			return env.Client.Update(ctx, du)
		}, within).Should(Succeed())
		// Within the grace nothing is claimed: node-agent makes the pod
		// right after the volume.
		g.Eventually(waiting(op), within, testSync).Should(Equal("False/NotWaiting, waitingFor=" + itemopsv1alpha1.ReasonPluginNotFound))
		g.Eventually(waiting(op), why.PodGrace+within, testSync).Should(Equal("True/PodGone, waitingFor=PodGone"))
		g.Expect(waitingMessage(g, op)).To(And(ContainSubstring("the data mover's pod velero/"+name+" does not exist"),
			ContainSubstring("cancels an Accepted DataUpload once it has seen the request for 5m0s")))

		By("a cancel requested: Canceling, the cause pending on node-agent's rule for Accepted")
		g.Eventually(func() error {
			fresh := get(g, op)
			fresh.Spec.Cancel = true
			return env.Client.Update(ctx, fresh)
		}, within).Should(Succeed())
		g.Eventually(phaseOf(op), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseCanceling))
		// The plugin is not installed here: Velero's would set the
		// DataUpload's spec.cancel.
		g.Eventually(func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(du), du); err != nil {
				return err
			}
			du.Spec.Cancel = true
			return env.Client.Update(ctx, du)
		}, within).Should(Succeed())
		g.Eventually(waiting(op), within, testSync).Should(Equal("True/CancelPending, waitingFor=CancelPending"))
		// CancelPending is shown from the request on; that spec.cancel is
		// set, once the cache has it.
		g.Eventually(func(g Gomega) string { return waitingMessage(g, op) }, within, testSync).Should(And(
			HavePrefix("itemops asked the plugin "+itemopsv1alpha1.DataUploadPlugin+" to cancel at "),
			ContainSubstring("spec.cancel is set on DataUpload "+name+", which is Accepted"),
			ContainSubstring("meanwhile DataUpload "+name+" is Accepted"), ContainSubstring("once it has seen the request for 5m0s")))
		g.Consistently(phaseOf(op), 5*testSync, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseCanceling), "a request, not an outcome")

		g.Expect(waitingMessage(g, op)).To(ContainSubstring("ends as the plugin's progress reports it"), "manage mode")

		By("node-agent cancels it: in manage mode the operation ends as the plugin's Progress reports it, and the plugin is not installed here")
		g.Eventually(func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(du), du); err != nil {
				return err
			}
			du.Status.Phase = velerov2alpha1.DataUploadPhaseCanceled
			return env.Client.Update(ctx, du)
		}, within).Should(Succeed())
		g.Consistently(waiting(op), 5*testSync, testSync).Should(Equal("True/CancelPending, waitingFor=CancelPending"))
		g.Expect(phaseOf(op)(g)).To(Equal(itemopsv1alpha1.OperationPhaseCanceling))
		g.Eventually(func(g Gomega) []string { return eventMessages(g, op, EventWaiting) }, within, testSync).
			Should(ConsistOf(HavePrefix("NodeAgentRestarted: "), HavePrefix("PodGone: "), HavePrefix("CancelPending: ")))
	})

	It("a transfer whose location Velero found Unavailable waits on LocationUnavailable, until it is Available", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		ns := envtest.VeleroNamespace
		backup := newBackup(t)
		id := fmt.Sprintf("du-location-%d", seq.Add(1))
		op := newOperation(t, backup, itemopsv1alpha1.DataUploadPlugin, id)
		within := 5 * time.Second
		location := fmt.Sprintf("unreachable-%d", seq.Add(1))
		bsl := &velerov1api.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: location},
			Spec: velerov1api.BackupStorageLocationSpec{Provider: "aws", StorageType: velerov1api.StorageType{
				ObjectStorage: &velerov1api.ObjectStorageLocation{Bucket: "gone"}}},
			Status: velerov1api.BackupStorageLocationStatus{Phase: velerov1api.BackupStorageLocationPhaseUnavailable, LastValidationTime: &metav1.Time{Time: time.Now()},
				Message: `BackupStorageLocation "` + location + `" is unavailable: rpc error: code = Unknown desc = dial tcp 127.0.0.1:9: connect: connection refused`}}
		g.Expect(env.Client.Create(ctx, bsl)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(ctx, bsl) })
		du := &velerov2alpha1.DataUpload{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-far", backup.Name), Labels: map[string]string{velerov1api.AsyncOperationIDLabel: id}},
			Spec: velerov2alpha1.DataUploadSpec{SnapshotType: velerov2alpha1.SnapshotTypeCSI, SourcePVC: "data", SourceNamespace: "far",
				BackupStorageLocation: location},
			Status: velerov2alpha1.DataUploadStatus{Phase: velerov2alpha1.DataUploadPhaseInProgress, Node: "node-1"},
		}
		g.Expect(env.Client.Create(ctx, du)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(ctx, du) })
		g.Eventually(waiting(op), within, testSync).Should(Equal("True/LocationUnavailable, waitingFor=LocationUnavailable"))
		g.Expect(waitingMessage(g, op)).To(And(ContainSubstring("BackupStorageLocation velero/"+location+" that DataUpload "+du.Name+" moves data through is Unavailable"),
			ContainSubstring("connection refused"), ContainSubstring("velero backup-location get "+location)))
		g.Eventually(func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(bsl), bsl); err != nil {
				return err
			}
			bsl.Status.Phase, bsl.Status.Message = velerov1api.BackupStorageLocationPhaseAvailable, ""
			return env.Client.Update(ctx, bsl)
		}, within).Should(Succeed())
		g.Eventually(waiting(op), within, testSync).Should(Equal("False/NotWaiting, waitingFor=" + itemopsv1alpha1.ReasonPluginNotFound))
	})
})

// runningPod creates a pod that runs on node, as the kubelet reports it.
func runningPod(g Gomega, namespace, name, node string, labels map[string]string) *corev1.Pod {
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "velero/velero:v1.18.3"}}}}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodRunning
	g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
	DeferCleanup(func() { _ = env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)) })
	return pod
}
