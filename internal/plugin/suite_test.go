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

package plugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/itemops/itemops/test/envtest"
)

// binDir holds the sample plugin binaries, built once for the package.
var binDir string

func TestPlugin(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Plugin processes", Label("plugins"))
}

// BeforeSuite builds the sample plugins and finds velero-plugin-for-aws; the
// specs start them as Velero does, through go-plugin.
var _ = BeforeSuite(func() {
	dir := GinkgoT().TempDir()
	binDir = filepath.Join(dir, "bin")
	root, err := envtest.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	Expect(envtest.BuildSamplePlugins(binDir, "sample", "samplev1")).To(Succeed())
	// Every sample plugin process this package starts keeps its operations here.
	Expect(os.Setenv("ITEMOPS_SAMPLE_STATE_DIR", filepath.Join(dir, "state"))).To(Succeed())
	awsPluginPath, awsPluginErr = buildAWSPlugin(root)
})

// velero-plugin-for-aws, built once per machine by hack/velero-plugin-for-aws.sh.
var (
	awsPluginPath string
	awsPluginErr  error
)

func buildAWSPlugin(root string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", "velero-plugin-for-aws.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}
