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
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/localcluster"
)

// OLM's parts, built here from their modules by hack/cached-binary.sh, by
// the names OLM's own install manifests and its catalog operator's flags
// give them.
const (
	// OLMImage holds OLM's olm and catalog operators, packageserver and
	// the tools of its bundle unpack Jobs (copy-content, cpb, /bin/cp).
	OLMImage = "quay.io/operator-framework/olm:v0.36.0"
	// OPMImage is operator-registry's opm with grpc_health_probe: OLM
	// unpacks bundles with it.
	OPMImage = "quay.io/operator-framework/opm:v1.55.0"
	// RegistryImage is CNCF Distribution's registry.
	RegistryImage = "registry:3.1.2"
	// RegistryNamespace is where the registry runs.
	RegistryNamespace = "registry"
	// OLMNamespace is where OLM's operators run (its quickstart's).
	OLMNamespace = "olm"
	// RegistryPort is the registry's port on the node.
	RegistryPort = 5000
	// CoreDNSImage is CoreDNS, the cluster's DNS: OLM reaches a
	// catalog's pod by its Service's name.
	CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.15.0"
	// ClusterDNSIP is the ClusterIP of the DNS Service (kube-system/kube-dns),
	// which kubelet gives pods (localcluster.Config.ClusterDNS).
	ClusterDNSIP = "10.96.0.10"
)

// OLMTools are OLM's binaries, its install manifests and the tools that
// make and push a catalog.
type OLMTools struct {
	// Dir holds olm, catalog, package-server, copy-content, cpb and
	// chart/ (OLM's helm chart, with its upstream-values.yaml).
	Dir                      string
	Opm, GRPCHealthProbe, Cp string
	Registry, Crane, CoreDNS string
}

// FindOLMTools builds (once per machine) and locates OLM's parts.
func FindOLMTools(ctx context.Context, root string) (OLMTools, error) {
	var t OLMTools
	var olm string
	for _, b := range []struct {
		name string
		into *string
	}{{"olm", &olm}, {"opm", &t.Opm}, {"grpc-health-probe", &t.GRPCHealthProbe}, {"cp", &t.Cp},
		{"registry", &t.Registry}, {"crane", &t.Crane}, {"coredns", &t.CoreDNS}} {
		var err error
		if *b.into, err = hackOutput(ctx, root, "cached-binary.sh", b.name); err != nil {
			return t, err
		}
	}
	t.Dir = filepath.Dir(olm)
	return t, nil
}

// BuildOLMImages builds OLM's image, opm's and the registry's, as
// tarballs in dir, and returns them.
func BuildOLMImages(t OLMTools, dir string) ([]string, error) {
	config := filepath.Join(dir, "registry-config.yml")
	// The registry's own default configuration, storage on the pod's
	// volume.
	if err := os.WriteFile(config, []byte(`version: 0.1
storage:
  filesystem:
    rootdirectory: /var/lib/registry
  delete:
    enabled: true
http:
  addr: :5000
`), 0o644); err != nil {
		return nil, err
	}
	olmFiles := map[string]string{"/bin/cp": t.Cp}
	for _, b := range []string{"olm", "catalog", "package-server", "copy-content", "cpb"} {
		olmFiles["/bin/"+b] = filepath.Join(t.Dir, b)
	}
	const user = "1001"
	images := []localcluster.Image{
		// As OLM's Dockerfile: its binaries, and the cp its bundle
		// unpack Jobs run.
		{Ref: OLMImage, Files: olmFiles, User: user, Entrypoint: []string{"/bin/olm"}},
		{Ref: OPMImage, Files: map[string]string{"/bin/opm": t.Opm, "/bin/grpc_health_probe": t.GRPCHealthProbe},
			Dirs: []string{"/tmp"}, User: user, Entrypoint: []string{"/bin/opm"}},
		{Ref: RegistryImage, Files: map[string]string{"/bin/registry": t.Registry, "/etc/distribution/config.yml": config},
			Dirs: []string{"/var/lib/registry"}, Entrypoint: []string{"/bin/registry"}, Cmd: []string{"serve", "/etc/distribution/config.yml"}},
		{Ref: CoreDNSImage, Files: map[string]string{"/coredns": t.CoreDNS}, User: "65532:65532", Entrypoint: []string{"/coredns"}},
	}
	return writeImages(dir, images)
}

// InstallClusterDNS runs CoreDNS behind ClusterDNSIP, as kubeadm runs it,
// answering for the cluster's Services and pods only (no forwarding: no
// name is looked up off this machine).
func (s *Stack) InstallClusterDNS(ctx context.Context) error {
	const ns, name = "kube-system", "coredns"
	labels := map[string]string{"k8s-app": "kube-dns"}
	corefile := `.:1053 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
`
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"Corefile": corefile}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				ServiceAccountName: name,
				DNSPolicy:          corev1.DNSDefault,
				SecurityContext:    RestrictedPod(),
				Containers: []corev1.Container{{Name: "coredns", Image: CoreDNSImage, ImagePullPolicy: corev1.PullNever,
					Args:            []string{"-conf", "/etc/coredns/Corefile"},
					SecurityContext: RestrictedContainer(),
					Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 1053, Protocol: corev1.ProtocolUDP},
						{Name: "dns-tcp", ContainerPort: 1053, Protocol: corev1.ProtocolTCP}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: "/ready", Port: intstr.FromInt32(8181)}}, PeriodSeconds: 2},
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns"}}}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}},
			}},
		}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns, Labels: labels}, Spec: corev1.ServiceSpec{
			ClusterIP: ClusterDNSIP, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(1053), Protocol: corev1.ProtocolUDP},
				{Name: "dns-tcp", Port: 53, TargetPort: intstr.FromInt32(1053), Protocol: corev1.ProtocolTCP}},
		}},
	}
	if err := s.create(ctx, objs...); err != nil {
		return err
	}
	return s.WaitAvailable(ctx, ns, name, 3*time.Minute)
}

// RegistryHost is the registry's "host:port", as the node and this
// machine reach it.
func RegistryHost() string {
	return net.JoinHostPort(localcluster.NodeIP, fmt.Sprint(RegistryPort))
}

// InstallRegistry runs an image registry on the node's network, at
// RegistryHost, without TLS (the node's containerd told so), as a cluster
// of users has one: OLM pulls the catalogs and bundles pushed to it.
func (s *Stack) InstallRegistry(ctx context.Context) error {
	if err := s.Cluster.PlainHTTPRegistry(RegistryHost()); err != nil {
		return err
	}
	labels := map[string]string{"app": "registry"}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: RegistryNamespace}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "registry", Namespace: RegistryNamespace}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				HostNetwork: true,
				Containers: []corev1.Container{{Name: "registry", Image: RegistryImage, ImagePullPolicy: corev1.PullNever,
					Env:   []corev1.EnvVar{{Name: "REGISTRY_HTTP_ADDR", Value: RegistryHost()}},
					Ports: []corev1.ContainerPort{{ContainerPort: RegistryPort, HostPort: RegistryPort}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: "/v2/", Port: intstr.FromInt32(RegistryPort), Host: localcluster.NodeIP}}, PeriodSeconds: 2},
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/registry"}}}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			}},
		}},
	}
	if err := s.create(ctx, objs...); err != nil {
		return err
	}
	return s.WaitAvailable(ctx, RegistryNamespace, "registry", 3*time.Minute)
}

// InstallOLM installs OLM as its releases' manifests do: its helm chart
// rendered with its upstream values, the images the ones built here (its
// catalog operator unpacking bundles with OPMImage), without cert-manager
// (OLM makes packageserver's certificate itself) and without the chart's
// catalog of operatorhub.io (out of reach here); then it waits for its
// operators and packageserver.
func (s *Stack) InstallOLM(ctx context.Context, t OLMTools) error {
	chart := filepath.Join(t.Dir, "chart")
	render := exec.CommandContext(ctx, s.Bins.Helm, "template", "olm", chart, "--include-crds",
		"-f", filepath.Join(chart, "upstream-values.yaml"),
		"--set", "olm.image.ref="+OLMImage, "--set", "catalog.image.ref="+OLMImage,
		"--set", "package.image.ref="+OLMImage, "--set", "package.image.pullPolicy=IfNotPresent",
		"--set", "catalog.opmImageArgs=--opmImage="+OPMImage, "--set", "certManager.enabled=false")
	var stderr bytes.Buffer
	render.Stderr = &stderr
	out, err := render.Output()
	if err != nil {
		return fmt.Errorf("helm template OLM's chart: %w: %s", err, stderr.String())
	}
	objs, err := envtest.Decode(bytes.NewReader(out))
	if err != nil {
		return err
	}
	var crds []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o)
			if err := s.apply(ctx, o); err != nil {
				return fmt.Errorf("OLM's CRD %s: %w", o.GetName(), err)
			}
		}
	}
	if err := s.waitCRDs(ctx, crds); err != nil {
		return err
	}
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "CatalogSource" {
			continue
		}
		if err := s.apply(ctx, o); err != nil {
			return fmt.Errorf("OLM's %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	for _, d := range []string{"olm-operator", "catalog-operator"} {
		if err := s.WaitAvailable(ctx, OLMNamespace, d, 3*time.Minute); err != nil {
			return err
		}
	}
	return s.WaitCSV(ctx, OLMNamespace, "packageserver", 5*time.Minute)
}

// apply applies an object server-side, as `kubectl apply --server-side`.
func (s *Stack) apply(ctx context.Context, o *unstructured.Unstructured) error {
	return s.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("itemops-test"), client.ForceOwnership)
}

// WaitCSV waits for a ClusterServiceVersion's phase Succeeded.
func (s *Stack) WaitCSV(ctx context.Context, namespace, name string, timeout time.Duration) error {
	var phase, message string
	var getErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		csv := &unstructured.Unstructured{}
		csv.SetAPIVersion("operators.coreos.com/v1alpha1")
		csv.SetKind("ClusterServiceVersion")
		if getErr = s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, csv); getErr != nil {
			return false, nil
		}
		phase, _, _ = unstructured.NestedString(csv.Object, "status", "phase")
		message, _, _ = unstructured.NestedString(csv.Object, "status", "message")
		return phase == "Succeeded", nil
	})
	if err != nil {
		ctx := context.WithoutCancel(ctx)
		return fmt.Errorf("waiting for ClusterServiceVersion %s/%s to succeed (phase %q: %s; reading it: %v): %w\n%s\n=== OLM's olm operator\n%s\n=== OLM's catalog operator\n%s",
			namespace, name, phase, message, getErr, err, s.Diagnose(ctx, namespace),
			s.Logs(ctx, OLMNamespace, "app=olm-operator", 40), s.Logs(ctx, OLMNamespace, "app=catalog-operator", 40))
	}
	return nil
}

// waitCRDs waits until the API server serves every CRD's kinds.
func (s *Stack) waitCRDs(ctx context.Context, crds []*unstructured.Unstructured) error {
	for _, crd := range crds {
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(crd.GroupVersionKind())
			if err := s.Client.Get(ctx, client.ObjectKey{Name: crd.GetName()}, got); err != nil {
				return false, nil
			}
			conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conditions {
				cm := c.(map[string]any)
				if cm["type"] == "Established" && cm["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s to be established: %w", crd.GetName(), err)
		}
	}
	return nil
}
