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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
)

func backupWaitingFor(t testing.TB, attempted int, phase velerov1api.BackupPhase) *velerov1api.Backup {
	t.Helper()
	b := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("backup-%d", seq.Add(1)), Namespace: envtest.VeleroNamespace},
		Status:     velerov1api.BackupStatus{Phase: phase, BackupItemOperationsAttempted: attempted},
	}
	if err := env.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

func backupStatus(b *velerov1api.Backup) func(g Gomega) velerov1api.BackupStatus {
	return func(g Gomega) velerov1api.BackupStatus {
		got := &velerov1api.Backup{}
		g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), got)).To(Succeed())
		return got.Status
	}
}

var _ = Describe("Moving a parent on", Label("envtest"), func() {
	It("backup moves to finalizing when every operation completed", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		b := backupWaitingFor(t, 2, velerov1api.BackupPhaseWaitingForPluginOperations)
		fast := map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "2Mi"}
		newOperation(t, b, "itemops.io/sample-datamover", startUpload(t, fast))
		g.Consistently(func(g Gomega) velerov1api.BackupPhase { return backupStatus(b)(g).Phase }, 2*time.Second, 200*time.Millisecond).
			Should(Equal(velerov1api.BackupPhaseWaitingForPluginOperations),
				func() string {
					return "Velero attempted two operations; one is not known yet\n" + env.DescribeBackup(context.Background(), b)
				})
		newOperation(t, b, "itemops.io/sample-datamover", startUpload(t, fast))
		g.Eventually(backupStatus(b), 10*time.Second, 100*time.Millisecond).Should(And(
			HaveField("Phase", velerov1api.BackupPhaseFinalizing),
			HaveField("BackupItemOperationsAttempted", 2),
			HaveField("BackupItemOperationsCompleted", 2),
			HaveField("BackupItemOperationsFailed", 0),
		), func() string { return env.DescribeBackup(context.Background(), b) })
	})

	It("failed operation makes the backup partially failed at once", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		b := backupWaitingFor(t, 2, velerov1api.BackupPhaseWaitingForPluginOperations)
		newOperation(t, b, "itemops.io/sample-datamover", startUpload(t, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "10Mi", sim.AnnotationFailAt: "10"}))
		slow := newOperation(t, b, "itemops.io/sample-datamover", startUpload(t, map[string]string{sim.AnnotationSize: "6Mi", sim.AnnotationSpeed: "1Mi"}))
		g.Eventually(backupStatus(b), 5*time.Second, 50*time.Millisecond).Should(And(
			HaveField("Phase", velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed),
			HaveField("BackupItemOperationsFailed", 1),
		))
		g.Expect(get(g, slow).Status.Phase.IsTerminal()).To(BeFalse(), "the backup went PartiallyFailed while an operation still ran")
		g.Eventually(backupStatus(b), 10*time.Second, 100*time.Millisecond).Should(And(
			HaveField("Phase", velerov1api.BackupPhaseFinalizingPartiallyFailed),
			HaveField("BackupItemOperationsCompleted", 1),
			HaveField("BackupItemOperationsFailed", 1),
		))
	})

	It("parents in other phases are not touched", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		b := backupWaitingFor(t, 1, velerov1api.BackupPhaseCompleted)
		op := newOperation(t, b, "itemops.io/sample-datamover", startUpload(t, map[string]string{sim.AnnotationSize: "1Ki", sim.AnnotationSpeed: "1Mi", sim.AnnotationFailAt: "0"}))
		g.Eventually(phaseOf(op), 5*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseFailed))
		before := &velerov1api.Backup{}
		g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), before)).To(Succeed())
		g.Consistently(func(g Gomega) string {
			got := &velerov1api.Backup{}
			g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), got)).To(Succeed())
			return got.ResourceVersion
		}, time.Second, 100*time.Millisecond).Should(Equal(before.ResourceVersion))
		g.Expect(before.Status.Phase).To(Equal(velerov1api.BackupPhaseCompleted))
	})

	It("restore moves to finalizing", func() {
		g := NewWithT(GinkgoT())
		r := &velerov1api.Restore{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("restore-%d", seq.Add(1)), Namespace: envtest.VeleroNamespace},
			Status:     velerov1api.RestoreStatus{Phase: velerov1api.RestorePhaseWaitingForPluginOperations, RestoreItemOperationsAttempted: 1},
		}
		g.Expect(env.Client.Create(context.Background(), r)).To(Succeed())
		store, err := sim.NewStore()
		g.Expect(err).NotTo(HaveOccurred())
		id, err := store.Start("download", "shop/data", map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi"})
		g.Expect(err).NotTo(HaveOccurred())
		op := &itemopsv1alpha1.ItemOperation{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("op-%d", seq.Add(1)), Namespace: envtest.VeleroNamespace,
				Labels: map[string]string{itemopsv1alpha1.LabelParentUID: string(r.UID)}},
			Spec: itemopsv1alpha1.ItemOperationSpec{
				Parent:      itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindRestore, Name: r.Name, UID: string(r.UID)},
				Plugin:      itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindRestoreItemAction, Name: "itemops.io/sample-restorer"},
				OperationID: id,
				Resource:    itemopsv1alpha1.ResourceIdentifier{Resource: "configmaps", Namespace: "shop", Name: "data"},
			},
		}
		g.Expect(env.Client.Create(context.Background(), op)).To(Succeed())
		g.Eventually(func(g Gomega) velerov1api.RestoreStatus {
			got := &velerov1api.Restore{}
			g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(r), got)).To(Succeed())
			return got.Status
		}, 10*time.Second, 100*time.Millisecond).Should(And(
			HaveField("Phase", velerov1api.RestorePhaseFinalizing),
			HaveField("RestoreItemOperationsCompleted", 1),
		))
	})
})
