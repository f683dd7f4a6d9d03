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

// Package stack installs Velero and itemops into a local cluster
// (test/localcluster) the way their users do: the commands of the README's
// install section, run as written (`velero install`, `helm install`,
// `kubectl patch`), around what a test machine lacks: an S3-compatible
// bucket (versitygw in a pod behind a Service), storage with snapshots (the
// CSI snapshot controller, external-provisioner and csi-snapshotter built
// from their modules, and the project's test driver, test/csidriver), and a
// directory the sample plugins share between Velero's pod and itemops' (a
// PersistentVolume). Velero's own node-agent moves the volumes' bytes.
//
// test/cluster and `make cluster` use it.
package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/localcluster"
)

// Where things are.
const (
	// VeleroNamespace is Velero's and itemops' as the README installs
	// them (a Stack's Namespace unless it says another).
	VeleroNamespace = "velero"
	// Release is itemops' helm release.
	Release = "itemops"
	// Bucket is the BackupStorageLocation's bucket.
	Bucket = "velero"
	// Region is the only region versitygw accepts.
	Region = "us-east-1"
	// Driver is the CSI driver's name (test/csidriver).
	Driver = "csi.itemops.io"
)

// Scheme knows the built-in, Velero, CSI snapshot and itemops kinds.
func Scheme() *k8sruntime.Scheme {
	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(velerov1api.AddToScheme(scheme))
	utilruntime.Must(velerov2alpha1.AddToScheme(scheme))
	utilruntime.Must(snapshotv1.AddToScheme(scheme))
	utilruntime.Must(itemopsv1alpha1.AddToScheme(scheme))
	return scheme
}

// Stack is Velero and itemops on a local cluster.
type Stack struct {
	Cluster *localcluster.Cluster
	// Client acts as the cluster's administrator.
	Client client.Client
	// Root is the itemops checkout; Work the directory the README's
	// commands run in (credentials-velero and itemops-values.yaml are
	// there, charts/ links to the checkout's); Bin holds kubectl, velero,
	// helm and kubectl-itemops, first on the commands' PATH.
	Root, Work, Bin string
	Bins            Binaries
	// Namespace is Velero's and itemops', at the privileged Pod Security
	// level node-agent needs: VeleroNamespace unless set.
	Namespace string
	// Log gets the commands and their output.
	Log io.Writer
	// ExtraEnv is more of the commands' environment (Env), such as the
	// REGISTRY docs/openshift.md's OLM commands push to.
	ExtraEnv []string

	// keepLogs is where Stop copies the cluster's logs (Launch.KeepLogs).
	keepLogs string
}

// New prepares the working directory of a stack on a running cluster.
func New(ctx context.Context, cluster *localcluster.Cluster, root, work string, bins Binaries, log io.Writer) (*Stack, error) {
	c, err := client.New(cluster.RESTConfig, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, err
	}
	s := &Stack{Cluster: cluster, Client: c, Root: root, Work: work, Bin: filepath.Join(work, "bin"), Bins: bins, Namespace: VeleroNamespace, Log: log}
	if err := os.MkdirAll(s.Bin, 0o755); err != nil {
		return nil, err
	}
	links := map[string]string{
		filepath.Join(s.Bin, "kubectl"): filepath.Join(bins.KubeDir, "kubectl"),
		filepath.Join(s.Bin, "velero"):  bins.Velero,
		filepath.Join(s.Bin, "helm"):    bins.Helm,
		filepath.Join(work, "charts"):   filepath.Join(root, "charts"),
	}
	for link, target := range links {
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return nil, err
		}
	}
	if _, err := localcluster.BuildStatic(ctx, s.Bin, "./cmd/kubectl-itemops"); err != nil {
		return nil, err
	}
	return s, nil
}

// LinkCheckout links these entries of the checkout (such as "Makefile"
// and "hack") into the working directory, for commands that docs say to
// run in an itemops checkout.
func (s *Stack) LinkCheckout(names ...string) error {
	for _, n := range names {
		link := filepath.Join(s.Work, n)
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(s.Root, n), link); err != nil {
			return err
		}
	}
	return nil
}

// Env is the environment of the README's commands: the cluster's
// kubeconfig, the tools first on PATH, and the bucket's coordinates the
// README's `velero install` reads.
func (s *Stack) Env() []string {
	return append(append(os.Environ(),
		"KUBECONFIG="+s.Cluster.Kubeconfig,
		"PATH="+s.Bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HELM_CACHE_HOME="+filepath.Join(s.Work, ".helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(s.Work, ".helm", "config"),
		"HELM_DATA_HOME="+filepath.Join(s.Work, ".helm", "data"),
		"BUCKET="+Bucket, "REGION="+Region, "S3_URL="+S3URL,
		// The velero CLI's and kubectl itemops' namespace when no flag says.
		"VELERO_NAMESPACE="+s.Namespace,
	), s.ExtraEnv...)
}

// Run runs a bash script in the working directory, with Env, and returns
// its output (stdout and stderr); the output is in the error too. While it
// runs, the pods of Velero's namespace are watched: one that cannot start
// (its image missing, its container failing to start or crashing) stops the
// script at once, with what Diagnose says of the namespace, instead of a
// `helm --wait` waiting out its five minutes.
func (s *Stack) Run(ctx context.Context, script string) (string, error) {
	fmt.Fprintf(s.Log, "$ %s\n", strings.TrimSpace(script))
	// What could not start before the script is not the script's doing
	// (unknown when the pods cannot be listed: then every one counts).
	before, _ := s.brokenPods(ctx, s.Namespace)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		if broken := s.watchPods(ctx, s.Namespace, before); broken != "" {
			cancel(fmt.Errorf("a pod cannot start: %s\n%s", broken, s.Diagnose(context.WithoutCancel(ctx), s.Namespace)))
		}
	}()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = s.Work, s.Env()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, s.Log), io.MultiWriter(&out, s.Log)
	if err := cmd.Run(); err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		} else {
			// A `helm --wait` that ran out of time says only that: what
			// the namespace's pods were doing says why.
			err = fmt.Errorf("%w\n%s", err, s.Diagnose(context.WithoutCancel(ctx), s.Namespace))
		}
		return out.String(), fmt.Errorf("%s: %w\n%s", strings.TrimSpace(script), err, out.String())
	}
	return out.String(), nil
}

// RunREADME runs the README's install block of that name as written.
func (s *Stack) RunREADME(ctx context.Context, name string) error {
	return s.RunDoc(ctx, "README.md", name)
}

// RunDoc runs the block of that name of a file of the repository (such as
// docs/velero.md) as written.
func (s *Stack) RunDoc(ctx context.Context, file, name string) error {
	readme, err := os.ReadFile(filepath.Join(s.Root, file))
	if err != nil {
		return err
	}
	block, err := READMEBlock(readme, name)
	if err != nil {
		return err
	}
	_, err = s.Run(ctx, block)
	return err
}

// READMEBlock returns the fenced code block that follows the line
// `<!-- test/cluster: NAME -->` in the README (or another page): the steps
// that test/cluster runs exactly as users read them.
func READMEBlock(readme []byte, name string) (string, error) {
	re := regexp.MustCompile("(?s)<!-- test/cluster: " + regexp.QuoteMeta(name) + " -->\\s*```[a-z]*\n(.*?)```")
	m := re.FindSubmatch(readme)
	if m == nil {
		return "", fmt.Errorf("the README has no code block after <!-- test/cluster: %s -->", name)
	}
	return string(m[1]), nil
}
