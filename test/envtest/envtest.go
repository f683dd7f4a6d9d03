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

// Package envtest starts a real kube-apiserver and etcd for the suites of
// itemops, with the CRDs of itemops (config/crd/bases) and of the pinned
// Velero module installed.
//
// The control plane binaries come from KUBEBUILDER_ASSETS when it is set, and
// otherwise from hack/envtest-assets.sh, which builds them once per machine
// from the Go module proxy.
package envtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"golang.org/x/mod/modfile"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// VeleroNamespace is the namespace the suites run Velero's objects in.
const VeleroNamespace = "velero"

// Environment is a running control plane.
type Environment struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a direct (uncached) client with the itemops and Velero
	// kinds (DataUploads and DataDownloads too) and the CSI snapshot kinds.
	Client client.Client
	// Scheme knows the built-in, Velero and itemops kinds.
	Scheme *k8sruntime.Scheme
	// RepoRoot is the root of the itemops checkout.
	RepoRoot string

	env *ctrlenvtest.Environment
	// restarted is the kube-apiserver RestartAPIServer started, if any.
	restarted *exec.Cmd
}

// controlPlaneStartTimeout is how long etcd and kube-apiserver may each take
// to start, unless KUBEBUILDER_CONTROLPLANE_START_TIMEOUT says otherwise.
const controlPlaneStartTimeout = 3 * time.Minute

// Options change what Start installs.
type Options struct {
	// WithoutItemopsCRD leaves the ItemOperation CRD out, for a test that
	// installs it itself (the helm chart's).
	WithoutItemopsCRD bool
	// ExtraCRDPaths are more CRD files or directories to install.
	ExtraCRDPaths []string
	// VeleroVersion installs the CRDs of that Velero release (such as
	// 1.15.2) instead of those of the Velero module itemops is built with.
	VeleroVersion string
}

// Start runs the API server, installs the CRDs and creates the Velero namespace.
func Start() (*Environment, error) { return StartWith(Options{}) }

// StartWith is Start with options.
func StartWith(opts Options) (*Environment, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := Assets(root)
	if err != nil {
		return nil, err
	}
	veleroCRDs, err := VeleroCRDDir(root)
	if opts.VeleroVersion != "" {
		veleroCRDs, err = VeleroCRDDirOf(opts.VeleroVersion)
	}
	if err != nil {
		return nil, err
	}

	crdPaths := []string{veleroCRDs, filepath.Join(filepath.Dir(veleroCRDs), "..", "v2alpha1", "bases")}
	if !opts.WithoutItemopsCRD {
		crdPaths = append(crdPaths, filepath.Join(root, "config", "crd", "bases"))
	}
	crdPaths = append(crdPaths, opts.ExtraCRDPaths...)

	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(velerov1api.AddToScheme(scheme))
	utilruntime.Must(velerov2alpha1.AddToScheme(scheme))
	utilruntime.Must(snapshotv1.AddToScheme(scheme))
	utilruntime.Must(itemopsv1alpha1.AddToScheme(scheme))

	env := &ctrlenvtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions: ctrlenvtest.CRDInstallOptions{
			Paths:              crdPaths,
			ErrorIfPathMissing: true,
			Scheme:             scheme,
		},
		Scheme: scheme,
	}
	// envtest gives etcd and kube-apiserver 20 s each to start; on a loaded
	// 2-core machine kube-apiserver has taken longer (every try of a start
	// timed out). How fast it starts is not what any suite checks.
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		env.ControlPlaneStartTimeout = controlPlaneStartTimeout
	}
	cfg, err := env.Start()
	if err != nil {
		// A CRD that fails to install leaves the control plane running.
		_ = env.Stop()
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	e := &Environment{Config: cfg, Client: c, Scheme: scheme, RepoRoot: root, env: env}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: VeleroNamespace}}
	if err := c.Create(context.Background(), ns); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating namespace %s: %w", VeleroNamespace, err)
	}
	return e, nil
}

// Stop ends the control plane.
func (e *Environment) Stop() error {
	e.stopRestarted()
	return e.env.Stop()
}

// Kubeconfig returns a kubeconfig for a new administrator of the control plane.
func (e *Environment) Kubeconfig() ([]byte, error) {
	user, err := e.env.AddUser(ctrlenvtest.User{Name: "itemops-test", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding a user: %w", err)
	}
	return user.KubeConfig()
}

// RepoRoot is the root of the itemops checkout the tests run in: the
// nearest directory above the working directory (a test's package
// directory) whose go.mod is itemops's. make test builds with -trimpath, so
// the compiled files' own paths cannot say where the checkout is.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cannot locate the itemops checkout: %w", err)
	}
	for start := dir; ; {
		if mod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modfile.ModulePath(mod) == itemopsModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s in %s or above it", itemopsModule, start)
		}
		dir = parent
	}
}

// itemopsModule is the module path in itemops's go.mod.
const itemopsModule = "github.com/itemops/itemops"

// Assets returns the directory holding kube-apiserver and etcd, building them
// through hack/envtest-assets.sh when KUBEBUILDER_ASSETS is not set.
func Assets(root string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", "envtest-assets.sh"), "control-plane")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("preparing envtest binaries with hack/envtest-assets.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// VeleroCRDDir returns config/crd/v1/bases of the Velero module itemops is
// built with; config/crd/v2alpha1/bases (DataUpload, DataDownload) is beside it.
func VeleroCRDDir(root string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/vmware-tanzu/velero")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the Velero module: %w: %s", err, stderr.String())
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "v1", "bases")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("velero CRDs not found: %w", err)
	}
	return dir, nil
}

// VeleroCRDDirOf returns config/crd/v1/bases of a Velero release, such as
// 1.15.2, downloaded through the module proxy into the module cache.
func VeleroCRDDirOf(version string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/vmware-tanzu/velero@v"+strings.TrimPrefix(version, "v"))
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("downloading Velero %s: %w: %s%s", version, err, out, stderr.String())
	}
	var module struct{ Dir string }
	if err := json.Unmarshal(out, &module); err != nil {
		return "", fmt.Errorf("reading go mod download's answer for Velero %s: %w", version, err)
	}
	dir := filepath.Join(module.Dir, "config", "crd", "v1", "bases")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("velero %s CRDs not found: %w", version, err)
	}
	return dir, nil
}

// WatchClient returns a client that can watch, for tests that count writes.
func (e *Environment) WatchClient() client.WithWatch {
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
	utilruntime.Must(err)
	return c
}

// BuildSamplePlugins builds the named packages under test/plugins (sample,
// samplev1) into dir, as the plugin directory of a test.
func BuildSamplePlugins(dir string, names ...string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, n := range names {
		args = append(args, "./test/plugins/"+n)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the sample plugins: %w", err)
	}
	return nil
}

// prometheusOperatorVersion is the Prometheus Operator whose CRDs
// (ServiceMonitor, PrometheusRule) the chart's optional objects are checked against.
const prometheusOperatorVersion = "v0.85.0"

// PrometheusOperatorCRDs returns the ServiceMonitor and PrometheusRule CRD
// files of the Prometheus Operator, fetched into the Go module cache (the
// module is not a dependency of itemops).
func PrometheusOperatorCRDs() ([]string, error) {
	dir, err := os.MkdirTemp("", "itemops-prom-crds-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/prometheus-operator/prometheus-operator@"+prometheusOperatorVersion)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("downloading the Prometheus Operator %s: %w\n%s", prometheusOperatorVersion, err, out)
	}
	var module struct{ Dir, Error string }
	if err := json.Unmarshal(out, &module); err != nil {
		return nil, fmt.Errorf("reading go mod download's answer: %w", err)
	}
	if module.Dir == "" {
		return nil, fmt.Errorf("downloading the Prometheus Operator %s: %s", prometheusOperatorVersion, module.Error)
	}
	crds := filepath.Join(module.Dir, "example", "prometheus-operator-crd")
	return []string{
		filepath.Join(crds, "monitoring.coreos.com_servicemonitors.yaml"),
		filepath.Join(crds, "monitoring.coreos.com_prometheusrules.yaml"),
	}, nil
}

// ServiceAccountKubeconfig returns a kubeconfig that authenticates as the
// ServiceAccount namespace/name with a token the API server issued for it,
// as a pod of that ServiceAccount does: whatever it may do comes from RBAC
// alone. The ServiceAccount must exist.
func (e *Environment) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) ([]byte, error) {
	clientset, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return nil, err
	}
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))}}
	token, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, request, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("issuing a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	config := clientcmdapi.NewConfig()
	config.Clusters["envtest"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	config.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token.Status.Token}
	config.Contexts[user] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: user, Namespace: namespace}
	config.CurrentContext = user
	return clientcmd.Write(*config)
}
