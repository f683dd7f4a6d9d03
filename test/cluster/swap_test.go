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
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/stack"
)

// pollInterval is the chart's syncFrequency: how often an operation in
// progress is polled.
const pollInterval = 10 * time.Second

// pluginFile is the path, on the node, of a binary in a pod's plugin
// directory (its emptyDir "plugins").
func pluginFile(g Gomega, pod, binary string) string {
	p := &corev1.Pod{}
	g.Expect(s.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: pod}, p)).To(Succeed())
	return filepath.Join(s.Cluster.Dir, "kubelet", "pods", string(p.UID), "volumes", "kubernetes.io~empty-dir", "plugins", binary)
}

// replaceFile renames a file with data over path, as an installer swaps a
// binary, keeping its mode.
func replaceFile(path string, data []byte) {
	GinkgoHelper()
	info, err := os.Stat(path)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(path+".new", data, info.Mode().Perm())).To(Succeed())
	Expect(os.Rename(path+".new", path)).To(Succeed())
}

// managerPluginProcesses are the node's processes of a plugin binary that
// an itemops manager started (Velero's pod runs the same binary as
// /plugins/<binary> too: its parent is the velero server).
func managerPluginProcesses(binary string) []int {
	GinkgoHelper()
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.HasPrefix(cmdline, []byte("/plugins/"+binary+"\x00")) && string(cmdline) != "/plugins/"+binary {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The parent's pid is the second field after the command's ")".
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		parent, err := os.ReadFile(filepath.Join("/proc", fields[1], "cmdline"))
		if err == nil && bytes.Contains(parent, []byte("--mode=")) {
			out = append(out, pid)
		}
	}
	return out
}

// binaryChangedAfterSwap swaps the sample plugin binary in the manager
// pod's plugin directory from the node while a Backup's operation is in
// flight, kills the manager's process of it, and checks that the
// operation shows PluginBinaryChanged, with its Warning Event, within two
// poll intervals (the guarantee; the wait allows a loaded machine more),
// that the changed file never ran, and that putting the binary back lets
// the operation end.
func binaryChangedAfterSwap(ctx context.Context, pod, namespace, backup string) {
	GinkgoHelper()
	appNamespace(ctx, namespace, item{name: "swapped", size: "1536Mi", speed: "16Mi"})
	run(ctx, fmt.Sprintf("velero backup create %s --include-namespaces %s", backup, namespace))
	waitMoving(ctx, "Backup", backup, 1)

	path := pluginFile(Default, pod, stack.SamplePluginsBinary)
	original, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	ran := filepath.Join(s.Work, "swapped-binary-ran-"+backup)
	By("swapping " + path + " from the node and killing the manager's process of it")
	replaceFile(path, []byte("#!/bin/sh\ntouch "+ran+"\n"))
	DeferCleanup(func() {
		if data, err := os.ReadFile(path); err == nil && !bytes.Equal(data, original) {
			replaceFile(path, original)
		}
	})
	processes := managerPluginProcesses(stack.SamplePluginsBinary)
	Expect(processes).NotTo(BeEmpty(), "the manager runs the plugin")
	for _, pid := range processes {
		Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
	}
	swapped := time.Now()

	Eventually(func(g Gomega) *itemopsv1alpha1.ItemOperation {
		op := operationsOf(g, "Backup", backup)["swapped"]
		if op.Status.Phase.IsTerminal() {
			StopTrying(fmt.Sprintf("the operation ended %s before the swap was seen: %+v", op.Status.Phase, op.Status)).Now()
		}
		return &op
	}).WithContext(ctx).WithTimeout(2*pollInterval + time.Minute).WithPolling(time.Second).Should(
		WithTransform(func(op *itemopsv1alpha1.ItemOperation) string {
			c := apimeta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionProgressing)
			if c == nil {
				return ""
			}
			return c.Reason + ": " + c.Message
		}, MatchRegexp(`^PluginBinaryChanged: .*/plugins/`+stack.SamplePluginsBinary+` is not the binary itemops discovered`)))
	seen := time.Since(swapped)
	GinkgoWriter.Printf("PluginBinaryChanged shown %s after the swap (the guarantee: %s)\n", seen.Round(time.Second), 2*pollInterval)
	Eventually(func(g Gomega) []string {
		events := &corev1.EventList{}
		g.Expect(s.Client.List(ctx, events, client.InNamespace(s.Namespace))).To(Succeed())
		var reasons []string
		for _, e := range events.Items {
			if e.InvolvedObject.Name == operationsOf(g, "Backup", backup)["swapped"].Name && e.Type == corev1.EventTypeWarning {
				reasons = append(reasons, e.Reason)
			}
		}
		return reasons
	}).WithContext(ctx).WithTimeout(time.Minute).Should(ContainElement(itemopsv1alpha1.ReasonPluginBinaryChanged))
	Expect(ran).NotTo(BeAnExistingFile(), "the swapped file ran")

	By("putting the discovered binary back: the operation goes on and ends")
	replaceFile(path, original)
	Eventually(backupPhase(backup)).WithContext(ctx).WithTimeout(4 * time.Minute).Should(Equal(velerov1api.BackupPhaseCompleted))
	Eventually(func(g Gomega) itemopsv1alpha1.OperationPhase {
		return operationsOf(g, "Backup", backup)["swapped"].Status.Phase
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Equal(itemopsv1alpha1.OperationPhaseCompleted))
}
