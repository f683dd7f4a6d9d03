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

package compat

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/compat"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/veleroenv"
)

// The plugins whose operations the specs follow.
const (
	backupper      = "velero.io/csi-pvc-backupper"
	restorer       = "velero.io/csi-pvc-restorer"
	sampleBackup   = "itemops.io/sample-datamover"
	sampleRestorer = "itemops.io/sample-restorer"
)

// minor is the minor release of a Velero version such as 1.16.2.
func minor(version string) int {
	parts := strings.Split(version, ".")
	if len(parts) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(parts[1])
	return n
}

// sample is the annotations of a sample operation moving size at speed.
func sample(size, speed string) map[string]string {
	return map[string]string{sim.AnnotationSize: size, sim.AnnotationSpeed: speed}
}

// releaseSpecs are the specs of one release, in order.
func releaseSpecs(version string) {
	var w *world
	BeforeAll(func() {
		var (
			stop func()
			err  error
		)
		w, stop, err = setUp(version, GinkgoT().TempDir())
		DeferCleanup(stop)
		Expect(err).NotTo(HaveOccurred(), "setting up Velero v%s, the CSI stand-ins and the API server", version)
	})

	Describe("manage mode", Ordered, func() {
		var (
			b       *velerov1api.Backup
			itemops *proc.Process
		)
		BeforeAll(func() {
			t := GinkgoTB()
			w.startVelero(t, veleroenv.ManageFlags...)
			itemops = w.startItemops(t, "manage")
		})

		It("follows a Backup's data-mover and sample operations, cancels one, and Velero's finalizer and describe read what it wrote", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			ctx := context.Background()
			w.appNamespace(t, "shop", [][2]string{{"2Gi", "100Mi"}, {"4Gi", "200Mi"}},
				sample("1Gi", "100Mi"), sample("4Gi", "100Mi"))
			b = w.backup(t, "shop-1", "shop")

			// Cancel the long sample operation as soon as it is followed.
			var uid string
			g.Eventually(func(g Gomega) map[string]itemopsv1alpha1.OperationPhase {
				uid = string(w.backupNow(g, b).UID)
				return phases(w.operationsOf(g, uid))
			}, 120*time.Second, 250*time.Millisecond).Should(And(HaveLen(4), HaveKeyWithValue("sample-1", itemopsv1alpha1.OperationPhaseInProgress)))
			op := w.operationsOf(g, uid)["sample-1"]
			patch := client.MergeFrom(op.DeepCopy())
			op.Spec.Cancel = true
			g.Expect(w.env.Client.Patch(ctx, &op, patch)).To(Succeed())

			g.Eventually(w.backupPhase(b), 120*time.Second, 250*time.Millisecond).Should(Equal(velerov1api.BackupPhasePartiallyFailed))
			final := w.backupNow(g, b)
			g.Expect(final.Status.BackupItemOperationsAttempted).To(Equal(4))
			g.Expect(final.Status.BackupItemOperationsCompleted).To(Equal(3))
			g.Expect(final.Status.BackupItemOperationsFailed).To(Equal(1))
			ops := w.operationsOf(g, uid)
			g.Expect(phases(ops)).To(Equal(map[string]itemopsv1alpha1.OperationPhase{
				"data-0": itemopsv1alpha1.OperationPhaseCompleted, "data-1": itemopsv1alpha1.OperationPhaseCompleted,
				"sample-0": itemopsv1alpha1.OperationPhaseCompleted, "sample-1": itemopsv1alpha1.OperationPhaseCanceled,
			}))
			g.Expect(ops["data-0"].Spec.Plugin.Name).To(Equal(backupper))
			g.Expect(ops["sample-0"].Spec.Plugin.Name).To(Equal(sampleBackup))
			g.Expect(pluginState(g, ops["sample-1"].Spec.OperationID)).To(And(
				HaveField("Cancels", 1), HaveField("Canceled", Not(BeNil()))), "Cancel reached the sample plugin once")
			for pvc, du := range w.dataUploads(g, b) {
				g.Expect(du.Status.Phase).To(Equal(velerov2alpha1.DataUploadPhaseCompleted), pvc)
				g.Expect(ops[pvc].Status.NCompleted).To(Equal(du.Status.Progress.TotalBytes), pvc)
			}

			// What itemops wrote back is what Velero's finalizer and
			// `velero backup describe --details` read.
			records, err := veleroenv.ReadBackupOperations(w.velero.BucketDir, b.Name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(records).To(HaveLen(4))
			described := describedPhases(w.describe(g, "backup", b.Name))
			for _, rec := range records {
				op := byOperationID(ops, rec.Spec.OperationID)
				g.Expect(op).NotTo(BeNil(), rec.Spec.OperationID)
				g.Expect(veleroenv.WrittenAs(rec.Status.Phase, op.Status.Phase)).To(BeTrue(), "%s: file %s, ItemOperation %s", op.Spec.Resource.Name, rec.Status.Phase, op.Status.Phase)
				g.Expect(described).To(HaveKeyWithValue(rec.Spec.OperationID, string(rec.Status.Phase)), "velero backup describe --details")
			}
		})

		It("follows the Restore of that Backup to Completed", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			ctx := context.Background()
			r := &velerov1api.Restore{
				ObjectMeta: metav1.ObjectMeta{Name: "shop-1-restore", Namespace: envtest.VeleroNamespace},
				Spec: velerov1api.RestoreSpec{BackupName: b.Name, NamespaceMapping: map[string]string{"shop": "shop-restored"},
					ItemOperationTimeout: metav1.Duration{Duration: time.Hour}},
			}
			g.Expect(w.env.Client.Create(ctx, r)).To(Succeed())
			restoreNow := func(g Gomega) *velerov1api.Restore {
				got := &velerov1api.Restore{}
				g.Expect(w.env.Client.Get(ctx, client.ObjectKeyFromObject(r), got)).To(Succeed())
				return got
			}
			g.Eventually(func(g Gomega) velerov1api.RestorePhase { return restoreNow(g).Status.Phase },
				180*time.Second, 250*time.Millisecond).Should(Equal(velerov1api.RestorePhaseCompleted))
			got := restoreNow(g)
			g.Expect(got.Status.RestoreItemOperationsAttempted).To(Equal(4))
			g.Expect(got.Status.RestoreItemOperationsCompleted).To(Equal(4))
			g.Expect(got.Status.RestoreItemOperationsFailed).To(BeZero())
			ops := w.operationsOf(g, string(got.UID))
			g.Expect(ops).To(HaveLen(4))
			for name, op := range ops {
				g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCompleted), name)
			}
			g.Expect(ops["data-0"].Spec.Plugin.Name).To(Equal(restorer))
			g.Expect(ops["sample-0"].Spec.Plugin.Name).To(Equal(sampleRestorer))
			pvcs := &corev1.PersistentVolumeClaimList{}
			g.Expect(w.env.Client.List(ctx, pvcs, client.InNamespace("shop-restored"))).To(Succeed())
			g.Expect(pvcs.Items).To(HaveLen(2))
			for _, pvc := range pvcs.Items {
				g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound), pvc.Name)
			}
			records, err := veleroenv.ReadRestoreOperations(w.velero.BucketDir, r.Name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(records).To(HaveLen(4))
			described := describedPhases(w.describe(g, "restore", r.Name))
			for _, rec := range records {
				g.Expect(rec.Status.Phase).To(Equal(itemoperation.OperationPhaseCompleted))
				g.Expect(described).To(HaveKeyWithValue(rec.Spec.OperationID, string(rec.Status.Phase)), "velero restore describe --details")
			}
		})

		It("says at start which Velero runs, and nothing more when the built-in plugins are of the same release", func() {
			g := NewWithT(GinkgoT())
			g.Eventually(itemops.Output.String, 10*time.Second).Should(MatchRegexp(
				`Velero.s release.*"support":\s*"Supported".*"builtinPlugins":\s*"v%s"`, version))
			g.Expect(w.warnings(g)).To(BeEmpty())
		})
	})

	It("agrees with Velero's own operations controllers in observe mode and writes nothing of Velero's", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		w.startVelero(t)
		itemops := w.startItemops(t, "observe")
		w.appNamespace(t, "catalog", [][2]string{{"3Gi", "150Mi"}}, sample("1Gi", "100Mi"))
		b := w.backup(t, "catalog-1", "catalog")
		g.Eventually(w.backupPhase(b), 120*time.Second, 250*time.Millisecond).Should(Equal(velerov1api.BackupPhaseCompleted))
		final := w.backupNow(g, b)
		g.Expect(final.Status.BackupItemOperationsCompleted).To(Equal(2))
		g.Eventually(func(g Gomega) map[string]itemopsv1alpha1.OperationPhase {
			return phases(w.operationsOf(g, string(final.UID)))
		},
			30*time.Second, 250*time.Millisecond).Should(Equal(map[string]itemopsv1alpha1.OperationPhase{
			"data-0": itemopsv1alpha1.OperationPhaseCompleted, "sample-0": itemopsv1alpha1.OperationPhaseCompleted}))
		records, err := veleroenv.ReadBackupOperations(w.velero.BucketDir, b.Name)
		g.Expect(err).NotTo(HaveOccurred())
		ops := w.operationsOf(g, string(final.UID))
		g.Expect(records).To(HaveLen(2))
		for _, rec := range records {
			op := byOperationID(ops, rec.Spec.OperationID)
			g.Expect(op).NotTo(BeNil(), "%s is followed", rec.Spec.OperationID)
			g.Expect(rec.Status.Phase).To(Equal(itemoperation.OperationPhaseCompleted), "Velero's controller saw it complete")
			g.Expect(op.Status.NCompleted).To(Equal(rec.Status.NCompleted), op.Spec.Resource.Name)
			g.Expect(op.Status.NTotal).To(Equal(rec.Status.NTotal), op.Spec.Resource.Name)
		}
		for _, mf := range final.ManagedFields {
			g.Expect(mf.Manager).NotTo(HavePrefix("itemops"))
		}
		g.Expect(itemops.Output.String()).NotTo(ContainSubstring("wrote the operations file"))
	})

	// node-agent cannot run without a node: the PodVolumeBackup is written
	// as this release's node-agent writes it, into this release's CRD.
	It("mirrors a file-system backup as this release writes it, and cancels it as far as the release can", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		b := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: envtest.VeleroNamespace, Name: "files-1"},
			Status: velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseInProgress}}
		g.Expect(w.env.Client.Create(ctx, b)).To(Succeed())
		pvb := &velerov1api.PodVolumeBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: envtest.VeleroNamespace, Name: "files-1-x7k2p",
				Labels:          map[string]string{velerov1api.BackupNameLabel: b.Name, velerov1api.BackupUIDLabel: string(b.UID)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "velero.io/v1", Kind: "Backup", Name: b.Name, UID: b.UID, Controller: ptr.To(true)}}},
			Spec: velerov1api.PodVolumeBackupSpec{Node: "node-1", Volume: "data", BackupStorageLocation: "default", UploaderType: "kopia",
				Pod: corev1.ObjectReference{Kind: "Pod", Namespace: "catalog", Name: "web-0"}},
			Status: velerov1api.PodVolumeBackupStatus{Phase: velerov1api.PodVolumeBackupPhaseNew},
		}
		g.Expect(w.env.Client.Create(ctx, pvb)).To(Succeed())
		update := func(edit func(*velerov1api.PodVolumeBackup)) {
			g.Eventually(func() error {
				if err := w.env.Client.Get(ctx, client.ObjectKeyFromObject(pvb), pvb); err != nil {
					return err
				}
				edit(pvb)
				return w.env.Client.Update(ctx, pvb)
			}, 10*time.Second).Should(Succeed())
		}
		w.startItemops(t, "observe")
		mirror := func(g Gomega) itemopsv1alpha1.ItemOperation {
			ops := w.operationsOf(g, string(b.UID))
			g.Expect(ops).To(HaveLen(1))
			for _, op := range ops {
				g.Expect(op.Spec.Mirror).NotTo(BeNil())
				return op
			}
			return itemopsv1alpha1.ItemOperation{}
		}
		g.Eventually(func(g Gomega) string { return mirror(g).Status.Description }, 20*time.Second, 250*time.Millisecond).
			Should(Equal("PodVolumeBackup New"))
		update(func(p *velerov1api.PodVolumeBackup) {
			p.Status.Phase, p.Status.StartTimestamp = velerov1api.PodVolumeBackupPhaseInProgress, &metav1.Time{Time: time.Now()}
			p.Status.Progress.TotalBytes, p.Status.Progress.BytesDone = 100<<20, 25<<20
		})
		g.Eventually(func(g Gomega) string { return mirror(g).Status.Progress }, 20*time.Second, 250*time.Millisecond).
			Should(Equal("25Mi/100Mi (25%)"))

		By("a cancel: spec.cancel since v1.17; before, a CRD without it, which the mirror says")
		op := mirror(g)
		patch := client.MergeFrom(op.DeepCopy())
		op.Spec.Cancel = true
		g.Expect(w.env.Client.Patch(ctx, &op, patch)).To(Succeed())
		g.Eventually(func(g Gomega) string {
			got := mirror(g)
			c := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionCanceled)
			g.Expect(c).NotTo(BeNil())
			return string(got.Status.Phase) + ": " + c.Message
		}, 20*time.Second, 250*time.Millisecond).Should(HavePrefix(string(itemopsv1alpha1.OperationPhaseCanceling) + ": "))
		c := meta.FindStatusCondition(mirror(g).Status.Conditions, itemopsv1alpha1.ConditionCanceled)
		g.Expect(w.env.Client.Get(ctx, client.ObjectKeyFromObject(pvb), pvb)).To(Succeed())
		if minor(version) < 17 {
			g.Expect(pvb.Spec.Cancel).To(BeFalse(), "v%s's PodVolumeBackup has no spec.cancel", version)
			g.Expect(c.Message).To(ContainSubstring("cannot be canceled: this Velero's PodVolumeBackup has no spec.cancel (Velero before v1.17)"))
		} else {
			g.Expect(pvb.Spec.Cancel).To(BeTrue())
			g.Expect(c.Message).To(ContainSubstring("spec.cancel was set on PodVolumeBackup " + pvb.Name))
		}
		By("the end is node-agent's: Completed, as it finished first")
		update(func(p *velerov1api.PodVolumeBackup) {
			p.Status.Phase, p.Status.Progress.BytesDone = velerov1api.PodVolumeBackupPhaseCompleted, 100<<20
			p.Status.CompletionTimestamp = &metav1.Time{Time: time.Now()}
		})
		g.Eventually(func(g Gomega) itemopsv1alpha1.OperationPhase { return mirror(g).Status.Phase }, 20*time.Second, 250*time.Millisecond).
			Should(Equal(itemopsv1alpha1.OperationPhaseCompleted))
	})

	It("warns on Velero's Deployment of a release it cannot follow and of built-in plugins of another release", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		d := &appsv1.Deployment{}
		g.Expect(w.env.Client.Get(ctx, client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: compat.VeleroDeployment}, d)).To(Succeed())
		patch := client.MergeFrom(d.DeepCopy())
		d.Spec.Template.Spec.Containers[0].Image = "velero/velero:v1.10.2"
		g.Expect(w.env.Client.Patch(ctx, d, patch)).To(Succeed())
		w.startItemops(t, "observe")
		g.Eventually(w.warnings, 20*time.Second, 250*time.Millisecond).Should(And(
			HaveKeyWithValue(compat.ReasonVeleroUnsupported, ContainSubstring("Velero v1.10.2 has no asynchronous plugin operations")),
			HaveKeyWithValue(compat.ReasonBuiltinPluginsRelease, ContainSubstring(
				"the built-in plugins in itemops' plugin directory are velero v"+version+", but Velero runs v1.10.2"))))
	})
}

// backup creates a Backup of a namespace that moves its volumes' data.
func (w *world) backup(t testing.TB, name, namespace string) *velerov1api.Backup {
	b := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace},
		Spec: velerov1api.BackupSpec{IncludedNamespaces: []string{namespace}, StorageLocation: veleroenv.Location,
			SnapshotMoveData: ptr.To(true), ItemOperationTimeout: metav1.Duration{Duration: time.Hour}},
	}
	NewWithT(t).Expect(w.env.Client.Create(context.Background(), b)).To(Succeed())
	return b
}
