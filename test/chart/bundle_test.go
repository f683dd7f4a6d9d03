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
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// csvOf reads the ClusterServiceVersion of a bundle directory.
func csvOf(g Gomega, dir string) *unstructured.Unstructured {
	data, err := os.ReadFile(filepath.Join(dir, "manifests", "itemops.clusterserviceversion.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	csv := &unstructured.Unstructured{}
	g.Expect(yaml.Unmarshal(data, &csv.Object)).To(Succeed())
	return csv
}

var _ = Describe("the OLM bundle", func() {
	It("make bundle writes the chart as a ClusterServiceVersion that operator-framework's validators pass, Velero's namespace the OperatorGroup's", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		root := filepath.Join(chartDir, "..", "..")
		dir := filepath.Join(t.TempDir(), "bundle")
		make := exec.Command("make", "--no-print-directory", "bundle", "BUNDLE_DIR="+dir,
			"IMG=registry.example.com/itemops:1.2.3", "VERSION=1.2.3", "BUNDLE_REPLACES=1.2.2")
		make.Dir = root
		out, err := make.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		g.Expect(string(out)).To(ContainSubstring("bundle 1.2.3 written"))
		g.Expect(string(out)).NotTo(ContainSubstring("Error:"))

		csv := csvOf(g, dir)
		g.Expect(csv.GetName()).To(Equal("itemops.v1.2.3"))
		replaces, _, _ := unstructured.NestedString(csv.Object, "spec", "replaces")
		g.Expect(replaces).To(Equal("itemops.v1.2.2"))
		modes, _, _ := unstructured.NestedSlice(csv.Object, "spec", "installModes")
		g.Expect(modes).To(ConsistOf(
			map[string]any{"type": "OwnNamespace", "supported": true},
			map[string]any{"type": "SingleNamespace", "supported": true},
			map[string]any{"type": "MultiNamespace", "supported": false},
			map[string]any{"type": "AllNamespaces", "supported": false},
		), "OADP's CSV supports OwnNamespace only: an operator sharing its namespace must too")
		icons, _, _ := unstructured.NestedSlice(csv.Object, "spec", "icon")
		g.Expect(icons).To(HaveLen(1))
		description, _, _ := unstructured.NestedString(csv.Object, "spec", "description")
		g.Expect(description).To(ContainSubstring("observe"))

		By("the chart's Deployment, Velero's namespace taken from the OperatorGroup's target, no fixed user")
		deployments, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "deployments")
		g.Expect(deployments).To(HaveLen(1))
		spec := &struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}{}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(deployments[0].(map[string]any), spec)).To(Succeed())
		pod := spec.Spec.Template.Spec
		manager := pod.Containers[0]
		g.Expect(manager.Image).To(Equal("registry.example.com/itemops:1.2.3"))
		g.Expect(manager.Args).To(ContainElement("--velero-namespace=$(OLM_TARGET_NAMESPACES)"))
		g.Expect(manager.Env).To(ContainElement(corev1.EnvVar{Name: "OLM_TARGET_NAMESPACES", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['olm.targetNamespaces']"}}}))
		g.Expect(pod.SecurityContext.RunAsUser).To(BeNil(), "the platform assigns the user")
		g.Expect(pod.SecurityContext.FSGroup).To(BeNil())
		var inits []string
		for _, c := range pod.InitContainers {
			inits = append(inits, c.Name+"="+c.Image)
		}
		g.Expect(inits).To(ContainElements("velero-builtin-plugins=velero/velero:v1.18.3", "velero-plugin-for-aws=velero/velero-plugin-for-aws:v1.14.3"))
		data, err := yaml.Marshal(deployments)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(data)).NotTo(ContainSubstring("itemops-bundle-namespace"))

		By("its permissions those the chart grants with the same values")
		rendered := render(t, "-f", filepath.Join(root, "config", "olm", "values.yaml"))
		var chartRules []rbacv1.PolicyRule
		for _, r := range rules(g, rendered, "Role") {
			chartRules = append(chartRules, r...)
		}
		var bundleRules []rbacv1.PolicyRule
		permissions, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "permissions")
		for _, p := range permissions {
			entry := &struct {
				ServiceAccountName string              `json:"serviceAccountName"`
				Rules              []rbacv1.PolicyRule `json:"rules"`
			}{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(p.(map[string]any), entry)).To(Succeed())
			g.Expect(entry.ServiceAccountName).To(Equal("itemops"))
			bundleRules = append(bundleRules, entry.Rules...)
		}
		g.Expect(bundleRules).To(ConsistOf(chartRules))
		clusterPermissions, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "clusterPermissions")
		g.Expect(clusterPermissions).NotTo(BeEmpty())

		By("the CRD, the metrics Service and the bundle's metadata beside it")
		files, err := filepath.Glob(filepath.Join(dir, "manifests", "*.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, f := range files {
			names = append(names, filepath.Base(f))
		}
		g.Expect(names).To(ContainElements("itemoperations.itemops.io_customresourcedefinition.yaml", "itemops-metrics_service.yaml"))
		annotations, err := os.ReadFile(filepath.Join(dir, "metadata", "annotations.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(annotations)).To(And(ContainSubstring("operators.operatorframework.io.bundle.package.v1: itemops"),
			ContainSubstring("operators.operatorframework.io.bundle.channels.v1: stable")))

		By("the validators run: a CSV that does not own the bundle's CRD fails them")
		csvFile := filepath.Join(dir, "manifests", "itemops.clusterserviceversion.yaml")
		data, err = os.ReadFile(csvFile)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(csvFile, []byte(strings.Replace(string(data), "kind: ItemOperation\n", "kind: ItemOperationX\n", 1)), 0o644)).To(Succeed())
		check := exec.Command("go", "-C", "hack/tools/bundle", "run", ".", "-validate", dir)
		check.Dir = root
		out, err = check.CombinedOutput()
		g.Expect(err).To(HaveOccurred(), string(out))
		g.Expect(string(out)).To(ContainSubstring(`owned CRD "itemops.io/v1alpha1, Kind=ItemOperationX" not found in bundle`))
	})

	It("carries a binding of the metrics readers as an object, not as itemops' permission, and warns of images pinned by tag", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		root := filepath.Join(chartDir, "..", "..")
		sample, err := os.ReadFile(filepath.Join(root, "config", "olm", "values.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		values := filepath.Join(t.TempDir(), "values.yaml")
		g.Expect(os.WriteFile(values, append(sample, []byte("metrics:\n  readers:\n  - kind: ServiceAccount\n    name: prometheus\n    namespace: monitoring\n")...), 0o644)).To(Succeed())
		dir := filepath.Join(t.TempDir(), "bundle")
		out := makeIn(g, root, "bundle", "BUNDLE_DIR="+dir, "BUNDLE_VALUES="+values,
			"IMG=registry.example.com/itemops@sha256:"+strings.Repeat("ab", 32), "VERSION=1.2.3")
		g.Expect(out).To(ContainSubstring("velero-builtin-plugins runs velero/velero:v1.18.3, pinned by tag"))
		g.Expect(out).NotTo(ContainSubstring("manager runs"), "the manager is pinned by digest")

		csv := csvOf(g, dir)
		clusterPermissions, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "clusterPermissions")
		for _, p := range clusterPermissions {
			data, err := yaml.Marshal(p)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(data)).NotTo(ContainSubstring("/metrics"), "itemops is not a metrics reader")
		}
		binding, err := os.ReadFile(filepath.Join(dir, "manifests", "itemops-metrics-reader_clusterrolebinding.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(binding)).To(And(ContainSubstring("name: prometheus"), ContainSubstring("namespace: monitoring")))
		_, err = os.Stat(filepath.Join(dir, "manifests", "itemops-metrics-reader_clusterrole.yaml"))
		g.Expect(err).NotTo(HaveOccurred(), "the role it binds, carried too")
	})
})

var _ = Describe("the OLM bundle image", func() {
	It("make bundle-image holds the bundle's manifests and metadata, labelled with its annotations, and names it by a digest one commit always gives", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		root := filepath.Join(chartDir, "..", "..")
		work := t.TempDir()
		bundle := filepath.Join(work, "bundle")
		makeIn(g, root, "bundle", "BUNDLE_DIR="+bundle, "IMG=registry.example.com/itemops:1.2.3", "VERSION=1.2.3")
		first := filepath.Join(work, "first")
		out := makeIn(g, root, "bundle-image", "BUNDLE_DIR="+bundle, "BUNDLE_IMG=registry.example.com:5000/itemops-bundle:1.2.3", "BUNDLE_IMG_DIR="+first)
		ref, err := os.ReadFile(filepath.Join(first, "ref"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(ref)).To(MatchRegexp(`^registry\.example\.com:5000/itemops-bundle@sha256:[0-9a-f]{64}\n$`))
		digest := strings.TrimPrefix(strings.TrimSpace(string(ref)), "registry.example.com:5000/itemops-bundle@")
		g.Expect(out).To(ContainSubstring(digest))

		index, err := layout.ImageIndexFromPath(filepath.Join(first, "oci"))
		g.Expect(err).NotTo(HaveOccurred())
		manifest, err := index.IndexManifest()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(manifest.Manifests).To(HaveLen(1))
		g.Expect(manifest.Manifests[0].Digest.String()).To(Equal(digest))
		img, err := index.Image(manifest.Manifests[0].Digest)
		g.Expect(err).NotTo(HaveOccurred())
		config, err := img.ConfigFile()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(config.Config.Labels).To(And(
			HaveKeyWithValue("operators.operatorframework.io.bundle.mediatype.v1", "registry+v1"),
			HaveKeyWithValue("operators.operatorframework.io.bundle.package.v1", "itemops"),
			HaveKeyWithValue("operators.operatorframework.io.bundle.channels.v1", "stable"),
			HaveKeyWithValue("operators.operatorframework.io.bundle.manifests.v1", "manifests/"),
			HaveKeyWithValue("org.opencontainers.image.version", "1.2.3")))
		files := map[string]string{}
		tr := tar.NewReader(mutate.Extract(img))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			g.Expect(err).NotTo(HaveOccurred())
			if h.Typeflag == tar.TypeReg {
				data, err := io.ReadAll(tr)
				g.Expect(err).NotTo(HaveOccurred())
				files[h.Name] = string(data)
			}
		}
		want := map[string]string{}
		for _, sub := range []string{"manifests", "metadata"} {
			entries, err := os.ReadDir(filepath.Join(bundle, sub))
			g.Expect(err).NotTo(HaveOccurred())
			for _, e := range entries {
				data, err := os.ReadFile(filepath.Join(bundle, sub, e.Name()))
				g.Expect(err).NotTo(HaveOccurred())
				want[sub+"/"+e.Name()] = string(data)
			}
		}
		g.Expect(files).To(Equal(want))
		g.Expect(files).To(HaveKey("manifests/itemops.clusterserviceversion.yaml"))

		By("the same bundle again, the same digest; another bundle, another")
		second := filepath.Join(work, "second")
		makeIn(g, root, "bundle-image", "BUNDLE_DIR="+bundle, "BUNDLE_IMG=registry.example.com:5000/itemops-bundle:1.2.3", "BUNDLE_IMG_DIR="+second)
		again, err := os.ReadFile(filepath.Join(second, "ref"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(again)).To(Equal(string(ref)))
		makeIn(g, root, "bundle", "BUNDLE_DIR="+bundle, "IMG=registry.example.com/itemops:1.2.4", "VERSION=1.2.4", "BUNDLE_REPLACES=1.2.3")
		makeIn(g, root, "bundle-image", "BUNDLE_DIR="+bundle, "BUNDLE_IMG=registry.example.com:5000/itemops-bundle:1.2.4", "BUNDLE_IMG_DIR="+second)
		other, err := os.ReadFile(filepath.Join(second, "ref"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(other)).NotTo(Equal(string(ref)))
	})
})

// makeIn runs a make target in dir and returns its output.
func makeIn(g Gomega, dir string, args ...string) string {
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	return string(out)
}
