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

package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kustomize renders a kustomization with the pinned kustomize.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	cmd := exec.Command("go", "tool", "-modfile="+filepath.Join(env.RepoRoot, "hack", "tools", "go.mod"),
		"kustomize", "build", filepath.Join(env.RepoRoot, dir))
	cmd.Dir = env.RepoRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objects []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := decoder.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objects
			}
			t.Fatalf("decoding kustomize build %s: %v", dir, err)
		}
		if len(u.Object) > 0 {
			objects = append(objects, u)
		}
	}
}

// TestManifestsApplyToAnAPIServer applies what a user applies: the default
// install and the samples, with server-side apply, as `kubectl apply
// --server-side` does.
func TestManifestsApplyToAnAPIServer(t *testing.T) {
	for _, dir := range []string{"config/default", "config/samples"} {
		t.Run(dir, func(t *testing.T) {
			g := NewWithT(t)
			objects := kustomize(t, dir)
			g.Expect(objects).NotTo(BeEmpty())
			kinds := map[string]int{}
			for _, obj := range objects {
				kinds[obj.GetKind()]++
				err := env.Client.Patch(context.Background(), obj, client.Apply,
					client.FieldOwner("itemops-e2e"), client.ForceOwnership)
				g.Expect(err).NotTo(HaveOccurred(), "applying %s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
			}
			if dir == "config/default" {
				g.Expect(kinds).To(HaveKeyWithValue("CustomResourceDefinition", 1))
				g.Expect(kinds).To(HaveKeyWithValue("Deployment", 1))
				g.Expect(kinds).To(HaveKeyWithValue("ServiceAccount", 1))
				g.Expect(kinds).To(HaveKeyWithValue("Role", 2))
				g.Expect(kinds).To(HaveKeyWithValue("RoleBinding", 2))
			} else {
				g.Expect(kinds).To(HaveKeyWithValue("ItemOperation", 1))
			}
		})
	}
}
