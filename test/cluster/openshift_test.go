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

package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	"github.com/itemops/itemops/test/localcluster"
	"github.com/itemops/itemops/test/stack"
)

// processIDs are the user and group IDs (real) of the processes whose
// command line holds marker, by pid.
func processIDs(marker string) map[int][2]string {
	GinkgoHelper()
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	out := map[int][2]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(marker)) {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var ids [2]string
		for line := range strings.Lines(string(status)) {
			fields := strings.Fields(line)
			if len(fields) > 1 && fields[0] == "Uid:" {
				ids[0] = fields[1]
			}
			if len(fields) > 1 && fields[0] == "Gid:" {
				ids[1] = fields[1]
			}
		}
		out[pid] = ids
	}
	return out
}

// backupAndRestore backs up a namespace of one sample item and one volume
// with the data mover, restores it into another namespace, and checks
// that both end Completed with their operations, and that the restored
// volume holds the backed-up files.
func backupAndRestore(ctx context.Context, name string) {
	GinkgoHelper()
	appNamespace(ctx, name, item{name: "ledger", size: "512Mi", speed: "128Mi"}, item{name: "data", mib: 16})
	run(ctx, "velero backup create "+name+" --include-namespaces "+name+" --snapshot-move-data")
	Eventually(backupPhase(name)).WithContext(ctx).WithTimeout(4 * time.Minute).Should(Equal(velerov1api.BackupPhaseCompleted))
	Eventually(func(g Gomega) map[string]string { return summary(operationsOf(g, "Backup", name)) }).
		WithContext(ctx).WithTimeout(time.Minute).Should(Equal(map[string]string{
		"ledger": sampleDatamover + " Completed",
		"data":   csiBackupper + " Completed",
	}))
	run(ctx, "velero restore create "+name+" --from-backup "+name+" --namespace-mappings "+name+":"+name+"-restored")
	Eventually(func(g Gomega) velerov1api.RestorePhase {
		r := &velerov1api.Restore{}
		g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, r)).To(Succeed())
		return r.Status.Phase
	}).WithContext(ctx).WithTimeout(4 * time.Minute).Should(Equal(velerov1api.RestorePhaseCompleted))
	Eventually(func(g Gomega) map[string]string { return summary(operationsOf(g, "Restore", name)) }).
		WithContext(ctx).WithTimeout(time.Minute).Should(Equal(map[string]string{
		"ledger": sampleRestorer + " Completed",
		"data":   csiRestorer + " Completed",
	}))
	Expect(volumeSum(ctx, name+"-restored", "data")).To(Equal(volumeSums[name+"/data"]), "the restored volume")
}

// stopRestrictedV2 removes the restricted-v2 stand-in the OpenShift pass
// puts on openshift-adp for its specs.
var stopRestrictedV2 func(context.Context) error

// openshiftPass runs Velero and itemops again in openshift-adp, as under
// OADP: Velero made by a stand-in of the OADP operator from a
// DataProtectionApplication, itemops installed by docs/openshift.md's
// commands, its pods admitted as OpenShift's restricted-v2 admits them.
// Velero's install of the specs before leaves first.
func openshiftPass() {
	It("OpenShift: Velero in openshift-adp from a DPA, itemops from it by docs/openshift.md, running as the user restricted-v2 assigns with group 0, observe mode", func(ctx SpecContext) {
		leaves(veleroOfOpenShift)
		By("the Velero of the specs before leaves the node (and itemops, when a focused run kept it)")
		run(ctx, "helm uninstall itemops -n velero --ignore-not-found --wait")
		run(ctx, "kubectl -n velero delete deployment/velero daemonset/node-agent --wait --timeout=3m")
		// From here on, the stack is the one in openshift-adp.
		adp := *s
		adp.Namespace = stack.OADPNamespace
		s = &adp

		By("OADP's part: Velero and node-agent in openshift-adp, made from a DataProtectionApplication")
		Expect(s.InstallOADP(ctx)).To(Succeed())
		By("restricted-v2 on openshift-adp's pods but Velero's")
		var err error
		stopRestrictedV2, err = s.RestrictedV2(ctx, s.Namespace, localcluster.HostIP)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			fixed := restrictedPod("fixed-user")
			fixed.Spec.SecurityContext.RunAsUser = ptr.To[int64](65532)
			return s.Client.Create(ctx, fixed, client.DryRunAll)
		}).WithContext(ctx).WithTimeout(time.Minute).Should(MatchError(ContainSubstring("restricted-v2: runAsUser must be in the namespace's range")),
			"a pod with the user the chart once fixed is refused")

		// The CRD the release in velero kept (helm.sh/resource-policy: keep)
		// is adopted by the release in openshift-adp, as docs/install.md
		// says of a CRD created before.
		run(ctx, "kubectl annotate crd itemoperations.itemops.io meta.helm.sh/release-namespace="+s.Namespace+" --overwrite")

		By("docs/openshift.md: the values from the DPA, then helm install")
		Expect(s.RunDoc(ctx, "docs/openshift.md", "openshift-values")).To(Succeed())
		values, err := os.ReadFile(filepath.Join(s.Work, stack.ValuesFile))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(values)).To(And(ContainSubstring("mode: observe"), ContainSubstring("velero/velero-plugin-for-aws:v1.14.3"),
			ContainSubstring(stack.SamplePluginsImage), ContainSubstring("existingSecret: cloud-credentials")))
		Expect(s.MachineValues(firstTag, false)).To(Succeed())
		Expect(s.RunDoc(ctx, "docs/openshift.md", "openshift-install")).To(Succeed())

		By("itemops' pod as restricted-v2 admitted it: the range's first user, group 0, every plugin copied and discovered")
		Eventually(readyManagers).WithContext(ctx).WithTimeout(2 * time.Minute).Should(HaveLen(1))
		pod := managers(Default)[0]
		Expect(pod.Spec.SecurityContext.RunAsUser).To(Equal(ptr.To[int64](stack.UIDRangeStart)))
		for _, st := range pod.Status.InitContainerStatuses {
			Expect(st.State.Terminated).NotTo(BeNil(), "init container %s", st.Name)
			Expect(st.State.Terminated.ExitCode).To(BeZero(), "init container %s", st.Name)
		}
		Eventually(func() map[int][2]string { return processIDs("--velero-namespace=" + s.Namespace) }).WithContext(ctx).
			WithTimeout(time.Minute).Should(And(Not(BeEmpty()), HaveEach([2]string{strconv.Itoa(stack.UIDRangeStart), "0"})))
		Eventually(func() string { return s.Logs(ctx, s.Namespace, "app.kubernetes.io/name=itemops", 2000) }).WithContext(ctx).
			WithTimeout(time.Minute).Should(MatchRegexp(`Velero's release.*"support":\s*"Supported"`))

		By("a Backup and its Restore, with the sample plugins and the data mover, in observe mode")
		backupAndRestore(ctx, "adp-observed")
		Expect(veleroControllers(Default)).To(BeTrue())
		By("kubectl itemops finds openshift-adp by itself")
		Expect(run(ctx, "env -u VELERO_NAMESPACE kubectl itemops get backup adp-observed")).To(ContainSubstring("adp-observed"))
	})

	It("OpenShift: manage mode through the DPA by docs/openshift.md, then back to observe, then removed", func(ctx SpecContext) {
		needs(veleroOfOpenShift)
		// The last spec: restricted-v2's stand-in leaves with it.
		DeferCleanup(func(ctx SpecContext) {
			if stopRestrictedV2 != nil {
				Expect(stopRestrictedV2(ctx)).To(Succeed())
			}
		})
		Expect(s.RunDoc(ctx, "docs/openshift.md", "openshift-manage-dpa")).To(Succeed())
		By("values-from-dpa refuses while OADP has not applied the DPA")
		out, err := s.Run(ctx, "kubectl itemops values-from-dpa "+stack.DPAName+" -n "+s.Namespace)
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("wait for the OADP operator to reconcile the DPA"))
		By("OADP's part: Velero rolled out with --disable-controllers")
		Expect(s.ApplyDPA(ctx)).To(Succeed())
		Expect(veleroControllers(Default)).To(BeFalse())
		Expect(s.RunDoc(ctx, "docs/openshift.md", "openshift-values")).To(Succeed())
		Expect(s.MachineValues(firstTag, false)).To(Succeed())
		Expect(s.RunDoc(ctx, "docs/openshift.md", "openshift-upgrade")).To(Succeed())
		Eventually(func(g Gomega) []string {
			var args []string
			for _, p := range managers(g) {
				if ready(p) {
					args = append(args, p.Spec.Containers[0].Args...)
				}
			}
			return args
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(ContainElement("--mode=manage"))

		By("a Backup and its Restore in manage mode")
		backupAndRestore(ctx, "adp-managed")

		By("back to observe mode: itemops first, then Velero's controllers through the DPA")
		Expect(s.RunDoc(ctx, "docs/openshift.md", "openshift-observe")).To(Succeed())
		Expect(s.ApplyDPA(ctx)).To(Succeed())
		Expect(veleroControllers(Default)).To(BeTrue())
		Expect(s.RunDoc(ctx, "docs/openshift.md", "openshift-values")).To(Succeed())
		values, err := os.ReadFile(filepath.Join(s.Work, stack.ValuesFile))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(values)).To(ContainSubstring("mode: observe"))

		By("removed by helm uninstall")
		Expect(s.RunDoc(ctx, "docs/openshift.md", "openshift-uninstall")).To(Succeed())
		Eventually(func(g Gomega) []corev1.Pod { return managers(g) }).WithContext(ctx).WithTimeout(time.Minute).Should(BeEmpty())
	})
}

// restrictedPod is a pod as the chart runs its containers: no user,
// restricted otherwise.
func restrictedPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace}, Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "manager", Image: stack.ItemopsRepository + ":" + firstTag, SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
	}}
}
