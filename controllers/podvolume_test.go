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
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmware-tanzu/velero/pkg/apis/velero/shared"
	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
)

// runningBackup creates a Backup that Velero is running (InProgress), as
// during its file-system backups.
func runningBackup(t testing.TB, phase velerov1api.BackupPhase) *velerov1api.Backup {
	t.Helper()
	b := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fs-backup-%d", seq.Add(1)), Namespace: envtest.VeleroNamespace},
		Status:     velerov1api.BackupStatus{Phase: phase},
	}
	if err := env.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

// newPVB creates a PodVolumeBackup of backup as Velero's backup does: named
// after it, controlled by it, for volume data of pod shop/NAME on node-1.
func newPVB(t testing.TB, namespace string, backup *velerov1api.Backup, pod string, status velerov1api.PodVolumeBackupStatus) *velerov1api.PodVolumeBackup {
	t.Helper()
	ctx := context.Background()
	pvb := &velerov1api.PodVolumeBackup{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: fmt.Sprintf("%s-%d", backup.Name, seq.Add(1)),
			Labels: map[string]string{velerov1api.BackupNameLabel: backup.Name, velerov1api.BackupUIDLabel: string(backup.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "velero.io/v1", Kind: "Backup", Name: backup.Name, UID: backup.UID,
				Controller: ptr.To(true)}},
		},
		Spec: velerov1api.PodVolumeBackupSpec{Node: "node-1", Volume: "data", BackupStorageLocation: "default", UploaderType: "kopia",
			Pod: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: pod}},
		// Velero's CRD has no status subresource: created as it is.
		Status: status,
	}
	if err := env.Client.Create(ctx, pvb); err != nil {
		t.Fatal(err)
	}
	DeferCleanup(func() { _ = env.Client.Delete(ctx, pvb) })
	return pvb
}

// mirrorOfPVB is the ItemOperation that mirrors pvb, once it exists.
func mirrorOfPVB(backup *velerov1api.Backup, pvb *velerov1api.PodVolumeBackup) *itemopsv1alpha1.ItemOperation {
	return &itemopsv1alpha1.ItemOperation{ObjectMeta: metav1.ObjectMeta{Namespace: pvb.Namespace,
		Name: mirrorName(backup.Name, string(backup.UID), itemopsv1alpha1.MirrorKindPodVolumeBackup, pvb.Name)}}
}

// updatePVB edits pvb's latest copy and writes it, as node-agent does.
func updatePVB(g Gomega, pvb *velerov1api.PodVolumeBackup, edit func(*velerov1api.PodVolumeBackup)) {
	ctx := context.Background()
	g.Eventually(func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pvb), pvb); err != nil {
			return err
		}
		edit(pvb)
		return env.Client.Update(ctx, pvb)
	}, 5*time.Second).Should(Succeed())
}

var _ = Describe("File-system backups mirrored as ItemOperations", Label("envtest"), func() {
	const within = 30 * time.Second

	It("follows a PodVolumeBackup through every phase, with its bytes, and ends as Velero ended it", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := runningBackup(t, velerov1api.BackupPhaseInProgress)
		pvb := newPVB(t, envtest.VeleroNamespace, backup, "web-0", velerov1api.PodVolumeBackupStatus{})
		op := mirrorOfPVB(backup, pvb)

		By("New: the mirror names the PodVolumeBackup, the pod and the volume, and no plugin")
		g.Eventually(func(g Gomega) *metav1.Time { return get(g, op).Status.Created }, within, testSync).ShouldNot(BeNil())
		got := get(g, op)
		g.Expect(got.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseNew))
		g.Expect(got.Spec.Mirror).To(Equal(&itemopsv1alpha1.MirrorReference{Kind: itemopsv1alpha1.MirrorKindPodVolumeBackup,
			Name: pvb.Name, UID: string(pvb.UID), Volume: "data"}))
		g.Expect(got.Spec.Plugin).To(BeZero())
		g.Expect(got.Spec.OperationID).To(BeEmpty())
		g.Expect(got.Spec.Resource).To(Equal(itemopsv1alpha1.ResourceIdentifier{Resource: "pods", Namespace: "shop", Name: "web-0"}))
		g.Expect(got.Spec.Parent).To(Equal(itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindBackup, Name: backup.Name, UID: string(backup.UID)}))
		g.Expect(got.Labels).To(HaveKeyWithValue(itemopsv1alpha1.LabelParentUID, string(backup.UID)))
		g.Expect(got.Finalizers).To(ContainElement(itemopsv1alpha1.Finalizer))
		g.Expect(got.Status.Created.Time).To(BeTemporally("~", pvb.CreationTimestamp.Time, time.Second))

		By("Accepted and Prepared: still New, Velero's phase in the description")
		for _, phase := range []velerov1api.PodVolumeBackupPhase{velerov1api.PodVolumeBackupPhaseAccepted, velerov1api.PodVolumeBackupPhasePrepared} {
			updatePVB(g, pvb, func(p *velerov1api.PodVolumeBackup) {
				p.Status.Phase, p.Status.AcceptedTimestamp = phase, &metav1.Time{Time: time.Now()}
			})
			g.Eventually(func(g Gomega) string { return get(g, op).Status.Description }, within, testSync).
				Should(Equal("PodVolumeBackup " + string(phase)))
			g.Expect(get(g, op).Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseNew))
		}

		By("InProgress: its bytes, moving")
		started := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
		updatePVB(g, pvb, func(p *velerov1api.PodVolumeBackup) {
			p.Status.Phase, p.Status.StartTimestamp = velerov1api.PodVolumeBackupPhaseInProgress, &started
			p.Status.Progress = shared.DataMoveOperationProgress{TotalBytes: 4 << 30, BytesDone: 1 << 30}
		})
		g.Eventually(func(g Gomega) string { return get(g, op).Status.Progress }, within, testSync).Should(Equal("1Gi/4Gi (25%)"))
		got = get(g, op)
		g.Expect(got.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		g.Expect(got.Status.OperationUnits).To(Equal("bytes"))
		g.Expect(got.Status.Started.Time).To(BeTemporally("==", started.Time))
		g.Expect(got.Status.EstimatedCompletion).NotTo(BeNil(), "an ETA at the rate since it started")
		updatePVB(g, pvb, func(p *velerov1api.PodVolumeBackup) { p.Status.Progress.BytesDone = 3 << 30 })
		g.Eventually(func(g Gomega) int64 { return get(g, op).Status.NCompleted }, within, testSync).Should(Equal(int64(3 << 30)))

		By("Completed: ended as Velero recorded it, at its time, and released")
		done := metav1.NewTime(time.Now().Truncate(time.Second))
		updatePVB(g, pvb, func(p *velerov1api.PodVolumeBackup) {
			p.Status.Phase, p.Status.CompletionTimestamp = velerov1api.PodVolumeBackupPhaseCompleted, &done
			p.Status.Progress.BytesDone = 4 << 30
		})
		g.Eventually(phaseOf(op), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseCompleted))
		got = get(g, op)
		g.Expect(got.Status.CompletionTimestamp.Time).To(BeTemporally("==", done.Time))
		g.Expect(got.Status.Progress).To(Equal("4Gi/4Gi (100%)"))
		g.Expect(got.Status.Error).To(BeEmpty())
		g.Eventually(func(g Gomega) []string { return get(g, op).Finalizers }, within, testSync).ShouldNot(ContainElement(itemopsv1alpha1.Finalizer))
	})

	It("a PodVolumeBackup that failed ends Failed with Velero's message", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := runningBackup(t, velerov1api.BackupPhaseInProgress)
		pvb := newPVB(t, envtest.VeleroNamespace, backup, "web-1", velerov1api.PodVolumeBackupStatus{Phase: velerov1api.PodVolumeBackupPhaseInProgress})
		op := mirrorOfPVB(backup, pvb)
		g.Eventually(phaseOf(op), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		updatePVB(g, pvb, func(p *velerov1api.PodVolumeBackup) {
			p.Status.Phase, p.Status.Message = velerov1api.PodVolumeBackupPhaseFailed, "error to run data path: unable to open /host_pods: permission denied"
		})
		g.Eventually(phaseOf(op), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseFailed))
		g.Expect(get(g, op).Status.Error).To(Equal("error to run data path: unable to open /host_pods: permission denied"))
	})

	It("a cancel sets the PodVolumeBackup's spec.cancel and is an outcome only once Velero records it", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		backup := runningBackup(t, velerov1api.BackupPhaseInProgress)
		pvb := newPVB(t, envtest.VeleroNamespace, backup, "web-2", velerov1api.PodVolumeBackupStatus{Phase: velerov1api.PodVolumeBackupPhaseInProgress})
		op := mirrorOfPVB(backup, pvb)
		g.Eventually(phaseOf(op), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))

		requestCancel(g, get(g, op))
		g.Eventually(func(g Gomega) bool {
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pvb), pvb)).To(Succeed())
			return pvb.Spec.Cancel
		}, within, testSync).Should(BeTrue())
		g.Eventually(phaseOf(op), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseCanceling))
		c := meta.FindStatusCondition(get(g, op).Status.Conditions, itemopsv1alpha1.ConditionCanceled)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Message).To(ContainSubstring("spec.cancel was set on PodVolumeBackup " + pvb.Name))
		g.Eventually(waiting(op), within, testSync).Should(HaveSuffix("waitingFor=" + itemopsv1alpha1.WaitingCancelPending))

		By("node-agent cancels it: Canceling, then Canceled")
		updatePVB(g, pvb, func(p *velerov1api.PodVolumeBackup) { p.Status.Phase = velerov1api.PodVolumeBackupPhaseCanceling })
		g.Consistently(phaseOf(op), 3*testSync, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseCanceling))
		updatePVB(g, pvb, func(p *velerov1api.PodVolumeBackup) {
			p.Status.Phase, p.Status.Message = velerov1api.PodVolumeBackupPhaseCanceled, "data path is canceled"
		})
		g.Eventually(phaseOf(op), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseCanceled))
		g.Expect(get(g, op).Status.Error).To(Equal("data path is canceled"))
	})

	It("a deletion of the Backup requested, or the Backup deleted, sets the PodVolumeBackups' spec.cancel", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		cancelled := func(pvb *velerov1api.PodVolumeBackup) func(g Gomega) bool {
			return func(g Gomega) bool {
				got := &velerov1api.PodVolumeBackup{}
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pvb), got)).To(Succeed())
				return got.Spec.Cancel
			}
		}

		By("velero backup delete of a Backup still InProgress, which Velero refuses")
		backup := runningBackup(t, velerov1api.BackupPhaseInProgress)
		pvb := newPVB(t, envtest.VeleroNamespace, backup, "web-8", velerov1api.PodVolumeBackupStatus{Phase: velerov1api.PodVolumeBackupPhaseInProgress})
		op := mirrorOfPVB(backup, pvb)
		g.Eventually(phaseOf(op), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		g.Expect(env.Client.Create(ctx, &velerov1api.DeleteBackupRequest{
			ObjectMeta: metav1.ObjectMeta{Name: backup.Name + "-delete", Namespace: backup.Namespace},
			Spec:       velerov1api.DeleteBackupRequestSpec{BackupName: backup.Name},
		})).To(Succeed())
		g.Eventually(cancelled(pvb), within, testSync).Should(BeTrue())
		g.Eventually(phaseOf(op), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseCanceling), "a request: node-agent ends it")
		g.Expect(meta.FindStatusCondition(get(g, op).Status.Conditions, itemopsv1alpha1.ConditionCanceled).Reason).
			To(Equal(itemopsv1alpha1.ReasonBackupDeletionRequested))

		By("kubectl delete backup: its mirror, going with it, sets spec.cancel first")
		gone := runningBackup(t, velerov1api.BackupPhaseInProgress)
		kept := newPVB(t, envtest.VeleroNamespace, gone, "web-9", velerov1api.PodVolumeBackupStatus{Phase: velerov1api.PodVolumeBackupPhaseInProgress})
		g.Eventually(phaseOf(mirrorOfPVB(gone, kept)), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		// envtest runs no garbage collector: the Backup's objects are
		// deleted as it would delete them, the mirror first.
		g.Expect(env.Client.Delete(ctx, gone)).To(Succeed())
		g.Expect(env.Client.Delete(ctx, mirrorOfPVB(gone, kept))).To(Succeed())
		g.Eventually(cancelled(kept), within, testSync).Should(BeTrue())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(mirrorOfPVB(gone, kept)), &itemopsv1alpha1.ItemOperation{}))
		}, within, testSync).Should(BeTrue(), "the mirror released")
	})

	It("a PodVolumeBackup deleted before it ended ends its mirror Failed, saying so", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		backup := runningBackup(t, velerov1api.BackupPhaseInProgress)
		pvb := newPVB(t, envtest.VeleroNamespace, backup, "web-3", velerov1api.PodVolumeBackupStatus{Phase: velerov1api.PodVolumeBackupPhasePrepared})
		op := mirrorOfPVB(backup, pvb)
		g.Eventually(func(g Gomega) string { return get(g, op).Status.Description }, within, testSync).Should(Equal("PodVolumeBackup Prepared"))
		g.Expect(env.Client.Delete(ctx, pvb)).To(Succeed())
		g.Eventually(phaseOf(op), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseFailed))
		got := get(g, op)
		g.Expect(got.Status.Error).To(ContainSubstring("PodVolumeBackup " + pvb.Name + " was deleted before it ended (PodVolumeBackup Prepared when last read)"))
		g.Expect(meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionProgressing).Reason).To(Equal(ReasonMirrorGone))
	})

	It("mirrors no PodVolumeBackup outside Velero's namespace, nor Velero's history, and no mirror counts among a parent's plugin operations", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}})).To(Or(Succeed(), MatchError(ContainSubstring("already exists"))))
		backup := runningBackup(t, velerov1api.BackupPhaseInProgress)
		foreign := newPVB(t, "elsewhere", backup, "web-4", velerov1api.PodVolumeBackupStatus{})
		finished := runningBackup(t, velerov1api.BackupPhaseCompleted)
		history := newPVB(t, envtest.VeleroNamespace, finished, "web-5", velerov1api.PodVolumeBackupStatus{Phase: velerov1api.PodVolumeBackupPhaseCompleted})
		// Looked at after the two above, by the same single worker.
		last := newPVB(t, envtest.VeleroNamespace, backup, "web-6", velerov1api.PodVolumeBackupStatus{})
		g.Eventually(phaseOf(mirrorOfPVB(backup, last)), within, testSync).Should(Equal(itemopsv1alpha1.OperationPhaseNew))
		for _, pvb := range []*velerov1api.PodVolumeBackup{foreign, history} {
			parent := backup
			if pvb == history {
				parent = finished
			}
			op := mirrorOfPVB(parent, pvb)
			op.Namespace = envtest.VeleroNamespace
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(op), &itemopsv1alpha1.ItemOperation{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "PodVolumeBackup %s/%s is not mirrored: %v", pvb.Namespace, pvb.Name, err)
		}
		ops, err := listOperations(ctx, cached.(client.Client), nil, envtest.VeleroNamespace, backup.UID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ops).To(BeEmpty(), "a parent's plugin operations hold no mirror")
		all, err := listAllOperations(ctx, cached.(client.Client), nil, envtest.VeleroNamespace, backup.UID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(all).To(HaveLen(1))
	})

	It("a PodVolumeBackup no node-agent accepts waits on NoNodeAgent", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := runningBackup(t, velerov1api.BackupPhaseInProgress)
		pvb := newPVB(t, envtest.VeleroNamespace, backup, "web-7", velerov1api.PodVolumeBackupStatus{})
		op := mirrorOfPVB(backup, pvb)
		g.Eventually(waiting(op), within, testSync).Should(Equal("True/NoNodeAgent, waitingFor=NoNodeAgent"))
		g.Expect(waitingMessage(g, op)).To(ContainSubstring("PodVolumeBackup " + pvb.Name + " waits to be accepted"))
	})
})
