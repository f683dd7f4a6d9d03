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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/itemops/itemops/test/envtest"
)

// binDir holds the sample plugin binaries, built once for the package.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "itemops-plugin-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binDir = filepath.Join(dir, "bin")
	root, err := envtest.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := envtest.BuildSamplePlugins(binDir, "sample", "samplev1"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Every sample plugin process this package starts keeps its operations here.
	if err := os.Setenv("ITEMOPS_SAMPLE_STATE_DIR", filepath.Join(dir, "state")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	awsPluginPath, awsPluginErr = buildAWSPlugin(root)
	return m.Run()
}

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
