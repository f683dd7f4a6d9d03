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

package cli

import (
	"context"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// waitingOn is the status of an operation waiting on a cause, as itemops writes it.
func waitingOn(reason, message string) func(*itemopsv1alpha1.ItemOperationStatus) {
	return func(s *itemopsv1alpha1.ItemOperationStatus) {
		s.WaitingFor = reason
		s.Conditions = append(s.Conditions, metav1.Condition{Type: itemopsv1alpha1.ConditionWaiting, Status: metav1.ConditionTrue,
			Reason: reason, Message: message, LastTransitionTime: metav1.Now()})
	}
}

var _ = Describe("kubectl itemops why", func() {
	// It checks, against golden files,
	// what why says of a Backup whose operations wait on causes, fail,
	// cannot be polled and move; of a Backup in Velero's queue; and the
	// causes in get's table.
	It("why names each waiting operation's cause, its evidence and what to do", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		ns := namespace(t, "why")
		b := backupIn(t, ns, "nightly-3", velerov1api.BackupPhaseWaitingForPluginOperations, 5)
		now := b.CreationTimestamp.Add(20 * time.Minute)

		setStatus(t, operation(t, b, "orders-db", "velero.io/csi-pvc-backupper", "du-orders"), ended(itemopsv1alpha1.OperationPhaseCompleted, gi("2Gi"), gi("2Gi"), ""))
		moving := operation(t, b, "media", "velero.io/csi-pvc-backupper", "du-media")
		setStatus(t, moving, progressAt(now, gi("1Gi"), gi("8Gi"), 10*time.Minute))
		setStatus(t, moving, func(s *itemopsv1alpha1.ItemOperationStatus) { s.Throughput, s.UnitsPerSecond = "12MiB/s", 12<<20 })
		busy := operation(t, b, "search", "velero.io/csi-pvc-backupper", "du-search")
		setStatus(t, busy, func(s *itemopsv1alpha1.ItemOperationStatus) { s.Phase = itemopsv1alpha1.OperationPhaseNew })
		setStatus(t, busy, waitingOn(itemopsv1alpha1.WaitingNodeAgentBusy,
			"DataUpload nightly-3-x7k2p is Prepared on node worker-1, which already runs node-agent's loadConcurrency of 1 data path(s): "+
				"1 ahead (DataUpload/nightly-3-q8m4z). It starts when one of them ends. To run more at once, raise loadConcurrency in "+
				"node-agent's ConfigMap (--node-agent-configmap) and restart node-agent, which reads it at start"))
		missing := operation(t, b, "catalog", "example.io/exporter", "ex-catalog")
		setStatus(t, missing, func(s *itemopsv1alpha1.ItemOperationStatus) {
			s.Phase, s.WaitingFor = itemopsv1alpha1.OperationPhaseNew, itemopsv1alpha1.ReasonPluginNotFound
			s.Conditions = []metav1.Condition{{Type: itemopsv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse,
				Reason: itemopsv1alpha1.ReasonPluginNotFound, Message: "no plugin serves BackupItemAction example.io/exporter",
				LastTransitionTime: metav1.Now()}}
		})
		setStatus(t, operation(t, b, "ledger", "velero.io/csi-pvc-backupper", "du-ledger"),
			ended(itemopsv1alpha1.OperationPhaseFailed, gi("1Gi"), gi("4Gi"), "data path for du-ledger failed: error to connect to storage"))

		// Left ReadyToStart: Velero's last write to it is its creation
		// here. Made before the others, it runs first in the queue's order.
		backupIn(t, ns, "nightly-2", velerov1api.BackupPhaseReadyToStart, 0)
		queued := backupIn(t, ns, "nightly-4", velerov1api.BackupPhaseQueued, 0)
		ahead := backupIn(t, ns, "adhoc-1", velerov1api.BackupPhaseQueued, 0)
		backupIn(t, ns, "weekly-1", velerov1api.BackupPhaseInProgress, 0)
		for backup, position := range map[*velerov1api.Backup]int{queued: 3, ahead: 2} {
			original := backup.DeepCopy()
			backup.Status.QueuePosition = position
			g.Expect(env.Client.Patch(ctx, backup, client.MergeFrom(original))).To(Succeed())
		}

		clock := clocktesting.NewFakePassiveClock(now)
		for _, c := range []struct {
			golden string
			args   []string
		}{
			{"why-backup.golden", []string{"why", "backup", "nightly-3", "-n", ns}},
			{"why-queued.golden", []string{"why", "backup", "nightly-4", "-n", ns}},
			{"get-waiting.golden", []string{"get", "backup", "nightly-3", "-n", ns}},
			{"why-readytostart.golden", []string{"why", "backup", "nightly-2", "-n", ns}},
		} {
			r := kubectlItemops(ctx, clock, c.args...)
			g.Expect(r.code).To(Equal(0), r.err)
			// The namespace is the test's own, new at each run, and so are
			// the times.
			out := strings.ReplaceAll(strings.ReplaceAll(r.out, ns+"/", "velero/"), "-n "+ns+" ", "-n velero ")
			out = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|\d{8}T\d{6}Z`).ReplaceAllString(out, "TIME")
			golden(t, c.golden, out)
		}

		By("a Backup InProgress, waiting for its file-system backups")
		files := backupIn(t, ns, "files-1", velerov1api.BackupPhaseInProgress, 0)
		for volume, status := range map[string]func(*itemopsv1alpha1.ItemOperationStatus){
			"data": waitingOn(itemopsv1alpha1.WaitingNodeAgentBusy,
				"PodVolumeBackup files-1-x7k2p is Prepared on node worker-1, which already runs node-agent's loadConcurrency of 1 data path(s): "+
					"1 ahead (PodVolumeBackup/files-1-q8m4z). It starts when one of them ends"),
			"logs": func(s *itemopsv1alpha1.ItemOperationStatus) {
				progressAt(now, gi("1Gi"), gi("4Gi"), 3*time.Minute)(s)
				s.Throughput, s.UnitsPerSecond = "17MiB/s", 17<<20
			},
		} {
			op := operation(t, files, "web-0", "", "files-1-"+volume, func(op *itemopsv1alpha1.ItemOperation) {
				op.Spec.Plugin, op.Spec.OperationID = itemopsv1alpha1.PluginReference{}, ""
				op.Spec.Mirror = &itemopsv1alpha1.MirrorReference{Kind: itemopsv1alpha1.MirrorKindPodVolumeBackup, Name: "files-1-" + volume, UID: "u-" + volume, Volume: volume}
				op.Spec.Resource = itemopsv1alpha1.ResourceIdentifier{Resource: "pods", Namespace: "shop", Name: "web-0"}
			})
			setStatus(t, op, status)
		}
		r := kubectlItemops(ctx, clock, "why", "backup", "files-1", "-n", ns)
		g.Expect(r.code).To(Equal(0), r.err)
		golden(t, "why-filesystem.golden", strings.ReplaceAll(r.out, ns+"/", "velero/"))

		r = kubectlItemops(ctx, clock, "why", "restore", "absent", "-n", ns)
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.err).To(ContainSubstring(`restores.velero.io "absent" not found`))
	})
})
