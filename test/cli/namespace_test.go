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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// veleroDeployment creates a Deployment named velero in namespace, as
// velero install, Velero's chart and OADP name Velero's server, until the
// spec ends.
func veleroDeployment(namespace string) {
	labels := map[string]string{"component": "velero"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "velero"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "velero", Image: "velero/velero:v1.18.3"}}}}}}
	Expect(env.Client.Create(context.Background(), d)).To(Succeed())
	DeferCleanup(func() { Expect(env.Client.Delete(context.Background(), d)).To(Succeed()) })
}

var _ = Describe("Velero's namespace", func() {
	BeforeEach(func() {
		// No velero CLI config, no $VELERO_NAMESPACE: nothing names it.
		GinkgoT().Setenv("HOME", GinkgoT().TempDir())
		GinkgoT().Setenv("VELERO_NAMESPACE", "")
	})

	It("is where the one Deployment named velero runs, when nothing names it", func() {
		ns := namespace(GinkgoTB(), "openshift-adp")
		veleroDeployment(ns)
		r := kubectlItemops(context.Background(), clocktesting.NewFakePassiveClock(time.Now()), "get", "backups")
		Expect(r.code).To(Equal(0), r.err)
		Expect(r.err).To(ContainSubstring("found in " + ns + " namespace"))
	})

	It("is $VELERO_NAMESPACE, then velero, when Velero runs in several namespaces or none", func() {
		first, second := namespace(GinkgoTB(), "velero-a"), namespace(GinkgoTB(), "velero-b")
		veleroDeployment(first)
		veleroDeployment(second)
		now := clocktesting.NewFakePassiveClock(time.Now())
		r := kubectlItemops(context.Background(), now, "get", "backups")
		Expect(r.err).To(ContainSubstring("found in velero namespace"))
		GinkgoT().Setenv("VELERO_NAMESPACE", second)
		r = kubectlItemops(context.Background(), now, "get", "backups")
		Expect(r.err).To(ContainSubstring("found in " + second + " namespace"))
	})
})
