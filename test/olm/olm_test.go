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

package olm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/stack"
)

const (
	sampleDatamover = "itemops.io/sample-datamover"
	// deployment is the Deployment of the bundle's CSV (the chart's).
	deployment = "itemops"
)

var _ = Describe("itemops through OLM", Ordered, func() {
	It("OLM installs itemops from its catalog in openshift-adp by docs/openshift.md (OperatorGroup, Subscription), pulling the catalog and the bundle from the cluster's registry, and that itemops mirrors a Backup", func(ctx SpecContext) {
		By("docs/openshift.md: the values from the DPA")
		Expect(s.RunDoc(ctx, "docs/openshift.md", "openshift-values")).To(Succeed())
		Expect(s.MachineValues(firstVersion, false)).To(Succeed())
		By("docs/openshift.md: the bundle and the catalog, made and pushed to the registry")
		Expect(s.RunDoc(ctx, "docs/openshift.md", "olm-catalog")).To(Succeed())
		bundleRef := readRef("bin/bundles/" + firstVersion + "/ref")
		Expect(bundleRef).To(HavePrefix(stack.RegistryHost() + "/itemops-bundle@sha256:"))
		Expect(pushedDigest(ctx, "itemops-bundle:"+firstVersion)).To(Equal(digestOf(bundleRef)), "the registry holds the bundle by the catalog's digest")
		catalogRef := readRef("bin/catalog-image/ref")
		Expect(pushedDigest(ctx, "itemops-catalog:"+firstVersion)).To(Equal(digestOf(catalogRef)))

		By("docs/openshift.md: an OperatorGroup, the CatalogSource and the Subscription")
		Expect(s.RunDoc(ctx, "docs/openshift.md", "olm-operatorgroup")).To(Succeed())
		Expect(s.RunDoc(ctx, "docs/openshift.md", "olm-subscribe")).To(Succeed())
		Expect(s.WaitCSV(ctx, s.Namespace, "itemops.v"+firstVersion, 10*time.Minute)).To(Succeed())
		Expect(s.WaitAvailable(ctx, s.Namespace, deployment, 3*time.Minute)).To(Succeed())
		Expect(managerImages(Default)).To(ConsistOf(stack.ItemopsRepository + ":" + firstVersion))
		Expect(installedCSV(Default)).To(Equal("itemops.v" + firstVersion))

		By("the catalog's pod ran the pushed image, pulled from the registry by its digest")
		Expect(catalogImageIDs(Default)).To(ContainElement(HaveSuffix(digestOf(catalogRef))))

		By("a Backup's operations, mirrored by the itemops OLM installed")
		mirrored(ctx, "olm-first")
	})

	It("OLM upgrades itemops to the next bundle of the catalog by docs/openshift.md, and the new itemops mirrors a Backup", func(ctx SpecContext) {
		Expect(s.RunDoc(ctx, "docs/openshift.md", "olm-upgrade")).To(Succeed())
		Expect(s.WaitCSV(ctx, s.Namespace, "itemops.v"+secondVersion, 10*time.Minute)).To(Succeed())
		Eventually(installedCSV).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal("itemops.v" + secondVersion))
		Eventually(func(g Gomega) error {
			return s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "itemops.v" + firstVersion}, csv())
		}).WithContext(ctx).WithTimeout(3*time.Minute).Should(Satisfy(apierrors.IsNotFound), "the CSV it replaces is gone")
		Expect(s.WaitAvailable(ctx, s.Namespace, deployment, 3*time.Minute)).To(Succeed())
		Eventually(managerImages).WithContext(ctx).WithTimeout(2 * time.Minute).Should(ConsistOf(stack.ItemopsRepository + ":" + secondVersion))

		By("the first Backup's ItemOperations kept; a new Backup mirrored")
		Expect(operationsOf(Default, "olm-first")).To(HaveLen(2))
		mirrored(ctx, "olm-second")
	})

	It("removed the OLM way by docs/openshift.md: its pods go, the CRD and the ItemOperations stay", func(ctx SpecContext) {
		Expect(s.RunDoc(ctx, "docs/openshift.md", "olm-uninstall")).To(Succeed())
		Eventually(func(g Gomega) []corev1.Pod {
			pods := &corev1.PodList{}
			g.Expect(s.Client.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "itemops"})).To(Succeed())
			return pods.Items
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(BeEmpty())
		Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: deployment}, &appsv1.Deployment{})).To(Satisfy(apierrors.IsNotFound))
		Expect(operationsOf(Default, "olm-first")).To(HaveLen(2))
		Expect(operationsOf(Default, "olm-second")).To(HaveLen(2))
	})
})

// mirrored backs up a new namespace holding two sample operations and
// waits until the Backup is Completed and its ItemOperations are too.
func mirrored(ctx context.Context, name string) {
	GinkgoHelper()
	Expect(s.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	for _, item := range []string{"orders", "payments"} {
		Expect(s.Client.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: item, Namespace: name, Labels: map[string]string{sim.LabelSelect: "yes"},
				Annotations: map[string]string{sim.AnnotationSize: "2Gi", sim.AnnotationSpeed: "64Mi"}},
			Data: map[string]string{"item": item},
		})).To(Succeed())
	}
	_, err := s.Run(ctx, fmt.Sprintf("velero backup create %s --include-namespaces %s", name, name))
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) map[string]string {
		out := map[string]string{}
		for item, op := range operationsOf(g, name) {
			out[item] = op.Spec.Plugin.Name + " " + string(op.Status.Phase)
		}
		return out
	}).WithContext(ctx).WithTimeout(5 * time.Minute).Should(Equal(map[string]string{
		"orders": sampleDatamover + " Completed", "payments": sampleDatamover + " Completed",
	}))
	Eventually(func(g Gomega) velerov1api.BackupPhase {
		b := &velerov1api.Backup{}
		g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, b)).To(Succeed())
		return b.Status.Phase
	}).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Equal(velerov1api.BackupPhaseCompleted))
}

// operationsOf lists a Backup's ItemOperations by the name of the item
// each moves.
func operationsOf(g Gomega, backup string) map[string]itemopsv1alpha1.ItemOperation {
	list := &itemopsv1alpha1.ItemOperationList{}
	g.Expect(s.Client.List(context.Background(), list, client.InNamespace(s.Namespace),
		client.MatchingLabels{itemopsv1alpha1.LabelParentKind: "Backup", itemopsv1alpha1.LabelParentName: backup})).To(Succeed())
	out := map[string]itemopsv1alpha1.ItemOperation{}
	for _, op := range list.Items {
		out[op.Spec.Resource.Name] = op
	}
	return out
}

// managerImages are the images of itemops' Ready pods not being deleted.
func managerImages(g Gomega) []string {
	pods := &corev1.PodList{}
	g.Expect(s.Client.List(context.Background(), pods, client.InNamespace(s.Namespace),
		client.MatchingLabels{"app.kubernetes.io/name": "itemops", "app.kubernetes.io/component": "manager"})).To(Succeed())
	var images []string
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				images = append(images, p.Spec.Containers[0].Image)
			}
		}
	}
	return images
}

// installedCSV is the Subscription's installed ClusterServiceVersion.
func installedCSV(g Gomega) string {
	sub := &unstructured.Unstructured{}
	sub.SetAPIVersion("operators.coreos.com/v1alpha1")
	sub.SetKind("Subscription")
	g.Expect(s.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: "itemops"}, sub)).To(Succeed())
	name, _, _ := unstructured.NestedString(sub.Object, "status", "installedCSV")
	return name
}

func csv() *unstructured.Unstructured {
	c := &unstructured.Unstructured{}
	c.SetAPIVersion("operators.coreos.com/v1alpha1")
	c.SetKind("ClusterServiceVersion")
	return c
}

// catalogImageIDs are the image IDs the node ran for the CatalogSource's
// pods.
func catalogImageIDs(g Gomega) []string {
	pods := &corev1.PodList{}
	g.Expect(s.Client.List(context.Background(), pods, client.InNamespace(s.Namespace),
		client.MatchingLabels{"olm.catalogSource": "itemops"})).To(Succeed())
	var ids []string
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			ids = append(ids, c.ImageID)
		}
	}
	return ids
}

// readRef reads a file the docs' commands wrote in the working directory.
func readRef(path string) string {
	GinkgoHelper()
	data, err := os.ReadFile(filepath.Join(s.Work, path))
	Expect(err).NotTo(HaveOccurred())
	return strings.TrimSpace(string(data))
}

func digestOf(ref string) string {
	_, digest, _ := strings.Cut(ref, "@")
	return digest
}

// pushedDigest is the digest the registry gives a tag of its repository,
// as crane reads it.
func pushedDigest(ctx context.Context, repositoryTag string) string {
	GinkgoHelper()
	out, err := s.Run(ctx, "crane digest $REGISTRY/"+repositoryTag)
	Expect(err).NotTo(HaveOccurred())
	return strings.TrimSpace(out)
}
