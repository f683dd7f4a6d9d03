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

package interop

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/veleroenv"
)

// manageFlags disable the two Velero controllers whose job itemops does.
var manageFlags = veleroenv.ManageFlags

// sourceNamespace creates a namespace of ConfigMaps that the sample data
// mover acts on, one per annotation set.
func sourceNamespace(t testing.TB, name string, items ...map[string]string) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	for i, annotations := range items {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("data-%d", i), Namespace: name,
				Labels: map[string]string{sim.LabelSelect: "yes"}, Annotations: annotations},
			Data: map[string]string{"payload": strings.Repeat("x", 64)},
		}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
}

func createBackup(t testing.TB, name, namespace string, timeout time.Duration) *velerov1api.Backup {
	t.Helper()
	b := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace},
		Spec: velerov1api.BackupSpec{IncludedNamespaces: []string{namespace}, StorageLocation: veleroenv.Location,
			ItemOperationTimeout: metav1.Duration{Duration: timeout}},
	}
	if err := env.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

func backupNow(g Gomega, b *velerov1api.Backup) *velerov1api.Backup {
	got := &velerov1api.Backup{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), got)).To(Succeed())
	return got
}

func backupPhase(b *velerov1api.Backup) func(g Gomega) velerov1api.BackupPhase {
	return func(g Gomega) velerov1api.BackupPhase { return backupNow(g, b).Status.Phase }
}

func operationsOf(g Gomega, uid string) []itemopsv1alpha1.ItemOperation {
	list := &itemopsv1alpha1.ItemOperationList{}
	g.Expect(env.Client.List(context.Background(), list, client.InNamespace(envtest.VeleroNamespace),
		client.MatchingLabels{itemopsv1alpha1.LabelParentUID: uid})).To(Succeed())
	return list.Items
}

// operationsFile reads a backup's operations file straight from the bucket's directory.
func operationsFile(g Gomega, backup string) []*itemoperation.BackupOperation {
	recs, err := veleroenv.ReadBackupOperations(bucketDir, backup)
	g.Expect(err).NotTo(HaveOccurred())
	return recs
}

func restoreOperationsFile(g Gomega, restore string) []*itemoperation.RestoreOperation {
	recs, err := veleroenv.ReadRestoreOperations(bucketDir, restore)
	g.Expect(err).NotTo(HaveOccurred())
	return recs
}

func pluginState(g Gomega, id string) *sim.State {
	store, err := sim.NewStore()
	g.Expect(err).NotTo(HaveOccurred())
	st, err := store.Load(id)
	g.Expect(err).NotTo(HaveOccurred())
	return st
}

func findCondition(op itemopsv1alpha1.ItemOperation, kind string) *metav1.Condition {
	for i := range op.Status.Conditions {
		if op.Status.Conditions[i].Type == kind && op.Status.Conditions[i].Status == metav1.ConditionTrue {
			return &op.Status.Conditions[i]
		}
	}
	return nil
}

// snapshotNamespace creates a namespace with one bound PVC per annotation
// set, each on a PersistentVolume the sample snapshotter claims, so that
// Velero takes a native snapshot of it.
func snapshotNamespace(t testing.TB, name string, volumes ...map[string]string) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	for i, annotations := range volumes {
		pvName := fmt.Sprintf("%s-pv-%d", name, i)
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: pvName, Labels: map[string]string{sim.LabelSnapshot: "yes"}, Annotations: annotations},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/" + pvName}},
				ClaimRef:               &corev1.ObjectReference{Namespace: name, Name: fmt.Sprintf("data-%d", i)},
			},
		}
		if err := env.Client.Create(ctx, pv); err != nil {
			t.Fatal(err)
		}
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("data-%d", i), Namespace: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				VolumeName:  pvName,
			},
		}
		if err := env.Client.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		pvc.Status.Phase = corev1.ClaimBound
		if err := env.Client.Status().Patch(ctx, pvc, patch); err != nil {
			t.Fatal(err)
		}
	}
}

var _ = Describe("A Backup beside the real velero server", func() {
	// This is scenario 1, and its
	// restore is scenario 3.
	Describe("a managed Backup and its restore", Ordered, func() {
		ctx := context.Background()
		var b *velerov1api.Backup
		// Velero and itemops serve both specs: the restore reads the Backup.
		BeforeAll(func() {
			t := GinkgoTB()
			startVelero(t, manageFlags...)
			Expect(waitForLocation(ctx)).To(Succeed())
			startItemops(t, "manage")
		})

		It("completes through Velero's finalizer", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			upload := map[string]string{sim.AnnotationSize: "3Mi", sim.AnnotationSpeed: "1Mi"}
			sourceNamespace(t, "shop", upload, upload, upload)
			b = createBackup(t, "shop-1", "shop", time.Hour)

			g.Eventually(backupPhase(b), 60*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhaseCompleted))
			final := backupNow(g, b)
			g.Expect(final.Status.BackupItemOperationsAttempted).To(Equal(3))
			g.Expect(final.Status.BackupItemOperationsCompleted).To(Equal(3))
			g.Expect(final.Status.BackupItemOperationsFailed).To(BeZero())

			ops := operationsOf(g, string(final.UID))
			g.Expect(ops).To(HaveLen(3))
			for _, op := range ops {
				g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCompleted))
				g.Expect(op.Spec.Resource.Namespace).To(Equal("shop"))
			}
			records := operationsFile(g, b.Name)
			g.Expect(records).To(HaveLen(3))
			for _, rec := range records {
				g.Expect(rec.Status.Phase).To(Equal(itemoperation.OperationPhaseCompleted), "the file Velero's finalizer read")
				g.Expect(rec.Status.NCompleted).To(Equal(int64(3 << 20)))
				g.Expect(rec.Status.NTotal).To(Equal(int64(3 << 20)))
				g.Expect(rec.Spec.BackupUID).To(Equal(string(final.UID)))
			}
		})

		It("restores through the sample RestoreItemAction v2", func() {
			g := NewWithT(GinkgoT())
			r := &velerov1api.Restore{
				ObjectMeta: metav1.ObjectMeta{Name: "shop-1-restore", Namespace: envtest.VeleroNamespace},
				Spec: velerov1api.RestoreSpec{BackupName: b.Name, NamespaceMapping: map[string]string{"shop": "shop-restored"},
					ItemOperationTimeout: metav1.Duration{Duration: time.Hour}},
			}
			g.Expect(env.Client.Create(ctx, r)).To(Succeed())
			g.Eventually(func(g Gomega) velerov1api.RestorePhase {
				got := &velerov1api.Restore{}
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(r), got)).To(Succeed())
				switch got.Status.Phase {
				case velerov1api.RestorePhaseFailed, velerov1api.RestorePhaseFailedValidation, velerov1api.RestorePhasePartiallyFailed:
					// Velero's reasons are in the status; its restore log is in the bucket.
					StopTrying(fmt.Sprintf("the restore ended %s: %+v", got.Status.Phase, got.Status)).Now()
				}
				return got.Status.Phase
			}, 60*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.RestorePhaseCompleted))
			got := &velerov1api.Restore{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(r), got)).To(Succeed())
			g.Expect(got.Status.RestoreItemOperationsAttempted).To(Equal(3))
			g.Expect(got.Status.RestoreItemOperationsCompleted).To(Equal(3))
			restoreOps := operationsOf(g, string(got.UID))
			g.Expect(restoreOps).To(HaveLen(3))
			for _, op := range restoreOps {
				g.Expect(op.Spec.Plugin.Kind).To(Equal(itemopsv1alpha1.PluginKindRestoreItemAction))
				g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCompleted))
			}
			for _, rec := range restoreOperationsFile(g, r.Name) {
				g.Expect(rec.Status.Phase).To(Equal(itemoperation.OperationPhaseCompleted))
			}
			restored := &corev1.ConfigMapList{}
			g.Expect(env.Client.List(ctx, restored, client.InNamespace("shop-restored"))).To(Succeed())
			g.Expect(restored.Items).To(HaveLen(3))
		})
	})

	// This is scenario 2.
	It("failed and timed out operations make the backup partially failed", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t, manageFlags...)
		g.Expect(waitForLocation(ctx)).To(Succeed())
		startItemops(t, "manage")

		sourceNamespace(t, "mixed",
			map[string]string{sim.AnnotationSize: "2Mi", sim.AnnotationSpeed: "1Mi"},
			map[string]string{sim.AnnotationSize: "2Mi", sim.AnnotationSpeed: "1Mi", sim.AnnotationFailAt: "50"},
			map[string]string{sim.AnnotationSize: "1Gi", sim.AnnotationSpeed: "1Mi"},
		)
		b := createBackup(t, "mixed-1", "mixed", 8*time.Second)
		g.Eventually(backupPhase(b), 60*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhasePartiallyFailed))
		final := backupNow(g, b)
		g.Expect(final.Status.BackupItemOperationsCompleted).To(Equal(1))
		g.Expect(final.Status.BackupItemOperationsFailed).To(Equal(2))

		byReason := map[string]itemopsv1alpha1.ItemOperation{}
		for _, op := range operationsOf(g, string(final.UID)) {
			g.Expect(op.Status.Phase).NotTo(Equal(itemopsv1alpha1.OperationPhaseInProgress))
			reason := string(op.Status.Phase)
			if c := findCondition(op, itemopsv1alpha1.ConditionCanceled); c != nil {
				reason = c.Reason
			}
			byReason[reason] = op
		}
		g.Expect(byReason).To(HaveKey(string(itemopsv1alpha1.OperationPhaseCompleted)))
		g.Expect(byReason).To(HaveKey(itemopsv1alpha1.ReasonTimedOut))
		timedOut := byReason[itemopsv1alpha1.ReasonTimedOut]
		g.Expect(pluginState(g, timedOut.Spec.OperationID).Cancels).To(Equal(1), "the plugin recorded the cancel")

		records := operationsFile(g, b.Name)
		phases := map[itemoperation.OperationPhase]int{}
		for _, rec := range records {
			phases[rec.Status.Phase]++
			if rec.Spec.OperationID == timedOut.Spec.OperationID {
				g.Expect(rec.Status.Error).To(ContainSubstring("timeout"))
			}
		}
		g.Expect(phases).To(Equal(map[itemoperation.OperationPhase]int{itemoperation.OperationPhaseCompleted: 1, itemoperation.OperationPhaseFailed: 2}))
	})

	// This is scenario 4.
	It("observe mode mirrors while Velero completes the backup", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t)
		g.Expect(waitForLocation(ctx)).To(Succeed())
		itemops := startItemops(t, "observe")

		upload := map[string]string{sim.AnnotationSize: "3Mi", sim.AnnotationSpeed: "1Mi"}
		sourceNamespace(t, "watched", upload, upload)
		b := createBackup(t, "watched-1", "watched", time.Hour)
		g.Eventually(func(g Gomega) []itemopsv1alpha1.ItemOperation { return operationsOf(g, string(backupNow(g, b).UID)) },
			30*time.Second, 200*time.Millisecond).Should(HaveLen(2))
		g.Eventually(backupPhase(b), 60*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhaseCompleted))
		g.Eventually(func(g Gomega) []itemopsv1alpha1.OperationPhase {
			var phases []itemopsv1alpha1.OperationPhase
			for _, op := range operationsOf(g, string(backupNow(g, b).UID)) {
				phases = append(phases, op.Status.Phase)
			}
			return phases
		}, 30*time.Second, 200*time.Millisecond).Should(HaveEach(itemopsv1alpha1.OperationPhaseCompleted))

		// Nothing of Velero's was written by itemops: no field of the Backup is
		// managed by it, and it never wrote an operations file.
		for _, mf := range backupNow(g, b).ManagedFields {
			g.Expect(mf.Manager).NotTo(HavePrefix("itemops"))
		}
		g.Expect(itemops.Output.String()).NotTo(ContainSubstring("wrote the operations file"))
		g.Expect(itemops.Output.String()).To(ContainSubstring("ingested operations"))
	})

	// Velero fails an operation on its first failed Progress call: here its
	// plugin process exits during Velero's first call after the upload
	// ended, which only Velero's process sees. itemops follows Velero's
	// record and says what its own calls saw. (A second operation Velero
	// polls right after the crash may fail too, "connection refused", when
	// Velero calls it before it notices the process exited: whatever Velero
	// records of it, the ItemOperation shows the same.)
	It("observe mode shows Velero's verdict, and what its own polls saw", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t)
		g.Expect(waitForLocation(ctx)).To(Succeed())
		startItemops(t, "observe")

		sourceNamespace(t, "verdict",
			map[string]string{sim.AnnotationSize: "3Mi", sim.AnnotationSpeed: "1Mi", sim.AnnotationCrashOnceUnder: "velero"},
			map[string]string{sim.AnnotationSize: "4Mi", sim.AnnotationSpeed: "1Mi"})
		since := time.Now()
		b := createBackup(t, "verdict-1", "verdict", time.Hour)
		g.Eventually(backupPhase(b), 60*time.Second, 200*time.Millisecond).Should(BeElementOf(
			velerov1api.BackupPhaseCompleted, velerov1api.BackupPhasePartiallyFailed, velerov1api.BackupPhaseFailed), "the Backup ends")
		final := backupNow(g, b)
		g.Expect(final.Status.Phase).To(Equal(velerov1api.BackupPhasePartiallyFailed), func() string {
			return fmt.Sprintf("Velero recorded the Backup %s: operations attempted %d, completed %d, failed %d; the sample plugin's account:\n%s",
				final.Status.Phase, final.Status.BackupItemOperationsAttempted, final.Status.BackupItemOperationsCompleted,
				final.Status.BackupItemOperationsFailed, sim.Account(os.Getenv(sim.EnvStateDir), since))
		})
		recorded := map[string]itemoperation.OperationPhase{}
		for _, rec := range operationsFile(g, b.Name) {
			recorded[rec.Spec.OperationID] = rec.Status.Phase
		}
		// Every ItemOperation ends as Velero recorded it, and so do the counts.
		byItem := map[string]itemopsv1alpha1.ItemOperation{}
		g.Eventually(func(g Gomega) {
			ops := operationsOf(g, string(b.UID))
			g.Expect(ops).To(HaveLen(2))
			failed := 0
			for _, op := range ops {
				g.Expect(string(op.Status.Phase)).To(Equal(string(recorded[op.Spec.OperationID])), "%s: %+v", op.Spec.Resource.Name, op.Status)
				if op.Status.Phase == itemopsv1alpha1.OperationPhaseFailed {
					failed++
				}
				byItem[op.Spec.Resource.Name] = op
			}
			g.Expect(failed).To(Equal(final.Status.BackupItemOperationsFailed))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

		// The crashed one: Velero's error, and what itemops saw.
		crashed := byItem["data-0"]
		g.Expect(crashed.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseFailed))
		g.Expect(crashed.Status.Error).NotTo(BeEmpty())
		differs := findCondition(crashed, itemopsv1alpha1.ConditionDiffersFromVelero)
		g.Expect(differs).NotTo(BeNil(), "conditions %+v", crashed.Status.Conditions)
		g.Expect(differs.Reason).To(Equal(itemopsv1alpha1.ReasonPolledCompleted))
		g.Expect(differs.Message).To(MatchRegexp(`^Velero recorded Failed \(.+\); (a retry of Progress answered|itemops' own Progress calls saw it) Completed`))
		g.Expect(differs.Message).To(ContainSubstring(crashed.Status.Error))
		// Events reach the API server after the status does.
		g.Eventually(func(g Gomega) int {
			events := &corev1.EventList{}
			g.Expect(env.Client.List(ctx, events, client.InNamespace(envtest.VeleroNamespace))).To(Succeed())
			seen := 0
			for _, e := range events.Items {
				if e.Reason == itemopsv1alpha1.ConditionDiffersFromVelero && e.InvolvedObject.Name == crashed.Name {
					seen += int(max(e.Count, 1))
				}
			}
			return seen
		}, 30*time.Second, 200*time.Millisecond).Should(Equal(1), "one DiffersFromVelero Event")
		for _, mf := range final.ManagedFields {
			g.Expect(mf.Manager).NotTo(HavePrefix("itemops"))
		}
	})

	// Velero's own controller times out an operation past the Backup's
	// itemOperationTimeout and calls Cancel; in observe mode itemops leaves
	// that to it, so the plugin is asked once, and the ItemOperation ends
	// as Velero recorded it.
	It("observe mode leaves the timeout to Velero: one Cancel, Velero's end", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t)
		g.Expect(waitForLocation(ctx)).To(Succeed())
		startItemops(t, "observe")

		sourceNamespace(t, "slow",
			map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "1Mi"},
			map[string]string{sim.AnnotationSize: "1Gi", sim.AnnotationSpeed: "1Mi"})
		b := createBackup(t, "slow-1", "slow", 8*time.Second)
		g.Eventually(backupPhase(b), 90*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhasePartiallyFailed))
		// Velero's end, in Velero's words: itemops' own poll may have seen
		// the cancelled plugin answer first, in its words.
		var timedOut itemopsv1alpha1.ItemOperation
		g.Eventually(func(g Gomega) []string {
			for _, op := range operationsOf(g, string(b.UID)) {
				if op.Spec.Resource.Name == "data-1" {
					timedOut = op
				}
			}
			return []string{string(timedOut.Status.Phase), timedOut.Status.Error}
		}, 30*time.Second, 200*time.Millisecond).Should(Equal([]string{string(itemopsv1alpha1.OperationPhaseFailed), "Asynchronous action timed out"}), "Velero's end")
		g.Expect(findCondition(timedOut, itemopsv1alpha1.ConditionCanceled)).To(BeNil(), "itemops did not cancel it: %+v", timedOut.Status.Conditions)
		g.Expect(findCondition(timedOut, itemopsv1alpha1.ConditionDiffersFromVelero)).To(BeNil(), "%+v", timedOut.Status.Conditions)
		g.Expect(pluginState(g, timedOut.Spec.OperationID).Cancels).To(Equal(1), "the plugin was asked to cancel once")
		for _, rec := range operationsFile(g, b.Name) {
			if rec.Spec.OperationID == timedOut.Spec.OperationID {
				g.Expect(rec.Status.Phase).To(Equal(itemoperation.OperationPhaseFailed))
			}
		}
	})

	// Leaving manage mode mid-flight, as docs/velero.md says (itemops
	// first, then Velero's controllers): Velero's own controller counts
	// from the file that itemops kept in step, and counts the failure
	// itemops already counted once.
	It("manage to Velero alone mid-flight counts each failure once", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		managed := startVelero(t, manageFlags...)
		g.Expect(waitForLocation(ctx)).To(Succeed())
		itemops := startItemops(t, "manage")

		sourceNamespace(t, "rollback",
			map[string]string{sim.AnnotationSize: "2Mi", sim.AnnotationSpeed: "1Mi", sim.AnnotationFailAt: "25"},
			map[string]string{sim.AnnotationSize: "12Mi", sim.AnnotationSpeed: "1Mi"},
			map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "1Mi"})
		b := createBackup(t, "rollback-1", "rollback", time.Hour)
		g.Eventually(func(g Gomega) []int {
			s := backupNow(g, b).Status
			return []int{s.BackupItemOperationsFailed, s.Errors}
		}, 60*time.Second, 200*time.Millisecond).Should(Equal([]int{1, 1}), "itemops counted the failure")
		g.Expect(backupNow(g, b).Status.Phase).To(Equal(velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed))

		itemops.Stop(syscall.SIGTERM)
		managed.Stop(syscall.SIGTERM)
		velero.StartServer(t) // this spec holds the server lock already
		g.Eventually(backupPhase(b), 90*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhasePartiallyFailed))
		final := backupNow(g, b).Status
		g.Expect([]int{final.BackupItemOperationsAttempted, final.BackupItemOperationsCompleted, final.BackupItemOperationsFailed, final.Errors}).
			To(Equal([]int{3, 2, 1, 1}), "attempted, completed, failed, errors")
		out, err := velero.Describe("backup", b.Name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.Count(out, "Phase:")).To(BeNumerically(">=", 3), out)
		g.Expect(regexp.MustCompile(`(?m)^\s*Phase:\s+Failed`).FindAllString(out, -1)).To(HaveLen(1), out)
		g.Expect(regexp.MustCompile(`(?m)^\s*Phase:\s+Completed`).FindAllString(out, -1)).To(HaveLen(2), out)
	})

	// This is scenario 5.
	It("restarted itemops still completes the backup", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t, manageFlags...)
		g.Expect(waitForLocation(ctx)).To(Succeed())
		first := startItemops(t, "manage")

		// Every phase the Backup passes through, seen by a watch.
		w, err := env.WatchClient().Watch(ctx, &velerov1api.BackupList{}, client.InNamespace(envtest.VeleroNamespace))
		g.Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		var mu sync.Mutex
		var phases []velerov1api.BackupPhase
		go func() {
			for e := range w.ResultChan() {
				if got, ok := e.Object.(*velerov1api.Backup); ok && got.Name == "restarted-1" && e.Type != watch.Deleted {
					mu.Lock()
					if len(phases) == 0 || phases[len(phases)-1] != got.Status.Phase {
						phases = append(phases, got.Status.Phase)
					}
					mu.Unlock()
				}
			}
		}()

		upload := map[string]string{sim.AnnotationSize: "6Mi", sim.AnnotationSpeed: "1Mi"}
		sourceNamespace(t, "restarted", upload, upload, upload)
		b := createBackup(t, "restarted-1", "restarted", time.Hour)
		g.Eventually(func(g Gomega) []itemopsv1alpha1.OperationPhase {
			var phases []itemopsv1alpha1.OperationPhase
			for _, op := range operationsOf(g, string(backupNow(g, b).UID)) {
				phases = append(phases, op.Status.Phase)
			}
			return phases
		}, 30*time.Second, 100*time.Millisecond).Should(And(HaveLen(3), HaveEach(itemopsv1alpha1.OperationPhaseInProgress)))
		first.Stop(syscall.SIGKILL)
		startItemops(t, "manage")

		g.Eventually(backupPhase(b), 60*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhaseCompleted))
		ops := operationsOf(g, string(backupNow(g, b).UID))
		g.Expect(ops).To(HaveLen(3), "no operation duplicated")
		order := map[velerov1api.BackupPhase]int{"": 0, velerov1api.BackupPhaseNew: 1, velerov1api.BackupPhaseQueued: 2,
			velerov1api.BackupPhaseReadyToStart: 3, velerov1api.BackupPhaseInProgress: 4, velerov1api.BackupPhaseWaitingForPluginOperations: 5,
			velerov1api.BackupPhaseFinalizing: 6, velerov1api.BackupPhaseCompleted: 7}
		g.Eventually(func() velerov1api.BackupPhase {
			mu.Lock()
			defer mu.Unlock()
			return phases[len(phases)-1]
		}, 5*time.Second).Should(Equal(velerov1api.BackupPhaseCompleted))
		mu.Lock()
		seen := append([]velerov1api.BackupPhase(nil), phases...)
		mu.Unlock()
		g.Expect(seen).To(ContainElement(velerov1api.BackupPhaseFinalizing))
		for i := 1; i < len(seen); i++ {
			g.Expect(order).To(HaveKey(seen[i]), "unexpected phase in %v", seen)
			g.Expect(order[seen[i]]).To(BeNumerically(">", order[seen[i-1]]), "the phase went back: %v", seen)
		}
		for _, op := range ops {
			g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCompleted))
			g.Expect(pluginState(g, op.Spec.OperationID).Cancels).To(BeZero())
		}
	})

	// It deletes a backup
	// the way `velero backup delete` does, while its uploads run.
	It("Velero's backup deletion cancels unfinished operations first", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t, manageFlags...)
		g.Expect(waitForLocation(ctx)).To(Succeed())
		startItemops(t, "manage")

		slow := map[string]string{sim.AnnotationSize: "1Gi", sim.AnnotationSpeed: "1Mi"}
		sourceNamespace(t, "deleted", slow, slow)
		b := createBackup(t, "deleted-1", "deleted", time.Hour)
		g.Eventually(backupPhase(b), 30*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhaseWaitingForPluginOperations))
		uid := string(backupNow(g, b).UID)
		g.Eventually(func(g Gomega) []itemopsv1alpha1.ItemOperation { return operationsOf(g, uid) }, 10*time.Second).Should(HaveLen(2))

		g.Expect(env.Client.Create(ctx, &velerov1api.DeleteBackupRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "deleted-1-delete", Namespace: envtest.VeleroNamespace},
			Spec:       velerov1api.DeleteBackupRequestSpec{BackupName: b.Name},
		})).To(Succeed())
		g.Eventually(func(g Gomega) []itemopsv1alpha1.OperationPhase {
			var phases []itemopsv1alpha1.OperationPhase
			for _, op := range operationsOf(g, uid) {
				phases = append(phases, op.Status.Phase)
			}
			return phases
		}, 30*time.Second, 200*time.Millisecond).Should(And(HaveLen(2), HaveEach(itemopsv1alpha1.OperationPhaseCanceled)))
		for _, op := range operationsOf(g, uid) {
			st := pluginState(g, op.Spec.OperationID)
			g.Expect(st.Cancels).To(Equal(1), "Cancel reached the plugin once")
			g.Expect(st.Canceled).NotTo(BeNil())
			g.Expect(*st.Canceled).To(BeTemporally("<", st.CompletesAt()), "the upload was stopped before it finished")
			g.Expect(findCondition(op, itemopsv1alpha1.ConditionCanceled)).To(HaveField("Reason", itemopsv1alpha1.ReasonBackupDeletionRequested))
		}
		// Velero refuses to delete a backup still waiting for its operations;
		// with them cancelled the backup ends, and deleting it again works.
		g.Eventually(backupPhase(b), 30*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhasePartiallyFailed))
		g.Expect(env.Client.Create(ctx, &velerov1api.DeleteBackupRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "deleted-1-delete-again", Namespace: envtest.VeleroNamespace},
			Spec:       velerov1api.DeleteBackupRequestSpec{BackupName: b.Name},
		})).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(b), &velerov1api.Backup{}))
		}, 60*time.Second, 200*time.Millisecond).Should(BeTrue(), "Velero deleted the backup")
		_, err := os.Stat(veleroenv.BackupOperationsFile(bucketDir, b.Name))
		g.Expect(os.IsNotExist(err)).To(BeTrue(), "Velero removed the backup's files")
	})

	// What kubectl itemops why tells of a Backup left ReadyToStart (a
	// restart of velero server), and what it tells to do, against the real
	// velero server: Velero's informer lists such a Backup as a create at
	// its start, which its backup controller ignores.
	It("a Backup left ReadyToStart is never started, until any change to it", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t)
		g.Expect(waitForLocation(ctx)).To(Succeed())
		sourceNamespace(t, "stranded")
		b := &velerov1api.Backup{
			ObjectMeta: metav1.ObjectMeta{Name: "stranded-1", Namespace: envtest.VeleroNamespace},
			Spec:       velerov1api.BackupSpec{IncludedNamespaces: []string{"stranded"}, StorageLocation: veleroenv.Location},
			Status:     velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseReadyToStart},
		}
		g.Expect(env.Client.Create(ctx, b)).To(Succeed())
		g.Consistently(backupPhase(b), 15*time.Second, time.Second).Should(Equal(velerov1api.BackupPhaseReadyToStart),
			"velero server starts no Backup that was ReadyToStart before it looked")
		g.Expect(env.Client.Patch(ctx, b, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"itemops.io/restarted-at":"now"}}}`)))).To(Succeed())
		g.Eventually(backupPhase(b), 60*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhaseCompleted),
			"the change made Velero's backup controller start it")
	})

	// It runs `velero backup describe
	// --details` while an upload runs: the DownloadRequest it makes has itemops
	// write the operations file back, so the CLI shows the progress itemops sees
	// rather than what Velero recorded when the upload started.
	It("describe details shows live progress", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t, manageFlags...)
		g.Expect(waitForLocation(ctx)).To(Succeed())
		startItemops(t, "manage")

		sourceNamespace(t, "described", map[string]string{sim.AnnotationSize: "40Mi", sim.AnnotationSpeed: "1Mi"})
		b := createBackup(t, "described-1", "described", time.Hour)
		g.Eventually(backupPhase(b), 30*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhaseWaitingForPluginOperations))
		// Velero polls once right after Execute and records that: a few KiB.
		g.Expect(operationsFile(g, b.Name)).To(ConsistOf(HaveField("Status.NCompleted", BeNumerically("<", 1<<20))))

		describe := func(g Gomega) string {
			out, err := exec.Command(velero.Velero, "backup", "describe", b.Name, "--details",
				"--kubeconfig", kubeconfig, "--namespace", envtest.VeleroNamespace).CombinedOutput()
			g.Expect(err).NotTo(HaveOccurred(), string(out))
			return string(out)
		}
		g.Eventually(describe, 30*time.Second, 500*time.Millisecond).Should(And(
			MatchRegexp(`Backup Item Action Plugin:\s+itemops.io/sample-datamover`),
			MatchRegexp(`Phase:\s+InProgress`),
			// At least 2 MiB: only itemops' later polls can have seen that much.
			MatchRegexp(`Progress:\s+([2-9][0-9]{6}|[0-9]{8,}) of 41943040 complete \(Bytes\)`),
		))
		g.Expect(backupPhase(b)(g)).To(Equal(velerov1api.BackupPhaseWaitingForPluginOperations))
	})

	// It runs the README's first command the way a
	// new user does, on a machine where the real Velero is built.
	It("demo backs up with the real Velero", func() {
		g := NewWithT(GinkgoT())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		demo := exec.CommandContext(ctx, "make", "demo", "DEMO_ARGS=--exit-when-done")
		demo.Dir = env.RepoRoot
		out, err := demo.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), proc.Tail(string(out), 60))
		g.Expect(string(out)).To(ContainSubstring("starting velero server v1.18.3"))
		g.Expect(string(out)).To(MatchRegexp(`shop/search-index\s+itemops.io/sample-datamover\s+Failed\s+2.4Gi/4Gi`))
		// Velero's own CSI data mover, served by the velero binary in itemops' plugin directory.
		g.Expect(string(out)).To(MatchRegexp(`shop/orders-db\s+velero.io/csi-pvc-backupper\s+InProgress\s+\S+/10Gi`))
		g.Expect(string(out)).To(MatchRegexp(`shop/product-images\s+velero.io/csi-pvc-backupper\s+Completed\s+24Gi/24Gi \(100%\)`))
		g.Expect(string(out)).To(ContainSubstring("Backup nightly-demo reached PartiallyFailed."))
	})

	// Velero takes the
	// snapshots through the sample's v1 VolumeSnapshotter and completes the
	// backup without waiting for them; itemops follows each snapshot's upload
	// through the same binary's VolumeSnapshotter v2 and reports it.
	It("native snapshots Velero takes are followed until durable", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t)
		g.Expect(waitForLocation(ctx)).To(Succeed())
		itemops := startItemops(t, "observe")

		vsl := &velerov1api.VolumeSnapshotLocation{
			ObjectMeta: metav1.ObjectMeta{Name: "sample-disks", Namespace: envtest.VeleroNamespace},
			Spec:       velerov1api.VolumeSnapshotLocationSpec{Provider: "itemops.io/sample-snapshotter", Config: map[string]string{"region": "lab"}},
		}
		g.Expect(env.Client.Create(ctx, vsl)).To(Succeed())
		snapshotNamespace(t, "disks",
			map[string]string{sim.AnnotationSize: "8Mi", sim.AnnotationSpeed: "1Mi"},
			map[string]string{sim.AnnotationSize: "8Mi", sim.AnnotationSpeed: "1Mi"})
		b := &velerov1api.Backup{
			ObjectMeta: metav1.ObjectMeta{Name: "disks-1", Namespace: envtest.VeleroNamespace},
			Spec: velerov1api.BackupSpec{IncludedNamespaces: []string{"disks"}, StorageLocation: veleroenv.Location,
				VolumeSnapshotLocations: []string{vsl.Name}, ItemOperationTimeout: metav1.Duration{Duration: time.Hour}},
		}
		g.Expect(env.Client.Create(ctx, b)).To(Succeed())

		// Velero took both snapshots and finished the backup without them.
		g.Eventually(backupPhase(b), 60*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhaseCompleted))
		done := backupNow(g, b)
		g.Expect(done.Status.VolumeSnapshotsAttempted).To(Equal(2))
		g.Expect(done.Status.VolumeSnapshotsCompleted).To(Equal(2))

		snapshots := func(g Gomega) []itemopsv1alpha1.ItemOperation {
			var out []itemopsv1alpha1.ItemOperation
			for _, op := range operationsOf(g, string(done.UID)) {
				if op.Spec.Plugin.Kind == itemopsv1alpha1.PluginKindVolumeSnapshotter {
					out = append(out, op)
				}
			}
			return out
		}
		var ops []itemopsv1alpha1.ItemOperation
		g.Eventually(func(g Gomega) {
			ops = snapshots(g)
			g.Expect(ops).To(HaveLen(2))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		for _, op := range ops {
			g.Expect(op.Spec.Plugin).To(Equal(itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindVolumeSnapshotter, Name: "itemops.io/sample-snapshotter"}))
			g.Expect(op.Spec.SnapshotLocation).To(Equal(vsl.Name))
			g.Expect(op.Spec.Resource.Resource).To(Equal("persistentvolumes"))
			st := pluginState(g, op.Spec.OperationID)
			g.Expect(st.Item).To(Equal("vol-"+op.Spec.Resource.Name), "the snapshot Velero took of that volume")
			g.Expect(st.Size).To(Equal(int64(8<<20)), "the PersistentVolume's annotations reached the snapshot")
		}
		// Velero called the backup Completed before the snapshots were durable.
		for _, op := range ops {
			g.Expect(pluginState(g, op.Spec.OperationID).CompletesAt()).To(BeTemporally(">", done.Status.CompletionTimestamp.Time))
		}

		g.Eventually(func(g Gomega) []itemopsv1alpha1.OperationPhase {
			var phases []itemopsv1alpha1.OperationPhase
			for _, op := range snapshots(g) {
				phases = append(phases, op.Status.Phase)
			}
			return phases
		}, 30*time.Second, 200*time.Millisecond).Should(HaveEach(itemopsv1alpha1.OperationPhaseCompleted))
		g.Eventually(func(g Gomega) []string {
			list := &corev1.EventList{}
			g.Expect(env.Client.List(ctx, list, client.InNamespace(envtest.VeleroNamespace))).To(Succeed())
			var reasons []string
			for _, e := range list.Items {
				if e.InvolvedObject.UID == done.UID {
					reasons = append(reasons, e.Reason)
				}
			}
			return reasons
		}, 10*time.Second, 200*time.Millisecond).Should(ContainElement("VolumeSnapshotsDurable"))
		g.Expect(backupNow(g, b).Status.Phase).To(Equal(velerov1api.BackupPhaseCompleted))
		g.Expect(itemops.Output.String()).To(ContainSubstring("ingested volume snapshots"))
	})
})
