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

package chart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/itemops/itemops/test/envtest"
)

var (
	env        *envtest.Environment
	helmBinary string
	kubeconfig string
	// chartDir is known while the specs are built: there is one per values file.
	chartDir = func() string {
		root, err := envtest.RepoRoot()
		if err != nil {
			panic(err)
		}
		return filepath.Join(root, "charts", "itemops")
	}()
)

func TestChart(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Helm chart", Label("envtest", "chart"))
}

var _ = BeforeSuite(func() {
	cmd := exec.Command(filepath.Join(chartDir, "..", "..", "hack", "cached-binary.sh"), "helm")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "building helm")
	helmBinary = strings.TrimSpace(string(out))
	prometheus, err := envtest.PrometheusOperatorCRDs()
	Expect(err).NotTo(HaveOccurred())
	// The chart installs the ItemOperation CRD itself.
	env, err = envtest.StartWith(envtest.Options{WithoutItemopsCRD: true, ExtraCRDPaths: prometheus})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)

	dir := GinkgoT().TempDir()
	config, err := env.Kubeconfig()
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = filepath.Join(dir, "kubeconfig")
	Expect(os.WriteFile(kubeconfig, config, 0o600)).To(Succeed())
	// helm keeps its caches and configuration here, not in the user's home.
	for k, v := range map[string]string{"HELM_CACHE_HOME": "cache", "HELM_CONFIG_HOME": "config", "HELM_DATA_HOME": "data"} {
		Expect(os.Setenv(k, filepath.Join(dir, v))).To(Succeed())
	}
})

// helm runs the helm CLI against the test API server.
func helm(args ...string) (string, error) {
	cmd := exec.Command(helmBinary, append(args, "--kubeconfig", kubeconfig)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// render runs helm template for the chart in Velero's namespace.
func render(t testing.TB, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(append([]string{"template", "itemops", chartDir, "--namespace", envtest.VeleroNamespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

func decode(t testing.TB, manifests string) []*unstructured.Unstructured {
	t.Helper()
	objects, err := envtest.Decode(strings.NewReader(manifests))
	if err != nil {
		t.Fatalf("decoding rendered manifests: %v", err)
	}
	return objects
}

// valuesFiles are the values every spec renders with: the defaults and ci/.
// They are read while the specs are built.
func valuesFiles() map[string][]string {
	out := map[string][]string{"default": nil}
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		panic(fmt.Sprintf("no ci/*-values.yaml in the chart: %v", err))
	}
	for _, f := range files {
		out[filepath.Base(f)] = []string{"--values", f}
	}
	return out
}

func find(objects []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}
