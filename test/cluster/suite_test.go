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

// Package cluster runs itemops the way its users install it: on a real
// one-node Kubernetes on this machine (test/localcluster), beside Velero
// installed by the real `velero install`, with `helm install
// charts/itemops`, both by the README's own commands (test/stack), in a
// namespace at the privileged Pod Security level node-agent needs, where
// itemops' own pods meet restricted. Every image is built here and
// imported; the bucket is versitygw in a pod; volumes are the project's CSI
// driver's (test/csidriver) with the real snapshot controller,
// external-provisioner and csi-snapshotter, and Velero's own node-agent
// moves their bytes with kopia.
//
// It needs root and Debian's containerd, runc, containernetworking-plugins
// and iptables (hack/cluster-packages.sh installs them); without them it
// fails, naming what is missing.
package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/format"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/stack"
)

// The itemops image's two tags: the one installed, and the one `helm
// upgrade` moves to mid-flight (the same image, tagged twice).
const (
	firstTag  = "cluster-1"
	secondTag = "cluster-2"
)

var (
	// s is Velero and itemops on the cluster.
	s *stack.Stack
	// failed is set once a spec failed: the components' logs are kept.
	failed bool
)

func TestCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	// A failure's message holds the namespace's diagnosis: show it whole.
	format.MaxLength = 0
	RunSpecs(t, "itemops installed on a real one-node cluster", Label("cluster", "e2e", "slow"))
}

// EnvSetUp names a file the suite creates once its setup has ended, the
// cluster up and Velero and itemops installed, or failed: hack/test.sh
// starts the other Ginkgo suites then, so that on a new machine the
// setup's builds and the node's start have the CPU first.
const EnvSetUp = "ITEMOPS_CLUSTER_SET_UP"

var _ = BeforeSuite(func(ctx SpecContext) {
	if file := os.Getenv(EnvSetUp); file != "" {
		defer func() {
			if err := os.WriteFile(file, nil, 0o644); err != nil {
				GinkgoWriter.Printf("telling hack/test.sh that the setup ended: %v\n", err)
			}
		}()
	}
	// The clients' own logs (client-side throttling, for one) belong to
	// the spec that made them: shown if it fails.
	ctrllog.SetLogger(GinkgoLogr)
	klog.SetLogger(GinkgoLogr)
	root, err := envtest.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	// The cluster's logs are kept once a spec failed.
	var keepLogs string
	if artifacts := os.Getenv("ARTIFACTS"); artifacts != "" {
		keepLogs = filepath.Join(artifacts, "cluster-logs")
	}
	s, err = stack.Launch{Root: root, ItemopsTag: firstTag, AlsoTags: []string{secondTag}, KeepLogs: keepLogs, Log: GinkgoWriter}.Start(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		Expect(s.Stop(ctx, failed || CurrentSpecReport().Failed())).To(Succeed(), "tearing the cluster down")
	}, NodeTimeout(3*time.Minute))
	// The helm that installs and upgrades the chart: HELM_VERSION's (make
	// test-kube runs helm 3 and helm 4), v3.22.0 by default.
	helmVersion, err := exec.CommandContext(ctx, s.Bins.Helm, "version", "--short").Output()
	Expect(err).NotTo(HaveOccurred())
	fmt.Fprintf(GinkgoWriter, "helm %s", helmVersion)
	if want := os.Getenv("HELM_VERSION"); want != "" {
		release, _, _ := strings.Cut(strings.TrimSpace(string(helmVersion)), "+")
		Expect(release).To(Equal("v"+want), "the helm HELM_VERSION asks for")
	}
	Expect(s.Install(ctx, firstTag)).To(Succeed(), "installing Velero and itemops as the README says")
}, NodeTimeout(45*time.Minute))

// specStart is when the running spec began: the sample plugins'
// operations it touched are those changed since.
var specStart time.Time

var _ = BeforeEach(func() { specStart = time.Now() })

// Whatever fails, the state of Velero's namespace is printed: the pods
// that are not Ready with their containers' logs, itemops', Velero's and
// node-agent's logs, the sample plugins' account of the calls they took
// and the Warning events; every container's whole log is kept in
// $ARTIFACTS/cluster-logs/pods/<spec>/.
var _ = AfterEach(func() {
	if CurrentSpecReport().Failed() && s != nil {
		failed = true
		diagnose()
		if os.Getenv(EnvContinue) != "1" {
			GinkgoWriter.Printf("The specs after this one are skipped; to run them too after a failure: %s=1 (make test sets it)\n", EnvContinue)
		}
	}
})

func diagnose() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	GinkgoWriter.Printf("\n=== the state of namespace %s after the failure\n%s\n", s.Namespace, s.Diagnose(ctx, s.Namespace))
	GinkgoWriter.Printf("=== itemops' logs\n%s\n", s.Logs(ctx, s.Namespace, "app.kubernetes.io/name=itemops", 60))
	GinkgoWriter.Printf("=== Velero's server log (its plugin processes' log lines and exits among them)\n%s\n",
		s.Logs(ctx, s.Namespace, stack.VeleroPods, 300))
	GinkgoWriter.Printf("=== node-agent's log\n%s\n", s.Logs(ctx, s.Namespace, stack.NodeAgentPods, 60))
	GinkgoWriter.Printf("=== the sample plugins' operations changed during the spec, and the calls each took\n%s\n", s.SampleCalls(specStart))
	if artifacts := os.Getenv("ARTIFACTS"); artifacts != "" {
		dir := filepath.Join(artifacts, "cluster-logs", "pods", fmt.Sprintf("spec-%d", CurrentSpecReport().LeafNodeLocation.LineNumber))
		if err := s.SaveLogs(ctx, dir, s.Namespace, stack.StorageNamespace, stack.CSINamespace); err != nil {
			GinkgoWriter.Printf("keeping the pods' logs: %v\n", err)
		}
		GinkgoWriter.Printf("every container's whole log: %s\n", dir)
	}
}
