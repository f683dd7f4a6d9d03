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

// Package e2e runs the itemops binary and its manifests the way a user does,
// against a real kube-apiserver.
package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/itemops/itemops/test/envtest"
)

var (
	env    *envtest.Environment
	binary string
	// suiteDir holds the manager and the sample plugins, built once.
	suiteDir string
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "itemops binary end to end", Label("envtest", "e2e"))
}

var _ = BeforeSuite(func() {
	prometheus, err := envtest.PrometheusOperatorCRDs()
	Expect(err).NotTo(HaveOccurred())
	// config/prometheus holds a ServiceMonitor and a PrometheusRule.
	env, err = envtest.StartWith(envtest.Options{ExtraCRDPaths: prometheus})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)

	suiteDir = GinkgoT().TempDir()
	binary = filepath.Join(suiteDir, "itemops")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Dir = env.RepoRoot
	build.Stdout, build.Stderr = GinkgoWriter, os.Stderr
	Expect(build.Run()).To(Succeed(), "building the manager")
})
