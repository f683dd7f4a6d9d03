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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/test/envtest"
)

// The user ID range OpenShift gives a namespace (the
// openshift.io/sa.scc.uid-range annotation), as in the range OpenShift
// assigns: restricted-v2 runs every pod as the range's first ID, with
// group 0.
const (
	UIDRangeStart = 1000650000
	UIDRangeSize  = 10000
	// privilegedServiceAccount is the ServiceAccount OADP grants the
	// privileged SCC (Velero's, node-agent's and the data mover's pods):
	// restricted-v2 does not apply to its pods.
	privilegedServiceAccount = "velero"
	// restrictedV2 names the webhook, the policy and its binding.
	restrictedV2 = "itemops-test-restricted-v2"
)

// RestrictedV2 makes namespace admit pods as OpenShift's restricted-v2 SCC
// does, for pods of every ServiceAccount but Velero's: a mutating webhook
// served by this process gives a pod that names no user the first ID of
// the namespace's range (and that fsGroup), as the SCC does; a
// ValidatingAdmissionPolicy refuses what restricted-v2 refuses (a user or
// fsGroup outside the range, a privileged container, privilege escalation,
// capabilities added beyond NET_BIND_SERVICE or ALL not dropped, host
// paths and other volume types, host namespaces and ports, no seccomp
// profile). The namespace gets the range annotations. The webhook listens
// on address, an IP the API server reaches. stop removes both.
func (s *Stack) RestrictedV2(ctx context.Context, namespace, address string) (stop func(context.Context) error, err error) {
	ns := &corev1.Namespace{}
	if err := s.Client.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return nil, err
	}
	patch := client.MergeFrom(ns.DeepCopy())
	if ns.Annotations == nil {
		ns.Annotations = map[string]string{}
	}
	uidRange := fmt.Sprintf("%d/%d", UIDRangeStart, UIDRangeSize)
	ns.Annotations["openshift.io/sa.scc.uid-range"] = uidRange
	ns.Annotations["openshift.io/sa.scc.supplemental-groups"] = uidRange
	if err := s.Client.Patch(ctx, ns, patch); err != nil {
		return nil, err
	}

	caPEM, cert, err := selfSigned(address)
	if err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", net.JoinHostPort(address, "0"))
	if err != nil {
		return nil, err
	}
	server := &http.Server{Handler: http.HandlerFunc(assignUser), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = server.ServeTLS(listener, "", "") }()

	selector := &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}}
	pods := admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}
	url := "https://" + listener.Addr().String() + "/mutate"
	webhook := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: restrictedV2},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "restricted-v2.itemops.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{pods},
			NamespaceSelector:       selector,
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
	policy, binding := restrictedV2Policy(selector, pods)
	for _, o := range []client.Object{webhook, policy, binding} {
		if err := s.Client.Create(ctx, o); err != nil {
			_ = server.Close()
			return nil, fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return func(ctx context.Context) error {
		var errs []error
		for _, o := range []client.Object{binding, policy, webhook} {
			errs = append(errs, client.IgnoreNotFound(s.Client.Delete(ctx, o)))
		}
		errs = append(errs, server.Close())
		return errors.Join(errs...)
	}, nil
}

// assignUser is the webhook: a pod of a ServiceAccount restricted-v2
// applies to that names no user gets the range's first ID, and that
// fsGroup unless it names one.
func assignUser(w http.ResponseWriter, r *http.Request) {
	review := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	response := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(review.Request.Object.Raw, pod); err != nil {
		response.Allowed = false
		response.Result = &metav1.Status{Message: err.Error()}
	} else if pod.Spec.ServiceAccountName != privilegedServiceAccount {
		var ops []map[string]any
		sc := pod.Spec.SecurityContext
		if sc == nil {
			ops = append(ops, map[string]any{"op": "add", "path": "/spec/securityContext", "value": map[string]any{}})
			sc = &corev1.PodSecurityContext{}
		}
		if sc.RunAsUser == nil && !anyContainerUser(pod) {
			ops = append(ops, map[string]any{"op": "add", "path": "/spec/securityContext/runAsUser", "value": UIDRangeStart})
		}
		if sc.FSGroup == nil {
			ops = append(ops, map[string]any{"op": "add", "path": "/spec/securityContext/fsGroup", "value": UIDRangeStart})
		}
		if len(ops) > 0 {
			patch, _ := json.Marshal(ops)
			response.Patch = patch
			response.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
		}
	}
	review.Response = response
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

func anyContainerUser(pod *corev1.Pod) bool {
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			return true
		}
	}
	return false
}

// restrictedV2Policy is what restricted-v2 refuses, as a
// ValidatingAdmissionPolicy over the pods of the selected namespace but
// Velero's ServiceAccount's; the user range is the namespace's annotation.
func restrictedV2Policy(selector *metav1.LabelSelector, pods admissionregistrationv1.RuleWithOperations) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	// Each container's effective security context field, the container's
	// or else the pod's.
	const containers = `object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])`
	rule := func(expression, message string) admissionregistrationv1.Validation {
		return admissionregistrationv1.Validation{Expression: expression, Message: "restricted-v2: " + message}
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: restrictedV2},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: pods}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "not-privileged-scc",
				Expression: fmt.Sprintf(`!has(object.spec.serviceAccountName) || object.spec.serviceAccountName != %q`, privilegedServiceAccount),
			}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "range", Expression: `namespaceObject.metadata.annotations['openshift.io/sa.scc.uid-range'].split('/')`},
				{Name: "low", Expression: `int(variables.range[0])`},
				{Name: "high", Expression: `int(variables.range[0]) + int(variables.range[1]) - 1`},
				{Name: "containers", Expression: containers},
				{Name: "podUser", Expression: `has(object.spec.securityContext) && has(object.spec.securityContext.runAsUser) ? object.spec.securityContext.runAsUser : -1`},
				{Name: "podSeccomp", Expression: `has(object.spec.securityContext) && has(object.spec.securityContext.seccompProfile) ? object.spec.securityContext.seccompProfile.type : ''`},
			},
			Validations: []admissionregistrationv1.Validation{
				{Expression: `variables.containers.all(c, (has(c.securityContext) && has(c.securityContext.runAsUser) ? c.securityContext.runAsUser : variables.podUser) >= variables.low && (has(c.securityContext) && has(c.securityContext.runAsUser) ? c.securityContext.runAsUser : variables.podUser) <= variables.high)`,
					MessageExpression: `'restricted-v2: runAsUser must be in the namespace\'s range ' + string(variables.low) + '-' + string(variables.high)`},
				{Expression: `!has(object.spec.securityContext) || !has(object.spec.securityContext.fsGroup) || (object.spec.securityContext.fsGroup >= variables.low && object.spec.securityContext.fsGroup <= variables.high)`,
					MessageExpression: `'restricted-v2: fsGroup must be in the namespace\'s range ' + string(variables.low) + '-' + string(variables.high)`},
				rule(`variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)`, "privileged containers are not allowed"),
				rule(`variables.containers.all(c, has(c.securityContext) && has(c.securityContext.allowPrivilegeEscalation) && !c.securityContext.allowPrivilegeEscalation)`, "allowPrivilegeEscalation must be false"),
				rule(`variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || c.securityContext.capabilities.add.all(a, a == 'NET_BIND_SERVICE'))`, "capabilities may add NET_BIND_SERVICE only"),
				rule(`variables.containers.all(c, has(c.securityContext) && has(c.securityContext.capabilities) && has(c.securityContext.capabilities.drop) && c.securityContext.capabilities.drop.exists(d, d == 'ALL'))`, "capabilities must drop ALL"),
				rule(`!has(object.spec.volumes) || object.spec.volumes.all(v, has(v.configMap) || has(v.csi) || has(v.downwardAPI) || has(v.emptyDir) || has(v.ephemeral) || has(v.persistentVolumeClaim) || has(v.projected) || has(v.secret))`,
					"volumes of type configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected and secret only (no hostPath)"),
				rule(`!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && !(has(object.spec.hostPID) && object.spec.hostPID) && !(has(object.spec.hostIPC) && object.spec.hostIPC)`, "host namespaces are not allowed"),
				rule(`variables.containers.all(c, !has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0))`, "host ports are not allowed"),
				rule(`variables.containers.all(c, (has(c.securityContext) && has(c.securityContext.seccompProfile) ? c.securityContext.seccompProfile.type : variables.podSeccomp) in ['RuntimeDefault', 'Localhost'])`, "a seccomp profile (RuntimeDefault) is required"),
			},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: restrictedV2},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        restrictedV2,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: selector},
		},
	}
	return policy, binding
}

// selfSigned is a certificate for address, and its PEM as the CA the API
// server trusts.
func selfSigned(address string) ([]byte, tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: restrictedV2},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP(address)},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return certPEM, cert, err
}

// What the OADP stand-in installs.
const (
	// OADPNamespace is where OADP installs Velero by default.
	OADPNamespace = "openshift-adp"
	// DPAName is the stand-in's DataProtectionApplication.
	DPAName = "velero-sample"
	// oadpPrefix is the prefix of its location in the bucket, so that it
	// syncs no Backup of a Velero that used the bucket before it.
	oadpPrefix = "oadp"
)

// InstallOADP plays the OADP operator's part in s.Namespace: Velero as
// OADP makes it from a DataProtectionApplication (the same Deployment and
// node-agent `velero install` makes, with the AWS plugin and the sample
// plugins, adjusted to this machine as Install adjusts it), and the DPA
// (the stand-in CRD of test/oadp) as the Deployment's controller.
func (s *Stack) InstallOADP(ctx context.Context) error {
	if err := s.VeleroNamespace(ctx); err != nil {
		return err
	}
	install := `velero install --provider aws --plugins velero/velero-plugin-for-aws:v1.14.3 \
  --bucket "$BUCKET" --prefix ` + oadpPrefix + ` --secret-file ./credentials-velero \
  --backup-location-config region="$REGION",s3ForcePathStyle=true,s3Url="$S3_URL" \
  --use-volume-snapshots=false --features=EnableCSI --use-node-agent`
	if _, err := s.Run(ctx, install); err != nil {
		return err
	}
	if err := s.AdjustVelero(ctx); err != nil {
		return err
	}
	if err := s.WaitVelero(ctx); err != nil {
		return err
	}
	crds, err := readObjects(filepath.Join(s.Root, "test", "oadp", "dpa-crd.yaml"))
	if err != nil {
		return err
	}
	if err := s.create(ctx, crds[0]); err != nil {
		return err
	}
	dpa := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "oadp.openshift.io/v1alpha1", "kind": "DataProtectionApplication",
		"metadata": map[string]any{"name": DPAName, "namespace": s.Namespace},
		"spec": map[string]any{
			"configuration": map[string]any{
				"velero": map[string]any{
					"defaultPlugins": []any{"aws"},
					"customPlugins":  []any{map[string]any{"name": "itemops-sample-plugins", "image": SamplePluginsImage}},
					"featureFlags":   []any{"EnableCSI"},
				},
				"nodeAgent": map[string]any{"enable": true, "uploaderType": "kopia"},
			},
			"backupLocations": []any{map[string]any{"velero": map[string]any{
				"provider": "aws", "default": true,
				"objectStorage": map[string]any{"bucket": Bucket, "prefix": oadpPrefix},
				"config":        map[string]any{"region": Region, "s3ForcePathStyle": "true", "s3Url": S3URL},
				"credential":    map[string]any{"name": "cloud-credentials", "key": "cloud"},
			}}},
		},
	}}
	// The kind is served a moment after its CRD.
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return s.Client.Create(ctx, dpa) == nil, nil
	})
	if err != nil {
		return fmt.Errorf("creating DataProtectionApplication %s: %w", DPAName, err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		deploy := &appsv1.Deployment{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "velero"}, deploy); err != nil {
			return err
		}
		deploy.OwnerReferences = []metav1.OwnerReference{{APIVersion: dpa.GetAPIVersion(), Kind: dpa.GetKind(), Name: dpa.GetName(),
			UID: dpa.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
		return s.Client.Update(ctx, deploy)
	})
}

// ApplyDPA plays the OADP operator's reconcile of the DPA's
// spec.configuration.velero.args.disabled-controllers: Velero's server
// runs with --disable-controllers naming them (or without it when none),
// and the new pod is rolled out.
func (s *Stack) ApplyDPA(ctx context.Context) error {
	dpa := &unstructured.Unstructured{}
	dpa.SetAPIVersion("oadp.openshift.io/v1alpha1")
	dpa.SetKind("DataProtectionApplication")
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: DPAName}, dpa); err != nil {
		return err
	}
	disabled, _, err := unstructured.NestedStringSlice(dpa.Object, "spec", "configuration", "velero", "args", "disabled-controllers")
	if err != nil {
		return err
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		deploy := &appsv1.Deployment{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "velero"}, deploy); err != nil {
			return err
		}
		for i := range deploy.Spec.Template.Spec.Containers {
			c := &deploy.Spec.Template.Spec.Containers[i]
			if c.Name != "velero" {
				continue
			}
			c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--disable-controllers=") })
			if len(disabled) > 0 {
				c.Args = append(c.Args, "--disable-controllers="+strings.Join(disabled, ","))
			}
		}
		return s.Client.Update(ctx, deploy)
	})
	if err != nil {
		return err
	}
	return s.WaitAvailable(ctx, s.Namespace, "velero", 3*time.Minute)
}

// readObjects reads the objects of a YAML file.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := envtest.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}
