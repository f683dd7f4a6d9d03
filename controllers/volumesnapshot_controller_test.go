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
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/store"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
)

const sampleSnapshotter = "itemops.io/sample-snapshotter"

// newSnapshotLocation creates a VolumeSnapshotLocation of the sample
// snapshotter, with a credential in a Secret as Velero allows.
func newSnapshotLocation(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("snaps-%d", seq.Add(1))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-creds", Namespace: envtest.VeleroNamespace},
		Data: map[string][]byte{"cloud": []byte("[default]\nkey=sample\n")}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	vsl := &velerov1api.VolumeSnapshotLocation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace},
		Spec: velerov1api.VolumeSnapshotLocationSpec{
			Provider:   sampleSnapshotter,
			Config:     map[string]string{"region": "lab"},
			Credential: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret.Name}, Key: "cloud"},
		},
	}
	if err := env.Client.Create(ctx, vsl); err != nil {
		t.Fatal(err)
	}
	return name
}

// takeSnapshot starts a simulated snapshot upload in the sample plugin's
// state, as its CreateSnapshot would have during the backup.
func takeSnapshot(t testing.TB, volumeID string, annotations map[string]string) string {
	t.Helper()
	s, err := sim.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Start("snapshot", volumeID, annotations)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// newSnapshotBackup creates a Backup in phase whose native snapshots are
// snapshots, as Velero records them.
func newSnapshotBackup(t testing.TB, phase velerov1api.BackupPhase, timeout time.Duration, started time.Time,
	snapshots func(uid string) []store.VolumeSnapshot) *velerov1api.Backup {
	t.Helper()
	ctx := context.Background()
	b := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("backup-%d", seq.Add(1)), Namespace: envtest.VeleroNamespace},
		Spec:       velerov1api.BackupSpec{ItemOperationTimeout: metav1.Duration{Duration: timeout}},
	}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	records := snapshots(string(b.UID))
	files.setSnapshots(string(b.UID), records)
	completed := 0
	for _, r := range records {
		if r.SnapshotID != "" {
			completed++
		}
	}
	patch := client.MergeFrom(b.DeepCopy())
	b.Status = velerov1api.BackupStatus{Phase: phase, StartTimestamp: &metav1.Time{Time: started},
		VolumeSnapshotsAttempted: len(records), VolumeSnapshotsCompleted: completed}
	if err := env.Client.Patch(ctx, b, patch); err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshotOperationsOf returns the VolumeSnapshotter ItemOperations of a backup.
func snapshotOperationsOf(g Gomega, uid string) []itemopsv1alpha1.ItemOperation {
	var out []itemopsv1alpha1.ItemOperation
	for _, op := range operationsOf(g, uid) {
		if op.Spec.Plugin.Kind == itemopsv1alpha1.PluginKindVolumeSnapshotter {
			out = append(out, op)
		}
	}
	return out
}

// parentReasons returns the reasons of the Events about obj.
func parentReasons(g Gomega, obj client.Object) []string {
	var out []string
	for _, e := range parentEvents(g, obj) {
		reason, _, _ := strings.Cut(e, ": ")
		out = append(out, reason)
	}
	return out
}

func backupNow(g Gomega, b *velerov1api.Backup) *velerov1api.Backup {
	got := &velerov1api.Backup{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), got)).To(Succeed())
	return got
}

func backupPhase(g Gomega, b *velerov1api.Backup) velerov1api.BackupPhase {
	got := &velerov1api.Backup{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), got)).To(Succeed())
	return got.Status.Phase
}

var _ = Describe("The VolumeSnapshot reconciler", Label("envtest"), func() {
	It("VolumeSnapshot is followed until durable", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		location := newSnapshotLocation(t)
		// Long enough to be seen in progress on a loaded machine, whose first
		// poll may come seconds after the ingestion.
		id := takeSnapshot(t, "vol-pv-a", map[string]string{sim.AnnotationSize: "12Mi", sim.AnnotationSpeed: "1Mi"})
		backup := newSnapshotBackup(t, velerov1api.BackupPhaseCompleted, time.Hour, time.Now(), func(uid string) []store.VolumeSnapshot {
			return []store.VolumeSnapshot{
				{BackupUID: uid, Location: location, PersistentVolumeName: "pv-a", ProviderVolumeID: "vol-pv-a", SnapshotID: id, Phase: "Completed"},
				// CreateSnapshot failed: nothing uploads, Velero counted it already.
				{BackupUID: uid, Location: location, PersistentVolumeName: "pv-b", ProviderVolumeID: "vol-pv-b", Phase: "Failed"},
			}
		})

		var op itemopsv1alpha1.ItemOperation
		g.Eventually(func(g Gomega) {
			ops := snapshotOperationsOf(g, string(backup.UID))
			g.Expect(ops).To(HaveLen(1))
			op = ops[0]
		}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
		g.Expect(op.Spec.Plugin).To(Equal(itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindVolumeSnapshotter, Name: sampleSnapshotter}))
		g.Expect(op.Spec.OperationID).To(Equal(id))
		g.Expect(op.Spec.SnapshotLocation).To(Equal(location))
		g.Expect(op.Spec.Resource).To(Equal(itemopsv1alpha1.ResourceIdentifier{Resource: "persistentvolumes", Name: "pv-a"}))
		g.Expect(op.OwnerReferences).To(HaveLen(1))

		g.Eventually(phaseOf(&op), 10*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		g.Expect(get(g, &op).Status.Progress).To(MatchRegexp(`/12Mi \(\d+%\)$`))
		g.Eventually(phaseOf(&op), time.Minute, 100*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCompleted))
		g.Eventually(func(g Gomega) []string { return parentReasons(g, backup) }, 5*time.Second).Should(ContainElements("VolumeSnapshotsIngested", "VolumeSnapshotsDurable"))
		g.Expect(backupPhase(g, backup)).To(Equal(velerov1api.BackupPhaseCompleted), "a snapshot never moves the Backup")
		g.Expect(pluginState(t, id).ProgressCalls).To(BeNumerically(">=", 2))
	})

	It("VolumeSnapshots do not hold the backup", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		location := newSnapshotLocation(t)
		id := takeSnapshot(t, "vol-pv-slow", map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})
		backup := newSnapshotBackup(t, velerov1api.BackupPhaseWaitingForPluginOperations, time.Hour, time.Now(), func(uid string) []store.VolumeSnapshot {
			return []store.VolumeSnapshot{{BackupUID: uid, Location: location, PersistentVolumeName: "pv-slow", SnapshotID: id, Phase: "Completed"}}
		})
		// Velero would move on with no item operation left, whatever its
		// snapshots do; in manage mode itemops does the same.
		g.Eventually(func(g Gomega) velerov1api.BackupPhase { return backupPhase(g, backup) }, 5*time.Second, 50*time.Millisecond).
			Should(Equal(velerov1api.BackupPhaseFinalizing))
		g.Eventually(func(g Gomega) []itemopsv1alpha1.OperationPhase {
			var phases []itemopsv1alpha1.OperationPhase
			for _, op := range snapshotOperationsOf(g, string(backup.UID)) {
				phases = append(phases, op.Status.Phase)
			}
			return phases
		}, 5*time.Second, 50*time.Millisecond).Should(Equal([]itemopsv1alpha1.OperationPhase{itemopsv1alpha1.OperationPhaseInProgress}))
	})

	It("VolumeSnapshot timeout cancels then fails", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		location := newSnapshotLocation(t)
		id := takeSnapshot(t, "vol-pv-stuck", map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})
		backup := newSnapshotBackup(t, velerov1api.BackupPhaseCompleted, 2*time.Second, time.Now(), func(uid string) []store.VolumeSnapshot {
			return []store.VolumeSnapshot{{BackupUID: uid, Location: location, PersistentVolumeName: "pv-stuck", SnapshotID: id, Phase: "Completed"}}
		})
		var op itemopsv1alpha1.ItemOperation
		g.Eventually(func(g Gomega) {
			ops := snapshotOperationsOf(g, string(backup.UID))
			g.Expect(ops).To(HaveLen(1))
			op = ops[0]
		}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
		g.Eventually(phaseOf(&op), 10*time.Second, 100*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseFailed))
		c := meta.FindStatusCondition(get(g, &op).Status.Conditions, itemopsv1alpha1.ConditionCanceled)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(itemopsv1alpha1.ReasonTimedOut))
		g.Expect(c.Message).To(ContainSubstring("the plugin accepted the cancel request"))
		g.Expect(pluginState(t, id).Cancels).To(Equal(1), "Cancel reached the snapshotter exactly once")
		g.Eventually(func(g Gomega) []string { return parentReasons(g, backup) }, 5*time.Second).Should(ContainElement("VolumeSnapshotsNotDurable"))
	})

	It("VolumeSnapshot without its location is visible", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := takeSnapshot(t, "vol-pv-x", nil)
		op := newOperation(t, backup, sampleSnapshotter, id, func(op *itemopsv1alpha1.ItemOperation) {
			op.Spec.Plugin.Kind = itemopsv1alpha1.PluginKindVolumeSnapshotter
			op.Spec.SnapshotLocation = "no-such-location"
			op.Spec.Resource = itemopsv1alpha1.ResourceIdentifier{Resource: "persistentvolumes", Name: "pv-x"}
		})
		g.Eventually(func(g Gomega) string {
			c := meta.FindStatusCondition(get(g, op).Status.Conditions, itemopsv1alpha1.ConditionProgressing)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Message).To(ContainSubstring(`VolumeSnapshotLocation "no-such-location" does not exist`))
			return c.Reason
		}, 5*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.ReasonSnapshotLocationUnavailable))
		g.Expect(get(g, op).Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseNew), "kept until the location exists or the timeout")
	})

	It("VolumeSnapshot of a missing location is reported not lost", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newSnapshotBackup(t, velerov1api.BackupPhaseCompleted, time.Hour, time.Now(), func(uid string) []store.VolumeSnapshot {
			return []store.VolumeSnapshot{{BackupUID: uid, Location: "deleted-location", PersistentVolumeName: "pv-y", SnapshotID: "snap-y", Phase: "Completed"}}
		})
		g.Eventually(func(g Gomega) []string { return parentReasons(g, backup) }, 5*time.Second, 50*time.Millisecond).
			Should(ContainElement("VolumeSnapshotRecordIgnored"))
		g.Expect(snapshotOperationsOf(g, string(backup.UID))).To(BeEmpty())
	})

	It("snapshots of old backups are not read", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		location := newSnapshotLocation(t)
		old := newSnapshotBackup(t, velerov1api.BackupPhaseCompleted, time.Hour, time.Now().Add(-2*time.Hour), func(uid string) []store.VolumeSnapshot {
			return []store.VolumeSnapshot{{BackupUID: uid, Location: location, PersistentVolumeName: "pv-old", SnapshotID: "snap-old", Phase: "Completed"}}
		})
		// A recent backup reconciled after the old one shows the controller has
		// had its chance at both.
		id := takeSnapshot(t, "vol-pv-new", map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "10Mi"})
		recent := newSnapshotBackup(t, velerov1api.BackupPhaseCompleted, time.Hour, time.Now(), func(uid string) []store.VolumeSnapshot {
			return []store.VolumeSnapshot{{BackupUID: uid, Location: location, PersistentVolumeName: "pv-new", SnapshotID: id, Phase: "Completed"}}
		})
		g.Eventually(func(g Gomega) []itemopsv1alpha1.ItemOperation { return snapshotOperationsOf(g, string(recent.UID)) },
			5*time.Second, 50*time.Millisecond).Should(HaveLen(1))
		g.Consistently(func() int { return files.snapshotReadsOf(string(old.UID)) }, time.Second, 100*time.Millisecond).Should(BeZero())
		g.Expect(snapshotOperationsOf(g, string(old.UID))).To(BeEmpty())
	})
})

// In manage mode a snapshot that did not become durable ends its Backup
// PartiallyFailed, once Velero has ended the Backup, with one error per
// volume, counted once whatever the reconciles.
var _ = Describe("A Backup whose native snapshot did not become durable", Label("envtest"), func() {
	snapshotOp := func(pv string, phase itemopsv1alpha1.OperationPhase) *itemopsv1alpha1.ItemOperation {
		return &itemopsv1alpha1.ItemOperation{
			Spec:   itemopsv1alpha1.ItemOperationSpec{Resource: itemopsv1alpha1.ResourceIdentifier{Resource: "persistentvolumes", Name: pv}},
			Status: itemopsv1alpha1.ItemOperationStatus{Phase: phase},
		}
	}
	It("ends PartiallyFailed in manage mode, with the volumes named", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		recorder := record.NewFakeRecorder(10)
		r := &VolumeSnapshotReconciler{Client: env.Client, Recorder: recorder, Store: files, Clock: clock.RealClock{},
			Manage: true, NonDurable: NonDurablePartiallyFail}
		backup := newSnapshotBackup(t, velerov1api.BackupPhaseFinalizing, time.Hour, time.Now(), func(string) []store.VolumeSnapshot { return nil })
		ops := []*itemopsv1alpha1.ItemOperation{
			snapshotOp("pv-ok", itemopsv1alpha1.OperationPhaseCompleted),
			snapshotOp("pv-bad", itemopsv1alpha1.OperationPhaseFailed),
			snapshotOp("pv-running", itemopsv1alpha1.OperationPhaseInProgress),
		}

		// Velero's finalizer has not ended it: its end would overwrite ours.
		g.Expect(r.failBackup(ctx, backupNow(g, backup), ops)).To(Succeed())
		g.Expect(backupPhase(g, backup)).To(Equal(velerov1api.BackupPhaseFinalizing))

		patch := client.MergeFrom(backup.DeepCopy())
		backup.Status.Phase, backup.Status.Warnings = velerov1api.BackupPhaseCompleted, 1
		g.Expect(env.Client.Patch(ctx, backup, patch)).To(Succeed())
		g.Expect(r.failBackup(ctx, backupNow(g, backup), ops)).To(Succeed())
		got := backupNow(g, backup)
		g.Expect(got.Status.Phase).To(Equal(velerov1api.BackupPhasePartiallyFailed))
		g.Expect(got.Status.Errors).To(Equal(1))
		g.Expect(got.Status.Warnings).To(Equal(1), "the rest of Velero's status is kept")
		g.Expect(got.Annotations).To(HaveKeyWithValue(itemopsv1alpha1.AnnotationNonDurableSnapshots, "pv-bad"))
		g.Expect(files.notDurable[string(backup.UID)]).To(Equal(markedNotDurable{pvs: []string{"pv-bad"},
			phase: velerov1api.BackupPhasePartiallyFailed, errors: 1}), "Velero's files say it first")
		g.Expect(recorder.Events).To(Receive(Equal("Warning PhaseChanged Completed -> PartiallyFailed: the volume snapshots of " +
			"PersistentVolumes pv-bad did not become durable; a restore cannot use them")))

		// Counted once; a later failure adds its own error.
		g.Expect(r.failBackup(ctx, backupNow(g, backup), ops)).To(Succeed())
		g.Expect(backupNow(g, backup).Status.Errors).To(Equal(1))
		ops[2].Status.Phase = itemopsv1alpha1.OperationPhaseCanceled
		g.Expect(r.failBackup(ctx, backupNow(g, backup), ops)).To(Succeed())
		got = backupNow(g, backup)
		g.Expect(got.Status.Errors).To(Equal(2))
		g.Expect(recorder.Events).NotTo(Receive(), "no phase changed: no PhaseChanged")
		g.Expect(got.Annotations).To(HaveKeyWithValue(itemopsv1alpha1.AnnotationNonDurableSnapshots, "pv-bad,pv-running"))
	})
})
