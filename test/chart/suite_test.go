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
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/itemops/itemops/test/envtest"
)

var (
	env        *envtest.Environment
	helmBinary string
	kubeconfig string
	chartDir   string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := envtest.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	chartDir = filepath.Join(root, "charts", "itemops")
	cmd := exec.Command(filepath.Join(root, "hack", "cached-binary.sh"), "helm")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "building helm:", err)
		return 1
	}
	helmBinary = strings.TrimSpace(string(out))
	prometheus, err := envtest.PrometheusOperatorCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The chart installs the ItemOperation CRD itself.
	env, err = envtest.StartWith(envtest.Options{WithoutItemopsCRD: true, ExtraCRDPaths: prometheus})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	dir, err := os.MkdirTemp("", "itemops-chart-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	config, err := env.Kubeconfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, config, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// helm keeps its caches and configuration here, not in the user's home.
	for k, v := range map[string]string{"HELM_CACHE_HOME": "cache", "HELM_CONFIG_HOME": "config", "HELM_DATA_HOME": "data"} {
		if err := os.Setenv(k, filepath.Join(dir, v)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

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
func render(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(append([]string{"template", "itemops", chartDir, "--namespace", envtest.VeleroNamespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

func decode(t *testing.T, manifests string) []*unstructured.Unstructured {
	t.Helper()
	decoder := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var objects []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := decoder.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objects
			}
			t.Fatalf("decoding rendered manifests: %v", err)
		}
		if len(u.Object) > 0 {
			objects = append(objects, u)
		}
	}
}

// valuesFiles are the values every test renders with: the defaults and ci/.
func valuesFiles(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{"default": nil}
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci/*-values.yaml in the chart: %v", err)
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
