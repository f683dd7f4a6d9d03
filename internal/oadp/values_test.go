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

package oadp

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// fixture reads testdata/name: a DPA and the Deployment OADP made of it.
func fixture(t *testing.T, name string) (*unstructured.Unstructured, *appsv1.Deployment) {
	t.Helper()
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join("testdata", name))
	g.Expect(err).NotTo(HaveOccurred())
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	dpa := &unstructured.Unstructured{}
	d := &appsv1.Deployment{}
	for _, into := range []any{&dpa.Object, d} {
		doc, err := docs.Read()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(yaml.UnmarshalStrict(doc, into)).To(Succeed())
	}
	g.Expect(dpa.GroupVersionKind()).To(Equal(GroupVersionKind))
	return dpa, d
}

func plugin(name, image string, pull corev1.PullPolicy) InitContainer {
	return InitContainer{Name: name, Image: image, ImagePullPolicy: pull,
		VolumeMounts: []corev1.VolumeMount{{Name: "plugins", MountPath: "/target"}}}
}

func TestFromDPA(t *testing.T) {
	t.Run("OADP's sample DPA: observe mode, its plugins, Velero's image and arguments, the AWS Secret", func(t *testing.T) {
		g := NewWithT(t)
		v, warnings, err := FromDPA(fixture(t, "sample.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(warnings).To(BeEmpty())
		g.Expect(v).To(Equal(Values{
			Mode: "observe",
			InitContainers: []InitContainer{
				plugin("openshift-velero-plugin", "quay.io/konveyor/openshift-velero-plugin:oadp-1.5", corev1.PullIfNotPresent),
				plugin("velero-plugin-for-aws", "quay.io/konveyor/velero-plugin-for-aws:oadp-1.5", corev1.PullIfNotPresent),
				plugin("kubevirt-velero-plugin", "quay.io/konveyor/kubevirt-velero-plugin:v0.7.0", corev1.PullIfNotPresent),
				plugin("hypershift-oadp-plugin", "quay.io/redhat-user-workloads/ocp-art-tenant/oadp-hypershift-oadp-plugin-main:main", corev1.PullAlways),
			},
			BuiltinPlugins: BuiltinPlugins{Image: Image{Repository: "quay.io/konveyor/velero", Tag: "oadp-1.5"}},
			PluginArgs: []string{"--uploader-type=kopia", "--fs-backup-timeout=4h",
				"--restore-resource-priorities=securitycontextconstraints,customresourcedefinitions,namespaces,storageclasses,persistentvolumes,persistentvolumeclaims,serviceaccounts,secrets,configmaps,limitranges,pods,replicasets.apps,-,clusterbootstraps.run.tanzu.vmware.com",
				"--disable-informer-cache=false"},
			Credentials: &Credentials{ExistingSecret: "cloud-credentials", Key: "cloud"},
		}))
		// OADP's own securityContext of an init container is not carried:
		// the chart gives the manager's, which keeps the pod restricted.
		out, err := yaml.Marshal(v)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(out)).NotTo(ContainSubstring("securityContext"))
		g.Expect(string(out)).NotTo(ContainSubstring("syncFrequency"), "Velero's default, the chart's too")
	})

	t.Run("disabled-controllers naming both: manage mode, Velero's sync frequency, a custom plugin, Velero by digest", func(t *testing.T) {
		g := NewWithT(t)
		v, warnings, err := FromDPA(fixture(t, "manage.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(warnings).To(BeEmpty())
		g.Expect(v.Mode).To(Equal("manage"))
		g.Expect(v.SyncFrequency).To(Equal("5s"))
		g.Expect(v.InitContainers).To(HaveLen(3))
		g.Expect(v.InitContainers[2]).To(Equal(plugin("my-plugin", "registry.example.com/team/my-velero-plugin:v2.1.0", corev1.PullIfNotPresent)))
		g.Expect(v.BuiltinPlugins.Image).To(Equal(Image{Repository: "registry.example.com/oadp/velero",
			Digest: "sha256:4b1b0b1e0e6b1f5e3a7f3c3d8d6b0c5f1e2d3c4b5a69788796a5b4c3d2e1f0a9"}))
		g.Expect(v.PluginArgs).To(ContainElement("--disable-controllers=backup-operations,restore-operations"))
		g.Expect(v.Credentials).To(Equal(&Credentials{ExistingSecret: "cloud-credentials", Key: "cloud"}))
	})

	t.Run("two clouds: the first provider's Secret, and a warning naming the other", func(t *testing.T) {
		g := NewWithT(t)
		v, warnings, err := FromDPA(fixture(t, "gcp-azure.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(v.Mode).To(Equal("observe"))
		g.Expect(v.SyncFrequency).To(Equal("30s"), "--item-operation-sync-frequency 30s, as two arguments")
		g.Expect(v.BuiltinPlugins.Image).To(Equal(Image{Repository: "quay.io/konveyor/velero", Tag: "latest"}))
		g.Expect(v.Credentials).To(Equal(&Credentials{ExistingSecret: "cloud-credentials-gcp", Key: "cloud"}))
		g.Expect(warnings).To(ConsistOf(And(ContainSubstring("cloud-credentials-azure"), ContainSubstring("spec.credential"))))
	})

	t.Run("refused: only one of the two controllers disabled", func(t *testing.T) {
		g := NewWithT(t)
		dpa, d := fixture(t, "manage.yaml")
		g.Expect(unstructured.SetNestedStringSlice(dpa.Object, []string{"backup-operations"},
			"spec", "configuration", "velero", "args", "disabled-controllers")).To(Succeed())
		_, _, err := FromDPA(dpa, d)
		g.Expect(err).To(MatchError(And(ContainSubstring("disables only one of backup-operations and restore-operations"),
			ContainSubstring("manage mode needs both disabled, observe mode neither"))))
	})

	t.Run("refused: the DPA asks for manage mode, Velero's Deployment does not run it yet", func(t *testing.T) {
		g := NewWithT(t)
		dpa, d := fixture(t, "sample.yaml")
		g.Expect(unstructured.SetNestedStringSlice(dpa.Object, []string{"backup-operations", "restore-operations"},
			"spec", "configuration", "velero", "args", "disabled-controllers")).To(Succeed())
		_, _, err := FromDPA(dpa, d)
		g.Expect(err).To(MatchError(ErrNotApplied))
		g.Expect(err.Error()).To(ContainSubstring("wait for the OADP operator to reconcile the DPA"))

		// And the other way round: observe asked, manage still run.
		dpa, d = fixture(t, "manage.yaml")
		unstructured.RemoveNestedField(dpa.Object, "spec", "configuration", "velero", "args", "disabled-controllers")
		_, _, err = FromDPA(dpa, d)
		g.Expect(err).To(MatchError(ErrNotApplied))
	})

	t.Run("refused: an init container's image the chart would evaluate as a template", func(t *testing.T) {
		g := NewWithT(t)
		dpa, d := fixture(t, "sample.yaml")
		d.Spec.Template.Spec.InitContainers[0].Image = `quay.io/x:{{ (lookup "v1" "Secret" "kube-system" "").items }}`
		_, _, err := FromDPA(dpa, d)
		g.Expect(err).To(MatchError(And(ContainSubstring("which the chart would evaluate as a template"),
			ContainSubstring(d.Spec.Template.Spec.InitContainers[0].Name))))
	})

	t.Run("refused: a Deployment another DPA, or nobody, made", func(t *testing.T) {
		g := NewWithT(t)
		dpa, d := fixture(t, "sample.yaml")
		dpa.SetName("other")
		_, _, err := FromDPA(dpa, d)
		g.Expect(err).To(MatchError(ContainSubstring("Deployment openshift-adp/velero is not made by DataProtectionApplication other (its controller: DataProtectionApplication velero-sample)")))
		dpa, d = fixture(t, "sample.yaml")
		d.OwnerReferences = nil
		_, _, err = FromDPA(dpa, d)
		g.Expect(err).To(MatchError(ContainSubstring("(its controller: none)")))
	})
}

func TestSplitImage(t *testing.T) {
	g := NewWithT(t)
	for image, want := range map[string]Image{
		"velero/velero:v1.18.3":                               {Repository: "velero/velero", Tag: "v1.18.3"},
		"registry:5000/velero/velero":                         {Repository: "registry:5000/velero/velero", Tag: "latest"},
		"registry:5000/velero/velero:v1.17.2@sha256:ab":       {Repository: "registry:5000/velero/velero", Tag: "v1.17.2", Digest: "sha256:ab"},
		"registry.redhat.io/oadp/oadp-velero-rhel9@sha256:cd": {Repository: "registry.redhat.io/oadp/oadp-velero-rhel9", Digest: "sha256:cd"},
	} {
		g.Expect(splitImage(image)).To(Equal(want), image)
	}
}
