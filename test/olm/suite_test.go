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

// Package olm installs itemops the way OpenShift's users install
// operators: through OLM, from a catalog. On a real one-node Kubernetes on
// this machine (test/localcluster), Velero runs in openshift-adp as OADP
// makes it from a DataProtectionApplication (test/stack's stand-in of the
// OADP operator), OLM v0.36.0 itself runs (its operators, packageserver,
// its bundle unpack Jobs), built here like every image, and an image
// registry runs in the cluster. docs/openshift.md's commands build itemops'
// bundle and catalog images, push them to that registry and subscribe to
// the catalog; OLM pulls them from it, installs itemops and later upgrades
// it to the next bundle.
//
// It is not part of make test (it would add its own cluster's start to
// CI's run): make test-olm runs it. Like test/cluster it needs root and
// Debian's containerd, runc, containernetworking-plugins and iptables.
package olm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/format"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/localcluster"
	"github.com/itemops/itemops/test/stack"
)

// The itemops image, tagged as the two releases the bundles name (one
// image, two tags: the upgrade is OLM's, not the code's).
const (
	firstVersion  = "0.1.0"
	secondVersion = "0.2.0"
)

var (
	// s is Velero (in openshift-adp, as OADP makes it), the registry and
	// OLM on the cluster.
	s *stack.Stack
	// failed is set once a spec has failed: the cluster's logs are kept.
	failed bool
)

func TestOLM(t *testing.T) {
	RegisterFailHandler(Fail)
	format.MaxLength = 20000
	RunSpecs(t, "itemops installed by OLM on a real one-node cluster", Label("olm", "e2e", "slow"))
}

var _ = BeforeSuite(func(ctx SpecContext) {
	ctrllog.SetLogger(GinkgoLogr)
	klog.SetLogger(GinkgoLogr)
	root, err := envtest.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	var keepLogs string
	if artifacts := os.Getenv("ARTIFACTS"); artifacts != "" {
		keepLogs = filepath.Join(artifacts, "olm-cluster-logs")
	}
	var olm stack.OLMTools
	s, err = stack.Launch{
		Root: root, ItemopsTag: firstVersion, AlsoTags: []string{secondVersion}, KeepLogs: keepLogs, Log: GinkgoWriter,
		// OLM reaches a catalog's pod by its Service's name: this
		// cluster has a DNS.
		Cluster: localcluster.Config{ClusterDNS: stack.ClusterDNSIP},
		MoreImages: func(ctx context.Context, dir string) (tarballs []string, err error) {
			if olm, err = stack.FindOLMTools(ctx, root); err != nil {
				return nil, fmt.Errorf("building OLM, opm, the registry and crane: %w", err)
			}
			return stack.BuildOLMImages(olm, dir)
		},
	}.Start(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		Expect(s.Stop(ctx, failed || CurrentSpecReport().Failed())).To(Succeed(), "tearing the cluster down")
	}, NodeTimeout(3*time.Minute))

	s.Namespace = stack.OADPNamespace
	s.ExtraEnv = []string{"REGISTRY=" + stack.RegistryHost()}
	// docs/openshift.md's OLM commands run in an itemops checkout: the
	// working directory gets the parts of one they use.
	Expect(s.LinkCheckout("Makefile", "hack", "config")).To(Succeed())
	Expect(os.Symlink(olm.Crane, filepath.Join(s.Bin, "crane"))).To(Succeed())
	for _, step := range []struct {
		what string
		do   func() error
	}{
		{"the cluster's DNS (CoreDNS)", func() error { return s.InstallClusterDNS(ctx) }},
		{"the bucket", func() error { return s.Storage(ctx) }},
		// Velero's CSI support (OADP's default) needs the snapshot API.
		{"the CSI snapshot controller and driver", func() error { return s.CSI(ctx) }},
		{"Velero in openshift-adp from a DPA (OADP's part)", func() error { return s.InstallOADP(ctx) }},
		{"the registry", func() error { return s.InstallRegistry(ctx) }},
		{"OLM", func() error { return s.InstallOLM(ctx, olm) }},
	} {
		start := time.Now()
		Expect(step.do()).To(Succeed(), step.what)
		GinkgoWriter.Printf("olm: %s (%.1fs)\n", step.what, time.Since(start).Seconds())
	}
}, NodeTimeout(45*time.Minute))

// Whatever fails, the state of Velero's namespace and of OLM's is printed.
var _ = AfterEach(func(ctx SpecContext) {
	if !CurrentSpecReport().Failed() || s == nil {
		return
	}
	failed = true
	for _, ns := range []string{s.Namespace, stack.OLMNamespace} {
		GinkgoWriter.Printf("\n=== the state of namespace %s after the failure\n%s\n", ns, s.Diagnose(ctx, ns))
	}
	GinkgoWriter.Printf("=== OLM's catalog operator\n%s\n", s.Logs(ctx, stack.OLMNamespace, "app=catalog-operator", 80))
	GinkgoWriter.Printf("=== OLM's olm operator\n%s\n", s.Logs(ctx, stack.OLMNamespace, "app=olm-operator", 80))
	GinkgoWriter.Printf("=== itemops' logs\n%s\n", s.Logs(ctx, s.Namespace, "app.kubernetes.io/name=itemops", 60))
	GinkgoWriter.Printf("=== Velero's server log\n%s\n", s.Logs(ctx, s.Namespace, stack.VeleroPods, 200))
	if artifacts := os.Getenv("ARTIFACTS"); artifacts != "" {
		dir := filepath.Join(artifacts, "olm-cluster-logs", "pods", fmt.Sprintf("spec-%d", CurrentSpecReport().LeafNodeLocation.LineNumber))
		if err := s.SaveLogs(ctx, dir, s.Namespace, stack.OLMNamespace, stack.RegistryNamespace); err != nil {
			GinkgoWriter.Printf("keeping the pods' logs: %v\n", err)
		}
	}
}, NodeTimeout(2*time.Minute))
