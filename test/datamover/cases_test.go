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

package datamover

import (
	"context"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/csisim"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/veleroenv"
)

// meta returns an operation's condition of a type.
func meta(op itemopsv1alpha1.ItemOperation, kind string) *metav1.Condition {
	for i := range op.Status.Conditions {
		if op.Status.Conditions[i].Type == kind {
			return &op.Status.Conditions[i]
		}
	}
	return nil
}

var _ = Describe("A Backup with data movement", func() {
	// This is case 1 (three PVCs of 1–20 GiB moved
	// by Velero's data mover, one ItemOperation each following its DataUpload's
	// bytes, the Backup Completed), and its restore into another namespace is
	// case 6.
	Describe("three PVCs moved by the data mover", Ordered, func() {
		ctx := context.Background()
		var (
			b     *velerov1api.Backup
			sizes = map[string]int64{"data-0": 1 << 30, "data-1": 5 << 30, "data-2": 20 << 30}
		)
		// Velero and itemops serve both specs: the restore reads the Backup.
		BeforeAll(func() {
			t := GinkgoTB()
			startVelero(t, veleroenv.ManageFlags...)
			startItemops(t, "manage")
		})

		It("completes the Backup, each operation following its DataUpload's bytes", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			// Each upload takes about 25 s, longer than Velero's backing up of the
			// three (it waits for each snapshot), so that all are still moving
			// when the Backup starts waiting for them.
			appNamespace(t, "shop", rated("1Gi", "40Mi"), rated("5Gi", "200Mi"), rated("20Gi", "800Mi"))
			b = backup(t, "shop-1", "shop")

			// What `kubectl get itemoperations -w` shows: bytes moving.
			g.Eventually(func(g Gomega) {
				ops := operationsOf(g, backupNow(g, b).UID)
				g.Expect(ops).To(HaveLen(3))
				for _, op := range ops {
					g.Expect(op.Spec.Plugin).To(Equal(itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: backupper}))
					g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseInProgress))
					g.Expect(op.Status.OperationUnits).To(Equal("Bytes"))
					g.Expect(op.Status.NCompleted).To(And(BeNumerically(">", 0), BeNumerically("<", op.Status.NTotal)))
					g.Expect(op.Status.Progress).To(MatchRegexp(`^\S+/\S+ \(\d+%\)$`))
				}
			}, 90*time.Second, 250*time.Millisecond).Should(Succeed())
			g.Expect(backupPhase(b)(g)).To(Equal(velerov1api.BackupPhaseWaitingForPluginOperations))

			g.Eventually(backupPhase(b), 90*time.Second, 250*time.Millisecond).Should(Equal(velerov1api.BackupPhaseCompleted))
			final := backupNow(g, b)
			g.Expect(final.Status.BackupItemOperationsAttempted).To(Equal(3))
			g.Expect(final.Status.BackupItemOperationsCompleted).To(Equal(3))
			g.Expect(final.Status.BackupItemOperationsFailed).To(BeZero())
			uploads := dataUploads(g, b)
			ops := operationsOf(g, final.UID)
			g.Expect(ops).To(HaveLen(3))
			for pvc, op := range ops {
				g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCompleted), pvc)
				g.Expect(op.Status.NTotal).To(Equal(sizes[pvc]), pvc)
				g.Expect(op.Status.NCompleted).To(Equal(sizes[pvc]), pvc)
				g.Expect(op.Spec.OperationID).To(Equal(uploads[pvc].Labels[velerov1api.AsyncOperationIDLabel]))
				g.Expect(uploads[pvc].Status.Phase).To(Equal(velerov2alpha1.DataUploadPhaseCompleted))
				g.Expect(eventsOf(g, op.UID)).NotTo(ContainElement(HaveField("Type", corev1.EventTypeWarning)), pvc)
			}
			records := operationsFile(g, b.Name)
			g.Expect(records).To(HaveLen(3))
			for _, rec := range records {
				g.Expect(rec.Spec.BackupItemAction).To(Equal(backupper))
				g.Expect(rec.Status.Phase).To(Equal(itemoperation.OperationPhaseCompleted), "the file Velero's finalizer read")
				g.Expect(rec.Status.NCompleted).To(Equal(rec.Status.NTotal))
				g.Expect(rec.Status.OperationUnits).To(Equal("Bytes"))
			}
			g.Expect(describe(g, b.Name)).To(And(
				MatchRegexp(`Backup Item Action Plugin:\s+velero.io/csi-pvc-backupper`),
				MatchRegexp(`Progress:\s+21474836480 of 21474836480 complete \(Bytes\)`),
				Not(MatchRegexp(`Phase:\s+(InProgress|Failed)`)),
			))
		})

		It("restores the Backup into another namespace", func() {
			g := NewWithT(GinkgoT())
			r := &velerov1api.Restore{
				ObjectMeta: metav1.ObjectMeta{Name: "shop-1-restore", Namespace: envtest.VeleroNamespace},
				Spec: velerov1api.RestoreSpec{BackupName: b.Name, NamespaceMapping: map[string]string{"shop": "shop-restored"},
					ItemOperationTimeout: metav1.Duration{Duration: time.Hour}},
			}
			g.Expect(c.Create(ctx, r)).To(Succeed())
			restoreNow := func(g Gomega) *velerov1api.Restore {
				got := &velerov1api.Restore{}
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(r), got)).To(Succeed())
				return got
			}
			g.Eventually(func(g Gomega) velerov1api.RestorePhase { return restoreNow(g).Status.Phase },
				120*time.Second, 250*time.Millisecond).Should(Equal(velerov1api.RestorePhaseCompleted))
			got := restoreNow(g)
			g.Expect(got.Status.RestoreItemOperationsAttempted).To(Equal(3))
			g.Expect(got.Status.RestoreItemOperationsCompleted).To(Equal(3))
			restoreOps := operationsOf(g, got.UID)
			g.Expect(restoreOps).To(HaveLen(3))
			for pvc, op := range restoreOps {
				g.Expect(op.Spec.Plugin).To(Equal(itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindRestoreItemAction, Name: restorer}))
				g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCompleted))
				g.Expect(op.Status.NCompleted).To(Equal(sizes[pvc]), pvc)
			}
			downloads := &velerov2alpha1.DataDownloadList{}
			g.Expect(c.List(ctx, downloads, client.InNamespace(envtest.VeleroNamespace))).To(Succeed())
			g.Expect(downloads.Items).To(HaveLen(3))
			pvcs := &corev1.PersistentVolumeClaimList{}
			g.Expect(c.List(ctx, pvcs, client.InNamespace("shop-restored"))).To(Succeed())
			g.Expect(pvcs.Items).To(HaveLen(3))
			for _, pvc := range pvcs.Items {
				g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
			}
		})
	})

	// This is case 2.
	It("a failed upload fails its operation with the upload's message", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		startVelero(t, veleroenv.ManageFlags...)
		startItemops(t, "manage")
		const message = "data path for PVC billing/data-1 failed: error to run kopia backup: unable to write content chunk: disk quota exceeded"
		failing := rated("4Gi", "200Mi")
		failing.annotations[csisim.AnnotationFail] = message
		appNamespace(t, "billing", rated("2Gi", "100Mi"), failing)
		b := backup(t, "billing-1", "billing")

		g.Eventually(backupPhase(b), 120*time.Second, 250*time.Millisecond).Should(Equal(velerov1api.BackupPhasePartiallyFailed))
		final := backupNow(g, b)
		g.Expect(final.Status.BackupItemOperationsCompleted).To(Equal(1))
		g.Expect(final.Status.BackupItemOperationsFailed).To(Equal(1))
		ops := operationsOf(g, final.UID)
		g.Expect(phases(ops)).To(Equal(map[string]itemopsv1alpha1.OperationPhase{
			"data-0": itemopsv1alpha1.OperationPhaseCompleted, "data-1": itemopsv1alpha1.OperationPhaseFailed}))
		failed := ops["data-1"]
		g.Expect(failed.Status.Error).To(ContainSubstring(message))
		g.Expect(failed.Status.NCompleted).To(BeNumerically(">=", int64(2<<30)), "the bytes moved before it failed")
		// Events reach the API server after the status does.
		g.Eventually(func(g Gomega) []corev1.Event { return eventsOf(g, failed.UID) }, 30*time.Second, 200*time.Millisecond).Should(
			ContainElement(And(HaveField("Reason", "Failed"), HaveField("Message", ContainSubstring(message)))))
		for _, rec := range operationsFile(g, b.Name) {
			if rec.Spec.OperationID == failed.Spec.OperationID {
				g.Expect(rec.Status.Phase).To(Equal(itemoperation.OperationPhaseFailed))
				g.Expect(rec.Status.Error).To(ContainSubstring(message))
			}
		}
	})

	// This is case 3: node-agent restarts
	// mid-upload and cancels every upload in flight, as it does when it cannot
	// resume them; the operations end and the Backup with them.
	It("a node agent restart leaves no backup waiting", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t, veleroenv.ManageFlags...)
		startItemops(t, "manage")
		appNamespace(t, "orders", rated("10Gi", "200Mi"), rated("10Gi", "200Mi"))
		b := backup(t, "orders-1", "orders")
		g.Eventually(func(g Gomega) map[string]itemopsv1alpha1.OperationPhase {
			return phases(operationsOf(g, backupNow(g, b).UID))
		}, 90*time.Second, 250*time.Millisecond).Should(Equal(map[string]itemopsv1alpha1.OperationPhase{
			"data-0": itemopsv1alpha1.OperationPhaseInProgress, "data-1": itemopsv1alpha1.OperationPhaseInProgress}))

		n, err := cluster.RestartNodeAgent(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(Equal(2))

		g.Eventually(backupPhase(b), 60*time.Second, 250*time.Millisecond).Should(Equal(velerov1api.BackupPhasePartiallyFailed),
			"not left in WaitingForPluginOperations")
		final := backupNow(g, b)
		g.Expect(final.Status.BackupItemOperationsFailed).To(Equal(2))
		for pvc, op := range operationsOf(g, final.UID) {
			g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseFailed), pvc)
			g.Expect(op.Status.Error).To(ContainSubstring("DataUpload is canceled"), "what Velero's plugin reports for a canceled upload")
			g.Expect(op.Status.NCompleted).To(BeNumerically("<", op.Status.NTotal))
		}
		for pvc, du := range dataUploads(g, b) {
			g.Expect(du.Status.Phase).To(Equal(velerov2alpha1.DataUploadPhaseCanceled), pvc)
			g.Expect(du.Status.Message).To(ContainSubstring("Resume InProgress dataupload failed"))
		}
	})

	// This is case 4.
	It("cancel and backup deletion cancel the data upload once", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t, veleroenv.ManageFlags...)
		io := startItemops(t, "manage")
		appNamespace(t, "media", rated("20Gi", "100Mi"), rated("20Gi", "100Mi"))
		b := backup(t, "media-1", "media")
		g.Eventually(backupPhase(b), 90*time.Second, 250*time.Millisecond).Should(Equal(velerov1api.BackupPhaseWaitingForPluginOperations))
		uid := backupNow(g, b).UID
		g.Eventually(func(g Gomega) map[string]itemopsv1alpha1.OperationPhase { return phases(operationsOf(g, uid)) },
			30*time.Second, 250*time.Millisecond).Should(HaveLen(2))

		// spec.cancel on one operation, as `kubectl patch` sets it.
		op := operationsOf(g, uid)["data-0"]
		patch := client.MergeFrom(op.DeepCopy())
		op.Spec.Cancel = true
		g.Expect(c.Patch(ctx, &op, patch)).To(Succeed())
		g.Eventually(func(g Gomega) itemopsv1alpha1.OperationPhase { return operationsOf(g, uid)["data-0"].Status.Phase },
			30*time.Second, 250*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCanceled))
		g.Eventually(func(g Gomega) velerov2alpha1.DataUpload { return dataUploads(g, b)["data-0"] }, 10*time.Second).Should(And(
			HaveField("Spec.Cancel", BeTrue()), HaveField("Status.Phase", velerov2alpha1.DataUploadPhaseCanceled)))
		g.Expect(dataUploads(g, b)["data-1"].Spec.Cancel).To(BeFalse(), "only the operation asked")

		// `velero backup delete` of the Backup still waiting for the other.
		g.Expect(c.Create(ctx, &velerov1api.DeleteBackupRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "media-1-delete", Namespace: envtest.VeleroNamespace},
			Spec:       velerov1api.DeleteBackupRequestSpec{BackupName: b.Name},
		})).To(Succeed())
		g.Eventually(func(g Gomega) itemopsv1alpha1.OperationPhase { return operationsOf(g, uid)["data-1"].Status.Phase },
			30*time.Second, 250*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCanceled))
		g.Eventually(func(g Gomega) velerov2alpha1.DataUpload { return dataUploads(g, b)["data-1"] }, 10*time.Second).Should(And(
			HaveField("Spec.Cancel", BeTrue()), HaveField("Status.Phase", velerov2alpha1.DataUploadPhaseCanceled)))

		ops := operationsOf(g, uid)
		g.Expect(meta(ops["data-0"], itemopsv1alpha1.ConditionCanceled)).To(HaveField("Reason", itemopsv1alpha1.ReasonCancelRequested))
		g.Expect(meta(ops["data-1"], itemopsv1alpha1.ConditionCanceled)).To(HaveField("Reason", itemopsv1alpha1.ReasonBackupDeletionRequested))
		g.Expect(io.cancelCalls(g, backupper)).To(Equal(2), "Cancel reached Velero's plugin once per operation")
		for pvc, du := range dataUploads(g, b) {
			g.Expect(du.Status.Progress.BytesDone).To(BeNumerically("<", du.Status.Progress.TotalBytes), "%s stopped before it finished", pvc)
		}
		g.Eventually(backupPhase(b), 30*time.Second, 250*time.Millisecond).Should(Equal(velerov1api.BackupPhasePartiallyFailed))
	})

	// This is case 5: the permission to
	// read DataUploads is taken from itemops' ServiceAccount for a moment; the
	// polls that fail say which permission is missing, and the operation goes
	// on once it is back.
	It("a data upload unreadable for a moment is retried", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t, veleroenv.ManageFlags...)
		startItemops(t, "manage", "--max-progress-failures=10")
		appNamespace(t, "ledger", rated("6Gi", "200Mi"))
		b := backup(t, "ledger-1", "ledger")
		g.Eventually(func(g Gomega) map[string]itemopsv1alpha1.OperationPhase {
			return phases(operationsOf(g, backupNow(g, b).UID))
		},
			90*time.Second, 250*time.Millisecond).Should(HaveKeyWithValue("data-0", itemopsv1alpha1.OperationPhaseInProgress))
		uid := backupNow(g, b).UID

		binding := &rbacv1.RoleBinding{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: "itemops-plugins"}, binding)).To(Succeed())
		// The manager reads DataUploads too (why a movement waits), with
		// the same ServiceAccount: its grant goes for the moment as well.
		manager := &rbacv1.Role{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: "itemops-manager"}, manager)).To(Succeed())
		granted := manager.DeepCopy()
		for i, rule := range manager.Rules {
			manager.Rules[i].Resources = slices.DeleteFunc(slices.Clone(rule.Resources), func(r string) bool { return r == "datauploads" })
		}
		g.Expect(c.Update(ctx, manager)).To(Succeed())
		g.Expect(c.Delete(ctx, binding)).To(Succeed())
		const permission = "system:serviceaccount:velero:itemops may not list datauploads.velero.io in namespace velero"
		g.Eventually(func(g Gomega) *metav1.Condition {
			return meta(operationsOf(g, uid)["data-0"], itemopsv1alpha1.ConditionProgressing)
		},
			30*time.Second, 100*time.Millisecond).Should(And(
			HaveField("Reason", itemopsv1alpha1.ReasonPluginForbidden), HaveField("Message", ContainSubstring(permission))))
		restored := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: binding.Name, Namespace: binding.Namespace, Labels: binding.Labels},
			RoleRef: binding.RoleRef, Subjects: binding.Subjects}
		g.Expect(c.Create(ctx, restored)).To(Succeed())
		manager.Rules = granted.Rules
		g.Expect(c.Update(ctx, manager)).To(Succeed())

		g.Eventually(backupPhase(b), 90*time.Second, 250*time.Millisecond).Should(Equal(velerov1api.BackupPhaseCompleted))
		op := operationsOf(g, uid)["data-0"]
		g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCompleted))
		g.Eventually(func(g Gomega) []corev1.Event { return eventsOf(g, op.UID) }, 30*time.Second, 200*time.Millisecond).Should(ContainElement(And(
			HaveField("Reason", itemopsv1alpha1.ReasonPluginForbidden), HaveField("Message", ContainSubstring(permission)))))
	})

	// This is case 7: Velero's own
	// operations controllers follow the DataUploads too; both see the same, and
	// itemops writes nothing of Velero's.
	It("observe mode agrees with Velero's own controllers", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		startVelero(t)
		io := startItemops(t, "observe")
		appNamespace(t, "catalog", rated("3Gi", "150Mi"), rated("8Gi", "400Mi"))
		b := backup(t, "catalog-1", "catalog")
		g.Eventually(func(g Gomega) map[string]itemopsv1alpha1.OperationPhase {
			return phases(operationsOf(g, backupNow(g, b).UID))
		},
			90*time.Second, 250*time.Millisecond).Should(HaveLen(2))
		g.Eventually(backupPhase(b), 90*time.Second, 250*time.Millisecond).Should(Equal(velerov1api.BackupPhaseCompleted))
		final := backupNow(g, b)
		g.Eventually(func(g Gomega) map[string]itemopsv1alpha1.OperationPhase { return phases(operationsOf(g, final.UID)) },
			30*time.Second, 250*time.Millisecond).Should(HaveEach(itemopsv1alpha1.OperationPhaseCompleted))

		records := map[string]*itemoperation.BackupOperation{}
		for _, rec := range operationsFile(g, b.Name) {
			records[rec.Spec.OperationID] = rec
		}
		uploads := dataUploads(g, b)
		for pvc, op := range operationsOf(g, final.UID) {
			rec := records[op.Spec.OperationID]
			g.Expect(rec).NotTo(BeNil(), "%s is in Velero's operations file", pvc)
			g.Expect(rec.Status.Phase).To(Equal(itemoperation.OperationPhaseCompleted), "Velero's controller saw it complete")
			g.Expect(op.Status.NCompleted).To(Equal(rec.Status.NCompleted), pvc)
			g.Expect(op.Status.NTotal).To(Equal(rec.Status.NTotal), pvc)
			g.Expect(op.Status.NTotal).To(Equal(uploads[pvc].Status.Progress.TotalBytes), pvc)
		}
		g.Expect(final.Status.BackupItemOperationsCompleted).To(Equal(2))
		for _, mf := range final.ManagedFields {
			g.Expect(mf.Manager).NotTo(HavePrefix("itemops"))
		}
		for pvc, du := range uploads {
			g.Expect(du.Spec.Cancel).To(BeFalse(), pvc)
		}
		g.Expect(io.Output.String()).NotTo(ContainSubstring("wrote the operations file"))
	})
})
