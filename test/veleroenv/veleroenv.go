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

// Package veleroenv puts the real Velero beside an envtest API server:
// versitygw as the object store, a default BackupStorageLocation on it through
// the unmodified velero-plugin-for-aws, and `velero server` (v1.18.3, or another release), all on
// 127.0.0.1 and built once per machine from the Go module proxy
// (hack/cached-binary.sh). The interop suite and `make demo` use it.
package veleroenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/s3"
)

// The names of what Setup creates.
const (
	Bucket   = "velero"
	Location = "default"
	Secret   = "cloud-credentials"
)

// ManageFlags disable the two Velero controllers whose job itemops does in manage mode.
var ManageFlags = []string{"--disable-controllers=backup-operations,restore-operations"}

// DefaultVersion is the Velero release the suites run unless told otherwise.
const DefaultVersion = "1.18.3"

// ErrNotBuilt: a binary is not in the cache and Setup was asked not to build it.
var ErrNotBuilt = errors.New("not built yet")

// Env is Velero's world beside an API server.
type Env struct {
	// Velero is the velero binary (server and CLI).
	Velero string
	// Kubeconfig is an administrator's kubeconfig file.
	Kubeconfig string
	// PluginDir holds velero-plugin-for-aws beside the plugins already in it.
	PluginDir string
	// BucketDir is the bucket as versitygw keeps it on disk.
	BucketDir string
	// Version is the Velero release, such as 1.18.3.
	Version string

	server *s3.Server
}

// Setup builds (unless cachedOnly) or finds velero and velero-plugin-for-aws,
// starts versitygw under work and creates Velero's objects in the Velero
// namespace. stop undoes what was started, even after an error.
func Setup(env *envtest.Environment, work, pluginDir string, cachedOnly bool) (e *Env, stop func(), err error) {
	return SetupVersion(env, work, pluginDir, DefaultVersion, cachedOnly)
}

// SetupVersion is Setup with the velero of a release, such as 1.15.2.
// velero-plugin-for-aws is v1.14.3 whatever the release: the module proxy
// serves no older minor, and the ObjectStore protocol it speaks is the same
// in every release since v1.0.
func SetupVersion(env *envtest.Environment, work, pluginDir, version string, cachedOnly bool) (e *Env, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	e = &Env{PluginDir: pluginDir, Version: version}
	paths := map[string]string{}
	errs := make([]error, 0, 2)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range []string{"velero", "velero-plugin-for-aws", "versitygw"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path, err := cached(env.RepoRoot, name, version, cachedOnly)
			mu.Lock()
			defer mu.Unlock()
			paths[name] = path
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, stop, err
	}
	e.Velero = paths["velero"]
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		return nil, stop, err
	}
	if err := os.Symlink(paths["velero-plugin-for-aws"], filepath.Join(pluginDir, "velero-plugin-for-aws")); err != nil {
		return nil, stop, err
	}

	if e.server, err = s3.Start(env.RepoRoot, work); err != nil {
		return nil, stop, err
	}
	stops = append(stops, e.server.Stop)
	if e.BucketDir, err = e.server.Bucket(Bucket); err != nil {
		return nil, stop, err
	}

	config, err := env.Kubeconfig()
	if err != nil {
		return nil, stop, err
	}
	e.Kubeconfig = filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, config, 0o600); err != nil {
		return nil, stop, err
	}
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: Secret, Namespace: envtest.VeleroNamespace},
		Data:       map[string][]byte{"cloud": s3.Credentials()},
	}); err != nil {
		return nil, stop, err
	}
	bsl := e.server.Location(envtest.VeleroNamespace, Location, Bucket, Secret, "cloud")
	bsl.Spec.Default = true
	if err := env.Client.Create(ctx, bsl); err != nil {
		return nil, stop, err
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
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "velero", Image: "velero/velero:v" + version}}},
			},
		},
	}); err != nil {
		return nil, stop, err
	}
	return e, stop, nil
}

// Describe runs this Velero's `velero <kind> describe <name> --details`
// (kind backup or restore) and returns what it printed, errors included.
func (e *Env) Describe(kind, name string) (string, error) {
	out, err := exec.Command(e.Velero, kind, "describe", name, "--details",
		"--kubeconfig", e.Kubeconfig, "--namespace", envtest.VeleroNamespace).CombinedOutput()
	return string(out), err
}

// StorageOutage makes the bucket unreachable for down: versitygw is
// stopped, then started again on the same address over the same files.
func (e *Env) StorageOutage(down time.Duration) error { return e.server.Outage(down) }

// Binary returns the path of a binary hack/cached-binary.sh builds
// (velero, velero-plugin-for-aws, versitygw), building it if need be.
func Binary(root, name string) (string, error) { return cached(root, name, DefaultVersion, false) }

// cached returns the path of a binary hack/cached-binary.sh builds, velero
// of veleroVersion.
func cached(root, name, veleroVersion string, cachedOnly bool) (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", "cached-binary.sh"), name)
	cmd.Env = append(os.Environ(), "VELERO_VERSION="+veleroVersion)
	if cachedOnly {
		cmd.Env = append(cmd.Env, "ITEMOPS_CACHED_ONLY=1")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if !cachedOnly {
		cmd.Stderr = os.Stderr
	}
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 {
		return "", fmt.Errorf("%s: %w", name, ErrNotBuilt)
	}
	if err != nil {
		return "", fmt.Errorf("hack/cached-binary.sh %s: %w: %s", name, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// ServerCommand is `velero server` against the API server, with extra flags.
// Its ports are free ones, so that it never collides with another.
func (e *Env) ServerCommand(extra ...string) (*exec.Cmd, error) {
	metrics, err := s3.FreeAddress()
	if err != nil {
		return nil, err
	}
	profiler, err := s3.FreeAddress()
	if err != nil {
		return nil, err
	}
	args := append([]string{"server", "--kubeconfig", e.Kubeconfig, "--namespace", envtest.VeleroNamespace,
		"--plugin-dir", e.PluginDir, "--item-operation-sync-frequency", "1s", "--metrics-address", metrics,
		"--profiler-address", profiler, "--store-validation-frequency", "5s", "--log-level", "info"}, extra...)
	cmd := exec.Command(e.Velero, args...)
	cmd.Env = append(os.Environ(), "VELERO_NAMESPACE="+envtest.VeleroNamespace,
		// Velero writes a location's credentials file in place (truncate,
		// then write) each time one of its controllers reaches the bucket,
		// every 5 s here; its AWS plugin, reading the file in between, found
		// no credentials under load and failed a Backup and a Restore. The
		// same keys from the environment come first in the AWS SDK's chain.
		// (itemops writes its own credentials files beside and renames them.)
		"AWS_ACCESS_KEY_ID="+s3.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3.SecretKey,
		// Without credentials the SDK asks the instance metadata address;
		// nothing of the tests may leave this machine.
		"AWS_EC2_METADATA_DISABLED=true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

// StartServer runs `velero server` (ServerCommand) until the end of t and
// waits until it serves its metrics. Its ports are free when chosen, but
// another program may take one before Velero binds it, and Velero then exits
// at once: it is started again on other ports, up to three times.
func (e *Env) StartServer(t testing.TB, extra ...string) *proc.Process {
	t.Helper()
	for attempt := 1; ; attempt++ {
		cmd, err := e.ServerCommand(extra...)
		if err != nil {
			t.Fatal(err)
		}
		p := proc.Start(t, "velero server", cmd)
		err = waitServing(p, flagValue(cmd.Args, "--metrics-address"))
		if err == nil {
			return p
		}
		if !strings.Contains(p.Output.String(), "address already in use") || attempt == 3 {
			t.Fatalf("velero server: %v", err)
		}
		p.Stop(syscall.SIGKILL)
	}
}

// waitServing waits until the server answers on its metrics address, or
// says why it exited.
func waitServing(p *proc.Process, metrics string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if strings.Contains(p.Output.String(), "level=fatal") {
			return fmt.Errorf("it exited: %s", proc.Tail(p.Output.String(), 1))
		}
		if resp, err := http.Get("http://" + metrics + "/metrics"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("no metrics on %s after a minute", metrics)
}

// flagValue returns the argument after flag.
func flagValue(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// WaitForLocation waits until Velero finds the bucket usable.
func WaitForLocation(ctx context.Context, c client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		bsl := &velerov1api.BackupStorageLocation{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: Location}, bsl); err != nil {
			return err
		}
		if bsl.Status.Phase == velerov1api.BackupStorageLocationPhaseAvailable {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("BackupStorageLocation %s is %q: %s", Location, bsl.Status.Phase, bsl.Status.Message)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// serverLock is the file whose lock one `velero server` at a time holds on
// this machine.
var serverLock = filepath.Join(os.TempDir(), "itemops-velero-server.lock")

// LockServer waits until no other `velero server` of this machine's suites
// runs, and keeps others from starting until unlock. Velero's controller
// manager always serves its metrics on :8080, with no flag to change that,
// so two at once make the second exit; the suites that run Velero (make test
// runs packages in parallel) take turns. Hold it from before the server
// starts until after it stopped.
func LockServer() (unlock func(), err error) {
	f, err := os.OpenFile(serverLock, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking %s: %w", serverLock, err)
	}
	// Closing the file releases the lock, also when the process dies.
	return func() { _ = f.Close() }, nil
}
