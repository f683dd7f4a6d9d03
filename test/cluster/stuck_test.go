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

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/stack"
)

// Where Velero itself is stuck: each wait reproduced for real on the node,
// the cause shown within two polls of the cluster showing it, and the
// Backup or Restore then ended as Velero ends it, itemops agreeing. The
// time from the fact to the cause, and what Velero then did, go to the
// suite's output.

// opState is an operation's phase and the reason of its Waiting
// condition when True ("-" when not waiting).
func opState(kind, parent, item string) func(g Gomega) string {
	return func(g Gomega) string {
		ops := operationsOf(g, kind, parent)
		g.Expect(ops).To(HaveKey(item))
		op := ops[item]
		reason := "-"
		if c := apimeta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionWaiting); c != nil && c.Status == "True" {
			reason = c.Reason
		}
		return string(op.Status.Phase) + " " + reason
	}
}

// unexposed is what the cluster shows of a parent's one movement that
// nothing exposes any more: Accepted, and no data mover's pod.
func unexposed(kind, parent string) func(g Gomega) {
	return func(g Gomega) {
		name, phase := onlyMovement(g, kind, parent)
		g.Expect(phase).To(Equal("Accepted"))
		err := s.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: name}, &corev1.Pod{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the data mover's pod %s gone: %v", name, err)
	}
}

// nodeAgentArgs sets node-agent's arguments until the spec ends, which
// restarts it.
func nodeAgentArgs(ctx context.Context, edit func([]string) []string) {
	GinkgoHelper()
	ds := &appsv1.DaemonSet{}
	Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "node-agent"}, ds)).To(Succeed())
	original := append([]string(nil), ds.Spec.Template.Spec.Containers[0].Args...)
	set := func(ctx context.Context, args []string) {
		Eventually(func(g Gomega) {
			ds := &appsv1.DaemonSet{}
			g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "node-agent"}, ds)).To(Succeed())
			ds.Spec.Template.Spec.Containers[0].Args = args
			g.Expect(s.Client.Update(ctx, ds)).To(Succeed())
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		run(ctx, "kubectl -n velero rollout status daemonset/node-agent --timeout=3m")
	}
	DeferCleanup(func(ctx SpecContext) { set(ctx, original) })
	set(ctx, edit(append([]string(nil), original...)))
}

// itemopsShows runs a kubectl itemops command as a user does until what it
// prints matches (what it prints is written by a controller that may not
// have written it yet), and prints its last output (docs/velero.md quotes
// it).
func itemopsShows(ctx context.Context, command string, matcher types.GomegaMatcher) {
	GinkgoHelper()
	var out string
	Eventually(func(g Gomega) string {
		var err error
		out, err = s.Run(ctx, command)
		g.Expect(err).NotTo(HaveOccurred(), out)
		return out
	}).WithContext(ctx).WithTimeout(2*pollInterval+settle).WithPolling(2*time.Second).Should(matcher, "$ %s", command)
	GinkgoWriter.Printf("$ %s\n%s\n", command, out)
}

// cancelHeld cancels a parent's operations as a user does and waits until
// the operation of item is Canceling and waits on its cancel, within two
// polls; it returns when the cancel was asked.
func cancelHeld(ctx context.Context, kind, parent, item string) time.Time {
	GinkgoHelper()
	run(ctx, fmt.Sprintf("kubectl itemops cancel %s %s -n velero", strings.ToLower(kind), parent))
	cancelled := time.Now()
	Eventually(opState(kind, parent, item)).WithContext(ctx).WithTimeout(2*pollInterval + settle).Should(Equal("Canceling CancelPending"))
	shownAfter("CancelPending of "+kind+" "+parent, cancelled)
	return cancelled
}

// shownAfter logs how long after the fact a cause was shown.
func shownAfter(what string, fact time.Time) {
	GinkgoWriter.Printf("MEASURED %s: shown %s after the fact\n", what, time.Since(fact).Round(time.Second))
}

// veleroStuckManaged runs in manage mode, within whyOperationsWait.
func veleroStuckManaged() {
	It("where Velero is stuck: node-agent restarted before it exposed an Accepted upload is NodeAgentRestarted; a cancel is Canceling until node-agent's prepare timeout fails it, then Canceled", func(ctx SpecContext) {
		needs(theMode)
		appNamespace(ctx, "why-restart", item{name: "held", mib: 8})
		holdFile := filepath.Join(s.CSIDataDir(), "fail-snapshot", volumeHandle(ctx, "why-restart", "held"))
		Expect(os.WriteFile(holdFile, nil, 0o644)).To(Succeed())
		DeferCleanup(func() { _ = os.Remove(holdFile) })
		run(ctx, "velero backup create why-restart --include-namespaces why-restart --snapshot-move-data")
		By("Accepted, node-agent waiting for the snapshot to expose it")
		causeShown(ctx, "Backup", "why-restart", "held", itemopsv1alpha1.WaitingSnapshotNotReady, `is not ready to use`,
			func(g Gomega) {
				_, phase := onlyMovement(g, "Backup", "why-restart")
				g.Expect(phase).To(Equal("Accepted"))
			})
		By("node-agent restarted (a prepare timeout of 4m in its new arguments), the snapshot then ready")
		nodeAgentArgs(ctx, func(args []string) []string { return append(args, "--data-mover-prepare-timeout=4m") })
		restarted := time.Now()
		Expect(os.Remove(holdFile)).To(Succeed())
		op := causeShown(ctx, "Backup", "why-restart", "held", itemopsv1alpha1.WaitingNodeAgentRestarted,
			`started again at .*not busy: 0 of its 1 data path\(s\).*prepare timeout \(4m0s`, unexposed("Backup", "why-restart"))
		shownAfter("NodeAgentRestarted", restarted)
		itemopsShows(ctx, "kubectl itemops why backup why-restart -n velero", ContainSubstring("waiting for NodeAgentRestarted"))

		By("a cancel: Canceling, pending on node-agent")
		cancelled := cancelHeld(ctx, "Backup", "why-restart", "held")
		itemopsShows(ctx, "kubectl itemops why backup why-restart -n velero", MatchRegexp(`waiting for CancelPending: .*spec.cancel is set on DataUpload why-restart-\w+, which is Accepted`))

		By("node-agent's prepare timeout fails the upload: the cancel's outcome is Canceled, the Backup PartiallyFailed")
		Eventually(func(g Gomega) string {
			_, phase := onlyMovement(g, "Backup", "why-restart")
			return phase
		}).WithContext(ctx).WithTimeout(6 * time.Minute).Should(Equal("Failed"))
		failed := time.Now()
		GinkgoWriter.Printf("MEASURED node-agent failed the DataUpload %s after its restart, %s after the cancel\n",
			failed.Sub(restarted).Round(time.Second), failed.Sub(cancelled).Round(time.Second))
		Eventually(opState("Backup", "why-restart", "held")).WithContext(ctx).WithTimeout(2*pollInterval + settle).Should(Equal("Canceled -"))
		Eventually(backupPhase("why-restart")).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal(velerov1api.BackupPhasePartiallyFailed))
		historyShows(ctx, op.Name, ContainElements("Waiting NodeAgentRestarted", "Waiting CancelPending"))
	})
}

// veleroStuckObserved runs in observe mode, where Velero records the ends.
func veleroStuckObserved() {
	It("where Velero is stuck: a restore's data mover pod deleted while Pending is PodGone; a cancel is Canceling until node-agent cancels it and Velero records it, then Canceled", func(ctx SpecContext) {
		needs(theMode, backupWhyTaint)
		taintNode(ctx)
		run(ctx, "velero restore create why-gone --from-backup why-taint --namespace-mappings why-taint:why-gone")
		causeShown(ctx, "Restore", "why-gone", "tainted", itemopsv1alpha1.WaitingPodUnschedulable, `untolerated taint`,
			func(g Gomega) {
				name, phase := onlyMovement(g, "Restore", "why-gone")
				g.Expect(phase).To(Equal("Accepted"))
				g.Expect(dataMoverPod(g, name).Status.Phase).To(Equal(corev1.PodPending))
			})
		name := ""
		Eventually(func(g Gomega) { name, _ = onlyMovement(g, "Restore", "why-gone") }).WithContext(ctx).Should(Succeed())
		run(ctx, "kubectl -n velero delete pod "+name+" --wait")
		deleted := time.Now()
		op := causeShown(ctx, "Restore", "why-gone", "tainted", itemopsv1alpha1.WaitingPodGone, `the data mover's pod velero/`+name+` does not exist`,
			unexposed("Restore", "why-gone"))
		shownAfter("PodGone", deleted)
		itemopsShows(ctx, "kubectl itemops why restore why-gone -n velero", ContainSubstring("waiting for PodGone"))

		By("a cancel: Canceling, not Canceled, until Velero records an end")
		cancelled := cancelHeld(ctx, "Restore", "why-gone", "tainted")
		itemopsShows(ctx, "kubectl itemops why restore why-gone -n velero", ContainSubstring("once it has seen the request for 5m0s"))
		Eventually(func(g Gomega) string {
			_, phase := onlyMovement(g, "Restore", "why-gone")
			return phase
		}).WithContext(ctx).WithTimeout(9 * time.Minute).Should(Equal(string(velerov2alpha1.DataDownloadPhaseCanceled)))
		GinkgoWriter.Printf("MEASURED node-agent canceled the Accepted DataDownload %s after the cancel\n", time.Since(cancelled).Round(time.Second))
		Eventually(opState("Restore", "why-gone", "tainted")).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Equal("Canceled -"))
		GinkgoWriter.Printf("MEASURED Canceled, as Velero recorded it, %s after the cancel\n", time.Since(cancelled).Round(time.Second))
		Eventually(func(g Gomega) velerov1api.RestorePhase {
			r := &velerov1api.Restore{}
			g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "why-gone"}, r)).To(Succeed())
			return r.Status.Phase
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal(velerov1api.RestorePhasePartiallyFailed))
		historyShows(ctx, op.Name, ContainElements("Waiting PodGone", "Waiting CancelPending"))
	})

	It("where Velero is stuck: the bucket's server gone mid-upload is LocationUnavailable once Velero finds the location Unavailable, until it is back", func(ctx SpecContext) {
		// A bucket of its own: the prefix-less location slow refuses a
		// bucket that holds anything but its own directories.
		run(ctx, fmt.Sprintf("velero backup-location create flaky --provider aws --bucket %s --validation-frequency 10s "+
			"--config region=%s,s3ForcePathStyle=true,s3Url=%s", stack.FlakyBucket, stack.Region, stack.SlowS3URL))
		// Read with a context of its own: the cleanup reads it too, after
		// the spec's context ended.
		locationPhase := func(name string) func(g Gomega) velerov1api.BackupStorageLocationPhase {
			return func(g Gomega) velerov1api.BackupStorageLocationPhase {
				bsl := &velerov1api.BackupStorageLocation{}
				g.Expect(s.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: name}, bsl)).To(Succeed())
				return bsl.Status.Phase
			}
		}
		Eventually(locationPhase("flaky")).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal(velerov1api.BackupStorageLocationPhaseAvailable))
		appNamespace(ctx, "why-bucket", item{name: "far", mib: 32})
		run(ctx, "velero backup create why-bucket --include-namespaces why-bucket --snapshot-move-data --storage-location flaky")
		Eventually(func(g Gomega) int64 {
			list := &velerov2alpha1.DataUploadList{}
			g.Expect(s.Client.List(ctx, list, client.InNamespace(s.Namespace),
				client.MatchingLabels{velerov1api.BackupNameLabel: "why-bucket"})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			return list.Items[0].Status.Progress.BytesDone
		}).WithContext(ctx).WithTimeout(3 * time.Minute).Should(BeNumerically(">", 0))
		By("the server behind the location gone")
		back := func(ctx context.Context) {
			run(ctx, "kubectl -n "+stack.StorageNamespace+" scale deployment slow-link --replicas=1")
			Expect(s.WaitAvailable(ctx, stack.StorageNamespace, "slow-link", 2*time.Minute)).To(Succeed())
		}
		DeferCleanup(func(ctx SpecContext) {
			back(ctx)
			Eventually(locationPhase("slow")).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Equal(velerov1api.BackupStorageLocationPhaseAvailable))
		})
		run(ctx, "kubectl -n "+stack.StorageNamespace+" scale deployment slow-link --replicas=0")
		op := causeShown(ctx, "Backup", "why-bucket", "far", itemopsv1alpha1.WaitingLocationUnavailable,
			`BackupStorageLocation velero/flaky that DataUpload why-bucket-\w+ moves data through is Unavailable`,
			func(g Gomega) {
				g.Expect(locationPhase("flaky")(g)).To(Equal(velerov1api.BackupStorageLocationPhaseUnavailable))
			})
		bsl := &velerov1api.BackupStorageLocation{}
		Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "flaky"}, bsl)).To(Succeed())
		if bsl.Status.LastValidationTime != nil {
			shownAfter("LocationUnavailable (from Velero's check)", bsl.Status.LastValidationTime.Time)
		}
		itemopsShows(ctx, "kubectl itemops why backup why-bucket -n velero", ContainSubstring("waiting for LocationUnavailable"))

		By("the server back: the Backup ends as Velero ends it, itemops agreeing")
		back(ctx)
		var end velerov1api.BackupPhase
		Eventually(func(g Gomega) velerov1api.BackupPhase {
			end = getBackup(g, "why-bucket").Status.Phase
			return end
		}).WithContext(ctx).WithTimeout(6 * time.Minute).Should(BeElementOf(velerov1api.BackupPhaseCompleted, velerov1api.BackupPhasePartiallyFailed))
		_, moved := onlyMovement(Default, "Backup", "why-bucket")
		GinkgoWriter.Printf("MEASURED the bucket back: Velero ended the Backup %s, its DataUpload %s\n", end, moved)
		want := "Completed -"
		if moved != "Completed" {
			want = "Failed -"
		}
		Eventually(opState("Backup", "why-bucket", "far")).WithContext(ctx).WithTimeout(time.Minute).Should(Equal(want))
		historyShows(ctx, op.Name, ContainElement("Waiting LocationUnavailable"))
	})

	It("where Velero is stuck: velero server scaled to 0 while a transfer stands still is VeleroNotRunning, until it runs; then NotMoving until its bytes move", func(ctx SpecContext) {
		needs(theMode)
		run(ctx, "helm upgrade itemops charts/itemops -n velero --reuse-values --set notMovingAfter=30s --wait")
		DeferCleanup(func(ctx SpecContext) {
			_ = os.Remove(s.SlowLinkPause())
			run(ctx, "kubectl -n velero scale deployment velero --replicas=1")
			run(ctx, "helm upgrade itemops charts/itemops -n velero --reuse-values --set notMovingAfter=2m --wait")
		})
		appNamespace(ctx, "why-velero", item{name: "idle", mib: 32})
		run(ctx, "velero backup create why-velero --include-namespaces why-velero --snapshot-move-data --storage-location slow")
		Eventually(func(g Gomega) int64 {
			list := &velerov2alpha1.DataUploadList{}
			g.Expect(s.Client.List(ctx, list, client.InNamespace(s.Namespace),
				client.MatchingLabels{velerov1api.BackupNameLabel: "why-velero"})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			return list.Items[0].Status.Progress.BytesDone
		}).WithContext(ctx).WithTimeout(3 * time.Minute).Should(BeNumerically(">", 0))
		By("the link paused, velero server scaled to 0")
		Expect(os.WriteFile(s.SlowLinkPause(), nil, 0o644)).To(Succeed())
		run(ctx, "kubectl -n velero scale deployment velero --replicas=0")
		var down time.Time
		op := causeShown(ctx, "Backup", "why-velero", "idle", itemopsv1alpha1.WaitingVeleroNotRunning, `velero server does not run: Deployment velero/velero is scaled to 0`,
			func(g Gomega) {
				d := &appsv1.Deployment{}
				g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "velero"}, d)).To(Succeed())
				g.Expect(d.Status.ReadyReplicas).To(BeZero())
				g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
				if down.IsZero() {
					down = time.Now()
				}
				// And the bytes standing still for the not-moving window
				// and one progress write interval more (its clock starts
				// at the last progress written).
				g.Expect(time.Since(down)).To(BeNumerically(">=", 30*time.Second+managerDuration(g, "progress-update-interval")))
			})
		shownAfter("VeleroNotRunning", down)
		itemopsShows(ctx, "kubectl itemops why backup why-velero -n velero", ContainSubstring("waiting for VeleroNotRunning"))
		By("velero server back, the link still paused: the transfer stands still and nothing explains it any more")
		run(ctx, "kubectl -n velero scale deployment velero --replicas=1")
		Expect(s.WaitAvailable(ctx, s.Namespace, "velero", 3*time.Minute)).To(Succeed())
		causeShown(ctx, "Backup", "why-velero", "idle", itemopsv1alpha1.WaitingNotMoving, `no progress since .*; checked: .*velero server \(Deployment velero/velero: 1 of 1 ready\)`,
			func(g Gomega) {
				d := &appsv1.Deployment{}
				g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "velero"}, d)).To(Succeed())
				g.Expect(d.Status.ReadyReplicas).To(BeNumerically(">", 0))
			})
		itemopsShows(ctx, "kubectl itemops why backup why-velero -n velero", ContainSubstring("waiting for NotMoving"))
		By("the link open: Velero completes the Backup")
		Expect(os.Remove(s.SlowLinkPause())).To(Succeed())
		waitEnds(ctx, "Backup", "why-velero", string(velerov1api.BackupPhaseCompleted),
			map[string][]string{op.Name: {itemopsv1alpha1.WaitingVeleroNotRunning, itemopsv1alpha1.WaitingNotMoving}})
	})
}
