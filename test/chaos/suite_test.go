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

package chaos

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/veleroenv"
)

// What the suite starts once: an API server, the sample plugins, Velero's
// storage location on a real S3 server, and the itemops binary.
var (
	env       *envtest.Environment
	venv      *veleroenv.Env
	work      string
	pluginDir string
	stateDir  string
	binary    string
)

func TestChaos(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Chaos", Label("chaos", "envtest", "s3", "slow"))
}

var _ = BeforeSuite(func() {
	var err error
	env, err = envtest.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	work = GinkgoT().TempDir()
	pluginDir = filepath.Join(work, "plugins")
	Expect(envtest.BuildSamplePlugins(pluginDir, "sample")).To(Succeed())
	var stopVelero func()
	venv, stopVelero, err = veleroenv.Setup(env, work, pluginDir, false)
	DeferCleanup(stopVelero)
	Expect(err).NotTo(HaveOccurred())
	stateDir = filepath.Join(work, "state")
	GinkgoT().Setenv(sim.EnvStateDir, stateDir)

	binary = filepath.Join(work, "itemops")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Dir, build.Stderr = env.RepoRoot, os.Stderr
	Expect(build.Run()).To(Succeed())
})
