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

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmware-tanzu/velero/pkg/apis/velero/shared"
	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
)

var _ = Describe("File-system backups", func() {
	It("are mirrored as ItemOperations across a restart of itemops, one per PodVolumeBackup of Velero's namespace, and cancelled through spec.cancel", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		pluginDir, err := buildPlugins()
		g.Expect(err).NotTo(HaveOccurred())

		backup := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: envtest.VeleroNamespace, Name: "fs-restart"},
			Status: velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseInProgress}}
		g.Expect(env.Client.Create(ctx, backup)).To(Succeed())
		DeferCleanup(func() { removeBackup(t, backup) })
		pvb := func(namespace, pod string) *velerov1api.PodVolumeBackup {
			p := &velerov1api.PodVolumeBackup{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: backup.Name + "-",
					Labels: map[string]string{velerov1api.BackupNameLabel: backup.Name, velerov1api.BackupUIDLabel: string(backup.UID)},
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "velero.io/v1", Kind: "Backup", Name: backup.Name, UID: backup.UID,
						Controller: ptr.To(true)}}},
				Spec: velerov1api.PodVolumeBackupSpec{Node: "node-1", Volume: "data", BackupStorageLocation: "default", UploaderType: "kopia",
					Pod: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: pod}},
				Status: velerov1api.PodVolumeBackupStatus{Phase: velerov1api.PodVolumeBackupPhaseInProgress,
					StartTimestamp: &metav1.Time{Time: time.Now()}, Progress: shared.DataMoveOperationProgress{TotalBytes: 100 << 20, BytesDone: 10 << 20}},
			}
			g.Expect(env.Client.Create(ctx, p)).To(Succeed())
			DeferCleanup(func() { _ = env.Client.Delete(ctx, p) })
			return p
		}
		mirrors := func(g Gomega) map[string]itemopsv1alpha1.ItemOperation {
			list := &itemopsv1alpha1.ItemOperationList{}
			g.Expect(env.Client.List(ctx, list, client.InNamespace(envtest.VeleroNamespace),
				client.MatchingLabels{itemopsv1alpha1.LabelParentUID: string(backup.UID)})).To(Succeed())
			by := map[string]itemopsv1alpha1.ItemOperation{}
			for _, op := range list.Items {
				g.Expect(op.Spec.Mirror).NotTo(BeNil(), "ItemOperation %s mirrors", op.Name)
				g.Expect(by).NotTo(HaveKey(op.Spec.Mirror.Name), "one ItemOperation per PodVolumeBackup")
				by[op.Spec.Mirror.Name] = op
			}
			return by
		}
		update := func(p *velerov1api.PodVolumeBackup, edit func(*velerov1api.PodVolumeBackup)) {
			g.Eventually(func() error {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
					return err
				}
				edit(p)
				return env.Client.Update(ctx, p)
			}, 10*time.Second).Should(Succeed())
		}

		// As the chart's ServiceAccount: its Role must let itemops read
		// PodVolumeBackups and set their spec.cancel.
		identity, err := env.ChartIdentity(ctx, "itemops")
		g.Expect(err).NotTo(HaveOccurred())
		first := startManagerAs(t, identity, pluginDir)
		g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "not-velero"}})).
			To(Or(Succeed(), MatchError(ContainSubstring("already exists"))))
		foreign := pvb("not-velero", "web-0")
		one := pvb(envtest.VeleroNamespace, "web-1")
		g.Eventually(func(g Gomega) string {
			return mirrors(g)[one.Name].Status.Progress
		}, 30*time.Second, 200*time.Millisecond).Should(Equal("10Mi/100Mi (10%)"), "itemops:\n%s", first.output.String())

		By("itemops killed: the PodVolumeBackup completes and another starts meanwhile")
		first.stop(syscall.SIGKILL)
		update(one, func(p *velerov1api.PodVolumeBackup) {
			p.Status.Phase, p.Status.Progress.BytesDone = velerov1api.PodVolumeBackupPhaseCompleted, 100<<20
			p.Status.CompletionTimestamp = &metav1.Time{Time: time.Now()}
		})
		two := pvb(envtest.VeleroNamespace, "web-2")

		second := startManagerAs(t, identity, pluginDir)
		g.Eventually(func(g Gomega) []string {
			var got []string
			for name, op := range mirrors(g) {
				got = append(got, fmt.Sprintf("%s %s %s", name, op.Status.Phase, op.Status.Progress))
			}
			return got
		}, 30*time.Second, 200*time.Millisecond).Should(ConsistOf(
			one.Name+" Completed 100Mi/100Mi (100%)", two.Name+" InProgress 10Mi/100Mi (10%)"), "itemops:\n%s", second.output.String())
		g.Expect(mirrors(g)).NotTo(HaveKey(foreign.Name), "a PodVolumeBackup outside Velero's namespace is not Velero's")

		By("a cancel, with the permissions the chart grants, sets the PodVolumeBackup's spec.cancel")
		op := mirrors(g)[two.Name]
		patch := client.MergeFrom(op.DeepCopy())
		op.Spec.Cancel = true
		g.Expect(env.Client.Patch(ctx, &op, patch)).To(Succeed())
		g.Eventually(func(g Gomega) bool {
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(two), two)).To(Succeed())
			return two.Spec.Cancel
		}, 30*time.Second, 200*time.Millisecond).Should(BeTrue(), "itemops:\n%s", second.output.String())
		g.Eventually(func(g Gomega) itemopsv1alpha1.OperationPhase { return mirrors(g)[two.Name].Status.Phase },
			10*time.Second, 200*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCanceling))
		update(two, func(p *velerov1api.PodVolumeBackup) {
			p.Status.Phase, p.Status.Message = velerov1api.PodVolumeBackupPhaseCanceled, "data path is canceled"
		})
		g.Eventually(func(g Gomega) itemopsv1alpha1.OperationPhase { return mirrors(g)[two.Name].Status.Phase },
			10*time.Second, 200*time.Millisecond).Should(Equal(itemopsv1alpha1.OperationPhaseCanceled))
	})
})

var _ = Describe("Velero's backup queue", func() {
	It("is counted by phase with its oldest, a Backup left ReadyToStart growing older at each scrape", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		pluginDir, err := buildPlugins()
		g.Expect(err).NotTo(HaveOccurred())
		for name, phase := range map[string]velerov1api.BackupPhase{
			"queue-1": velerov1api.BackupPhaseQueued, "queue-2": velerov1api.BackupPhaseQueued,
			"queue-ready": velerov1api.BackupPhaseReadyToStart, "queue-running": velerov1api.BackupPhaseInProgress,
		} {
			b := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: envtest.VeleroNamespace, Name: name},
				Status: velerov1api.BackupStatus{Phase: phase}}
			g.Expect(env.Client.Create(ctx, b)).To(Succeed())
			DeferCleanup(func() { removeBackup(t, b) })
		}
		identity, err := env.ChartIdentity(ctx, "itemops")
		g.Expect(err).NotTo(HaveOccurred())
		address := freeAddress(t)
		m := startManagerAs(t, identity, pluginDir, "--metrics-bind-address="+address)
		reader := metricsReader(t)
		scrapeQueue := func(g Gomega) map[string]float64 {
			_, body, err := getWith(reader, "https://"+address+"/metrics")
			g.Expect(err).NotTo(HaveOccurred())
			out := map[string]float64{}
			for _, line := range strings.Split(body, "\n") {
				if !strings.HasPrefix(line, "itemops_backup_queue_") {
					continue
				}
				name, value, ok := strings.Cut(line, " ")
				g.Expect(ok).To(BeTrue(), line)
				v, err := strconv.ParseFloat(value, 64)
				g.Expect(err).NotTo(HaveOccurred(), line)
				out[name] = v
			}
			return out
		}
		var first float64
		g.Eventually(func(g Gomega) {
			got := scrapeQueue(g)
			g.Expect(got).To(And(
				HaveKeyWithValue(`itemops_backup_queue_backups{phase="Queued"}`, 2.0),
				HaveKeyWithValue(`itemops_backup_queue_backups{phase="ReadyToStart"}`, 1.0),
				HaveKeyWithValue(`itemops_backup_queue_backups{phase="InProgress"}`, 1.0),
				HaveKeyWithValue(`itemops_backup_queue_scrape_error`, 0.0),
				HaveKey(`itemops_backup_queue_oldest_seconds{phase="Queued"}`),
			))
			first = got[`itemops_backup_queue_oldest_seconds{phase="ReadyToStart"}`]
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed(), "itemops:\n%s", m.output.String())
		g.Eventually(func(g Gomega) float64 {
			return scrapeQueue(g)[`itemops_backup_queue_oldest_seconds{phase="ReadyToStart"}`]
		}, 10*time.Second, 200*time.Millisecond).Should(BeNumerically(">=", first+1), "the Backup left ReadyToStart grows older")
	})
})
