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

package compat

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/itemops/itemops/test/csisim"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/s3"
	"github.com/itemops/itemops/test/veleroenv"
)

// driver is the CSI driver of the suite's volumes.
const driver = "csi.itemops.test"

// world is one Velero release beside its own API server.
type world struct {
	version string
	env     *envtest.Environment
	velero  *veleroenv.Env
	// itemops is the program under test.
	itemops string
	// pluginDir is itemops' plugin directory: velero-plugin-for-aws, the
	// sample plugins and the release's velero binary, which Velero's own
	// plugin directory (velero.PluginDir) never holds.
	pluginDir string
	// kubeconfigs of the chart's ServiceAccounts, by mode.
	kubeconfigs map[string]string
	cluster     *csisim.Cluster
}

// setUp starts a world of one release under work; stop undoes what was
// started, even after an error.
func setUp(version, work string) (w *world, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	w = &world{version: version, kubeconfigs: map[string]string{}}
	root, err := envtest.RepoRoot()
	if err != nil {
		return nil, stop, err
	}
	snapshotCRDs, err := csisim.CRDs(root)
	if err != nil {
		return nil, stop, err
	}
	if w.env, err = envtest.StartWith(envtest.Options{VeleroVersion: version, ExtraCRDPaths: snapshotCRDs}); err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { _ = w.env.Stop() })

	// The sample plugins keep their state here; every plugin process,
	// started by Velero or by itemops, inherits it.
	if err := os.Setenv(sim.EnvStateDir, filepath.Join(work, "state")); err != nil {
		return nil, stop, err
	}
	veleroPlugins := filepath.Join(work, "velero-plugins")
	w.pluginDir = filepath.Join(work, "itemops-plugins")
	if err := envtest.BuildSamplePlugins(veleroPlugins, "sample"); err != nil {
		return nil, stop, err
	}
	w.itemops = filepath.Join(work, "itemops")
	build := exec.Command("go", "build", "-o", w.itemops, ".")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, stop, err
	}
	v, stopVelero, err := veleroenv.SetupVersion(w.env, work, veleroPlugins, version, false)
	stops = append(stops, stopVelero)
	if err != nil {
		return nil, stop, err
	}
	w.velero = v
	if err := os.MkdirAll(w.pluginDir, 0o755); err != nil {
		return nil, stop, err
	}
	aws, err := os.Readlink(filepath.Join(veleroPlugins, "velero-plugin-for-aws"))
	if err != nil {
		return nil, stop, err
	}
	for name, target := range map[string]string{"velero": v.Velero, "velero-plugin-for-aws": aws,
		"sample": filepath.Join(veleroPlugins, "sample")} {
		if err := os.Symlink(target, filepath.Join(w.pluginDir, name)); err != nil {
			return nil, stop, err
		}
	}

	// itemops runs as the chart installed beside this release renders it.
	ctx := context.Background()
	for release, mode := range map[string]string{"itemops": "manage", "itemops-observe": "observe"} {
		config, err := w.env.ChartIdentity(ctx, release, "--set", "mode="+mode, "--set", "builtinPlugins.image.tag=v"+version)
		if err != nil {
			return nil, stop, err
		}
		w.kubeconfigs[mode] = filepath.Join(work, release+".kubeconfig")
		if err := os.WriteFile(w.kubeconfigs[mode], config, 0o600); err != nil {
			return nil, stop, err
		}
	}
	w.cluster = &csisim.Cluster{Client: w.env.Client, Namespace: envtest.VeleroNamespace, Driver: driver, Rate: 1 << 30}
	if err := w.cluster.StorageClasses(ctx); err != nil {
		return nil, stop, err
	}
	if err := w.cluster.Start(ctx); err != nil {
		return nil, stop, err
	}
	stops = append(stops, w.cluster.Stop)
	return w, stop, nil
}

// startVelero runs the release's velero server with CSI on until the end of t.
func (w *world) startVelero(t testing.TB, extra ...string) *proc.Process {
	t.Helper()
	unlock, err := veleroenv.LockServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock) // after the server stopped: cleanups run last first
	p := w.velero.StartServer(t, append([]string{"--features=EnableCSI"}, extra...)...)
	if err := veleroenv.WaitForLocation(context.Background(), w.env.Client); err != nil {
		t.Fatal(err)
	}
	return p
}

// startItemops runs itemops in mode as the chart's ServiceAccount for it.
func (w *world) startItemops(t testing.TB, mode string) *proc.Process {
	t.Helper()
	var addrs [2]string
	for i := range addrs {
		a, err := s3.FreeAddress()
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = a
	}
	args := []string{"--kubeconfig=" + w.kubeconfigs[mode], "--mode=" + mode, "--velero-namespace=" + envtest.VeleroNamespace,
		"--plugin-dir=" + w.pluginDir, "--sync-frequency=500ms", "--progress-update-interval=1s",
		"--credentials-dir=" + filepath.Join(t.TempDir(), "credentials"), "--plugin-args=--features=EnableCSI",
		"--metrics-bind-address=" + addrs[0], "--health-probe-bind-address=" + addrs[1]}
	return proc.Start(t, "itemops", exec.Command(w.itemops, args...))
}

// appNamespace creates a namespace with one bound CSI PVC, moved by the
// data mover, per entry of pvcs (size → rate), and one ConfigMap the sample
// plugins act on per entry of samples (annotations).
func (w *world) appNamespace(t testing.TB, name string, pvcs [][2]string, samples ...map[string]string) {
	t.Helper()
	ctx := context.Background()
	c := w.env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	for i, pvc := range pvcs {
		if _, err := resource.ParseQuantity(pvc[1]); err != nil {
			t.Fatal(err)
		}
		if err := w.cluster.BoundPVC(ctx, name, fmt.Sprintf("data-%d", i), pvc[0], map[string]string{csisim.AnnotationRate: pvc[1]}); err != nil {
			t.Fatal(err)
		}
	}
	for i, annotations := range samples {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sample-%d", i), Namespace: name,
				Labels: map[string]string{sim.LabelSelect: "yes"}, Annotations: annotations},
			Data: map[string]string{"payload": "x"},
		}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
}
