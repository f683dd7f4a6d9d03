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

package stack

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/test/envtest"
)

// TestRestrictedV2 checks the stand-in for OpenShift's restricted-v2 SCC
// that test/cluster's OpenShift pass admits itemops' pods with, against a
// real API server: a pod that names no user runs as the namespace range's
// first ID; what restricted-v2 refuses is refused, each with its reason;
// Velero's ServiceAccount's pods are left alone.
func TestRestrictedV2(t *testing.T) {
	g := NewWithT(t)
	env, err := envtest.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "openshift-adp"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	for _, name := range []string{"itemops", "velero"} {
		g.Expect(env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name}})).To(Succeed())
	}
	s := &Stack{Client: env.Client}
	stop, err := s.RestrictedV2(ctx, ns.Name, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(stop(ctx)).To(Succeed()) })

	// As the chart runs its containers: no user, restricted otherwise.
	restricted := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name}, Spec: corev1.PodSpec{
			ServiceAccountName: "itemops",
			SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "manager", Image: "itemops", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		}}
	}
	// The policy and the webhook are served once the API server has read
	// them, which takes longer on a loaded machine: wait for each to act.
	g.Eventually(func() error {
		p := restricted("fixed-user")
		p.Spec.SecurityContext.RunAsUser = ptr.To[int64](65532)
		return env.Client.Create(ctx, p, client.DryRunAll)
	}).WithTimeout(time.Minute).Should(MatchError(ContainSubstring("restricted-v2: runAsUser")))
	g.Eventually(func(g Gomega) {
		pod := restricted("manager")
		g.Expect(env.Client.Create(ctx, pod, client.DryRunAll)).To(Succeed())
		g.Expect(pod.Spec.SecurityContext.RunAsUser).To(Equal(ptr.To[int64](UIDRangeStart)), "the range's first ID, as restricted-v2 assigns it")
		g.Expect(pod.Spec.SecurityContext.FSGroup).To(Equal(ptr.To[int64](UIDRangeStart)))
	}).WithTimeout(time.Minute).Should(Succeed())

	refused := map[string]func(p *corev1.Pod){
		"runAsUser must be in the namespace's range 1000650000-1000659999": func(p *corev1.Pod) {
			p.Spec.SecurityContext.RunAsUser = ptr.To[int64](65532)
		},
		"fsGroup must be in the namespace's range": func(p *corev1.Pod) { p.Spec.SecurityContext.FSGroup = ptr.To[int64](65532) },
		"allowPrivilegeEscalation must be false": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
		},
		"capabilities may add NET_BIND_SERVICE only": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		},
		"capabilities must drop ALL": func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Capabilities.Drop = nil },
		"volumes of type configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected and secret only (no hostPath)": func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var"}}}}
		},
		"host namespaces are not allowed": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"host ports are not allowed": func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}
		},
		"a seccomp profile (RuntimeDefault) is required": func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil },
		"privileged containers are not allowed": func(p *corev1.Pod) {
			// An init container: the manager's rules hold for every container.
			c := p.Spec.Containers[0]
			c.Name = "copy"
			c.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true), Capabilities: c.SecurityContext.Capabilities}
			p.Spec.InitContainers = []corev1.Container{c}
		},
	}
	for reason, change := range refused {
		p := restricted("refused")
		change(p)
		err := env.Client.Create(ctx, p, client.DryRunAll)
		g.Expect(err).To(MatchError(ContainSubstring("restricted-v2: "+reason)), reason)
	}

	// Velero's pods (the privileged SCC under OADP) are not restricted.
	velero := restricted("velero")
	velero.Spec.ServiceAccountName = "velero"
	velero.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var"}}}}
	g.Expect(env.Client.Create(ctx, velero, client.DryRunAll)).To(Succeed())
	g.Expect(velero.Spec.SecurityContext.RunAsUser).To(BeNil())
}
