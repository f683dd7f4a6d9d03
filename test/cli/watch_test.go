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
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

func startWatch(t testing.TB, now time.Time, args ...string) *running {
	t.Helper()
	return start(t, clocktesting.NewFakePassiveClock(now), append([]string{"watch"}, args...)...)
}

var _ = Describe("kubectl itemops watch", func() {
	// It feeds a Backup's operations a scripted
	// sequence of status updates, as itemops writes them, and checks each line
	// the plain output prints and the exit code of the outcome.
	It("watch prints one line per change", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ns := namespace(t, "watch-plain")
		now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
		b := backupIn(t, ns, "nightly", velerov1api.BackupPhaseWaitingForPluginOperations, 2)
		orders := operation(t, b, "orders-db", "velero.io/csi-pvc-backupper", "du-orders")
		setStatus(t, orders, progressAt(now, gi("1Gi"), gi("4Gi"), 3*time.Minute))
		search := operation(t, b, "search-index", "itemops.io/sample-datamover", "up-search")

		w := startWatch(t, now, "backup", "nightly", "-n", ns)
		// Each step waits for the lines of the one before, so that no two
		// updates merge into one snapshot.
		step := func(lines int, change func()) {
			g.Eventually(w.lines, 20*time.Second).Should(HaveLen(lines), w.errs.String())
			change()
		}
		step(3, func() { setStatus(t, orders, progressAt(now, gi("3Gi"), gi("4Gi"), time.Minute)) })
		step(4, func() { setStatus(t, search, stalledNow) })
		step(6, func() {
			setStatus(t, search, ended(itemopsv1alpha1.OperationPhaseFailed, gi("1Gi"), gi("4Gi"), "upload failed at 25%"))
		})
		step(8, func() { setStatus(t, orders, ended(itemopsv1alpha1.OperationPhaseCompleted, gi("4Gi"), gi("4Gi"), "")) })
		step(10, func() { setBackupPhase(t, b, velerov1api.BackupPhaseFinalizingPartiallyFailed) })
		step(11, func() { setBackupPhase(t, b, velerov1api.BackupPhasePartiallyFailed) })
		g.Expect(w.exitCode(g)).To(Equal(1))
		golden(t, "watch-plain.golden", w.out.String())
	})

	// It checks the exit code of each way a
	// parent can end, for Backups and Restores, and of a parent that is not there.
	Describe("watch ends with the outcome as exit code", func() {
		// ns is made once, for every outcome.
		var ns string
		BeforeEach(func() {
			if ns == "" {
				ns = namespace(GinkgoTB(), "watch-outcomes")
			}
		})
		now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
		for _, c := range []struct {
			name     string
			end      func(t testing.TB, b *velerov1api.Backup)
			code     int
			lastLine string
		}{
			{"completed", func(t testing.TB, b *velerov1api.Backup) { setBackupPhase(t, b, velerov1api.BackupPhaseCompleted) },
				0, "backup/completed ended Completed (exit code 0)"},
			{"partially-failed", func(t testing.TB, b *velerov1api.Backup) {
				setBackupPhase(t, b, velerov1api.BackupPhasePartiallyFailed)
			},
				1, "backup/partially-failed ended PartiallyFailed (exit code 1)"},
			{"failed", func(t testing.TB, b *velerov1api.Backup) { setBackupPhase(t, b, velerov1api.BackupPhaseFailed) },
				2, "backup/failed ended Failed (exit code 2)"},
			{"deleting", func(t testing.TB, b *velerov1api.Backup) { setBackupPhase(t, b, velerov1api.BackupPhaseDeleting) },
				3, "backup/deleting is being deleted (exit code 3)"},
			{"deleted", func(t testing.TB, b *velerov1api.Backup) {
				if err := env.Client.Delete(context.Background(), b); err != nil {
					t.Fatal(err)
				}
			}, 3, "backup/deleted was deleted (exit code 3)"},
		} {
			It(c.name, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				b := backupIn(t, ns, c.name, velerov1api.BackupPhaseFinalizing, 1)
				setStatus(t, operation(t, b, "data", "velero.io/csi-pvc-backupper", "du"),
					ended(itemopsv1alpha1.OperationPhaseCompleted, gi("1Gi"), gi("1Gi"), ""))
				w := startWatch(t, now, "backup", c.name, "-n", ns, "-o", "plain")
				g.Eventually(w.lines, 20*time.Second).Should(HaveLen(2), w.errs.String())
				c.end(t, b)
				g.Expect(w.exitCode(g)).To(Equal(c.code))
				g.Expect(w.lines()).To(HaveExactElements(HaveSuffix("Finalizing: 1/1 operations completed, 0 failed, 1Gi/1Gi, 100%"),
					ContainSubstring("shop/data  velero.io/csi-pvc-backupper  Completed  1Gi/1Gi (100%)"),
					HaveSuffix(c.lastLine)))
			})
		}

		It("restore", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			r := restoreIn(t, ns, "restore", velerov1api.RestorePhaseWaitingForPluginOperations, 1)
			op := operation(t, r, "data", "velero.io/csi-pvc-restorer", "dd")
			w := startWatch(t, now, "restore", "restore", "-n", ns)
			g.Eventually(w.lines, 20*time.Second).Should(HaveLen(2), w.errs.String())
			setStatus(t, op, ended(itemopsv1alpha1.OperationPhaseCompleted, gi("1Gi"), gi("1Gi"), ""))
			original := r.DeepCopy()
			r.Status.Phase = velerov1api.RestorePhaseCompleted
			g.Expect(env.Client.Patch(context.Background(), r, client.MergeFrom(original))).To(Succeed())
			g.Expect(w.exitCode(g)).To(Equal(0))
			g.Expect(w.lines()[len(w.lines())-1]).To(HaveSuffix("restore/restore ended Completed (exit code 0)"))
		})

		It("absent", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			w := startWatch(t, now, "backup", "absent", "-n", ns)
			g.Expect(w.exitCode(g)).To(Equal(3))
			g.Expect(w.out.String()).To(Equal("10:00:00 backup/absent not found in namespace " + ns + " (exit code 3)\n"))
		})
	})
})
