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

package scrape

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// ReaderName names the ServiceAccount, ClusterRole and ClusterRoleBinding
// ReaderToken creates: a reader of itemops' metrics, as Prometheus' own
// ServiceAccount is once bound to the chart's metrics-reader ClusterRole.
const ReaderName = "itemops-test-metrics-reader"

// Client scrapes itemops' secure metrics as Prometheus does with its
// ServiceAccount's token: over HTTPS with token as the bearer token, without
// verifying the certificate (self-signed unless one is mounted). An empty
// token sends none.
func Client(token string) *http.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // itemops' self-signed certificate, on loopback
	return &http.Client{Timeout: 10 * time.Second, Transport: bearer{token: token, next: transport}}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	if b.token != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(req)
}

// ReaderToken issues a token of a ServiceAccount in namespace that may get
// /metrics and do nothing else, creating the ServiceAccount and its
// ClusterRole and binding the first time.
func ReaderToken(ctx context.Context, cfg *rest.Config, namespace string) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ReaderName, Namespace: namespace}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, account, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating the metrics reader's ServiceAccount: %w", err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ReaderName},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating the metrics reader's ClusterRole: %w", err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ReaderName + "-" + namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ReaderName},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ReaderName, Namespace: namespace}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("binding the metrics reader: %w", err)
	}
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))}}
	token, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, ReaderName, request, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("issuing the metrics reader's token: %w", err)
	}
	return token.Status.Token, nil
}
