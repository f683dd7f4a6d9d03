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

package datamover

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/csisim"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/s3"
	"github.com/itemops/itemops/test/scrape"
	"github.com/itemops/itemops/test/veleroenv"
)

// The names of Velero's CSI data mover plugins.
const (
	backupper = "velero.io/csi-pvc-backupper"
	restorer  = "velero.io/csi-pvc-restorer"
)

// volume is one PVC of an application namespace.
type volume struct {
	size        string
	annotations map[string]string
}

// appNamespace creates a namespace with one bound CSI PVC per volume, each
// on its own PersistentVolume, as a provisioner leaves them.
func appNamespace(t testing.TB, name string, volumes ...volume) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	for i, v := range volumes {
		g.Expect(cluster.BoundPVC(ctx, name, fmt.Sprintf("data-%d", i), v.size, v.annotations)).To(Succeed())
	}
}

// rated is a volume of size moved at rate (bytes per second, as a quantity).
func rated(size, rate string) volume {
	return volume{size: size, annotations: map[string]string{csisim.AnnotationRate: rate}}
}

// startVelero runs the real Velero server with CSI on.
func startVelero(t testing.TB, extra ...string) *proc.Process {
	t.Helper()
	unlock, err := veleroenv.LockServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock) // after the server stopped: cleanups run last first
	p := velero.StartServer(t, append([]string{"--features=EnableCSI"}, extra...)...)
	if err := veleroenv.WaitForLocation(context.Background(), env.Client); err != nil {
		t.Fatal(err)
	}
	return p
}

// itemops is a running itemops and its metrics address.
type itemops struct {
	*proc.Process
	metrics string
}

// startItemops runs itemops in mode as the chart's ServiceAccount for it.
func startItemops(t testing.TB, mode string, extra ...string) *itemops {
	t.Helper()
	probes, err := s3.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := s3.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig=" + kubeconfigs[mode], "--mode=" + mode, "--velero-namespace=" + envtest.VeleroNamespace,
		"--plugin-dir=" + pluginDir, "--sync-frequency=500ms", "--progress-update-interval=1s",
		"--credentials-dir=" + filepath.Join(t.TempDir(), "credentials"), "--plugin-args=--features=EnableCSI",
		"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probes}, extra...)
	return &itemops{Process: proc.Start(t, "itemops", exec.Command(itemopsBinary, args...)), metrics: metrics}
}

// cancelCalls sums itemops_cancel_calls_total of a plugin, read as a
// metrics reader.
func (i *itemops) cancelCalls(g Gomega, plugin string) int {
	token, err := scrape.ReaderToken(context.Background(), env.Config, envtest.VeleroNamespace)
	g.Expect(err).NotTo(HaveOccurred())
	families, err := scrape.Get(scrape.Client(token), "https://"+i.metrics+"/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	return int(max(0, families.Sum("itemops_cancel_calls_total", map[string]string{"plugin": plugin})))
}

func backup(t testing.TB, name, namespace string) *velerov1api.Backup {
	t.Helper()
	b := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace},
		Spec: velerov1api.BackupSpec{IncludedNamespaces: []string{namespace}, StorageLocation: veleroenv.Location,
			SnapshotMoveData: ptr.To(true), ItemOperationTimeout: metav1.Duration{Duration: time.Hour}},
	}
	NewWithT(t).Expect(c.Create(context.Background(), b)).To(Succeed())
	return b
}

func backupNow(g Gomega, b *velerov1api.Backup) *velerov1api.Backup {
	got := &velerov1api.Backup{}
	g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(b), got)).To(Succeed())
	return got
}

func backupPhase(b *velerov1api.Backup) func(g Gomega) velerov1api.BackupPhase {
	return func(g Gomega) velerov1api.BackupPhase { return backupNow(g, b).Status.Phase }
}

// operationsOf lists the ItemOperations of a parent, by the name of the PVC each moves.
func operationsOf(g Gomega, uid k8stypes.UID) map[string]itemopsv1alpha1.ItemOperation {
	list := &itemopsv1alpha1.ItemOperationList{}
	g.Expect(c.List(context.Background(), list, client.InNamespace(envtest.VeleroNamespace),
		client.MatchingLabels{itemopsv1alpha1.LabelParentUID: string(uid)})).To(Succeed())
	out := map[string]itemopsv1alpha1.ItemOperation{}
	for _, op := range list.Items {
		out[op.Spec.Resource.Name] = op
	}
	return out
}

// phases maps each PVC's operation to its phase.
func phases(ops map[string]itemopsv1alpha1.ItemOperation) map[string]itemopsv1alpha1.OperationPhase {
	out := map[string]itemopsv1alpha1.OperationPhase{}
	for pvc, op := range ops {
		out[pvc] = op.Status.Phase
	}
	return out
}

// dataUploads lists a Backup's DataUploads by source PVC.
func dataUploads(g Gomega, b *velerov1api.Backup) map[string]velerov2alpha1.DataUpload {
	list := &velerov2alpha1.DataUploadList{}
	g.Expect(c.List(context.Background(), list, client.InNamespace(envtest.VeleroNamespace),
		client.MatchingLabels{velerov1api.BackupNameLabel: b.Name})).To(Succeed())
	out := map[string]velerov2alpha1.DataUpload{}
	for _, du := range list.Items {
		out[du.Spec.SourcePVC] = du
	}
	return out
}

// operationsFile reads a backup's operations file straight from the bucket's directory.
func operationsFile(g Gomega, backup string) []*itemoperation.BackupOperation {
	recs, err := veleroenv.ReadBackupOperations(velero.BucketDir, backup)
	g.Expect(err).NotTo(HaveOccurred())
	return recs
}

// eventsOf returns the reasons and messages of the Events about an object.
func eventsOf(g Gomega, uid k8stypes.UID) []corev1.Event {
	list := &corev1.EventList{}
	g.Expect(c.List(context.Background(), list, client.InNamespace(envtest.VeleroNamespace))).To(Succeed())
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.UID == uid {
			out = append(out, e)
		}
	}
	return out
}

// describe runs `velero backup describe --details`.
func describe(g Gomega, name string) string {
	out, err := velero.Describe("backup", name)
	g.Expect(err).NotTo(HaveOccurred(), out)
	return out
}
