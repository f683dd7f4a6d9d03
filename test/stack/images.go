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

package stack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/itemops/itemops/test/localcluster"
)

// The images, by the names the README, `velero install` and the chart use.
const (
	VeleroImage    = "velero/velero:v1.18.3"
	AWSPluginImage = "velero/velero-plugin-for-aws:v1.14.3"
	VersitygwImage = "versity/versitygw:v1.8.0"
	// SamplePluginsImage copies the sample plugins (test/plugins/sample)
	// into /target, as a Velero plugin image does.
	SamplePluginsImage = "itemops.io/sample-plugins:dev"
	// The CSI parts: the project's test driver (test/csidriver), the
	// snapshot controller, its csi-snapshotter sidecar and the
	// external-provisioner sidecar, built here from their modules.
	CSIDriverImage          = "itemops.io/csidriver:dev"
	SnapshotControllerImage = "registry.k8s.io/sig-storage/snapshot-controller:v8.7.0"
	CSISnapshotterImage     = "registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0"
	CSIProvisionerImage     = "registry.k8s.io/sig-storage/csi-provisioner:v5.3.0"
	// VolumeFilesImage writes and sums a volume's files
	// (test/volumefiles).
	VolumeFilesImage = "itemops.io/volume-files:dev"
	// ThrottleImage is a TCP proxy of limited rate (test/throttle).
	ThrottleImage = "itemops.io/throttle:dev"
	// ItemopsRepository is the chart's image repository.
	ItemopsRepository = "ghcr.io/itemops/itemops"
	// SamplePluginsBinary is the sample plugins' file in a plugin directory.
	SamplePluginsBinary = "itemops-sample-plugins"
)

// Binaries are the programs nobody here wrote, built once per machine by
// hack/cached-binary.sh (static, as their own images hold them), and the
// Kubernetes binaries of hack/envtest-assets.sh.
type Binaries struct {
	Velero, AWSPlugin, AWSCopier, Versitygw, Helm string
	// The CSI snapshot controller and its sidecar, and the
	// external-provisioner.
	SnapshotController, CSISnapshotter, CSIProvisioner string
	// KubeDir holds kubectl and the cluster's binaries.
	KubeDir string
}

// FindBinaries builds (once per machine) and locates the binaries.
func FindBinaries(ctx context.Context, root string) (Binaries, error) {
	b, err := FindTools(ctx, root)
	if err != nil {
		return b, err
	}
	b.KubeDir, err = hackOutput(ctx, root, "envtest-assets.sh")
	return b, err
}

// FindTools builds (once per machine) and locates the binaries but the
// Kubernetes ones: all that BuildImages needs.
func FindTools(ctx context.Context, root string) (Binaries, error) {
	var b Binaries
	for _, t := range []struct {
		name string
		into *string
	}{{"velero", &b.Velero}, {"velero-plugin-for-aws", &b.AWSPlugin}, {"versitygw", &b.Versitygw}, {"helm", &b.Helm},
		{"snapshot-controller", &b.SnapshotController}, {"csi-provisioner", &b.CSIProvisioner}} {
		var err error
		if *t.into, err = hackOutput(ctx, root, "cached-binary.sh", t.name); err != nil {
			return b, err
		}
	}
	b.AWSCopier = filepath.Join(filepath.Dir(b.AWSPlugin), "cp-plugin")
	b.CSISnapshotter = filepath.Join(filepath.Dir(b.SnapshotController), "csi-snapshotter")
	return b, nil
}

// FindBinariesAndBuildImages builds (once per machine) and locates the
// binaries, and builds every image the stack runs, as tarballs in dir. On a
// new machine the node's Kubernetes binaries take longest to build (make
// test builds them beside the other suites): this repository's programs,
// which the images hold beside the other projects' binaries, are built
// meanwhile, and the images written once both are there.
func FindBinariesAndBuildImages(ctx context.Context, root, dir, itemopsTag string) (Binaries, []string, error) {
	g, gctx := errgroup.WithContext(ctx)
	var kubeDir string
	g.Go(func() (err error) {
		kubeDir, err = hackOutput(gctx, root, "envtest-assets.sh")
		return err
	})
	var b Binaries
	g.Go(func() (err error) {
		b, err = FindTools(gctx, root)
		return err
	})
	var o ownPrograms
	g.Go(func() (err error) {
		o, err = buildOwn(gctx, root, dir, itemopsTag)
		return err
	})
	if err := g.Wait(); err != nil {
		return b, nil, err
	}
	b.KubeDir = kubeDir
	more, err := writeImages(dir, images(b, o))
	return b, append([]string{o.itemopsTarball}, more...), err
}

// hackOutput runs a script of hack/ and returns what it printed.
func hackOutput(ctx context.Context, root, script string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", script), args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s %s: %w", script, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// ownPrograms are this repository's programs that the images hold, built.
type ownPrograms struct {
	// itemopsTarball is the itemops image itself.
	itemopsTarball                                       string
	samplePlugins, copier, driver, volumeFiles, throttle string
	// restoreHelper is Velero's velero-restore-helper.
	restoreHelper string
}

// buildOwn builds this repository's programs that the images hold into
// dir: the itemops image, `make image`'s (hack/image.sh), for this
// machine's platform, named ItemopsRepository:itemopsTag; then the sample
// plugins, the plugin copier, the CSI driver, the volume writer and the
// throttling proxy in one go build, which compiles what they share once
// and links them side by side.
func buildOwn(ctx context.Context, root, dir, itemopsTag string) (ownPrograms, error) {
	itemops := exec.CommandContext(ctx, filepath.Join(root, "hack", "image.sh"))
	itemops.Dir = root
	itemops.Env = append(os.Environ(), "OUT="+filepath.Join(dir, "itemops"), "PLATFORMS=linux/amd64",
		"TARBALL_PLATFORM=linux/amd64", "IMG="+ItemopsRepository+":"+itemopsTag, "VERSION="+itemopsTag)
	if out, err := itemops.CombinedOutput(); err != nil {
		return ownPrograms{}, fmt.Errorf("make image (hack/image.sh): %w: %s", err, out)
	}
	binDir := filepath.Join(dir, "bin")
	// Velero's restore helper, the init container its file-system restore
	// puts into restored pods, at the release of the Velero module
	// itemops requires, which the Velero image is of.
	bins, err := localcluster.BuildStatic(ctx, binDir,
		"./test/plugins/sample", "./cmd/cp-plugin", "./test/csidriver/csidriver", "./test/volumefiles", "./test/throttle",
		"github.com/vmware-tanzu/velero/cmd/velero-restore-helper")
	if err != nil {
		return ownPrograms{}, err
	}
	// The name Velero finds the sample plugins by in its plugin directory.
	sample := filepath.Join(binDir, SamplePluginsBinary)
	if err := os.Rename(bins[0], sample); err != nil {
		return ownPrograms{}, err
	}
	return ownPrograms{itemopsTarball: filepath.Join(dir, "itemops", "itemops.tar"), samplePlugins: sample,
		copier: bins[1], driver: bins[2], volumeFiles: bins[3], throttle: bins[4], restoreHelper: bins[5]}, nil
}

// images are the images the stack runs but itemops' own, laid out as their
// projects' own images are: Velero's binary at /velero (and its restore
// helper at /velero-restore-helper), the AWS plugin at
// /plugins with its copier as entrypoint, versitygw at /app/versitygw.
func images(bins Binaries, o ownPrograms) []localcluster.Image {
	const nonroot = "65532:65532"
	return []localcluster.Image{
		// Velero's own image runs as its user, whose home (where
		// kopia keeps a repository's configuration) is its own.
		{Ref: VeleroImage, Files: map[string]string{"/velero": bins.Velero, "/velero-restore-helper": o.restoreHelper}, Dirs: []string{"/tmp"}, Home: "/home/cnb",
			User: nonroot, Env: []string{"HOME=/home/cnb"}},
		{Ref: AWSPluginImage, Files: map[string]string{"/plugins/velero-plugin-for-aws": bins.AWSPlugin, "/bin/cp-plugin": bins.AWSCopier},
			User: nonroot, Entrypoint: []string{"cp-plugin", "/plugins/velero-plugin-for-aws", "/target/velero-plugin-for-aws"}},
		{Ref: VersitygwImage, Files: map[string]string{"/app/versitygw": bins.Versitygw}, Dirs: []string{"/tmp"},
			User: nonroot, Entrypoint: []string{"/app/versitygw"}},
		{Ref: SamplePluginsImage, Files: map[string]string{"/plugins/" + SamplePluginsBinary: o.samplePlugins, "/bin/cp-plugin": o.copier},
			User: nonroot, Entrypoint: []string{"/bin/cp-plugin", "/plugins/" + SamplePluginsBinary, "/target/" + SamplePluginsBinary}},
		// The driver mounts: it runs as root, privileged, as CSI node
		// plugins do.
		{Ref: CSIDriverImage, Files: map[string]string{"/csidriver": o.driver}, Entrypoint: []string{"/csidriver"}},
		{Ref: SnapshotControllerImage, Files: map[string]string{"/snapshot-controller": bins.SnapshotController},
			User: nonroot, Entrypoint: []string{"/snapshot-controller"}},
		{Ref: CSISnapshotterImage, Files: map[string]string{"/csi-snapshotter": bins.CSISnapshotter},
			Entrypoint: []string{"/csi-snapshotter"}},
		{Ref: CSIProvisionerImage, Files: map[string]string{"/csi-provisioner": bins.CSIProvisioner},
			Entrypoint: []string{"/csi-provisioner"}},
		{Ref: VolumeFilesImage, Files: map[string]string{"/volumefiles": o.volumeFiles}, User: nonroot, Entrypoint: []string{"/volumefiles"}},
		{Ref: ThrottleImage, Files: map[string]string{"/throttle": o.throttle}, User: nonroot, Entrypoint: []string{"/throttle"}},
	}
}

// writeImages writes each image as a tarball in dir and returns them.
func writeImages(dir string, images []localcluster.Image) ([]string, error) {
	var tarballs []string
	for _, img := range images {
		tarball := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(img.Ref)+".tar")
		if err := img.Write(tarball); err != nil {
			return nil, fmt.Errorf("building %s: %w", img.Ref, err)
		}
		tarballs = append(tarballs, tarball)
	}
	return tarballs, nil
}
