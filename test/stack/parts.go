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
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	// SlowS3URL reaches the same server through a link of SlowRate bytes
	// per second (test/throttle), for a location whose data movements last:
	// its bucket is SlowBucket (a location without a prefix refuses a
	// bucket holding anything but its own directories).
	SlowS3URL  = "http://10.96.0.71:7070"
	SlowBucket = "velero-slow"
	// FlakyBucket is a bucket of its own for a location whose server is
	// stopped and started (through the slow link): it may not share
	// SlowBucket, whose location has no prefix.
	FlakyBucket  = "velero-flaky"
	slowServerIP = "10.96.0.71"
	SlowRate     = 1 << 20
)

// sampleStateClaim is the PersistentVolumeClaim, in Velero's namespace,
// of the directory the sample plugins keep their operations in, shared by
// Velero's pod (Execute) and itemops' (Progress, Cancel), as a real
// plugin's operations live in its cloud.
const (
	sampleStateClaim = "sample-plugin-state"
	sampleStateMount = "/sample-state"
)

// RestrictedPod is the pod security context of the stack's own pods that
// meet the restricted Pod Security level: a non-root user, its group owning
// the volumes, the runtime's seccomp profile.
func RestrictedPod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// RestrictedContainer is the container security context that goes with
// RestrictedPod: no privilege escalation, no capabilities.
func RestrictedContainer() *corev1.SecurityContext {
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

// Storage runs versitygw with the bucket, behind its Service, and the slow
// link to it (SlowS3URL).
func (s *Stack) Storage(ctx context.Context) error {
	data, err := s.sharedDir("s3")
	if err != nil {
		return err
	}
	for _, bucket := range []string{Bucket, SlowBucket, FlakyBucket} {
		if err := os.MkdirAll(filepath.Join(data, bucket), 0o777); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(data, bucket), 0o777); err != nil {
			return err
		}
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
					SecurityContext: RestrictedPod(),
					Containers: []corev1.Container{{
						Name: "versitygw", Image: VersitygwImage, ImagePullPolicy: corev1.PullNever,
						Args:            []string{"--port", fmt.Sprintf(":%d", s3Port), "--access", s3.AccessKey, "--secret", s3.SecretKey, "posix", "/data"},
						Ports:           []corev1.ContainerPort{{Name: "s3", ContainerPort: s3Port}},
						SecurityContext: RestrictedContainer(),
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
	control, err := s.sharedDir("slow-link")
	if err != nil {
		return err
	}
	slowLabels := map[string]string{"app": "slow-link"}
	slow := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "slow-link", Namespace: StorageNamespace},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: slowLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: slowLabels},
				Spec: corev1.PodSpec{
					SecurityContext: RestrictedPod(),
					Containers: []corev1.Container{{
						Name: "throttle", Image: ThrottleImage, ImagePullPolicy: corev1.PullNever,
						Args: []string{fmt.Sprintf("--listen=:%d", s3Port), fmt.Sprintf("--to=%s:%d", s3ServiceIP, s3Port),
							fmt.Sprintf("--rate=%d", SlowRate), "--pause-file=/control/paused"},
						Ports:           []corev1.ContainerPort{{Name: "s3", ContainerPort: s3Port}},
						SecurityContext: RestrictedContainer(),
						VolumeMounts:    []corev1.VolumeMount{{Name: "control", MountPath: "/control", ReadOnly: true}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(s3Port)}},
							PeriodSeconds: 1},
					}},
					Volumes: []corev1.Volume{{Name: "control", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: control, Type: ptr.To(corev1.HostPathDirectory)}}}},
				},
			},
		},
	}
	slowSvc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "slow-link", Namespace: StorageNamespace},
		Spec: corev1.ServiceSpec{ClusterIP: slowServerIP, Selector: slowLabels,
			Ports: []corev1.ServicePort{{Name: "s3", Port: s3Port, TargetPort: intstr.FromString("s3")}}},
	}
	if err := s.create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: StorageNamespace}}, deploy, svc, slow, slowSvc); err != nil {
		return err
	}
	if err := s.WaitAvailable(ctx, StorageNamespace, "versitygw", 2*time.Minute); err != nil {
		return err
	}
	return s.WaitAvailable(ctx, StorageNamespace, "slow-link", 2*time.Minute)
}

// VeleroNamespace creates Velero's namespace as `velero install` labels
// it, at the privileged Pod Security level that node-agent's host paths
// need (`velero install` keeps an existing namespace), and the volume the
// sample plugins share.
func (s *Stack) VeleroNamespace(ctx context.Context) error {
	dir, err := s.sharedDir("sample-state")
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.Namespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "privileged",
		"pod-security.kubernetes.io/audit":   "privileged",
		"pod-security.kubernetes.io/warn":    "privileged",
	}}}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "itemops-sample-plugin-state-" + s.Namespace},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{Namespace: s.Namespace, Name: sampleStateClaim},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)}},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: sampleStateClaim, Namespace: s.Namespace},
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

// AdjustVelero makes what `velero install` made fit this machine: the
// sample plugins added with `velero plugin add`, and their directory
// mounted into Velero's pod; node-agent's host paths moved to this
// kubelet's root directory (`velero install --kubelet-root-dir` would do the
// same; the README's command is a node's with /var/lib/kubelet).
func (s *Stack) AdjustVelero(ctx context.Context) error {
	if _, err := s.Run(ctx, "velero plugin add --confirm "+SamplePluginsImage); err != nil {
		return err
	}
	volume, mount, env := sampleState()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		deploy := &appsv1.Deployment{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "velero"}, deploy); err != nil {
			return err
		}
		spec := &deploy.Spec.Template.Spec
		for i := range spec.Containers {
			c := &spec.Containers[i]
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
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "node-agent"}, ds); err != nil {
			return err
		}
		for i := range ds.Spec.Template.Spec.Volumes {
			v := &ds.Spec.Template.Spec.Volumes[i]
			if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, "/var/lib/kubelet/") {
				v.HostPath.Path = filepath.Join(s.Cluster.KubeletDir(), strings.TrimPrefix(v.HostPath.Path, "/var/lib/kubelet/"))
			}
		}
		return s.Client.Update(ctx, ds)
	})
	if err != nil {
		return fmt.Errorf("moving node-agent's host paths to the kubelet's root directory: %w", err)
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

// SlowLinkPause is the host file whose existence holds every byte on the
// slow link (SlowS3URL) back, its connections open.
func (s *Stack) SlowLinkPause() string {
	return filepath.Join(s.Work, "volumes", "slow-link", "paused")
}

// SampleStateDir is the host directory behind the sample plugins' shared
// volume: one JSON file per operation (package sim's State).
func (s *Stack) SampleStateDir() string { return filepath.Join(s.Work, "volumes", "sample-state") }
