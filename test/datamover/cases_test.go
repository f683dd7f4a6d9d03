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
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/veleroenv"
)

// TestBackupWithDataMovementCompletes is case 1 (three PVCs of 1–20 GiB moved
// by Velero's data mover, one ItemOperation each following its DataUpload's
// bytes, the Backup Completed), and its restore into another namespace is
// case 6.
func TestBackupWithDataMovementCompletes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	startVelero(t, veleroenv.ManageFlags...)
	startItemops(t, "manage")
	// Each upload takes about 25 s, longer than Velero's backing up of the
	// three (it waits for each snapshot), so that all are still moving
	// when the Backup starts waiting for them.
	appNamespace(t, "shop", rated("1Gi", "40Mi"), rated("5Gi", "200Mi"), rated("20Gi", "800Mi"))
	b := backup(t, "shop-1", "shop")

	// What `kubectl get itemoperations -w` shows: bytes moving.
	var uid = func(g Gomega) string { return string(backupNow(g, b).UID) }
	g.Eventually(func(g Gomega) {
		ops := operationsOf(g, typesUID(uid(g)))
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
	sizes := map[string]int64{"data-0": 1 << 30, "data-1": 5 << 30, "data-2": 20 << 30}
	for pvc, op := range ops {
		g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCompleted), pvc)
		g.Expect(op.Status.NTotal).To(Equal(sizes[pvc]), pvc)
		g.Expect(op.Status.NCompleted).To(Equal(sizes[pvc]), pvc)
		g.Expect(op.Spec.OperationID).To(Equal(uploads[pvc].Labels[velerov1api.AsyncOperationIDLabel]))
		g.Expect(uploads[pvc].Status.Phase).To(Equal(velerov2alpha1.DataUploadPhaseCompleted))
		g.Expect(eventsOf(g, op.UID)).To(ContainElement(HaveField("Reason", "Completed")))
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

	t.Run("restore into another namespace", func(t *testing.T) {
		g := NewWithT(t)
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
}
