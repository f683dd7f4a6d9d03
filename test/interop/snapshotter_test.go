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
	"path/filepath"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/veleroenv"
)

// The example provider's volumes: one that copies whole, one with a bad
// block part way, one too large to finish, which is cancelled.
const (
	volumeOK     = "ok"
	volumeBad    = "bad"
	volumeBig    = "big"
	badBlockAt   = 8 << 20
	exampleDisks = "example.io/disks"
)

// exampleProvider makes the example plugin's provider directory, with its
// volumes, and a VolumeSnapshotLocation of it copying 1Mi a second.
func exampleProvider(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "provider")
	if err := os.MkdirAll(filepath.Join(dir, "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	for volume, size := range map[string]int64{volumeOK: 4 << 20, volumeBad: 64 << 20, volumeBig: 100 << 30} {
		f, err := os.Create(filepath.Join(dir, "volumes", volume))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil { // sparse: the provider only reads its size
			t.Fatal(err)
		}
		f.Close()
	}
	if err := os.WriteFile(filepath.Join(dir, "volumes", volumeBad+".bad"), []byte(fmt.Sprint(badBlockAt)), 0o644); err != nil {
		t.Fatal(err)
	}
	vsl := &velerov1api.VolumeSnapshotLocation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace},
		Spec:       velerov1api.VolumeSnapshotLocationSpec{Provider: exampleDisks, Config: map[string]string{"dir": dir, "bytesPerSecond": "1Mi"}},
	}
	if err := env.Client.Create(context.Background(), vsl); err != nil {
		t.Fatal(err)
	}
	// Velero refuses every Backup that names no location while a provider
	// has two: later specs' Backups would fail validation.
	t.Cleanup(func() {
		if err := client.IgnoreNotFound(env.Client.Delete(context.Background(), vsl)); err != nil {
			t.Error(err)
		}
	})
	return dir
}

// diskNamespace creates a namespace with a bound PVC on a PersistentVolume
// of the example provider for each volume, the PV named <namespace>-<volume>.
func diskNamespace(t testing.TB, name string, volumes ...string) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	for _, volume := range volumes {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + volume},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/disks/" + volume}},
				ClaimRef:                      &corev1.ObjectReference{Namespace: name, Name: volume},
			},
		}
		if err := env.Client.Create(ctx, pv); err != nil {
			t.Fatal(err)
		}
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: volume, Namespace: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				VolumeName:  pv.Name,
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

// snapshotOps returns the VolumeSnapshotter ItemOperations of a backup, by
// PersistentVolume.
func snapshotOps(g Gomega, uid string) map[string]itemopsv1alpha1.ItemOperation {
	out := map[string]itemopsv1alpha1.ItemOperation{}
	for _, op := range operationsOf(g, uid) {
		if op.Spec.Plugin.Kind == itemopsv1alpha1.PluginKindVolumeSnapshotter {
			out[op.Spec.Resource.Name] = op
		}
	}
	return out
}

// eventsOf returns "Reason: message" of the Events about the object with uid.
func eventsOf(g Gomega, uid string) []string {
	list := &corev1.EventList{}
	g.Expect(env.Client.List(context.Background(), list, client.InNamespace(envtest.VeleroNamespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if string(e.InvolvedObject.UID) == uid {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

// backUpDisks backs up a namespace of the example provider's three
// volumes, cancels the big one's snapshot as an administrator would, and
// waits for the three ItemOperations to end: Completed, Failed, Canceled.
func backUpDisks(t testing.TB, g Gomega, name string) *velerov1api.Backup {
	ctx := context.Background()
	exampleProvider(t, name)
	diskNamespace(t, name, volumeOK, volumeBad, volumeBig)
	b := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace},
		Spec: velerov1api.BackupSpec{IncludedNamespaces: []string{name}, StorageLocation: veleroenv.Location,
			VolumeSnapshotLocations: []string{name}, ItemOperationTimeout: metav1.Duration{Duration: time.Hour}},
	}
	g.Expect(env.Client.Create(ctx, b)).To(Succeed())
	g.Eventually(backupPhase(b), 60*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhaseCompleted),
		"Velero took the snapshots and ended the backup without waiting for them")
	b = backupNow(g, b)
	g.Expect(b.Status.VolumeSnapshotsCompleted).To(Equal(3))

	pv := func(volume string) string { return name + "-" + volume }
	var big itemopsv1alpha1.ItemOperation
	g.Eventually(func(g Gomega) {
		ops := snapshotOps(g, string(b.UID))
		g.Expect(ops).To(HaveLen(3))
		big = ops[pv(volumeBig)]
		g.Expect(big.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		g.Expect(big.Status.Progress).To(MatchRegexp(`/100Gi \(\d+%\)$`), "bytes, as vsv2.UnitsBytes shows them")
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	patch := client.MergeFrom(big.DeepCopy())
	big.Spec.Cancel = true
	g.Expect(env.Client.Patch(ctx, &big, patch)).To(Succeed())

	g.Eventually(func(g Gomega) map[string]itemopsv1alpha1.OperationPhase {
		phases := map[string]itemopsv1alpha1.OperationPhase{}
		for pv, op := range snapshotOps(g, string(b.UID)) {
			phases[pv] = op.Status.Phase
		}
		return phases
	}, 2*time.Minute, 200*time.Millisecond).Should(Equal(map[string]itemopsv1alpha1.OperationPhase{
		pv(volumeOK):  itemopsv1alpha1.OperationPhaseCompleted,
		pv(volumeBad): itemopsv1alpha1.OperationPhaseFailed,
		pv(volumeBig): itemopsv1alpha1.OperationPhaseCanceled,
	}))
	ops := snapshotOps(g, string(b.UID))
	g.Expect(ops[pv(volumeOK)].Status.Progress).To(Equal("4Mi/4Mi (100%)"))
	g.Expect(ops[pv(volumeBad)].Status.Error).To(ContainSubstring(fmt.Sprintf("reading volume bad failed at byte %d", badBlockAt)))
	g.Expect(ops[pv(volumeBad)].Status.Progress).To(Equal("8Mi/64Mi (12%)"))
	canceled := findCondition(ops[pv(volumeBig)], itemopsv1alpha1.ConditionCanceled)
	g.Expect(canceled).NotTo(BeNil())
	g.Expect(canceled.Message).To(ContainSubstring("the plugin accepted the cancel request"))
	g.Eventually(func(g Gomega) []string { return eventsOf(g, string(b.UID)) }, 30*time.Second, 200*time.Millisecond).
		Should(ContainElement(fmt.Sprintf("VolumeSnapshotsNotDurable: 2 of 3 volume snapshots did not become durable (PersistentVolumes [%s %s]); see their ItemOperations",
			pv(volumeBad), pv(volumeBig))))
	return b
}

// The plugin docs/plugins.md walks a plugin author through, built from
// examples/volumesnapshotter and loaded by the real Velero as a v1
// VolumeSnapshotter and by itemops as a v2 one.
var _ = Describe("The guide's VolumeSnapshotter v2 beside the real velero server", func() {
	It("observe mode: snapshots end Completed, Failed and Canceled; the Backup stays as Velero ended it", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		startVelero(t)
		g.Expect(waitForLocation(context.Background())).To(Succeed())
		itemops := startItemops(t, "observe")
		g.Eventually(itemops.Output.String, 30*time.Second, 200*time.Millisecond).Should(MatchRegexp(`"msg":"discovered plugin","kind":"VolumeSnapshotter","name":"example.io/disks","interface":"v2"`))

		b := backUpDisks(t, g, "disks-observed")
		g.Consistently(backupPhase(b), 3*time.Second, 200*time.Millisecond).Should(Equal(velerov1api.BackupPhaseCompleted),
			"observe mode never writes to a Backup")
		g.Expect(backupNow(g, b).Annotations).NotTo(HaveKey(itemopsv1alpha1.AnnotationNonDurableSnapshots))
	})

	It("manage mode: the Backup ends PartiallyFailed naming the volumes, and a restore is refused their snapshots", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		startVelero(t, manageFlags...)
		g.Expect(waitForLocation(ctx)).To(Succeed())
		startItemops(t, "manage")

		const name = "disks-managed"
		b := backUpDisks(t, g, name)
		bad, big := name+"-"+volumeBad, name+"-"+volumeBig
		// Each volume is counted as its snapshot ends: the last one may be
		// counted a moment after the Backup went PartiallyFailed.
		g.Eventually(func(g Gomega) {
			final := backupNow(g, b)
			g.Expect(final.Status.Phase).To(Equal(velerov1api.BackupPhasePartiallyFailed))
			g.Expect(final.Status.Errors).To(Equal(2), "one per volume")
			g.Expect(final.Annotations).To(HaveKeyWithValue(itemopsv1alpha1.AnnotationNonDurableSnapshots, bad+","+big))
		}, time.Minute, 200*time.Millisecond).Should(Succeed())
		g.Eventually(func(g Gomega) []string { return eventsOf(g, string(b.UID)) }, 30*time.Second, 200*time.Millisecond).
			Should(ContainElement(MatchRegexp(`^PhaseChanged: Completed -> PartiallyFailed: the volume snapshots of PersistentVolumes (%s|%s|%s, %s) `+
				`did not become durable; a restore cannot use them$`, bad, big, bad, big)), "the first to end ends the Backup PartiallyFailed")
		described, err := velero.Describe("backup", name)
		g.Expect(err).NotTo(HaveOccurred(), described)
		g.Expect(described).To(MatchRegexp(`Phase:\s+\S*PartiallyFailed`)) // velero colours the phase
		g.Expect(regexpCount(`Result:\s+failed`, described)).To(Equal(2), "velero backup describe --details names the volumes:\n%s", described)
		g.Expect(regexpCount(`Result:\s+succeeded`, described)).To(Equal(1), described)

		// A restore after losing the volumes: Velero hands each snapshot to
		// the plugin, which restores the durable one and refuses the others.
		for _, volume := range []string{volumeOK, volumeBad, volumeBig} {
			pv := &corev1.PersistentVolume{}
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: name + "-" + volume}, pv)).To(Succeed())
			patch := client.MergeFrom(pv.DeepCopy())
			pv.Finalizers = nil
			g.Expect(env.Client.Patch(ctx, pv, patch)).To(Succeed())
			g.Expect(client.IgnoreNotFound(env.Client.Delete(ctx, pv))).To(Succeed())
		}
		r := &velerov1api.Restore{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-restore", Namespace: envtest.VeleroNamespace},
			Spec: velerov1api.RestoreSpec{BackupName: name, NamespaceMapping: map[string]string{name: name + "-restored"},
				ItemOperationTimeout: metav1.Duration{Duration: time.Hour}},
		}
		g.Expect(env.Client.Create(ctx, r)).To(Succeed())
		g.Eventually(func(g Gomega) velerov1api.RestorePhase {
			got := &velerov1api.Restore{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(r), got)).To(Succeed())
			return got.Status.Phase
		}, 2*time.Minute, 200*time.Millisecond).Should(Equal(velerov1api.RestorePhasePartiallyFailed))
		got := &velerov1api.Restore{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(r), got)).To(Succeed())
		g.Expect(got.Status.Errors).To(BeNumerically(">=", 2))
		g.Eventually(func(g Gomega) []string { return eventsOf(g, string(got.UID)) }, 30*time.Second, 200*time.Millisecond).
			Should(ContainElement(fmt.Sprintf("RestoreFromNonDurableSnapshots: Backup %s: the volume snapshots of PersistentVolumes %s, %s "+
				"did not become durable; Velero restores volumes from them as if whole: expect their restore to fail, or to hold incomplete data",
				name, bad, big)))
		described, err = velero.Describe("restore", r.Name)
		g.Expect(err).NotTo(HaveOccurred(), described)
		g.Expect(regexpCount(`is not durable \([^)]*\): refusing to restore from it`, described)).To(Equal(2), described)
		restored := &corev1.PersistentVolume{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: name + "-" + volumeOK}, restored)).To(Succeed())
		g.Expect(restored.Spec.HostPath.Path).To(HavePrefix("/disks/"+volumeOK+"-from-snap-"), "restored from its durable snapshot")
	})
})

// regexpCount is how many times pattern matches text.
func regexpCount(pattern, text string) int {
	return len(regexp.MustCompile(pattern).FindAllStringIndex(text, -1))
}
