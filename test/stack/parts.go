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
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"

	"github.com/itemops/itemops/test/csisim"
	"github.com/itemops/itemops/test/s3"
)

// The bucket's server: versitygw in namespace storage behind a Service
// with a fixed ClusterIP (pods have no DNS), its data in a directory of the
// working directory.
const (
	StorageNamespace = "storage"
	s3ServiceIP      = "10.96.0.70"
	s3Port           = 7070
	// S3URL is the BackupStorageLocation's s3Url.
	S3URL = "http://10.96.0.70:7070"
)

// StandinNamespace holds the CSI snapshot controller's stand-in.
const StandinNamespace = "csi-standin"

// sampleStateClaim is the PersistentVolumeClaim, in Velero's namespace,
// of the directory the sample plugins keep their operations in, shared by
// Velero's pod (Execute) and itemops' (Progress, Cancel), as a real
// plugin's operations live in its cloud.
const (
	sampleStateClaim = "sample-plugin-state"
	sampleStateMount = "/sample-state"
)

func restrictedPod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// sharedDir makes a directory of the working directory that any pod's
// user may write, for a hostPath volume.
func (s *Stack) sharedDir(name string) (string, error) {
	dir := filepath.Join(s.Work, "volumes", name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o777)
}

func (s *Stack) create(ctx context.Context, objs ...client.Object) error {
	for _, o := range objs {
		if err := s.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// Storage runs versitygw with the bucket, behind its Service.
func (s *Stack) Storage(ctx context.Context) error {
	data, err := s.sharedDir("s3")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(data, Bucket), 0o777); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(data, Bucket), 0o777); err != nil {
		return err
	}
	labels := map[string]string{"app": "versitygw"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "versitygw", Namespace: StorageNamespace},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: restrictedPod(),
					Containers: []corev1.Container{{
						Name: "versitygw", Image: VersitygwImage, ImagePullPolicy: corev1.PullNever,
						Args:            []string{"--port", fmt.Sprintf(":%d", s3Port), "--access", s3.AccessKey, "--secret", s3.SecretKey, "posix", "/data"},
						Ports:           []corev1.ContainerPort{{Name: "s3", ContainerPort: s3Port}},
						SecurityContext: restrictedContainer(),
						VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(s3Port)}},
							PeriodSeconds: 1},
					}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: data, Type: ptr.To(corev1.HostPathDirectory)}}}},
				},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "versitygw", Namespace: StorageNamespace},
		Spec: corev1.ServiceSpec{ClusterIP: s3ServiceIP, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "s3", Port: s3Port, TargetPort: intstr.FromString("s3")}}},
	}
	if err := s.create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: StorageNamespace}}, deploy, svc); err != nil {
		return err
	}
	return s.WaitAvailable(ctx, StorageNamespace, "versitygw", 2*time.Minute)
}

// CSI installs the CSI snapshot CRDs (Velero's install does not), the
// StorageClass and VolumeSnapshotClass of the stand-ins' driver, and the
// snapshot controller's stand-in as a Deployment with its own
// ServiceAccount and ClusterRole.
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
	sim := &csisim.Cluster{Client: s.Client, Driver: Driver}
	if err := sim.StorageClasses(ctx); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	labels := map[string]string{"app": "snapshot-controller"}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: StandinNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "snapshot-controller", Namespace: StandinNamespace}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "itemops-csi-standin-snapshot-controller"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots", "volumesnapshots/status", "volumesnapshotcontents", "volumesnapshotcontents/status", "volumesnapshotclasses"},
				Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims", "persistentvolumes"}, Verbs: []string{"get", "list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "itemops-csi-standin-snapshot-controller"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "itemops-csi-standin-snapshot-controller"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "snapshot-controller", Namespace: StandinNamespace}}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "snapshot-controller", Namespace: StandinNamespace},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName: "snapshot-controller",
						SecurityContext:    restrictedPod(),
						Containers: []corev1.Container{{
							Name: "snapshot-controller", Image: StandinImage, ImagePullPolicy: corev1.PullNever,
							Args:            []string{"--role=" + string(csisim.RoleSnapshotController), "--namespace=" + VeleroNamespace, "--driver=" + Driver},
							SecurityContext: restrictedContainer(),
						}},
					},
				},
			},
		},
	}
	if err := s.create(ctx, objs...); err != nil {
		return err
	}
	return s.WaitAvailable(ctx, StandinNamespace, "snapshot-controller", 2*time.Minute)
}

// VeleroNamespace creates Velero's namespace enforcing the restricted Pod
// Security Standard, before `velero install` (which keeps an existing
// namespace), and the volume the sample plugins share.
func (s *Stack) VeleroNamespace(ctx context.Context) error {
	dir, err := s.sharedDir("sample-state")
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: VeleroNamespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "itemops-sample-plugin-state"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{Namespace: VeleroNamespace, Name: sampleStateClaim},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)}},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: sampleStateClaim, Namespace: VeleroNamespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: ptr.To(""),
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := os.WriteFile(filepath.Join(s.Work, "credentials-velero"), s3.Credentials(), 0o600); err != nil {
		return err
	}
	return s.create(ctx, ns, pv, pvc)
}

// sampleState is the sample plugins' shared directory as a pod mounts it.
func sampleState() (corev1.Volume, corev1.VolumeMount, corev1.EnvVar) {
	return corev1.Volume{Name: "sample-state", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: sampleStateClaim}}},
		corev1.VolumeMount{Name: "sample-state", MountPath: sampleStateMount},
		corev1.EnvVar{Name: "ITEMOPS_SAMPLE_STATE_DIR", Value: sampleStateMount}
}

// AdjustVelero makes what `velero install` made fit this machine and the
// namespace: the sample plugins added with `velero plugin add`; every
// container of Velero's pod under the restricted Pod Security Standard
// (`velero install` sets no securityContext) and the sample plugins'
// directory mounted; node-agent's container replaced by its stand-in
// (there is no real volume to move), in Velero's DaemonSet.
func (s *Stack) AdjustVelero(ctx context.Context) error {
	if _, err := s.Run(ctx, "velero plugin add --confirm "+SamplePluginsImage); err != nil {
		return err
	}
	volume, mount, env := sampleState()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		deploy := &appsv1.Deployment{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: VeleroNamespace, Name: "velero"}, deploy); err != nil {
			return err
		}
		spec := &deploy.Spec.Template.Spec
		spec.SecurityContext = restrictedPod()
		for i := range spec.InitContainers {
			spec.InitContainers[i].SecurityContext = restrictedContainer()
		}
		for i := range spec.Containers {
			c := &spec.Containers[i]
			c.SecurityContext = restrictedContainer()
			if c.Name == "velero" {
				c.VolumeMounts = append(c.VolumeMounts, mount)
				c.Env = append(c.Env, env)
			}
		}
		spec.Volumes = append(spec.Volumes, volume)
		return s.Client.Update(ctx, deploy)
	})
	if err != nil {
		return fmt.Errorf("adjusting Velero's Deployment: %w", err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds := &appsv1.DaemonSet{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: VeleroNamespace, Name: "node-agent"}, ds); err != nil {
			return err
		}
		pod := &ds.Spec.Template.Spec
		pod.SecurityContext = restrictedPod()
		pod.Volumes = nil
		pod.InitContainers = nil
		pod.Containers = []corev1.Container{{
			Name: "node-agent", Image: StandinImage, ImagePullPolicy: corev1.PullNever,
			Args:            []string{"--role=" + string(csisim.RoleNodeAgent), "--namespace=" + VeleroNamespace, "--driver=" + Driver},
			Env:             []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
			SecurityContext: restrictedContainer(),
		}}
		return s.Client.Update(ctx, ds)
	})
	if err != nil {
		return fmt.Errorf("replacing node-agent by its stand-in: %w", err)
	}
	return nil
}

// WaitAvailable waits until a Deployment's pods of its latest template are
// all available.
func (s *Stack) WaitAvailable(ctx context.Context, namespace, name string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		d := &appsv1.Deployment{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, d); err != nil {
			return false, nil
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
			d.Status.AvailableReplicas == want && d.Status.Replicas == want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for Deployment %s/%s: %w\n%s", namespace, name, err, s.Diagnose(context.WithoutCancel(ctx), namespace))
	}
	return nil
}

// SampleStateDir is the host directory behind the sample plugins' shared
// volume: one JSON file per operation (package sim's State).
func (s *Stack) SampleStateDir() string { return filepath.Join(s.Work, "volumes", "sample-state") }
