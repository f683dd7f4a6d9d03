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

// Package upgrade upgrades itemops while operations run, as an
// administrator does: an earlier itemops, built from an earlier commit of
// this repository (Earlier, built by hack/itemops-at.sh with git worktree)
// and installed with that commit's chart, follows Backups' operations; then
// `helm upgrade` applies the current chart, its CRD over the live
// ItemOperations, and the current itemops takes the operations over. Both
// run as the chart's ServiceAccount, with a token.
//
// It needs the repository's history: `make test-e2e` runs it
// (ITEMOPS_UPGRADE=1); `make test`, which must not depend on history,
// skips it. Run where the commit is missing, it fails and says so.
package upgrade

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/veleroenv"
)

// Earlier is the commit of main whose itemops starts the operations: the
// first version with kubectl-itemops, before API writes were halved (its
// operations carry a status from their first write, and its CRD has no
// defaults for it).
const Earlier = "6ddfc8495644a2ea64a8b3baacece88795ad2dc3"

var (
	env  *envtest.Environment
	venv *veleroenv.Env
	// earlier holds itemops and chart as they were at Earlier.
	earlier string
	// current is the itemops binary built from this checkout; chartDir its chart.
	current, chartDir string
	helmBinary        string
	// kubeconfig is an administrator's, for helm.
	kubeconfig string
	work       string
	pluginDir  string
	stateDir   string
)

func TestUpgrade(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Upgrade in flight", Label("e2e", "upgrade", "envtest", "s3", "chart", "slow"))
}

var _ = BeforeSuite(func() {
	if os.Getenv("ITEMOPS_UPGRADE") != "1" {
		Skip("the upgrade suite builds itemops at an earlier commit of this repository's history: make test-e2e runs it (ITEMOPS_UPGRADE=1)")
	}
	root, err := envtest.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	chartDir = filepath.Join(root, "charts", "itemops")
	earlier, err = cachedBuild(root, "itemops-at.sh", Earlier)
	Expect(err).NotTo(HaveOccurred(), "building itemops at %s", Earlier)
	helmBinary, err = cachedBuild(root, "cached-binary.sh", "helm")
	Expect(err).NotTo(HaveOccurred(), "building helm")

	// The chart installs the ItemOperation CRD: the earlier one first.
	env, err = envtest.StartWith(envtest.Options{WithoutItemopsCRD: true})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	work = GinkgoT().TempDir()
	config, err := env.Kubeconfig()
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = filepath.Join(work, "admin.kubeconfig")
	Expect(os.WriteFile(kubeconfig, config, 0o600)).To(Succeed())
	for k, v := range map[string]string{"HELM_CACHE_HOME": "helm-cache", "HELM_CONFIG_HOME": "helm-config", "HELM_DATA_HOME": "helm-data"} {
		GinkgoT().Setenv(k, filepath.Join(work, v))
	}

	// The plugins are not upgraded with itemops: both versions run these.
	pluginDir = filepath.Join(work, "plugins")
	Expect(envtest.BuildSamplePlugins(pluginDir, "sample")).To(Succeed())
	var stopVelero func()
	venv, stopVelero, err = veleroenv.Setup(env, work, pluginDir, false)
	DeferCleanup(stopVelero)
	Expect(err).NotTo(HaveOccurred())
	stateDir = filepath.Join(work, "state")
	GinkgoT().Setenv(sim.EnvStateDir, stateDir)

	current = filepath.Join(work, "itemops")
	build := exec.Command("go", "build", "-o", current, ".")
	build.Dir, build.Stderr = root, os.Stderr
	Expect(build.Run()).To(Succeed(), "building the manager")
})

// cachedBuild runs one of the hack scripts that build a binary into the
// per-machine cache, and returns the path it prints.
func cachedBuild(root, script string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", script), args...)
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(GinkgoWriter, &stderr)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s: %w: %s", script, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
