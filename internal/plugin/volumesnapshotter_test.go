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

package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	hcplugin "github.com/hashicorp/go-plugin"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	veleroframework "github.com/vmware-tanzu/velero/pkg/plugin/framework"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	vsv2 "github.com/itemops/itemops/pkg/plugin/velero/volumesnapshotter/v2"
	"github.com/itemops/itemops/test/plugins/sim"
)

const snapshotter = "itemops.io/sample-snapshotter"

// snapshotConfig is what a VolumeSnapshotLocation of the sample gives Init.
var snapshotConfig = map[string]string{"region": "lab"}

// pv is a PersistentVolume the sample snapshotter takes snapshots of.
func pv(name string, annotations map[string]string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("v1")
	obj.SetKind("PersistentVolume")
	obj.SetName(name)
	obj.SetLabels(map[string]string{sim.LabelSnapshot: "true"})
	obj.SetAnnotations(annotations)
	return obj
}

// takeSnapshot does what Velero's backup does with a VolumeSnapshotter:
// Init with the location's config, GetVolumeID of the PV, CreateSnapshot.
func takeSnapshot(t testing.TB, m *Manager, name string, annotations map[string]string) string {
	t.Helper()
	ctx := context.Background()
	vs, err := m.VolumeSnapshotter(snapshotter)
	if err != nil {
		t.Fatal(err)
	}
	if err := vs.Init(ctx, snapshotConfig); err != nil {
		t.Fatal(err)
	}
	volumeID, err := vs.GetVolumeID(ctx, pv(name, annotations))
	if err != nil {
		t.Fatal(err)
	}
	if volumeID != "vol-"+name {
		t.Fatalf("GetVolumeID returned %q", volumeID)
	}
	id, err := vs.CreateSnapshot(ctx, volumeID, "zone-a", map[string]string{"velero.io/backup": "nightly"})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func snapshot(id string) Operation {
	return Operation{Kind: itemopsv1alpha1.PluginKindVolumeSnapshotter, Plugin: snapshotter, ID: id, SnapshotConfig: snapshotConfig}
}

var _ = Describe("VolumeSnapshotter plugins", func() {
	It("VolumeSnapshotter v2 is listed to itemops and Velero sees only v1", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		dir := pluginDir(t, "sample")
		m, _ := newManager(t, dir, 10*time.Second)
		g.Expect(m.Registry().IDs()).To(ContainElements(
			ID{common.PluginKindBackupItemActionV2, datamover},
			ID{common.PluginKindVolumeSnapshotter, snapshotter},
			ID{vsv2.PluginKind, snapshotter},
		))

		// Velero's own listing of the same binary, through the client its
		// registry uses: it must accept the list (Velero refuses a binary that
		// lists a kind it does not know) and see the snapshotter as the v1 kind
		// it calls to take snapshots.
		client := hcplugin.NewClient(&hcplugin.ClientConfig{
			HandshakeConfig:  veleroframework.Handshake(),
			AllowedProtocols: []hcplugin.Protocol{hcplugin.ProtocolGRPC},
			Plugins: map[string]hcplugin.Plugin{
				string(common.PluginKindPluginLister): veleroframework.NewPluginListerPlugin(nil),
			},
			Cmd:    exec.Command(filepath.Join(dir, "sample")),
			Logger: hclog.NewNullLogger(),
		})
		defer client.Kill()
		protocol, err := client.Client()
		g.Expect(err).NotTo(HaveOccurred())
		raw, err := protocol.Dispense(string(common.PluginKindPluginLister))
		g.Expect(err).NotTo(HaveOccurred())
		listed, err := raw.(veleroframework.PluginLister).ListPlugins()
		g.Expect(err).NotTo(HaveOccurred())
		var kinds []string
		for _, id := range listed {
			kinds = append(kinds, string(id.Kind)+"/"+id.Name)
		}
		g.Expect(kinds).To(ConsistOf(
			"BackupItemActionV2/"+datamover,
			"RestoreItemActionV2/"+restorer,
			"VolumeSnapshotter/"+snapshotter,
		))
	})

	It("VolumeSnapshotter v2 progress completes", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample"), 10*time.Second)
		ctx := context.Background()
		id := takeSnapshot(t, m, "pv-fast", map[string]string{sim.AnnotationSize: "10Mi", sim.AnnotationSpeed: "20Mi"})

		p, err := m.Progress(ctx, snapshot(id))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.NTotal).To(Equal(int64(10 << 20)))
		g.Expect(p.OperationUnits).To(Equal("Bytes"))
		g.Expect(p.Description).To(Equal("snapshoting in lab"), "answered by the instance Init configured")
		g.Eventually(func(g Gomega) {
			p, err := m.Progress(ctx, snapshot(id))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.Completed).To(BeTrue())
			g.Expect(p.NCompleted).To(Equal(p.NTotal))
		}).WithTimeout(10 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		g.Expect(state(t, id).Item).To(Equal("vol-pv-fast"))
	})

	It("VolumeSnapshotter v2 cancel and failure", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample"), 10*time.Second)
		ctx := context.Background()
		id := takeSnapshot(t, m, "pv-slow", map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})

		p, err := m.Progress(ctx, snapshot(id))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Completed).To(BeFalse())
		g.Expect(m.Cancel(ctx, snapshot(id))).To(Succeed())
		g.Expect(state(t, id).Cancels).To(Equal(1))
		p, err = m.Progress(ctx, snapshot(id))
		g.Expect(errors.Is(err, ErrOperationFailed)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("operation canceled"))
		g.Expect(p.Completed).To(BeTrue())

		failing := takeSnapshot(t, m, "pv-bad", map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationFailAt: "0"})
		_, err = m.Progress(ctx, snapshot(failing))
		g.Expect(errors.Is(err, ErrOperationFailed)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("simulated failure at 0%"))

		_, err = m.Progress(ctx, snapshot("sample-snapshot-unknown"))
		g.Expect(errors.Is(err, ErrInvalidOperationID)).To(BeTrue(), "got %v", err)
	})

	It("VolumeSnapshotter is initialised with the location config", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample"), 10*time.Second)
		ctx := context.Background()
		id := takeSnapshot(t, m, "pv-config", map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})

		// A location whose config the plugin rejects: the Init error is the answer.
		bad := snapshot(id)
		bad.SnapshotConfig = map[string]string{"fail-init": "yes"}
		_, err := m.Progress(ctx, bad)
		g.Expect(errors.Is(err, ErrPluginError)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("invalid configuration: fail-init=yes"))

		// The good config again is initialised again, then shared by callers.
		_, err = m.Progress(ctx, snapshot(id))
		g.Expect(err).NotTo(HaveOccurred())

		// A restarted process has lost its Init; itemops initialises it again
		// (the sample fails Progress on an instance that was never initialised).
		pid := m.pids()[filepath.Join(m.opts.Dir, "sample")]
		g.Expect(pid).NotTo(BeZero())
		g.Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
		g.Eventually(func() error {
			_, err := m.Progress(ctx, snapshot(id))
			return err
		}).WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
		g.Expect(m.pids()[filepath.Join(m.opts.Dir, "sample")]).NotTo(Equal(pid))
	})

	It("VolumeSnapshotter v1 through the adapter", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		if awsPluginErr != nil {
			t.Fatalf("building velero-plugin-for-aws: %v", awsPluginErr)
		}
		dir := t.TempDir()
		g.Expect(os.Symlink(awsPluginPath, filepath.Join(dir, "velero-plugin-for-aws"))).To(Succeed())
		m, _ := newManager(t, dir, 30*time.Second)
		ctx := context.Background()

		// The v1 methods reach the real plugin.
		vs, err := m.VolumeSnapshotter("velero.io/aws")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(vs.Init(ctx, map[string]string{"region": "us-east-1"})).To(Succeed())
		ebs := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "PersistentVolume", "metadata": map[string]any{"name": "pv-ebs"},
			"spec": map[string]any{"awsElasticBlockStore": map[string]any{"volumeID": "aws://us-east-1a/vol-0abc"}},
		}}
		volumeID, err := vs.GetVolumeID(ctx, ebs)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(volumeID).To(Equal("vol-0abc"))
		updated, err := vs.SetVolumeID(ctx, ebs, "vol-0def")
		g.Expect(err).NotTo(HaveOccurred())
		newID, _, _ := unstructured.NestedString(updated.UnstructuredContent(), "spec", "awsElasticBlockStore", "volumeID")
		g.Expect(newID).To(Equal("vol-0def"))
		_, _, err = vs.GetVolumeInfo(ctx, "", "")
		g.Expect(err).To(HaveOccurred(), "the real plugin answers, here with its own error")

		// Progress and Cancel are the adapter's no-ops.
		op := Operation{Kind: itemopsv1alpha1.PluginKindVolumeSnapshotter, Plugin: "velero.io/aws", ID: "snap-0123",
			SnapshotConfig: map[string]string{"region": "us-east-1"}}
		p, err := m.Progress(ctx, op)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Completed).To(BeTrue())
		g.Expect(p.Err).To(BeEmpty())
		g.Expect(m.Cancel(ctx, op)).To(Succeed())
	})

	It("unknown VolumeSnapshotter is not found", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample", "samplev1"), 10*time.Second)
		op := snapshot("x")
		op.Plugin = "example.io/missing"
		_, err := m.Progress(context.Background(), op)
		g.Expect(errors.Is(err, ErrPluginNotFound)).To(BeTrue(), "got %v", err)
		g.Expect(errors.Is(m.Cancel(context.Background(), op), ErrPluginNotFound)).To(BeTrue())
		_, err = m.VolumeSnapshotter("example.io/missing")
		g.Expect(errors.Is(err, ErrPluginNotFound)).To(BeTrue(), "got %v", err)
	})

	It("config key ignores order but not content", func() {
		g := NewWithT(GinkgoT())
		a := map[string]string{"region": "us-east-1", "profile": "default"}
		b := map[string]string{"profile": "default", "region": "us-east-1"}
		g.Expect(configKey(a)).To(Equal(configKey(b)))
		g.Expect(configKey(map[string]string{"a": "bc"})).NotTo(Equal(configKey(map[string]string{"ab": "c"})))
		g.Expect(configKey(nil)).To(Equal(configKey(map[string]string{})))
		g.Expect(configKey(a)).NotTo(Equal(configKey(map[string]string{"region": "us-east-2", "profile": "default"})))
	})

	It("locations with different configs never mix", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample"), 10*time.Second)
		id := takeSnapshot(t, m, "pv-shared", map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})

		// One process holds one instance of the snapshotter: callers of two
		// locations at once must each be answered under their own configuration.
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for i := range 10 {
			region := []string{"east", "west"}[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				op := snapshot(id)
				op.SnapshotConfig = map[string]string{"region": region}
				for range 10 {
					p, err := m.Progress(context.Background(), op)
					if err != nil {
						errs <- err
						return
					}
					if p.Description != "snapshoting in "+region {
						errs <- fmt.Errorf("a caller of %s was answered %q", region, p.Description)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			g.Expect(err).NotTo(HaveOccurred())
		}
	})
})
