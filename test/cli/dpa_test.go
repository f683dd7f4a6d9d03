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

package cli

import (
	"context"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/itemops/itemops/internal/oadp"
)

var _ = Describe("kubectl itemops values-from-dpa", Ordered, func() {
	ctx := context.Background()
	var ns string

	BeforeAll(func() {
		ns = namespace(GinkgoTB(), "openshift-adp")
	})

	It("says OADP is missing on a cluster without the DataProtectionApplication kind", func() {
		r := kubectlItemops(ctx, clock.RealClock{}, "values-from-dpa", "velero-sample", "-n", ns)
		Expect(r.code).To(Equal(1))
		Expect(r.err).To(ContainSubstring("this cluster has no DataProtectionApplication.oadp.openshift.io kind: is the OADP operator installed?"))
	})

	It("prints values the chart takes, from the DPA and the Deployment OADP made of it; refuses a DPA not applied yet", func() {
		g := NewWithT(GinkgoTB())
		crds, err := env.ReadManifests("test/oadp/dpa-crd.yaml")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(env.Apply(ctx, "test", crds...)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(env.Client.Delete(ctx, crds[0]))).To(Succeed()) })

		// Once the kind is served: no DPA of that name.
		var r result
		Eventually(func(g Gomega) {
			r = kubectlItemops(ctx, clock.RealClock{}, "values-from-dpa", "velero-sample", "-n", ns)
			g.Expect(r.err).NotTo(ContainSubstring("is the OADP operator installed?"))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(r.code).To(Equal(1))
		Expect(r.err).To(ContainSubstring(`DataProtectionApplication "velero-sample" not found in namespace ` + ns))

		// OADP's sample DPA and the Deployment the operator makes of it.
		objs, err := env.ReadManifests("internal/oadp/testdata/sample.yaml")
		g.Expect(err).NotTo(HaveOccurred())
		dpa := objs[0]
		dpa.SetNamespace(ns)
		dpa.SetUID("")
		g.Expect(env.Client.Create(ctx, dpa)).To(Succeed())

		r = kubectlItemops(ctx, clock.RealClock{}, "values-from-dpa", "velero-sample", "-n", ns)
		Expect(r.code).To(Equal(1))
		Expect(r.err).To(ContainSubstring("Velero's Deployment " + ns + "/velero not found: the OADP operator makes it once it has reconciled the DPA"))

		d := &appsv1.Deployment{}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(objs[1].Object, d)).To(Succeed())
		d.Namespace = ns
		d.OwnerReferences[0].UID = dpa.GetUID()
		g.Expect(env.Client.Create(ctx, d)).To(Succeed())

		r = kubectlItemops(ctx, clock.RealClock{}, "values-from-dpa", "velero-sample", "-n", ns)
		Expect(r.code).To(Equal(0), r.err)
		Expect(r.out).To(HavePrefix("# itemops' values for the Velero that OADP runs from DataProtectionApplication " + ns + "/velero-sample"))
		var values oadp.Values
		g.Expect(yaml.UnmarshalStrict([]byte(r.out), &values)).To(Succeed())
		g.Expect(values.Mode).To(Equal("observe"))
		g.Expect(values.InitContainers).To(HaveLen(4))

		// The chart takes them (its schema too), and renders Velero's plugins,
		// Velero's image and its Secret.
		file := filepath.Join(GinkgoT().TempDir(), "itemops-values.yaml")
		g.Expect(os.WriteFile(file, []byte(r.out), 0o600)).To(Succeed())
		rendered, err := env.RenderChart("itemops", "-f", file)
		g.Expect(err).NotTo(HaveOccurred())
		var pod *corev1.PodSpec
		for _, o := range rendered {
			if o.GetKind() == "Deployment" {
				manager := &appsv1.Deployment{}
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, manager)).To(Succeed())
				pod = &manager.Spec.Template.Spec
			}
		}
		g.Expect(pod).NotTo(BeNil())
		images := map[string]string{}
		for _, c := range pod.InitContainers {
			images[c.Name] = c.Image
			g.Expect(c.SecurityContext).NotTo(BeNil(), c.Name)
			g.Expect(c.SecurityContext.Capabilities.Drop).To(ContainElement(corev1.Capability("ALL")), "the chart's restricted context, not OADP's: %s", c.Name)
		}
		g.Expect(images).To(HaveKeyWithValue("velero-builtin-plugins", "quay.io/konveyor/velero:oadp-1.5"))
		g.Expect(images).To(HaveKeyWithValue("openshift-velero-plugin", "quay.io/konveyor/openshift-velero-plugin:oadp-1.5"))
		g.Expect(images).To(HaveKeyWithValue("hypershift-oadp-plugin", "quay.io/redhat-user-workloads/ocp-art-tenant/oadp-hypershift-oadp-plugin-main:main"))
		secrets := []string{}
		for _, v := range pod.Volumes {
			if v.Secret != nil {
				secrets = append(secrets, v.Secret.SecretName)
			}
		}
		g.Expect(secrets).To(ContainElement("cloud-credentials"))

		// Manage mode asked in the DPA, which OADP has not applied yet.
		g.Expect(unstructured.SetNestedStringSlice(dpa.Object, []string{"backup-operations", "restore-operations"},
			"spec", "configuration", "velero", "args", "disabled-controllers")).To(Succeed())
		g.Expect(env.Client.Update(ctx, dpa)).To(Succeed())
		r = kubectlItemops(ctx, clock.RealClock{}, "values-from-dpa", "velero-sample", "-n", ns)
		Expect(r.code).To(Equal(1))
		Expect(r.err).To(ContainSubstring("the DataProtectionApplication is not applied to Velero's Deployment"))
		Expect(r.out).To(BeEmpty())
		g.Expect(client.IgnoreNotFound(env.Client.Delete(ctx, d))).To(Succeed())
		g.Expect(env.Client.Delete(ctx, dpa)).To(Or(Succeed(), WithTransform(apierrors.IsNotFound, BeTrue())))
	})
})
