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
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
)

var seq atomic.Int64

// newBackup creates a Backup waiting for its plugin operations.
func newBackup(t testing.TB) *velerov1api.Backup {
	t.Helper()
	b := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("backup-%d", seq.Add(1)), Namespace: envtest.VeleroNamespace},
		Status:     velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations},
	}
	if err := env.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

// startUpload begins a simulated upload in the sample plugin's state, as its
// Execute would have during the backup, and returns the operation ID.
func startUpload(t testing.TB, annotations map[string]string) string {
	t.Helper()
	store, err := sim.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	id, err := store.Start("upload", "shop/data", annotations)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func pluginState(t testing.TB, id string) *sim.State {
	t.Helper()
	store, err := sim.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// newOperation creates the ItemOperation of one upload of backup.
func newOperation(t testing.TB, backup *velerov1api.Backup, pluginName, id string, mutate ...func(*itemopsv1alpha1.ItemOperation)) *itemopsv1alpha1.ItemOperation {
	t.Helper()
	op := &itemopsv1alpha1.ItemOperation{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("op-%d", seq.Add(1)), Namespace: envtest.VeleroNamespace,
			Labels: map[string]string{
				itemopsv1alpha1.LabelParentKind: "Backup",
				itemopsv1alpha1.LabelParentUID:  string(backup.UID),
			},
		},
		Spec: itemopsv1alpha1.ItemOperationSpec{
			Parent:      itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindBackup, Name: backup.Name, UID: string(backup.UID)},
			Plugin:      itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: pluginName},
			OperationID: id,
			Resource:    itemopsv1alpha1.ResourceIdentifier{Resource: "configmaps", Namespace: "shop", Name: "data"},
		},
	}
	for _, m := range mutate {
		m(op)
	}
	if err := env.Client.Create(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	return op
}

func get(g Gomega, op *itemopsv1alpha1.ItemOperation) *itemopsv1alpha1.ItemOperation {
	got := &itemopsv1alpha1.ItemOperation{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(op), got)).To(Succeed())
	return got
}

func phaseOf(op *itemopsv1alpha1.ItemOperation) func(g Gomega) itemopsv1alpha1.OperationPhase {
	return func(g Gomega) itemopsv1alpha1.OperationPhase { return get(g, op).Status.Phase }
}

// events returns the reasons of the Events about op.
func events(g Gomega, op *itemopsv1alpha1.ItemOperation) []string {
	list := &corev1.EventList{}
	g.Expect(env.Client.List(context.Background(), list, client.InNamespace(op.Namespace))).To(Succeed())
	var reasons []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == op.Name && e.InvolvedObject.Kind == "ItemOperation" {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// requestCancel sets spec.cancel, as a user does.
func requestCancel(g Gomega, op *itemopsv1alpha1.ItemOperation) {
	patch := client.MergeFrom(op.DeepCopy())
	op.Spec.Cancel = true
	g.Expect(env.Client.Patch(context.Background(), op, patch)).To(Succeed())
}

var _ = Describe("The ItemOperation reconciler", Label("envtest"), func() {
	// The upload runs 12 s: long enough to be seen in progress on a
	// loaded machine, whose first poll may come after a 3 s one ended.
	It("operation is polled to completion", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationSize: "12Mi", sim.AnnotationSpeed: "1Mi"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)

		g.Eventually(phaseOf(op), 10*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		running := get(g, op)
		g.Expect(running.Finalizers).To(ContainElement(itemopsv1alpha1.Finalizer))
		g.Expect(running.Status.Progress).To(MatchRegexp(`^[0-9.]+(Ki|Mi)?/12Mi \(\d+%\)$`))
		g.Expect(running.Status.Started).NotTo(BeNil())
		g.Expect(meta.IsStatusConditionTrue(running.Status.Conditions, itemopsv1alpha1.ConditionProgressing)).To(BeTrue())

		g.Eventually(phaseOf(op), time.Minute, 100*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCompleted))
		done := get(g, op)
		g.Expect(done.Status.Progress).To(Equal("12Mi/12Mi (100%)"))
		g.Expect(done.Status.NCompleted).To(Equal(int64(12 << 20)))
		g.Expect(done.Status.CompletionTimestamp).NotTo(BeNil())
		g.Expect(done.Status.ObservedGeneration).To(Equal(done.Generation))
		g.Eventually(func(g Gomega) []string { return get(g, op).Finalizers }, time.Second).ShouldNot(ContainElement(itemopsv1alpha1.Finalizer),
			"a finished operation is released at once")
		// Starting and completing are in the status; an Event each would cost two writes.
		g.Consistently(func(g Gomega) []string { return events(g, op) }, time.Second).Should(BeEmpty())
	})

	It("operation the plugin fails is failed", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "10Mi", sim.AnnotationFailAt: "50"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)
		g.Eventually(phaseOf(op), 30*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseFailed))
		g.Expect(get(g, op).Status.Error).To(Equal("simulated failure at 50%"))
		g.Expect(pluginState(t, id).Cancels).To(BeZero(), "a failed operation is not cancelled")
		g.Eventually(func(g Gomega) []string { return events(g, op) }, 5*time.Second).Should(ContainElement("Failed"))
	})

	It("timeout cancels then fails", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id, func(op *itemopsv1alpha1.ItemOperation) {
			op.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Second}
		})
		g.Eventually(phaseOf(op), 10*time.Second, 100*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseFailed))
		got := get(g, op)
		c := meta.FindStatusCondition(got.Status.Conditions, itemopsv1alpha1.ConditionCanceled)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(itemopsv1alpha1.ReasonTimedOut))
		g.Expect(c.Message).To(ContainSubstring("the plugin accepted the cancel request"))
		g.Expect(pluginState(t, id).Cancels).To(Equal(1), "Cancel is called exactly once")
		g.Expect(got.Status.CompletionTimestamp.Sub(got.Status.Created.Time)).To(BeNumerically(">=", 2*time.Second))
		g.Eventually(func(g Gomega) []string { return events(g, op) }, 5*time.Second).Should(ContainElement(itemopsv1alpha1.ReasonTimedOut))
	})

	It("timeout defaults to the parent's", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := &velerov1api.Backup{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("backup-%d", seq.Add(1)), Namespace: envtest.VeleroNamespace},
			Spec:       velerov1api.BackupSpec{ItemOperationTimeout: metav1.Duration{Duration: 2 * time.Second}},
			Status:     velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations},
		}
		g.Expect(env.Client.Create(context.Background(), backup)).To(Succeed())
		id := startUpload(t, map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)
		g.Eventually(phaseOf(op), 10*time.Second, 100*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseFailed))
		g.Expect(meta.FindStatusCondition(get(g, op).Status.Conditions, itemopsv1alpha1.ConditionCanceled).Reason).To(Equal(itemopsv1alpha1.ReasonTimedOut))
	})

	It("spec cancel cancels", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)
		g.Eventually(phaseOf(op), 30*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))

		requestCancel(g, op)
		g.Eventually(phaseOf(op), 30*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCanceled))
		c := meta.FindStatusCondition(get(g, op).Status.Conditions, itemopsv1alpha1.ConditionCanceled)
		g.Expect(c.Reason).To(Equal(itemopsv1alpha1.ReasonCancelRequested))
		g.Expect(pluginState(t, id).Cancels).To(Equal(1))
		g.Consistently(func() int { return pluginState(t, id).Cancels }, time.Second, 100*time.Millisecond).Should(Equal(1))
	})

	// The plugin's process dies during Cancel: the operation is not recorded
	// Canceled until a Cancel has reached the restarted process.
	It("cancel is tried again when the plugin dies during it", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi", sim.AnnotationCrashOnCancel: "true"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)
		g.Eventually(phaseOf(op), 30*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))

		requestCancel(g, op)
		// The process restarts at once after a first exit; the next attempt
		// comes a second later.
		g.Eventually(phaseOf(op), 20*time.Second, 100*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCanceled))
		st := pluginState(t, id)
		g.Expect(st.CancelCrashed).To(BeTrue(), "the plugin process did exit during Cancel")
		g.Expect(st.Cancels).To(Equal(1), "the Cancel after the restart reached the plugin")
		c := meta.FindStatusCondition(get(g, op).Status.Conditions, itemopsv1alpha1.ConditionCanceled)
		g.Expect(c.Message).To(ContainSubstring("the plugin accepted the cancel request"))
	})

	// Many events at once wake the operation while it is cancelled; reconciles
	// on a cache that has not seen the cancel yet must not cancel it again.
	It("cancel once under a burst of events", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		for range 10 {
			backup := newBackup(t)
			id := startUpload(t, map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})
			op := newOperation(t, backup, "itemops.io/sample-datamover", id)
			g.Eventually(phaseOf(op), 30*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))
			requestCancel(g, op)
			for i := range 20 {
				b := backup.DeepCopy()
				p := client.MergeFrom(b.DeepCopy())
				b.Labels = map[string]string{"burst": fmt.Sprint(i)}
				g.Expect(env.Client.Patch(context.Background(), b, p)).To(Succeed())
			}
			g.Eventually(phaseOf(op), 30*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCanceled))
			g.Consistently(func() int { return pluginState(t, id).Cancels }, 500*time.Millisecond, 50*time.Millisecond).Should(Equal(1))
		}
	})

	It("parent deletion cancels unfinished operations", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		running := startUpload(t, map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})
		finished := startUpload(t, map[string]string{sim.AnnotationSize: "1Ki", sim.AnnotationSpeed: "1Mi"})
		opRunning := newOperation(t, backup, "itemops.io/sample-datamover", running)
		opFinished := newOperation(t, backup, "itemops.io/sample-datamover", finished)
		g.Eventually(phaseOf(opRunning), 5*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		g.Eventually(phaseOf(opFinished), 5*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCompleted))

		g.Expect(env.Client.Delete(context.Background(), backup)).To(Succeed())
		g.Eventually(phaseOf(opRunning), 5*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCanceled))
		g.Expect(meta.FindStatusCondition(get(g, opRunning).Status.Conditions, itemopsv1alpha1.ConditionCanceled).Reason).
			To(Equal(itemopsv1alpha1.ReasonParentDeleted))
		g.Expect(pluginState(t, running).Cancels).To(Equal(1))
		g.Expect(pluginState(t, finished).Cancels).To(BeZero(), "a completed operation is never cancelled")
		g.Expect(get(g, opFinished).Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCompleted))
	})

	It("delete backup request cancels", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)
		g.Eventually(phaseOf(op), 30*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		dbr := &velerov1api.DeleteBackupRequest{
			ObjectMeta: metav1.ObjectMeta{Name: backup.Name + "-delete", Namespace: backup.Namespace},
			Spec:       velerov1api.DeleteBackupRequestSpec{BackupName: backup.Name},
		}
		g.Expect(env.Client.Create(context.Background(), dbr)).To(Succeed())
		g.Eventually(phaseOf(op), 30*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCanceled))
		g.Expect(meta.FindStatusCondition(get(g, op).Status.Conditions, itemopsv1alpha1.ConditionCanceled).Reason).
			To(Equal(itemopsv1alpha1.ReasonBackupDeletionRequested))
		g.Expect(pluginState(t, id).Cancels).To(Equal(1))
	})

	It("deleting an unfinished operation cancels it first", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)
		g.Eventually(phaseOf(op), 30*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		g.Expect(env.Client.Delete(context.Background(), op)).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKeyFromObject(op), &itemopsv1alpha1.ItemOperation{}))
		}, 5*time.Second, 50*time.Millisecond).Should(BeTrue())
		g.Expect(pluginState(t, id).Cancels).To(Equal(1))
	})

	It("hung plugin fails after the retry budget", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationHangProgress: "true"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)
		g.Eventually(func(g Gomega) int32 { return get(g, op).Status.PollFailures }, testCallTimeout+10*time.Second, 50*time.Millisecond).
			Should(BeNumerically(">=", 1))
		g.Expect(get(g, op).Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseNew), "one failure does not fail the operation")
		g.Eventually(phaseOf(op), testMaxFailures*testCallTimeout+20*time.Second, 100*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseFailed))
		g.Expect(get(g, op).Status.Error).To(ContainSubstring(fmt.Sprintf("progress could not be read %d times in a row", testMaxFailures)))
	})

	It("unknown plugin is visible and kept", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		op := newOperation(t, backup, "example.io/not-installed", "op-1")
		g.Eventually(func(g Gomega) string {
			c := meta.FindStatusCondition(get(g, op).Status.Conditions, itemopsv1alpha1.ConditionProgressing)
			if c == nil {
				return ""
			}
			return c.Reason
		}, 5*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.ReasonPluginNotFound))
		g.Expect(get(g, op).Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseNew))
		g.Eventually(func(g Gomega) []string { return events(g, op) }, 5*time.Second).Should(ContainElement(itemopsv1alpha1.ReasonPluginNotFound))
	})

	It("v1 plugin fails as not supported", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		op := newOperation(t, backup, "itemops.io/sample-v1-backupper", "op-1")
		g.Eventually(phaseOf(op), 30*time.Second, 50*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseFailed))
		g.Expect(get(g, op).Status.Error).To(ContainSubstring("asynchronous operations not supported"))
	})

	It("stalled operation is marked", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "10Mi", sim.AnnotationStallAt: "40"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)
		g.Eventually(func(g Gomega) bool {
			return meta.IsStatusConditionTrue(get(g, op).Status.Conditions, itemopsv1alpha1.ConditionStalled)
		}, 10*time.Second, 100*time.Millisecond).Should(BeTrue())
		g.Expect(get(g, op).Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		g.Eventually(func(g Gomega) []string { return events(g, op) }, 5*time.Second).Should(ContainElement("Stalled"))
	})

	It("progress writes are throttled", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationSize: "6Mi", sim.AnnotationSpeed: "1Mi"})

		// Count the writes the API server sees for the operation.
		w, err := env.WatchClient().Watch(context.Background(), &itemopsv1alpha1.ItemOperationList{},
			client.InNamespace(envtest.VeleroNamespace))
		g.Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)
		modifications := 0
		deadline := time.After(20 * time.Second)
		for done := false; !done; {
			select {
			case e := <-w.ResultChan():
				got, ok := e.Object.(*itemopsv1alpha1.ItemOperation)
				if !ok || got.Name != op.Name || e.Type != watch.Modified {
					continue
				}
				modifications++
				done = got.Status.Phase.IsTerminal() && len(got.Finalizers) == 0
			case <-deadline:
				t.Fatal("the operation did not finish in time")
			}
		}
		polls := pluginState(t, id).ProgressCalls
		// ~6s of progress polled every 200ms is ~30 polls. Writes: finalizer
		// added and removed, first status, InProgress, every 2s of progress,
		// Completed.
		g.Expect(polls).To(BeNumerically(">=", 15))
		g.Expect(modifications).To(BeNumerically("<=", 9), "%d writes for %d polls", modifications, polls)
	})

	It("plugin crash mid flight recovers", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		backup := newBackup(t)
		id := startUpload(t, map[string]string{sim.AnnotationSize: "2Mi", sim.AnnotationSpeed: "2Mi", sim.AnnotationCrashOnce: "true"})
		op := newOperation(t, backup, "itemops.io/sample-datamover", id)
		// The restart waits out the process's restart backoff, longer when
		// other suites' crashes came just before.
		g.Eventually(phaseOf(op), 20*time.Second, 100*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCompleted))
		g.Expect(pluginState(t, id).Crashed).To(BeTrue(), "the plugin process did crash during a poll")
		g.Expect(get(g, op).Status.PollFailures).To(BeZero(), "the answer after the restart reset the failure count")
	})

	// The API server refuses a status with
	// a plugin's 80 KB error in a condition, and accepts it once bounded.
	It("bounded status is accepted by the API", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		op := newOperation(t, newBackup(t), "example.io/not-installed", "op-huge")
		huge := "the plugin said: " + strings.Repeat("é", 40000)
		write := func(bound bool) error {
			current := get(g, op)
			changed := current.DeepCopy()
			changed.Status.Error = huge
			setCondition(changed, itemopsv1alpha1.ConditionProgressing, metav1.ConditionFalse, itemopsv1alpha1.ReasonPollFailing, huge, time.Now())
			if bound {
				boundStatus(&changed.Status)
			}
			return env.Client.Status().Patch(context.Background(), changed, client.MergeFrom(current))
		}
		g.Expect(apierrors.IsInvalid(write(false))).To(BeTrue(), "the API accepted an 80 KB condition message")
		g.Expect(write(true)).To(Succeed())
	})
})
