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
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/s3"
)

const (
	bucket   = "velero"
	location = "default"
)

var (
	env *envtest.Environment
	// kubeconfig is an administrator's kubeconfig file for Velero and itemops.
	kubeconfig string
	// itemopsBinary, veleroBinary: the programs under test.
	itemopsBinary, veleroBinary string
	// pluginDir holds velero-plugin-for-aws and the sample plugins, for both.
	pluginDir string
	// bucketDir is the bucket as versitygw keeps it on disk.
	bucketDir string
	// stateDir is where the sample plugins keep their operations.
	stateDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	work, err := os.MkdirTemp("", "itemops-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(work) }()
	stop, err := setUp(work)
	defer stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "setting up Velero, versitygw and the API server:", err)
		return 1
	}
	return m.Run()
}

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
	root := env.RepoRoot

	// The sample plugins keep their state here; every plugin process,
	// started by Velero or by itemops, inherits it.
	stateDir = filepath.Join(work, "state")
	if err := os.Setenv(sim.EnvStateDir, stateDir); err != nil {
		return stop, err
	}

	type built struct {
		path string
		err  error
	}
	binaries := map[string]*built{}
	var wg sync.WaitGroup
	for name, script := range map[string][]string{
		"velero": {filepath.Join(root, "hack", "cached-binary.sh"), "velero"},
		"aws":    {filepath.Join(root, "hack", "cached-binary.sh"), "velero-plugin-for-aws"},
	} {
		b := &built{}
		binaries[name] = b
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(script[0], script[1:]...)
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			b.path, b.err = strings.TrimSpace(string(out)), err
			if err != nil {
				b.err = fmt.Errorf("%s: %w", strings.Join(script, " "), err)
			}
		}()
	}
	pluginDir = filepath.Join(work, "plugins")
	itemopsBinary = filepath.Join(work, "itemops")
	buildErr := envtest.BuildSamplePlugins(pluginDir, "sample")
	if buildErr == nil {
		build := exec.Command("go", "build", "-o", itemopsBinary, ".")
		build.Dir = root
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		buildErr = build.Run()
	}
	wg.Wait()
	if buildErr != nil {
		return stop, buildErr
	}
	for _, b := range binaries {
		if b.err != nil {
			return stop, b.err
		}
	}
	veleroBinary = binaries["velero"].path
	if err := os.Symlink(binaries["aws"].path, filepath.Join(pluginDir, "velero-plugin-for-aws")); err != nil {
		return stop, err
	}

	// versitygw serves a posix directory; the bucket is a directory in it.
	server, err := s3.Start(root, work)
	if err != nil {
		return stop, err
	}
	stops = append(stops, server.Stop)
	if bucketDir, err = server.Bucket(bucket); err != nil {
		return stop, err
	}

	config, err := env.Kubeconfig()
	if err != nil {
		return stop, err
	}
	kubeconfig = filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(kubeconfig, config, 0o600); err != nil {
		return stop, err
	}
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cloud-credentials", Namespace: envtest.VeleroNamespace},
		Data:       map[string][]byte{"cloud": s3.Credentials()},
	}); err != nil {
		return stop, err
	}
	bsl := server.Location(envtest.VeleroNamespace, location, bucket, "cloud-credentials", "cloud")
	bsl.Spec.Default = true
	if err := env.Client.Create(ctx, bsl); err != nil {
		return stop, err
	}
	// Velero's restore reads its own Deployment (for the image of its
	// restore helpers); outside a cluster one is created with no pods.
	labels := map[string]string{"component": "velero"}
	replicas := int32(0)
	if err := env.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "velero", Namespace: envtest.VeleroNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "velero", Image: "velero/velero:v1.18.3"}}},
			},
		},
	}); err != nil {
		return stop, err
	}
	return stop, nil
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is a program the suite started and stops.
type process struct {
	name   string
	cmd    *exec.Cmd
	output *syncBuffer
}

func start(t *testing.T, name, binary string, args ...string) *process {
	t.Helper()
	p := &process{name: name, output: &syncBuffer{}}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	p.cmd.Env = append(os.Environ(), "VELERO_NAMESPACE="+envtest.VeleroNamespace)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", p.name, tail(p.output.String(), 200))
		}
	})
	return p
}

func (p *process) stop(sig syscall.Signal) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func tail(s string, lines int) string {
	all := strings.Split(s, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// startVelero runs the real Velero server against the suite's API server.
func startVelero(t *testing.T, extra ...string) *process {
	t.Helper()
	metrics, err := s3.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	profiler, err := s3.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"server", "--kubeconfig", kubeconfig, "--namespace", envtest.VeleroNamespace,
		"--plugin-dir", pluginDir, "--item-operation-sync-frequency", "1s", "--metrics-address", metrics,
		"--profiler-address", profiler, "--store-validation-frequency", "5s", "--log-level", "info"}, extra...)
	return start(t, "velero server", veleroBinary, args...)
}

// startItemops runs the itemops binary in mode.
func startItemops(t *testing.T, mode string, extra ...string) *process {
	t.Helper()
	probes, err := s3.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig=" + kubeconfig, "--mode=" + mode, "--velero-namespace=" + envtest.VeleroNamespace,
		"--plugin-dir=" + pluginDir, "--sync-frequency=500ms", "--progress-update-interval=1s",
		"--credentials-dir=" + filepath.Join(t.TempDir(), "credentials"),
		"--metrics-bind-address=0", "--health-probe-bind-address=" + probes}, extra...)
	return start(t, "itemops", itemopsBinary, args...)
}

// waitForLocation waits until Velero finds the bucket usable.
func waitForLocation(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		bsl := &velerov1api.BackupStorageLocation{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: location}, bsl); err != nil {
			return err
		}
		if bsl.Status.Phase == velerov1api.BackupStorageLocationPhaseAvailable {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("BackupStorageLocation %s is %q: %s", location, bsl.Status.Phase, bsl.Status.Message)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
