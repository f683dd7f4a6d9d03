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

// Package interop runs itemops beside the real Velero server: Velero v1.18
// built from the module proxy, run against an envtest API server, storing
// backups through velero-plugin-for-aws in versitygw, an S3-compatible
// server, all on 127.0.0.1; the sample plugins start the asynchronous
// operations in Velero and are polled by itemops.
package interop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/s3"
	"github.com/itemops/itemops/test/veleroenv"
)

var (
	env *envtest.Environment
	// velero is Velero's world beside the API server.
	velero *veleroenv.Env
	// kubeconfig is an administrator's kubeconfig file for Velero and itemops.
	kubeconfig string
	// itemopsBinary is the program under test.
	itemopsBinary string
	// pluginDir holds velero-plugin-for-aws, the sample plugins and the
	// example VolumeSnapshotter v2, for both.
	pluginDir string
	// bucketDir is the bucket as versitygw keeps it on disk.
	bucketDir string
)

func TestInterop(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "itemops beside the real velero server", Label("velero", "e2e", "envtest", "s3", "slow"))
}

// BeforeSuite starts an API server, versitygw and the real velero server,
// with the plugins the specs use.
var _ = BeforeSuite(func() {
	stop, err := setUp(GinkgoT().TempDir())
	DeferCleanup(stop)
	Expect(err).NotTo(HaveOccurred(), "setting up Velero, versitygw and the API server")
})

// setUp starts everything the scenarios share; stop undoes what was started.
func setUp(work string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	env, err = envtest.Start()
	if err != nil {
		return stop, err
	}
	stops = append(stops, func() { _ = env.Stop() })

	// The sample plugins keep their state here; every plugin process,
	// started by Velero or by itemops, inherits it.
	if err := os.Setenv(sim.EnvStateDir, filepath.Join(work, "state")); err != nil {
		return stop, err
	}
	pluginDir = filepath.Join(work, "plugins")
	itemopsBinary = filepath.Join(work, "itemops")
	if err := envtest.BuildSamplePlugins(pluginDir, "sample"); err != nil {
		return stop, err
	}
	// The plugin docs/plugins.md walks a plugin author through.
	example := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "volumesnapshotter"), "./examples/volumesnapshotter")
	example.Dir = env.RepoRoot
	example.Stdout, example.Stderr = os.Stderr, os.Stderr
	if err := example.Run(); err != nil {
		return stop, err
	}
	build := exec.Command("go", "build", "-o", itemopsBinary, ".")
	build.Dir = env.RepoRoot
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return stop, err
	}
	v, stopVelero, err := veleroenv.Setup(env, work, pluginDir, false)
	stops = append(stops, stopVelero)
	if err != nil {
		return stop, err
	}
	velero, kubeconfig, bucketDir = v, v.Kubeconfig, v.BucketDir
	return stop, nil
}

// startVelero runs the real Velero server against the suite's API server.
func startVelero(t testing.TB, extra ...string) *proc.Process {
	t.Helper()
	unlock, err := veleroenv.LockServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock) // after the server stopped: cleanups run last first
	return velero.StartServer(t, extra...)
}

// startItemops runs the itemops binary in mode.
func startItemops(t testing.TB, mode string, extra ...string) *proc.Process {
	t.Helper()
	probes, err := s3.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig=" + kubeconfig, "--mode=" + mode, "--velero-namespace=" + envtest.VeleroNamespace,
		"--plugin-dir=" + pluginDir, "--sync-frequency=500ms", "--progress-update-interval=1s",
		"--credentials-dir=" + filepath.Join(t.TempDir(), "credentials"),
		"--metrics-bind-address=0", "--health-probe-bind-address=" + probes}, extra...)
	return proc.Start(t, "itemops", exec.Command(itemopsBinary, args...))
}

// waitForLocation waits until Velero finds the bucket usable.
func waitForLocation(ctx context.Context) error {
	return veleroenv.WaitForLocation(ctx, env.Client)
}
