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

package envtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RenderChart is what `helm template <release> charts/itemops` renders in
// Velero's namespace with args (such as --set mode=manage), as objects.
// helm is built once per machine by hack/cached-binary.sh.
func (e *Environment) RenderChart(release string, args ...string) ([]*unstructured.Unstructured, error) {
	helm := exec.Command(filepath.Join(e.RepoRoot, "hack", "cached-binary.sh"), "helm")
	helm.Stderr = os.Stderr
	path, err := helm.Output()
	if err != nil {
		return nil, fmt.Errorf("building helm: %w", err)
	}
	render := exec.Command(strings.TrimSpace(string(path)), append([]string{"template", release,
		filepath.Join(e.RepoRoot, "charts", "itemops"), "--namespace", VeleroNamespace}, args...)...)
	render.Stderr = os.Stderr
	out, err := render.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %w", err)
	}
	return Decode(bytes.NewReader(out))
}

// ChartIdentity applies the ServiceAccount, Roles, ClusterRoles and their
// bindings that `helm install <release> charts/itemops` with args creates,
// and returns a kubeconfig with a token of that ServiceAccount: itemops run
// with it may do what the chart grants, and nothing more.
func (e *Environment) ChartIdentity(ctx context.Context, release string, args ...string) ([]byte, error) {
	objs, err := e.RenderChart(release, args...)
	if err != nil {
		return nil, err
	}
	serviceAccount := ""
	for _, u := range objs {
		switch u.GetKind() {
		case "ServiceAccount":
			serviceAccount = u.GetName()
		case "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
		default:
			continue
		}
		if err := e.Apply(ctx, "helm", u); err != nil {
			return nil, err
		}
	}
	if serviceAccount == "" {
		return nil, fmt.Errorf("the chart rendered no ServiceAccount for %s", release)
	}
	return e.ServiceAccountKubeconfig(ctx, VeleroNamespace, serviceAccount)
}

// ReadManifests are the objects of YAML files, relative to the repository root.
func (e *Environment) ReadManifests(paths ...string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, p := range paths {
		data, err := os.ReadFile(filepath.Join(e.RepoRoot, p))
		if err != nil {
			return nil, err
		}
		decoded, err := Decode(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		objs = append(objs, decoded...)
	}
	return objs, nil
}

// Decode reads every object of a stream of YAML or JSON documents, skipping
// empty ones.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := decoder.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// Apply applies objs server-side as fieldManager, in order.
func (e *Environment) Apply(ctx context.Context, fieldManager string, objs ...*unstructured.Unstructured) error {
	for _, u := range objs {
		if err := e.Client.Patch(ctx, u, client.Apply, client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// AggregateClusterRoles does once what kube-controller-manager's
// clusterrole-aggregation controller does all the time (envtest runs no
// controller manager): every ClusterRole with an aggregationRule, such as the
// built-in view, edit and admin, gets the rules of the ClusterRoles its
// selectors match.
func (e *Environment) AggregateClusterRoles(ctx context.Context) error {
	roles := &rbacv1.ClusterRoleList{}
	if err := e.Client.List(ctx, roles); err != nil {
		return err
	}
	for i := range roles.Items {
		role := &roles.Items[i]
		if role.AggregationRule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, selector := range role.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&selector)
			if err != nil {
				return err
			}
			rules = append(rules, matchingRules(roles.Items, role.Name, s)...)
		}
		original := role.DeepCopy()
		role.Rules = rules
		if err := e.Client.Patch(ctx, role, client.MergeFrom(original)); err != nil {
			return fmt.Errorf("aggregating ClusterRole %s: %w", role.Name, err)
		}
	}
	return nil
}

func matchingRules(roles []rbacv1.ClusterRole, except string, s labels.Selector) []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	for _, r := range roles {
		if r.Name != except && s.Matches(labels.Set(r.Labels)) {
			rules = append(rules, r.Rules...)
		}
	}
	return rules
}
