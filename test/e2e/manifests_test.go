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
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/test/envtest"
)

// manifests renders a kustomization, or reads a manifest file.
func manifests(t testing.TB, path string) []*unstructured.Unstructured {
	t.Helper()
	if !strings.HasSuffix(path, ".yaml") {
		return kustomize(t, path)
	}
	b, err := os.ReadFile(filepath.Join(env.RepoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, path, b)
}

func decodeAll(t testing.TB, source string, b []byte) []*unstructured.Unstructured {
	t.Helper()
	objects, err := envtest.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decoding %s: %v", source, err)
	}
	return objects
}

// kustomize renders a kustomization with the pinned kustomize.
func kustomize(t testing.TB, dir string) []*unstructured.Unstructured {
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
	return decodeAll(t, "kustomize build "+dir, out)
}

var _ = Describe("The install manifests", func() {
	// It applies what a user applies: the default
	// install and the samples, with server-side apply, as `kubectl apply
	// --server-side` does.
	Describe("manifests apply to an API server", func() {
		for _, dir := range []string{"config/default", "config/manage", "config/prometheus", "dist/install.yaml", "config/samples"} {
			It(dir, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				objects := manifests(t, dir)
				g.Expect(objects).NotTo(BeEmpty())
				kinds := map[string]int{}
				for _, obj := range objects {
					kinds[obj.GetKind()]++
					err := env.Client.Patch(context.Background(), obj, client.Apply,
						client.FieldOwner("itemops-e2e"), client.ForceOwnership)
					g.Expect(err).NotTo(HaveOccurred(), "applying %s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
				}
				if dir != "config/samples" {
					g.Expect(kinds).To(HaveKeyWithValue("CustomResourceDefinition", 1))
					g.Expect(kinds).To(HaveKeyWithValue("Deployment", 1))
					g.Expect(kinds).To(HaveKeyWithValue("ServiceAccount", 1))
					g.Expect(kinds).To(HaveKeyWithValue("Role", 3))
					g.Expect(kinds).To(HaveKeyWithValue("RoleBinding", 3))
					g.Expect(kinds).To(HaveKeyWithValue("ClusterRoleBinding", 3), "Velero's built-in plugins read VolumeSnapshots; the metrics server asks who scrapes; the manager reads nodes' labels")
				} else {
					g.Expect(kinds).To(HaveKeyWithValue("ItemOperation", 1))
				}
				if dir == "config/prometheus" {
					g.Expect(kinds).To(HaveKeyWithValue("ServiceMonitor", 1))
					g.Expect(kinds).To(HaveKeyWithValue("PrometheusRule", 1))
				}
			})
		}
	})

	// Velero before v1.18 looks for a DataUpload in every namespace
	// (docs/velero.md, "Velero releases"): its component adds that list to
	// the plugins' ClusterRole, and nothing else.
	It("config/velero-before-1.18 lets the built-in plugins list DataUploads at the cluster scope", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		pluginRules := func(dir string) []rbacv1.PolicyRule {
			for _, obj := range kustomize(t, dir) {
				if obj.GetKind() == "ClusterRole" && obj.GetName() == "itemops-velero-plugins" {
					role := &rbacv1.ClusterRole{}
					g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, role)).To(Succeed())
					return role.Rules
				}
			}
			t.Fatalf("%s has no ClusterRole itemops-velero-plugins", dir)
			return nil
		}
		overlay := t.TempDir()
		rel, err := filepath.Rel(overlay, env.RepoRoot)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(
			"resources:\n- "+rel+"/config/manage\ncomponents:\n- "+rel+"/config/velero-before-1.18\n"), 0o644)).To(Succeed())
		fromRoot, err := filepath.Rel(env.RepoRoot, overlay)
		g.Expect(err).NotTo(HaveOccurred())
		before, after := pluginRules("config/manage"), pluginRules(fromRoot)
		g.Expect(after).To(HaveLen(len(before) + 1))
		g.Expect(after[:len(before)]).To(Equal(before))
		g.Expect(after[len(before)]).To(Equal(rbacv1.PolicyRule{APIGroups: []string{"velero.io"}, Resources: []string{"datauploads"}, Verbs: []string{"list"}}))
	})

	// It checks what every install path grants: no
	// wildcard, Secrets only read one by one, Velero's objects written only in
	// manage mode, and only ItemOperations cluster-wide.
	Describe("RBAC is least privilege", func() {
		for _, path := range []string{"config/default", "config/manage", "dist/install.yaml"} {
			It(path, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				manage := path == "config/manage"
				for _, obj := range manifests(t, path) {
					if obj.GetKind() != "Role" && obj.GetKind() != "ClusterRole" {
						continue
					}
					role := &rbacv1.Role{}
					g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, role)).To(Succeed())
					// Authenticated metrics: the manager only asks the API
					// server who a scraper is and whether it may read
					// /metrics; readers may get /metrics and nothing else.
					switch {
					case obj.GetKind() == "ClusterRole" && obj.GetName() == "itemops-metrics-auth":
						g.Expect(role.Rules).To(ConsistOf(
							rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
							rbacv1.PolicyRule{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}}))
						continue
					case obj.GetKind() == "ClusterRole" && obj.GetName() == "itemops-metrics-reader":
						g.Expect(role.Rules).To(ConsistOf(rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}))
						continue
					case obj.GetKind() == "ClusterRole" && obj.GetName() == "itemops-nodes":
						// The labels node-agent's per-node rules match.
						g.Expect(role.Rules).To(ConsistOf(rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}))
						continue
					}
					for _, r := range role.Rules {
						for _, field := range [][]string{r.Verbs, r.Resources, r.APIGroups} {
							g.Expect(field).NotTo(ContainElement("*"), "wildcard in %s %s: %+v", obj.GetKind(), obj.GetName(), r)
						}
						g.Expect(r.NonResourceURLs).To(BeEmpty())
						if obj.GetKind() == "ClusterRole" && obj.GetName() == "itemops-velero-plugins" {
							g.Expect(r.Verbs).To(Equal([]string{"get"}), "plugins only read outside Velero's namespace")
						} else if obj.GetKind() == "ClusterRole" && slices.Equal(r.APIGroups, []string{"velero.io"}) {
							// For kubectl itemops: people who may read operations may read their parents.
							g.Expect(r.Resources).To(ConsistOf("backups", "restores"))
							g.Expect(r.Verbs).To(ConsistOf("get", "list", "watch"), "people's ClusterRoles only read Velero's objects")
						} else if obj.GetKind() == "ClusterRole" {
							g.Expect(r.APIGroups).To(Equal([]string{"itemops.io"}), "a ClusterRole grants only ItemOperations and reading their parents")
						}
						if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "secrets") {
							g.Expect(r.Verbs).To(Equal([]string{"get"}), "Secrets are only read, one by one")
							g.Expect(r.ResourceNames).To(Equal([]string{"cloud-credentials"}), "only the Secret velero install makes")
						}
						if slices.Contains(r.Resources, "deployments") {
							g.Expect(r.ResourceNames).To(Equal([]string{"velero"}), "only Velero's Deployment")
						}
						if slices.Contains(r.APIGroups, "velero.io") && slices.Contains(r.Resources, "backups") {
							g.Expect(r.Verbs).NotTo(ContainElements("create", "update", "delete"))
							if obj.GetKind() == "ClusterRole" {
								continue
							}
							if manage {
								g.Expect(r.Verbs).To(ContainElement("patch"))
							} else {
								g.Expect(r.Verbs).NotTo(ContainElement("patch"), "observe mode never writes to Velero's objects")
							}
						}
					}
				}
			})
		}
	})
})
