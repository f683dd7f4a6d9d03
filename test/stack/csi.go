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
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"

	"github.com/itemops/itemops/test/csisim"
)

// The CSI parts: the snapshot controller and the driver's node plugin
// (test/csidriver with its csi-provisioner and csi-snapshotter sidecars)
// in namespace CSINamespace; the driver's StorageClass and
// VolumeSnapshotClass, which Velero's CSI data mover uses.
const (
	CSINamespace        = "csi-itemops"
	StorageClass        = "csi-itemops"
	VolumeSnapshotClass = "csi-itemops-snapshots"
	// csiDriverDaemonSet runs the driver and its sidecars on the node.
	csiDriverDaemonSet = "csi-itemops-node"
)

// CSIDataDir is the host directory of the driver's volumes and snapshots:
// volumes/<id>/data is what a pod that mounts the volume sees, and a file
// fail-snapshot/<volume id> makes the driver refuse that volume's
// snapshots, with the file's content as the error.
func (s *Stack) CSIDataDir() string { return filepath.Join(s.Work, "volumes", "csi") }

// CSI installs the CSI snapshot CRDs (Velero's install does not), the
// snapshot controller, the driver (its CSIDriver object and its node
// plugin with the provisioner and snapshotter sidecars, each with the
// ClusterRole of its project's deploy/kubernetes/rbac.yaml), the
// StorageClass and the VolumeSnapshotClass.
func (s *Stack) CSI(ctx context.Context) error {
	files, err := csisim.CRDs(s.Root)
	if err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			return fmt.Errorf("reading %s: %w", f, err)
		}
		if err := s.create(ctx, crd); err != nil {
			return err
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := s.Client.List(ctx, &snapshotv1.VolumeSnapshotClassList{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("waiting for the CSI snapshot CRDs: %w", err)
	}
	if err := os.MkdirAll(s.CSIDataDir(), 0o755); err != nil {
		return err
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CSINamespace, Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "privileged",
		}}},
		&storagev1.CSIDriver{
			ObjectMeta: metav1.ObjectMeta{Name: Driver},
			Spec: storagev1.CSIDriverSpec{
				AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(false),
				// The kubelet gives a volume to the pod's fsGroup, as for
				// a disk's filesystem.
				FSGroupPolicy:        ptr.To(storagev1.FileFSGroupPolicy),
				VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
			},
		},
		&storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{Name: StorageClass}, Provisioner: Driver,
			ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
		},
		&snapshotv1.VolumeSnapshotClass{
			ObjectMeta:     metav1.ObjectMeta{Name: VolumeSnapshotClass, Labels: map[string]string{"velero.io/csi-volumesnapshot-class": "true"}},
			Driver:         Driver,
			DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
		},
	}
	objs = append(objs, s.snapshotController()...)
	objs = append(objs, s.csiNodePlugin()...)
	if err := s.create(ctx, objs...); err != nil {
		return err
	}
	if err := s.WaitAvailable(ctx, CSINamespace, "snapshot-controller", 2*time.Minute); err != nil {
		return err
	}
	if err := s.WaitDaemonSet(ctx, CSINamespace, csiDriverDaemonSet, 2*time.Minute); err != nil {
		return err
	}
	return s.waitCSINode(ctx)
}

// waitCSINode waits until the kubelet registered the driver on the node
// (its CSINode lists it): before that a pod of its volumes cannot start.
func (s *Stack) waitCSINode(ctx context.Context) error {
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes := &storagev1.CSINodeList{}
		if err := s.Client.List(ctx, nodes); err != nil {
			return false, nil
		}
		for _, n := range nodes.Items {
			for _, d := range n.Spec.Drivers {
				if d.Name == Driver {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the kubelet to register %s: %w\n%s", Driver, err, s.Diagnose(context.WithoutCancel(ctx), CSINamespace))
	}
	return nil
}

// clusterRole is a ClusterRole with its binding to a ServiceAccount of
// CSINamespace.
func clusterRole(account string, rules ...rbacv1.PolicyRule) []client.Object {
	name := "itemops-" + account
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account, Namespace: CSINamespace}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: CSINamespace}}},
	}
}

var (
	eventsRule = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "watch", "create", "update", "patch"}}
	readVerbs  = []string{"get", "list", "watch"}
)

// snapshotController is external-snapshotter's snapshot controller with
// the rules of its rbac-snapshot-controller.yaml (without leader election
// and group snapshots, neither of which runs here).
func (s *Stack) snapshotController() []client.Object {
	labels := map[string]string{"app": "snapshot-controller"}
	objs := clusterRole("snapshot-controller",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: readVerbs},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "update"}},
		rbacv1.PolicyRule{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: readVerbs},
		eventsRule,
		rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshotclasses"}, Verbs: readVerbs},
		rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshotcontents"},
			Verbs: []string{"create", "get", "list", "watch", "update", "delete", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshotcontents/status"}, Verbs: []string{"patch"}},
		rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"}, Verbs: []string{"create", "get", "list", "watch", "update", "patch", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots/status"}, Verbs: []string{"update", "patch"}},
	)
	return append(objs, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "snapshot-controller", Namespace: CSINamespace},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "snapshot-controller",
					SecurityContext:    RestrictedPod(),
					Containers: []corev1.Container{{
						Name: "snapshot-controller", Image: SnapshotControllerImage, ImagePullPolicy: corev1.PullNever,
						Args:            []string{"--v=2", "--leader-election=false", "--retry-interval-max=10s"},
						SecurityContext: RestrictedContainer(),
					}},
				},
			},
		},
	})
}

// csiNodePlugin is the driver's DaemonSet: test/csidriver serving its CSI
// socket in the kubelet's plugins directory and registering through its
// plugins_registry, privileged with Bidirectional propagation into the
// pods' directory (its bind mounts are the pods' volumes), with
// csi-provisioner and csi-snapshotter beside it on the same socket, each
// with the rules of its project's rbac.yaml.
func (s *Stack) csiNodePlugin() []client.Object {
	kubelet := s.Cluster.KubeletDir()
	socketDir := filepath.Join(kubelet, "plugins", Driver)
	const socket = "/csi/csi.sock"
	labels := map[string]string{"app": csiDriverDaemonSet}
	hostPath := func(name, path string, kind corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(kind)}}}
	}
	socketMount := corev1.VolumeMount{Name: "socket-dir", MountPath: "/csi"}
	sidecar := func(name, image string, args ...string) corev1.Container {
		return corev1.Container{
			Name: name, Image: image, ImagePullPolicy: corev1.PullNever,
			Args:         append([]string{"--v=2", "--csi-address=" + socket, "--leader-election=false"}, args...),
			VolumeMounts: []corev1.VolumeMount{socketMount},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		}
	}
	objs := clusterRole("csi-itemops",
		// csi-provisioner
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "update"}},
		rbacv1.PolicyRule{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses", "csinodes", "volumeattachments"}, Verbs: readVerbs},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: readVerbs},
		rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"}, Verbs: []string{"get", "list"}},
		// csi-snapshotter
		rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshotclasses"}, Verbs: readVerbs},
		rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshotcontents"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshotcontents/status"}, Verbs: []string{"update", "patch"}},
		eventsRule,
	)
	return append(objs, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: csiDriverDaemonSet, Namespace: CSINamespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "csi-itemops",
					Containers: []corev1.Container{
						{
							Name: "driver", Image: CSIDriverImage, ImagePullPolicy: corev1.PullNever,
							Args: []string{"--name=" + Driver, "--root=/var/lib/itemops-csi", "--endpoint=" + socket,
								"--kubelet-endpoint=" + filepath.Join(socketDir, "csi.sock"), "--registration-dir=/registration"},
							Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
								FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
							SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
							VolumeMounts: []corev1.VolumeMount{
								socketMount,
								{Name: "registration-dir", MountPath: "/registration"},
								{Name: "data", MountPath: "/var/lib/itemops-csi"},
								// The pods' volumes at the path the kubelet
								// gives, so that its bind mounts reach them.
								{Name: "pods-dir", MountPath: filepath.Join(kubelet, "pods"),
									MountPropagation: ptr.To(corev1.MountPropagationBidirectional)},
							},
						},
						sidecar("csi-provisioner", CSIProvisionerImage),
						// A snapshot the driver failed to make ready is asked
						// again within seconds of its fix, not minutes.
						sidecar("csi-snapshotter", CSISnapshotterImage, "--retry-interval-max=10s"),
					},
					Volumes: []corev1.Volume{
						hostPath("socket-dir", socketDir, corev1.HostPathDirectoryOrCreate),
						hostPath("registration-dir", filepath.Join(kubelet, "plugins_registry"), corev1.HostPathDirectory),
						hostPath("pods-dir", filepath.Join(kubelet, "pods"), corev1.HostPathDirectory),
						hostPath("data", s.CSIDataDir(), corev1.HostPathDirectory),
					},
				},
			},
		},
	})
}

// WaitDaemonSet waits until a DaemonSet's pods of its latest template are
// Ready on every node it should run on.
func (s *Stack) WaitDaemonSet(ctx context.Context, namespace, name string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ds := &appsv1.DaemonSet{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, ds); err != nil {
			return false, nil
		}
		st := ds.Status
		return st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled > 0 &&
			st.UpdatedNumberScheduled == st.DesiredNumberScheduled && st.NumberReady == st.DesiredNumberScheduled, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for DaemonSet %s/%s: %w\n%s", namespace, name, err, s.Diagnose(context.WithoutCancel(ctx), namespace))
	}
	return nil
}
