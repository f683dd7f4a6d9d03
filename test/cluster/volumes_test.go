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
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/test/stack"
)

// volumeSums holds, by "namespace/claim", the digest of the files a pod
// wrote into each volume an application namespace got (volumefiles' Sum):
// what a restore of it must give back.
var volumeSums = map[string]string{}

// filledVolume creates a PVC of the CSI driver's StorageClass, which
// external-provisioner provisions, and has a pod write mib MiB of files into
// it through the driver's mount; it records their digest in volumeSums.
func filledVolume(ctx context.Context, namespace, name string, mib int) {
	GinkgoHelper()
	Expect(s.Client.Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(stack.StorageClass),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(int64(mib)<<21, resource.BinarySI)}},
		},
	})).To(Succeed())
	sum := volumePod(ctx, namespace, "fill-"+name, name, "write", fmt.Sprintf("--mib=%d", mib), "--seed="+namespace+"/"+name)
	volumeSums[namespace+"/"+name] = sum
}

// volumeSum has a pod sum the files of a PVC, read-only.
func volumeSum(ctx context.Context, namespace, claim string) string {
	GinkgoHelper()
	return volumePod(ctx, namespace, "sum-"+claim, claim, "sum")
}

// restoredVolumeSum sums the files of a PVC that Velero's file-system
// restore filled, but for the marks it left in .velero/: its restore
// helper, running as the restored pod's user (not root, as the restricted
// Pod Security Standard has it), may not remove what node-agent wrote there
// as root.
func restoredVolumeSum(ctx context.Context, namespace, claim string) string {
	GinkgoHelper()
	return volumePod(ctx, namespace, "sum-"+claim, claim, "sum", "--skip=.velero")
}

// volumePod runs volumefiles in a pod (as the restricted Pod Security
// Standard has it, the volume given to its fsGroup by the kubelet) with the
// claim at /data, waits for it to succeed, deletes it and returns its
// result, the digest of the volume's files.
func volumePod(ctx context.Context, namespace, name, claim string, args ...string) string {
	GinkgoHelper()
	readOnly := args[0] == "sum"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext:              stack.RestrictedPod(),
			Containers: []corev1.Container{{
				Name: "volumefiles", Image: stack.VolumeFilesImage, ImagePullPolicy: corev1.PullNever,
				Args:            append(args, "--dir=/data", "--result=/dev/termination-log"),
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: readOnly}},
				SecurityContext: stack.RestrictedContainer(),
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}},
		},
	}
	// The namespace's default ServiceAccount, without which no pod is
	// admitted, appears a moment after the namespace.
	Eventually(func() error { return s.Client.Create(ctx, pod) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	var result string
	Eventually(func(g Gomega) corev1.PodPhase {
		g.Expect(s.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		for _, st := range pod.Status.ContainerStatuses {
			if t := st.State.Terminated; t != nil {
				result = strings.TrimSpace(t.Message)
			}
		}
		return pod.Status.Phase
	}).WithContext(ctx).WithTimeout(3*time.Minute).Should(Equal(corev1.PodSucceeded),
		func() string {
			return fmt.Sprintf("pod %s/%s: %s", namespace, name, s.Diagnose(context.WithoutCancel(ctx), namespace))
		})
	Expect(s.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(s.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(), "pod %s/%s deleted", namespace, name)
	Expect(result).To(MatchRegexp(`^[0-9a-f]{64} \d+$`), "pod %s/%s's result", namespace, name)
	return result
}
