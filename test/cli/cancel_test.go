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
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// cancelRequested are the names of the operations whose spec.cancel is set.
func cancelRequested(g Gomega, ops ...*itemopsv1alpha1.ItemOperation) []string {
	var names []string
	for _, op := range ops {
		now := &itemopsv1alpha1.ItemOperation{}
		g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(op), now)).To(Succeed())
		if now.Spec.Cancel {
			names = append(names, now.Name)
		}
	}
	return names
}

var _ = Describe("kubectl itemops cancel", func() {
	// It checks that cancel sets
	// spec.cancel on the unfinished operations only (or on those named), says
	// which, and refuses an operation the Backup does not have before touching any.
	It("cancel touches exactly the unfinished operations", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		ns := namespace(t, "cancel")
		b := backupIn(t, ns, "nightly", velerov1api.BackupPhaseWaitingForPluginOperations, 5)
		completed := operation(t, b, "done", "velero.io/csi-pvc-backupper", "du-done")
		setStatus(t, completed, ended(itemopsv1alpha1.OperationPhaseCompleted, gi("1Gi"), gi("1Gi"), ""))
		failed := operation(t, b, "broken", "velero.io/csi-pvc-backupper", "du-broken")
		setStatus(t, failed, ended(itemopsv1alpha1.OperationPhaseFailed, gi("1Gi"), gi("2Gi"), "disk gone"))
		running := operation(t, b, "orders-db", "velero.io/csi-pvc-backupper", "du-orders")
		setStatus(t, running, progressAt(time.Now(), gi("1Gi"), gi("4Gi"), time.Minute))
		other := operation(t, b, "media", "velero.io/csi-pvc-backupper", "du-media")
		setStatus(t, other, progressAt(time.Now(), gi("1Gi"), gi("4Gi"), time.Minute))
		fresh := operation(t, b, "search-index", "itemops.io/sample-datamover", "up-search")
		all := []*itemopsv1alpha1.ItemOperation{completed, failed, running, other, fresh}

		r := kubectlItemops(ctx, clock.RealClock{}, "cancel", "backup", "nightly", "-n", ns, "--operation", "du-orders", "--operation", "nope")
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.err).To(ContainSubstring(`backup/nightly has no operation "nope"`))
		g.Expect(cancelRequested(g, all...)).To(BeEmpty(), "nothing touched")

		r = kubectlItemops(ctx, clock.RealClock{}, "cancel", "backup", "nightly", "-n", ns, "--operation", "du-orders")
		g.Expect(r.code).To(Equal(0), r.err)
		g.Expect(r.out).To(Equal("itemoperation/nightly-du-orders (shop/orders-db, velero.io/csi-pvc-backupper, operation du-orders) cancel requested\n"))
		g.Expect(cancelRequested(g, all...)).To(ConsistOf(running.Name))

		r = kubectlItemops(ctx, clock.RealClock{}, "cancel", "backup", "nightly", "-n", ns)
		g.Expect(r.code).To(Equal(0), r.err)
		g.Expect(strings.Split(strings.TrimSpace(r.out), "\n")).To(ConsistOf(
			"itemoperation/nightly-du-done (shop/done, velero.io/csi-pvc-backupper, operation du-done) already Completed",
			"itemoperation/nightly-du-broken (shop/broken, velero.io/csi-pvc-backupper, operation du-broken) already Failed",
			"itemoperation/nightly-du-orders (shop/orders-db, velero.io/csi-pvc-backupper, operation du-orders) cancel already requested",
			"itemoperation/nightly-du-media (shop/media, velero.io/csi-pvc-backupper, operation du-media) cancel requested",
			"itemoperation/nightly-up-search (shop/search-index, itemops.io/sample-datamover, operation up-search) cancel requested",
		))
		g.Expect(cancelRequested(g, all...)).To(ConsistOf(running.Name, other.Name, fresh.Name))

		// --wait returns once itemops has canceled them all.
		waiting := start(t, clock.RealClock{}, "cancel", "backup", "nightly", "-n", ns, "--wait")
		g.Eventually(waiting.out.String, 20*time.Second).Should(ContainSubstring("Waiting for 3 operation(s) to end"), waiting.errs.String())
		for _, op := range []*itemopsv1alpha1.ItemOperation{running, other} {
			setStatus(t, op, ended(itemopsv1alpha1.OperationPhaseCanceled, gi("1Gi"), gi("4Gi"), "canceled on request"))
		}
		g.Eventually(waiting.lines, 20*time.Second).Should(ContainElement(HaveSuffix("(shop/media, velero.io/csi-pvc-backupper, operation du-media) Canceled: canceled on request")))
		g.Consistently(waiting.code, time.Second).ShouldNot(Receive(), "one operation still runs")
		setStatus(t, fresh, ended(itemopsv1alpha1.OperationPhaseCanceled, 0, 0, "canceled on request"))
		g.Expect(waiting.exitCode(g)).To(Equal(0))
		g.Expect(waiting.out.String()).To(ContainSubstring("itemoperation/nightly-up-search (shop/search-index, itemops.io/sample-datamover, operation up-search) Canceled: canceled on request"))

		r = kubectlItemops(ctx, clock.RealClock{}, "cancel", "backup", "nightly", "-n", ns)
		g.Expect(r.code).To(Equal(0), r.err)
		g.Expect(r.out).To(HaveSuffix("Nothing to cancel: every operation of backup/nightly has already ended.\n"))

		r = kubectlItemops(ctx, clock.RealClock{}, "cancel", "restore", "absent", "-n", ns)
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.err).To(ContainSubstring(`restores.velero.io "absent" not found`))
	})

	// It calls the __complete command that shells and
	// kubectl's plugin completion (kubectl_complete-itemops) run.
	It("completion returns names", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		ns := namespace(t, "complete")
		b := backupIn(t, ns, "nightly-20261123", velerov1api.BackupPhaseWaitingForPluginOperations, 2)
		backupIn(t, ns, "nightly-20261124", velerov1api.BackupPhaseNew, 0)
		backupIn(t, ns, "weekly-20261122", velerov1api.BackupPhaseCompleted, 0)
		restoreIn(t, ns, "restore-orders", velerov1api.RestorePhaseCompleted, 0)
		setStatus(t, operation(t, b, "orders-db", "velero.io/csi-pvc-backupper", "du-orders"), progressAt(time.Now(), 1, 4, time.Minute))
		setStatus(t, operation(t, b, "done", "velero.io/csi-pvc-backupper", "du-done"), ended(itemopsv1alpha1.OperationPhaseCompleted, 4, 4, ""))

		complete := func(args ...string) []string {
			r := kubectlItemops(ctx, clock.RealClock{}, append([]string{"__complete", "-n", ns}, args...)...)
			g.Expect(r.code).To(Equal(0), r.err)
			return strings.Split(strings.TrimSpace(r.out), "\n")
		}
		g.Expect(complete("watch", "")).To(Equal([]string{"backup\tVelero Backups", "restore\tVelero Restores", ":4"}))
		g.Expect(complete("get", "re")).To(Equal([]string{"restores\tVelero Restores", ":4"}))
		g.Expect(complete("watch", "backup", "nightly")).To(Equal([]string{"nightly-20261123", "nightly-20261124", ":4"}))
		g.Expect(complete("cancel", "restore", "")).To(Equal([]string{"restore-orders", ":4"}))
		g.Expect(complete("cancel", "backup", "nightly-20261123", "--operation", "")).To(Equal([]string{
			"du-orders\tshop/orders-db velero.io/csi-pvc-backupper", ":4"}))
	})
})
