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

package upgrade

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/s3"
	"github.com/itemops/itemops/test/veleroenv"
)

// release is the helm release of both versions.
const release = "itemops"

// plugin starts every operation of the suite.
const plugin = "itemops.io/sample-datamover"

// kind is what one operation of the workload does, and so how it must end.
type kind string

const (
	// before: a Backup's operations that end, and their Backup moves on,
	// under the earlier itemops.
	before kind = "before"
	// early ends under the earlier itemops, beside operations that do not.
	early kind = "early"
	// late runs across the upgrade and completes under the current itemops.
	late kind = "late"
	// fails runs across the upgrade and fails under the current itemops.
	fails kind = "fails"
	// cancelled runs across the upgrade and is cancelled under the current itemops.
	cancelled kind = "cancelled"
)

// annotations tell the sample plugin how each kind of operation moves.
var annotations = map[kind]map[string]string{
	before:    {sim.AnnotationSize: "6Mi", sim.AnnotationSpeed: "2Mi"},
	early:     {sim.AnnotationSize: "10Mi", sim.AnnotationSpeed: "2Mi"},
	late:      {sim.AnnotationSize: "80Mi", sim.AnnotationSpeed: "2Mi"},
	fails:     {sim.AnnotationSize: "100Mi", sim.AnnotationSpeed: "2Mi", sim.AnnotationFailAt: "60"},
	cancelled: {sim.AnnotationSize: "1Gi", sim.AnnotationSpeed: "2Mi"},
}

// ends is the phase each kind of operation must end in.
var ends = map[kind]itemopsv1alpha1.OperationPhase{
	before: itemopsv1alpha1.OperationPhaseCompleted, early: itemopsv1alpha1.OperationPhaseCompleted,
	late: itemopsv1alpha1.OperationPhaseCompleted, fails: itemopsv1alpha1.OperationPhaseFailed,
	cancelled: itemopsv1alpha1.OperationPhaseCanceled,
}

// workload is the Backups and, by operation ID, the kind of each operation.
type workload struct {
	backups []*velerov1api.Backup
	kinds   map[string]kind
	store   *sim.Store
}

var _ = Describe("An upgrade of itemops", Ordered, func() {
	It("carries the earlier itemops' operations on, after helm upgrade applied the CRD over them, losing nothing", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()

		g.Expect(helm("install", release, filepath.Join(earlier, "chart"), "--namespace", envtest.VeleroNamespace, "--set", "mode=manage")).
			Error().NotTo(HaveOccurred())
		identity := serviceAccountKubeconfig(t)

		load := newWorkload(t)
		old := startItemops(t, filepath.Join(earlier, "itemops"), "earlier", identity)

		// Under the earlier itemops: every operation ingested, the first
		// Backup moved on, the early ones done, the others moving.
		g.Eventually(func(g Gomega) {
			ops := operations(g)
			g.Expect(ops).To(HaveLen(len(load.kinds)))
			for _, op := range ops {
				switch load.kinds[op.Spec.OperationID] {
				case before, early:
					g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCompleted), op.Name)
				default:
					g.Expect(op.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseInProgress), op.Name)
					g.Expect(op.Status.NCompleted).To(BeNumerically(">", 0), op.Name)
				}
			}
			g.Expect(phase(g, load.backups[0])).To(Equal(velerov1api.BackupPhaseFinalizing))
		}, time.Minute, 250*time.Millisecond).Should(Succeed(), "the earlier itemops:\n%s", proc.Tail(old.Output.String(), 40))

		// The rollout: the earlier pod ends (SIGTERM), helm upgrade applies
		// the current chart, its CRD among the rest, the current pod starts.
		old.Stop(syscall.SIGTERM)
		g.Expect(phaseDefault(g)).To(BeEmpty(), "the CRD is the earlier chart's")
		underEarlier := uids(operations(g))
		polledUnderEarlier := map[string]int{}
		for id, k := range load.kinds {
			if k == before || k == early {
				polledUnderEarlier[id] = load.state(g, id).ProgressCalls
			}
		}
		g.Expect(helm("upgrade", release, chartDir, "--namespace", envtest.VeleroNamespace, "--set", "mode=manage")).
			Error().NotTo(HaveOccurred(), "the API server refused the current chart over live ItemOperations")
		g.Expect(phaseDefault(g)).To(Equal("New"), "the CRD is the current chart's")
		g.Expect(uids(operations(g))).To(Equal(underEarlier), "the ItemOperations, as the earlier itemops left them, under the current CRD")

		now := startItemops(t, current, "current", identity)
		for _, op := range operations(g) {
			if load.kinds[op.Spec.OperationID] != cancelled {
				continue
			}
			patch := client.MergeFrom(op.DeepCopy())
			op.Spec.Cancel = true
			g.Expect(env.Client.Patch(ctx, &op, patch)).To(Succeed())
		}

		// Under the current itemops: every operation ends as its kind says,
		// and every Backup moves on as its operations decide.
		g.Eventually(func(g Gomega) {
			for _, op := range operations(g) {
				g.Expect(op.Status.Phase).To(Equal(ends[load.kinds[op.Spec.OperationID]]), op.Name)
			}
			g.Expect(phase(g, load.backups[0])).To(Equal(velerov1api.BackupPhaseFinalizing))
			for _, b := range load.backups[1:] {
				g.Expect(phase(g, b)).To(Equal(velerov1api.BackupPhaseFinalizingPartiallyFailed), b.Name)
			}
		}, 2*time.Minute, 250*time.Millisecond).Should(Succeed(), "the current itemops:\n%s", proc.Tail(now.Output.String(), 40))

		// Nothing lost, nothing made twice, nothing done twice.
		g.Expect(uids(operations(g))).To(Equal(underEarlier), "no ItemOperation created or removed by the current itemops")
		for id, calls := range polledUnderEarlier {
			g.Expect(load.state(g, id).ProgressCalls).To(Equal(calls), "operation %s ended under the earlier itemops and is not polled again", id)
		}
		for id, k := range load.kinds {
			if k == cancelled {
				g.Expect(load.state(g, id).Cancels).To(Equal(1), "operation %s is cancelled once", id)
			}
		}
		for _, b := range load.backups {
			got := &velerov1api.Backup{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(b), got)).To(Succeed())
			want := map[itemoperation.OperationPhase]int{}
			recs, err := veleroenv.ReadBackupOperations(venv.BucketDir, b.Name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(recs).To(HaveLen(got.Status.BackupItemOperationsAttempted))
			for _, rec := range recs {
				end := ends[load.kinds[rec.Spec.OperationID]]
				written := itemoperation.OperationPhase(end)
				if end == itemopsv1alpha1.OperationPhaseCanceled {
					written = itemoperation.OperationPhaseFailed // Velero's file knows no Canceled
				}
				g.Expect(rec.Status.Phase).To(Equal(written), "Backup %s: operation %s as written back", b.Name, rec.Spec.OperationID)
				want[written]++
			}
			g.Expect(got.Status.BackupItemOperationsCompleted).To(Equal(want[itemoperation.OperationPhaseCompleted]), b.Name)
			g.Expect(got.Status.BackupItemOperationsFailed).To(Equal(want[itemoperation.OperationPhaseFailed]), b.Name)
		}
	})
})

// newWorkload starts the operations in the sample plugin and creates their
// Backups as Velero leaves them at the end of a backup: the operations file
// in the bucket, then the Backup waiting for its operations. The first
// Backup's operations all end soon; the others' run across the upgrade.
func newWorkload(t testing.TB) *workload {
	t.Helper()
	store, err := sim.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	l := &workload{kinds: map[string]kind{}, store: store}
	plans := [][]kind{{before, before}, {early, late, fails, cancelled}, {early, late, fails, cancelled}}
	for i, plan := range plans {
		name := fmt.Sprintf("upgrade-%d", i)
		b := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace},
			Spec: velerov1api.BackupSpec{StorageLocation: veleroenv.Location, IncludedNamespaces: []string{name},
				ItemOperationTimeout: metav1.Duration{Duration: time.Hour}}}
		// The operations file names the Backup's UID: create it first.
		if err := env.Client.Create(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		var recs []*itemoperation.BackupOperation
		for j, k := range plan {
			item := fmt.Sprintf("data-%d", j)
			id, err := store.Start("upload", name+"/"+item, annotations[k])
			if err != nil {
				t.Fatal(err)
			}
			l.kinds[id] = k
			created := metav1.Now()
			recs = append(recs, &itemoperation.BackupOperation{
				Spec: itemoperation.BackupOperationSpec{BackupName: name, BackupUID: string(b.UID), BackupItemAction: plugin,
					ResourceIdentifier: velero.ResourceIdentifier{GroupResource: schema.GroupResource{Resource: "persistentvolumeclaims"},
						Namespace: name, Name: item},
					OperationID: id},
				Status: itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseNew, Created: &created},
			})
		}
		if err := veleroenv.WriteBackupOperations(venv.BucketDir, name, recs); err != nil {
			t.Fatal(err)
		}
		b.Status = velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations,
			BackupItemOperationsAttempted: len(recs), StartTimestamp: &metav1.Time{Time: time.Now()}}
		if err := env.Client.Update(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		l.backups = append(l.backups, b)
	}
	return l
}

// state is what the sample plugin knows of an operation.
func (l *workload) state(g Gomega, id string) *sim.State {
	st, err := l.store.Load(id)
	g.Expect(err).NotTo(HaveOccurred())
	return st
}

// startItemops runs an itemops binary in manage mode as the chart's
// ServiceAccount, with the sample plugins.
func startItemops(t testing.TB, binary, name, kubeconfig string) *proc.Process {
	t.Helper()
	probes, err := s3.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "--kubeconfig="+kubeconfig, "--mode=manage", "--velero-namespace="+envtest.VeleroNamespace,
		"--plugin-dir="+pluginDir, "--sync-frequency=500ms", "--progress-update-interval=1s",
		"--credentials-dir="+filepath.Join(work, "credentials-"+name), "--metrics-bind-address=0",
		"--health-probe-bind-address="+probes)
	return proc.Start(t, "itemops ("+name+")", cmd)
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the
// ServiceAccount the chart installed: both versions run as it.
func serviceAccountKubeconfig(t testing.TB) string {
	t.Helper()
	config, err := env.ServiceAccountKubeconfig(context.Background(), envtest.VeleroNamespace, release)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(work, release+".kubeconfig")
	if err := os.WriteFile(path, config, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// helm runs the helm CLI as an administrator.
func helm(args ...string) (string, error) {
	cmd := exec.Command(helmBinary, append(args, "--kubeconfig", kubeconfig)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func operations(g Gomega) []itemopsv1alpha1.ItemOperation {
	list := &itemopsv1alpha1.ItemOperationList{}
	g.Expect(env.Client.List(context.Background(), list, client.InNamespace(envtest.VeleroNamespace))).To(Succeed())
	return list.Items
}

// uids maps each ItemOperation's name to its UID.
func uids(ops []itemopsv1alpha1.ItemOperation) map[string]k8stypes.UID {
	out := map[string]k8stypes.UID{}
	for _, op := range ops {
		out[op.Name] = op.UID
	}
	return out
}

func phase(g Gomega, b *velerov1api.Backup) velerov1api.BackupPhase {
	got := &velerov1api.Backup{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), got)).To(Succeed())
	return got.Status.Phase
}

// phaseDefault is the default the installed CRD gives status.phase.
func phaseDefault(g Gomega) string {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Name: "itemoperations.itemops.io"}, crd)).To(Succeed())
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	g.Expect(err).NotTo(HaveOccurred())
	for _, v := range versions {
		version, _ := v.(map[string]any)
		if version["name"] != itemopsv1alpha1.GroupVersion.Version {
			continue
		}
		def, found, err := unstructured.NestedFieldNoCopy(version, "schema", "openAPIV3Schema", "properties", "status", "properties", "phase", "default")
		g.Expect(err).NotTo(HaveOccurred())
		if !found {
			return ""
		}
		return fmt.Sprint(def)
	}
	return ""
}
