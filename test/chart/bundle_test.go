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
	"os"
	"os/exec"
	"path/filepath"
	"strings"

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
})
