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
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/store"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
)

// backupRecord is what Velero writes for one operation the sample data mover started.
func backupRecord(b *velerov1api.Backup, id string, phase itemoperation.OperationPhase, created time.Time) *itemoperation.BackupOperation {
	c := metav1.NewTime(created)
	return &itemoperation.BackupOperation{
		Spec: itemoperation.BackupOperationSpec{
			BackupName: b.Name, BackupUID: string(b.UID), BackupItemAction: "itemops.io/sample-datamover",
			ResourceIdentifier: velero.ResourceIdentifier{GroupResource: schema.GroupResource{Resource: "configmaps"}, Namespace: "shop", Name: id[:8]},
			OperationID:        id,
			PostOperationItems: []velero.ResourceIdentifier{{GroupResource: schema.GroupResource{Resource: "configmaps"}, Namespace: "shop", Name: "after"}},
		},
		Status: itemoperation.OperationStatus{Phase: phase, Created: &c},
	}
}

func operationsOf(g Gomega, uid string) []itemopsv1alpha1.ItemOperation {
	list := &itemopsv1alpha1.ItemOperationList{}
	g.Expect(env.Client.List(context.Background(), list, client.InNamespace(envtest.VeleroNamespace),
		client.MatchingLabels{itemopsv1alpha1.LabelParentUID: uid})).To(Succeed())
	return list.Items
}

func parentEvents(g Gomega, obj client.Object) []string {
	list := &corev1.EventList{}
	g.Expect(env.Client.List(context.Background(), list, client.InNamespace(obj.GetNamespace()))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.UID == obj.GetUID() {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

func patchBackupLabel(t testing.TB, b *velerov1api.Backup) {
	t.Helper()
	got := &velerov1api.Backup{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), got); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(got.DeepCopy())
	if got.Labels == nil {
		got.Labels = map[string]string{}
	}
	got.Labels["wake"] = fmt.Sprint(seq.Add(1))
	if err := env.Client.Patch(context.Background(), got, patch); err != nil {
		t.Fatal(err)
	}
}

var _ = Describe("Reading Velero's operations files", Label("envtest"), func() {
	It("operations are read from the file and written back before finalizing", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		b := backupWaitingFor(t, 3, velerov1api.BackupPhaseWaitingForPluginOperations)
		fast := map[string]string{sim.AnnotationSize: "2Mi", sim.AnnotationSpeed: "4Mi"}
		created := time.Now().Add(-time.Minute).Truncate(time.Second)
		done := backupRecord(b, startUpload(t, fast), itemoperation.OperationPhaseCompleted, created)
		done.Status.NCompleted, done.Status.NTotal, done.Status.OperationUnits = 5, 5, "bytes"
		records := []*itemoperation.BackupOperation{
			backupRecord(b, startUpload(t, fast), itemoperation.OperationPhaseNew, created),
			backupRecord(b, startUpload(t, fast), itemoperation.OperationPhaseInProgress, created),
			done,
		}
		files.setBackup(string(b.UID), records)
		// Wake the parent: in a cluster Velero's own write of the phase does.
		patchBackupLabel(t, b)

		g.Eventually(backupStatus(b), 15*time.Second, 100*time.Millisecond).Should(And(
			HaveField("Phase", velerov1api.BackupPhaseFinalizing),
			HaveField("BackupItemOperationsCompleted", 3),
		))
		ops := operationsOf(g, string(b.UID))
		g.Expect(ops).To(HaveLen(3))
		for _, op := range ops {
			g.Expect(len(op.Name)).To(BeNumerically("<=", 63))
			g.Expect(op.Name).To(HavePrefix(b.Name + "-"))
			g.Expect(op.Labels).To(HaveKeyWithValue(itemopsv1alpha1.LabelParentName, b.Name))
			g.Expect(op.OwnerReferences).To(ConsistOf(HaveField("UID", b.UID)))
			g.Expect(op.Spec.PostOperationItems).To(ConsistOf(HaveField("Name", "after")))
			g.Expect(op.Status.Created.Time).To(BeTemporally("==", created), "the timeout clock runs from Velero's record")
			g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCompleted))
		}
		// The record that was already Completed was not polled: its plugin state says so.
		g.Expect(pluginState(t, done.Spec.OperationID).ProgressCalls).To(BeZero())

		written := files.backup(string(b.UID))
		g.Expect(written).To(HaveLen(3))
		for i, rec := range written {
			g.Expect(rec.Spec.OperationID).To(Equal(records[i].Spec.OperationID), "the file keeps Velero's order")
			g.Expect(rec.Status.Phase).To(Equal(itemoperation.OperationPhaseCompleted))
			g.Expect(rec.Spec.PostOperationItems).To(HaveLen(1))
			g.Expect(rec.Status.Created.Time).To(BeTemporally("==", created))
		}
		g.Expect(written[0].Status.NCompleted).To(Equal(int64(2 << 20)))
		g.Expect(written[0].Status.NTotal).To(Equal(int64(2 << 20)))
	})

	It("reading the file again creates nothing twice", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		b := backupWaitingFor(t, 2, velerov1api.BackupPhaseWaitingForPluginOperations)
		slow := map[string]string{sim.AnnotationSize: "100Mi", sim.AnnotationSpeed: "1Mi"}
		now := time.Now()
		files.setBackup(string(b.UID), []*itemoperation.BackupOperation{
			backupRecord(b, startUpload(t, slow), itemoperation.OperationPhaseNew, now),
			backupRecord(b, startUpload(t, slow), itemoperation.OperationPhaseNew, now),
		})
		patchBackupLabel(t, b)
		g.Eventually(func(g Gomega) []itemopsv1alpha1.ItemOperation { return operationsOf(g, string(b.UID)) }, 10*time.Second).Should(HaveLen(2))
		reads, _ := files.counts(string(b.UID))
		// Every operation known: further changes of the parent read nothing.
		for i := 0; i < 3; i++ {
			patchBackupLabel(t, b)
		}
		g.Consistently(func(g Gomega) int {
			g.Expect(operationsOf(g, string(b.UID))).To(HaveLen(2))
			r, _ := files.counts(string(b.UID))
			return r
		}, 2*time.Second, 200*time.Millisecond).Should(Equal(reads))

		// An operation deleted while the backup waits is read again from the file
		// under the same name, and not duplicated.
		ops := operationsOf(g, string(b.UID))
		g.Expect(env.Client.Delete(context.Background(), &ops[0])).To(Succeed())
		g.Eventually(func(g Gomega) []string {
			var names []string
			for _, op := range operationsOf(g, string(b.UID)) {
				if op.DeletionTimestamp.IsZero() {
					names = append(names, op.Name)
				}
			}
			return names
		}, 10*time.Second, 100*time.Millisecond).Should(ConsistOf(ops[0].Name, ops[1].Name))
	})

	It("malformed file ends the backup partially failed with an event", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		b := backupWaitingFor(t, 2, velerov1api.BackupPhaseWaitingForPluginOperations)
		files.fail(string(b.UID), fmt.Errorf("%w: gzip: invalid header", store.ErrMalformed))
		patchBackupLabel(t, b)
		g.Eventually(backupStatus(b), 10*time.Second, 100*time.Millisecond).Should(And(
			HaveField("Phase", velerov1api.BackupPhasePartiallyFailed),
			HaveField("CompletionTimestamp", Not(BeNil())),
			HaveField("Errors", 1),
		))
		g.Eventually(func(g Gomega) []string { return parentEvents(g, b) }, 5*time.Second).Should(ContainElements(
			ContainSubstring("OperationsFileUnreadable: "+store.ErrMalformed.Error()),
			ContainSubstring("OperationsUnknown: WaitingForPluginOperations -> PartiallyFailed"),
		))
	})

	It("read only location ends the backup partially failed", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		b := backupWaitingFor(t, 1, velerov1api.BackupPhaseWaitingForPluginOperations)
		files.setBackup(string(b.UID), []*itemoperation.BackupOperation{
			backupRecord(b, startUpload(t, map[string]string{sim.AnnotationSize: "100Mi", sim.AnnotationSpeed: "1Mi"}), itemoperation.OperationPhaseNew, time.Now()),
		})
		files.setReadOnly(string(b.UID))
		patchBackupLabel(t, b)
		g.Eventually(backupStatus(b), 10*time.Second, 100*time.Millisecond).Should(HaveField("Phase", velerov1api.BackupPhasePartiallyFailed))
		g.Eventually(func(g Gomega) []string { return parentEvents(g, b) }, 5*time.Second).Should(
			ContainElement(ContainSubstring("read-only")))
	})

	It("store down keeps the backup waiting with an event", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		b := backupWaitingFor(t, 1, velerov1api.BackupPhaseWaitingForPluginOperations)
		files.fail(string(b.UID), errors.New("connection refused"))
		patchBackupLabel(t, b)
		g.Eventually(func(g Gomega) []string { return parentEvents(g, b) }, 5*time.Second).Should(
			ContainElement(ContainSubstring("connection refused")))
		g.Consistently(func(g Gomega) velerov1api.BackupPhase { return backupStatus(b)(g).Phase }, time.Second, 100*time.Millisecond).
			Should(Equal(velerov1api.BackupPhaseWaitingForPluginOperations))
		// Back up: the operation is read and the backup moves on.
		files.fail(string(b.UID), nil)
		files.setBackup(string(b.UID), []*itemoperation.BackupOperation{
			backupRecord(b, startUpload(t, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi"}), itemoperation.OperationPhaseNew, time.Now()),
		})
		g.Eventually(backupStatus(b), 15*time.Second, 100*time.Millisecond).Should(HaveField("Phase", velerov1api.BackupPhaseFinalizing))
	})

	It("record of another backup is ignored", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		b := backupWaitingFor(t, 1, velerov1api.BackupPhaseWaitingForPluginOperations)
		foreign := backupRecord(b, startUpload(t, nil), itemoperation.OperationPhaseNew, time.Now())
		foreign.Spec.BackupUID = "another-uid"
		files.setBackup(string(b.UID), []*itemoperation.BackupOperation{foreign})
		patchBackupLabel(t, b)
		g.Eventually(func(g Gomega) []string { return parentEvents(g, b) }, 5*time.Second).Should(
			ContainElement(ContainSubstring("another-uid")))
		g.Expect(operationsOf(g, string(b.UID))).To(BeEmpty())
	})

	// Velero attempted both
	// records and polls each, so one ItemOperation follows the operation and the
	// Backup counts it twice, finalizes, and both records are written back.
	It("repeated record is one operation counted twice", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		b := backupWaitingFor(t, 3, velerov1api.BackupPhaseWaitingForPluginOperations)
		fast := map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi"}
		repeated := backupRecord(b, startUpload(t, fast), itemoperation.OperationPhaseNew, time.Now())
		other := backupRecord(b, startUpload(t, fast), itemoperation.OperationPhaseNew, time.Now())
		files.setBackup(string(b.UID), []*itemoperation.BackupOperation{repeated, other, repeated})
		patchBackupLabel(t, b)

		g.Eventually(backupStatus(b), 15*time.Second, 100*time.Millisecond).Should(And(
			HaveField("Phase", velerov1api.BackupPhaseFinalizing),
			HaveField("BackupItemOperationsAttempted", 3),
			HaveField("BackupItemOperationsCompleted", 3),
		))
		g.Expect(operationsOf(g, string(b.UID))).To(HaveLen(2))
		// Events reach the API server after the status does.
		g.Eventually(func(g Gomega) []string { return parentEvents(g, b) }, 15*time.Second, 100*time.Millisecond).Should(
			ContainElement(And(HavePrefix(reasonDuplicateRecord), ContainSubstring("record 2"), ContainSubstring("repeats record 0"))))
		written := files.backup(string(b.UID))
		g.Expect(written).To(HaveLen(3))
		for _, rec := range written {
			g.Expect(rec.Status.Phase).To(Equal(itemoperation.OperationPhaseCompleted))
		}
	})

	It("restore operations are read and written back", func() {
		g := NewWithT(GinkgoT())
		r := &velerov1api.Restore{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("restore-%d", seq.Add(1)), Namespace: envtest.VeleroNamespace},
			Status:     velerov1api.RestoreStatus{Phase: velerov1api.RestorePhaseWaitingForPluginOperations, RestoreItemOperationsAttempted: 1},
		}
		g.Expect(env.Client.Create(context.Background(), r)).To(Succeed())
		sims, err := sim.NewStore()
		g.Expect(err).NotTo(HaveOccurred())
		id, err := sims.Start("download", "shop/data", map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi"})
		g.Expect(err).NotTo(HaveOccurred())
		now := metav1.Now()
		files.setRestore(string(r.UID), []*itemoperation.RestoreOperation{{
			Spec: itemoperation.RestoreOperationSpec{RestoreName: r.Name, RestoreUID: string(r.UID), RestoreItemAction: "itemops.io/sample-restorer",
				ResourceIdentifier: velero.ResourceIdentifier{GroupResource: schema.GroupResource{Resource: "configmaps"}, Namespace: "shop", Name: "data"},
				OperationID:        id},
			Status: itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseNew, Created: &now},
		}})
		patch := client.MergeFrom(r.DeepCopy())
		r.Labels = map[string]string{"wake": "1"}
		g.Expect(env.Client.Patch(context.Background(), r, patch)).To(Succeed())
		g.Eventually(func(g Gomega) velerov1api.RestorePhase {
			got := &velerov1api.Restore{}
			g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(r), got)).To(Succeed())
			return got.Status.Phase
		}, 15*time.Second, 100*time.Millisecond).Should(Equal(velerov1api.RestorePhaseFinalizing))
		_, writes := files.counts(string(r.UID))
		g.Expect(writes).To(Equal(1))
	})

	It("operation names fit label values", func() {
		g := NewWithT(GinkgoT())
		long := strings.Repeat("a", 60) + "-" + strings.Repeat("b", 100)
		for _, parent := range []string{"b", long, strings.Repeat("x", 52) + "-tail", "daily-20261122"} {
			name := operationName(parent, "uid", "velero.io/p", "op-1")
			g.Expect(validation.IsDNS1123Subdomain(name)).To(BeEmpty(), name)
			g.Expect(len(name)).To(BeNumerically("<=", 63), name)
			g.Expect(validation.IsValidLabelValue(itemopsv1alpha1.ParentNameLabelValue(parent))).To(BeEmpty(), parent)
			g.Expect(name).To(Equal(operationName(parent, "uid", "velero.io/p", "op-1")), "deterministic")
			g.Expect(name).NotTo(Equal(operationName(parent, "uid", "velero.io/p", "op-2")))
			g.Expect(name).NotTo(Equal(operationName(parent, "uid2", "velero.io/p", "op-1")))
		}
	})
})
