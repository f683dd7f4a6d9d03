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

package csidriver

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The driver under test listens here; the sanity suite's specs are
// registered before the suite runs, and use the connection BeforeSuite makes.
var (
	dir, _ = os.MkdirTemp("", "csidriver-")
	socket = filepath.Join(dir, "csi.sock")
	driver = &Driver{Name: "csi.itemops.io", NodeID: "node-1", Root: filepath.Join(dir, "root")}
	config = func() *sanity.TestConfig {
		c := sanity.NewTestConfig()
		// No Address: the sanity suite reuses the connection BeforeSuite
		// makes (sc.Conn). Its own dial waits for the connection's state to
		// change from the one it reads after dialing, and waits a minute in
		// vain when the connection was already Ready by then.
		c.Address = ""
		c.TargetPath = filepath.Join(dir, "target")
		c.StagingPath = filepath.Join(dir, "staging")
		c.TestVolumeSize = 64 << 20
		return &c
	}()
	sc = sanity.GinkgoTest(config)
)

func TestCSIDriver(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "The tests' CSI driver", Label("csi"))
}

var _ = BeforeSuite(func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- driver.Serve(ctx, socket) }()
	DeferCleanup(func() {
		cancel()
		Expect(<-done).To(Succeed())
		Expect(os.RemoveAll(dir)).To(Succeed())
	})
	Eventually(func() error { _, err := os.Stat(socket); return err }, 10*time.Second, 10*time.Millisecond).Should(Succeed())
	sc.Conn = connect()
})

// connect is a client of the driver under test.
func connect() *grpc.ClientConn {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(conn.Close)
	return conn
}

func sum(path string) string {
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

var _ = Describe("The tests' CSI driver, beyond the sanity suite", func() {
	mount := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}

	It("a snapshot is a copy of the volume's files, a volume made from it holds them, and a failing volume's snapshot is cut but not ready until allowed", func() {
		ctx := context.Background()
		conn := connect()
		controller, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)

		vol, err := controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "source", VolumeCapabilities: []*csi.VolumeCapability{mount}})
		Expect(err).NotTo(HaveOccurred())
		target := filepath.Join(dir, "published")
		_, err = node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol.Volume.VolumeId, TargetPath: target, VolumeCapability: mount})
		Expect(err).NotTo(HaveOccurred())
		data := make([]byte, 3<<20)
		for i := range data {
			data[i] = byte(i * 7)
		}
		Expect(os.WriteFile(filepath.Join(target, "blob"), data, 0o644)).To(Succeed())
		want := sum(filepath.Join(target, "blob"))

		By("not cut at all while the refuse-snapshot file names the volume")
		refuseFile := filepath.Join(driver.Root, refuseSnapshotDir, vol.Volume.VolumeId)
		Expect(os.WriteFile(refuseFile, []byte("the array is read-only\n"), 0o644)).To(Succeed())
		_, err = controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: vol.Volume.VolumeId})
		Expect(status.Code(err)).To(Equal(codes.Unavailable))
		Expect(status.Convert(err).Message()).To(Equal("the array is read-only"))
		none, err := controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: vol.Volume.VolumeId})
		Expect(err).NotTo(HaveOccurred())
		Expect(none.Entries).To(BeEmpty())
		Expect(os.Remove(refuseFile)).To(Succeed())

		By("cut but not ready while the fail-snapshot file names the volume, then failing once it says why")
		failFile := filepath.Join(driver.Root, failSnapshotDir, vol.Volume.VolumeId)
		Expect(os.WriteFile(failFile, nil, 0o644)).To(Succeed())
		snap, err := controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: vol.Volume.VolumeId})
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Snapshot.ReadyToUse).To(BeFalse())
		Expect(snap.Snapshot.SnapshotId).NotTo(BeEmpty())
		again, err := controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: vol.Volume.VolumeId})
		Expect(err).NotTo(HaveOccurred(), "an empty file: still copying")
		Expect(again.Snapshot.ReadyToUse).To(BeFalse())
		Expect(again.Snapshot.SnapshotId).To(Equal(snap.Snapshot.SnapshotId))
		Expect(os.WriteFile(failFile, []byte("the array is out of snapshot reserve\n"), 0o644)).To(Succeed())
		_, err = controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: vol.Volume.VolumeId})
		Expect(status.Code(err)).To(Equal(codes.Internal))
		Expect(status.Convert(err).Message()).To(Equal("the array is out of snapshot reserve"))
		listed, err := controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: snap.Snapshot.SnapshotId})
		Expect(err).NotTo(HaveOccurred())
		Expect(listed.Entries).To(HaveLen(1))
		Expect(listed.Entries[0].Snapshot.ReadyToUse).To(BeFalse())
		_, err = controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "too-soon", VolumeCapabilities: []*csi.VolumeCapability{mount},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
				Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}}})
		Expect(status.Code(err)).To(Equal(codes.Unavailable), "no volume from a snapshot that is not ready")
		Expect(os.Remove(failFile)).To(Succeed())

		By("ready at the next call once the file is gone")
		ready, err := controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: vol.Volume.VolumeId})
		Expect(err).NotTo(HaveOccurred())
		Expect(ready.Snapshot.ReadyToUse).To(BeTrue())
		Expect(ready.Snapshot.SnapshotId).To(Equal(snap.Snapshot.SnapshotId))
		// Later writes to the volume are not in the snapshot.
		Expect(os.WriteFile(filepath.Join(target, "blob"), []byte("changed"), 0o644)).To(Succeed())

		restored, err := controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "restored", VolumeCapabilities: []*csi.VolumeCapability{mount},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
				Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}}})
		Expect(err).NotTo(HaveOccurred())
		restoredTarget := filepath.Join(dir, "restored")
		_, err = node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: restored.Volume.VolumeId, TargetPath: restoredTarget,
			VolumeCapability: mount, Readonly: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(sum(filepath.Join(restoredTarget, "blob"))).To(Equal(want))
		Expect(os.WriteFile(filepath.Join(restoredTarget, "other"), nil, 0o644)).NotTo(Succeed(), "a read-only publish is read-only")

		for volume, path := range map[string]string{vol.Volume.VolumeId: target, restored.Volume.VolumeId: restoredTarget} {
			_, err = node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volume, TargetPath: path})
			Expect(err).NotTo(HaveOccurred())
			Expect(path).NotTo(BeAnExistingFile())
			_, err = controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volume})
			Expect(err).NotTo(HaveOccurred())
		}
		_, err = controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId})
		Expect(err).NotTo(HaveOccurred())
		entries, err := os.ReadDir(filepath.Join(driver.Root, volumesDir))
		Expect(err).NotTo(HaveOccurred())
		Expect(entries).To(BeEmpty())
	})
})

var _ = Describe("The tests' CSI driver's registration with the kubelet", func() {
	It("tells the kubelet its name and endpoint, and keeps the kubelet's answer", func() {
		ctx, cancel := context.WithCancel(context.Background())
		registry := filepath.Join(dir, "plugins_registry")
		r := &Registrar{Name: driver.Name, Endpoint: "/var/lib/kubelet/plugins/csi.itemops.io/csi.sock"}
		done := make(chan error, 1)
		socket := Socket(registry, driver.Name)
		go func() { done <- r.Serve(ctx, socket) }()
		DeferCleanup(func() {
			cancel()
			Expect(<-done).To(Succeed())
			Expect(socket).NotTo(BeAnExistingFile(), "the kubelet unregisters a driver whose socket is gone")
		})
		Expect(socket).To(Equal(filepath.Join(registry, "csi.itemops.io-reg.sock")))
		Eventually(func() error { _, err := os.Stat(socket); return err }, 10*time.Second, 10*time.Millisecond).Should(Succeed())

		// As the kubelet's plugin watcher does.
		conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		kubelet := registerapi.NewRegistrationClient(conn)
		info, err := kubelet.GetInfo(ctx, &registerapi.InfoRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(info.GetType()).To(Equal(registerapi.CSIPlugin))
		Expect(info.GetName()).To(Equal("csi.itemops.io"))
		Expect(info.GetEndpoint()).To(Equal("/var/lib/kubelet/plugins/csi.itemops.io/csi.sock"))
		Expect(info.GetSupportedVersions()).To(ContainElement("1.0.0"))
		registered, err := r.Registered()
		Expect(registered, err).To(BeFalse())

		_, err = kubelet.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Registered()).To(BeTrue())
		_, err = kubelet.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "unsupported versions"})
		Expect(err).NotTo(HaveOccurred())
		_, err = r.Registered()
		Expect(err).To(MatchError(ContainSubstring("the kubelet refused driver csi.itemops.io: unsupported versions")))
	})
})
