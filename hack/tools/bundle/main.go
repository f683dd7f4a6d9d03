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

// The bundle writer of `make bundle`: it turns what the chart renders
// (helm template, read on stdin) into an OLM bundle — a
// ClusterServiceVersion whose Deployment, permissions and cluster
// permissions are the chart's, with the CRD, the metrics Service and the
// aggregated ClusterRoles beside it, and metadata/annotations.yaml — and
// checks it with operator-framework's own validators. In a module of its
// own so that its dependencies never move the operator's.
package main

import (
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/lib/version"
	"github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/api/pkg/validation"
	validationerrors "github.com/operator-framework/api/pkg/validation/errors"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Namespace is the namespace the chart is rendered in: no object of the
// bundle may name it, since OLM installs into the OperatorGroup's.
const Namespace = "itemops-bundle-namespace"

// targetNamespaces is the variable that holds the namespace an
// OperatorGroup targets, from the annotation OLM puts on the pods.
const targetNamespaces = "OLM_TARGET_NAMESPACES"

func main() {
	var o options
	flag.StringVar(&o.out, "out", "bundle", "directory the bundle is written to (replaced)")
	flag.StringVar(&o.version, "version", "", "the bundle's version (semver, no v)")
	flag.StringVar(&o.replaces, "replaces", "", "the version this one replaces, if any")
	flag.StringVar(&o.channel, "channel", "stable", "the channel the bundle is in")
	flag.StringVar(&o.icon, "icon", "config/olm/icon.svg", "the operator's icon (SVG)")
	flag.StringVar(&o.description, "description", "config/olm/description.md", "the operator's description (Markdown)")
	check := flag.String("validate", "", "only check the bundle in this directory with the validators")
	flag.Parse()
	var err error
	if *check != "" {
		err = validate(*check)
	} else {
		err = run(o, os.Stdin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
}

type options struct {
	out, version, replaces, channel, icon, description string
}

func run(o options, rendered io.Reader) error {
	if _, err := semver.Parse(o.version); err != nil {
		return fmt.Errorf("-version %q: %w", o.version, err)
	}
	if o.channel == "" {
		return fmt.Errorf("-channel: a bundle is in a channel")
	}
	objs, err := decode(rendered)
	if err != nil {
		return err
	}
	icon, err := os.ReadFile(o.icon)
	if err != nil {
		return err
	}
	description, err := os.ReadFile(o.description)
	if err != nil {
		return err
	}
	csv, others, err := build(objs, o, icon, string(description))
	if err != nil {
		return err
	}
	if err := os.RemoveAll(o.out); err != nil {
		return err
	}
	write := func(name string, obj any) error {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(o.out, name), data, 0o644)
	}
	for _, dir := range []string{"manifests", "metadata"} {
		if err := os.MkdirAll(filepath.Join(o.out, dir), 0o755); err != nil {
			return err
		}
	}
	if err := write(filepath.Join("manifests", "itemops.clusterserviceversion.yaml"), csv); err != nil {
		return err
	}
	for _, u := range others {
		name := fmt.Sprintf("%s_%s.yaml", u.GetName(), strings.ToLower(u.GetKind()))
		if err := write(filepath.Join("manifests", name), u.Object); err != nil {
			return err
		}
	}
	if err := write(filepath.Join("metadata", "annotations.yaml"), map[string]any{"annotations": Annotations(o.channel)}); err != nil {
		return err
	}
	return validate(o.out)
}

// Annotations are the bundle's metadata, which the bundle image carries
// as labels too.
func Annotations(channel string) map[string]string {
	return map[string]string{
		"operators.operatorframework.io.bundle.mediatype.v1":       "registry+v1",
		"operators.operatorframework.io.bundle.manifests.v1":       "manifests/",
		"operators.operatorframework.io.bundle.metadata.v1":        "metadata/",
		"operators.operatorframework.io.bundle.package.v1":         "itemops",
		"operators.operatorframework.io.bundle.channels.v1":        channel,
		"operators.operatorframework.io.bundle.channel.default.v1": channel,
	}
}

func decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := decoder.Decode(&u.Object); err != nil {
			if err == io.EOF {
				return objs, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// build makes the ClusterServiceVersion from the chart's objects, and
// returns the objects the bundle carries beside it.
func build(objs []*unstructured.Unstructured, o options, icon []byte, description string) (*operatorsv1alpha1.ClusterServiceVersion, []*unstructured.Unstructured, error) {
	var (
		deployment       *appsv1.Deployment
		serviceAccount   string
		roles            = map[string][]rbacv1.PolicyRule{}
		clusterRoles     = map[string][]rbacv1.PolicyRule{}
		serviceAccountNS string
		bound            = map[string]bool{} // "Role/name", "ClusterRole/name" bound to the ServiceAccount
		bindings         []*unstructured.Unstructured
		roleObjects      = map[string]*unstructured.Unstructured{} // "Role/name", "ClusterRole/name"
		crds, others     []*unstructured.Unstructured
	)
	for _, u := range objs {
		switch u.GetKind() {
		case "Deployment":
			if deployment != nil {
				return nil, nil, fmt.Errorf("the chart rendered two Deployments")
			}
			deployment = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, deployment); err != nil {
				return nil, nil, err
			}
		case "ServiceAccount":
			serviceAccount, serviceAccountNS = u.GetName(), u.GetNamespace()
		case "Role", "ClusterRole":
			role := &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, role); err != nil {
				return nil, nil, err
			}
			if u.GetKind() == "Role" {
				roles[u.GetName()] = role.Rules
			} else {
				clusterRoles[u.GetName()] = role.Rules
			}
			roleObjects[u.GetKind()+"/"+u.GetName()] = u
		case "RoleBinding", "ClusterRoleBinding":
			bindings = append(bindings, u)
		case "CustomResourceDefinition":
			crds = append(crds, clean(u))
		case "Service", "ServiceMonitor", "PrometheusRule", "PodDisruptionBudget", "Secret", "ConfigMap":
			others = append(others, clean(u))
		default:
			return nil, nil, fmt.Errorf("the chart rendered a %s (%s), which an OLM bundle cannot carry", u.GetKind(), u.GetName())
		}
	}
	if deployment == nil || serviceAccount == "" {
		return nil, nil, fmt.Errorf("the chart rendered no Deployment or no ServiceAccount")
	}
	// A role is itemops' own when a binding gives it to itemops'
	// ServiceAccount; OLM binds those (permissions, clusterPermissions).
	// Bindings to anyone else (metrics.readers) and the roles only they
	// name stay objects of the bundle, as the chart renders them.
	referenced := map[string]bool{}
	for _, u := range bindings {
		binding := &rbacv1.RoleBinding{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, binding); err != nil {
			return nil, nil, err
		}
		key := binding.RoleRef.Kind + "/" + binding.RoleRef.Name
		referenced[key] = true
		ours := slices.ContainsFunc(binding.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == serviceAccount && s.Namespace == serviceAccountNS
		})
		if ours && len(binding.Subjects) > 1 {
			return nil, nil, fmt.Errorf("%s %s binds %s to itemops and to others: OLM would bind it to itemops alone", u.GetKind(), u.GetName(), key)
		}
		if ours {
			bound[key] = true
		} else {
			others = append(others, clean(u))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(roleObjects)) {
		if u := roleObjects[key]; !bound[key] {
			// Aggregated into view and edit, or bound to others: carried
			// as they are.
			if u.GetKind() == "Role" && !referenced[key] {
				return nil, nil, fmt.Errorf("Role %s is bound to nobody", u.GetName())
			}
			others = append(others, clean(u))
		}
	}
	var permissions, clusterPermissions []operatorsv1alpha1.StrategyDeploymentPermissions
	for _, name := range slices.Sorted(maps.Keys(roles)) {
		if !bound["Role/"+name] {
			continue
		}
		permissions = append(permissions, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: serviceAccount, Rules: roles[name]})
	}
	for _, name := range slices.Sorted(maps.Keys(clusterRoles)) {
		if bound["ClusterRole/"+name] {
			clusterPermissions = append(clusterPermissions, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: serviceAccount, Rules: clusterRoles[name]})
		}
	}

	spec := deployment.Spec.DeepCopy()
	if err := targetNamespace(spec); err != nil {
		return nil, nil, err
	}
	var related []operatorsv1alpha1.RelatedImage
	// The manager first: an image two containers run is named after it.
	for _, c := range append(slices.Clone(spec.Template.Spec.Containers), spec.Template.Spec.InitContainers...) {
		if !slices.ContainsFunc(related, func(r operatorsv1alpha1.RelatedImage) bool { return r.Image == c.Image }) {
			related = append(related, operatorsv1alpha1.RelatedImage{Name: c.Name, Image: c.Image})
			if !strings.Contains(c.Image, "@sha256:") {
				// A tag can be moved under a published bundle; a digest
				// cannot (docs/security.md).
				fmt.Fprintf(os.Stderr, "bundle: warning: %s runs %s, pinned by tag: pin it by digest in the values of a bundle you publish\n", c.Name, c.Image)
			}
		}
	}
	manager := spec.Template.Spec.Containers[0].Image

	owned := []operatorsv1alpha1.CRDDescription{}
	for _, crd := range crds {
		kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		for _, v := range versions {
			name, _, _ := unstructured.NestedString(v.(map[string]any), "name")
			owned = append(owned, operatorsv1alpha1.CRDDescription{Name: crd.GetName(), Version: name, Kind: kind, DisplayName: "Item Operation",
				Description: "One asynchronous plugin operation of a Velero Backup or Restore, as itemops follows it (itemops creates them; nobody needs to)."})
		}
		others = append(others, crd)
	}

	v, err := semver.Parse(o.version)
	if err != nil {
		return nil, nil, err
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	csv.APIVersion, csv.Kind = operatorsv1alpha1.SchemeGroupVersion.String(), operatorsv1alpha1.ClusterServiceVersionKind
	csv.Name = "itemops.v" + o.version
	csv.Annotations = map[string]string{
		"capabilities":   "Deep Insights",
		"categories":     "Storage,Monitoring",
		"containerImage": manager,
		"description":    "Follows, explains and cancels Velero's asynchronous plugin operations",
		"repository":     "https://github.com/itemops/itemops",
		// The namespace OADP installs Velero in, which itemops shares.
		"operatorframework.io/suggested-namespace": "openshift-adp",
		// itemops creates its ItemOperations itself: nothing to create,
		// and the console offers no form for them.
		"alm-examples": "[]",
		"operators.operatorframework.io/internal-objects": `["itemoperations.itemops.io"]`,
	}
	csv.Spec = operatorsv1alpha1.ClusterServiceVersionSpec{
		DisplayName:    "itemops",
		Description:    description,
		Version:        version.OperatorVersion{Version: v},
		Maturity:       "alpha",
		MinKubeVersion: "1.31.0",
		Keywords:       []string{"velero", "oadp", "backup", "restore", "data mover", "item operations"},
		Maintainers:    []operatorsv1alpha1.Maintainer{{Name: "The itemops Authors", Email: "itemops@localhost"}},
		Provider:       operatorsv1alpha1.AppLink{Name: "The itemops Authors"},
		Links:          []operatorsv1alpha1.AppLink{{Name: "Documentation", URL: "https://github.com/itemops/itemops#readme"}},
		Icon:           []operatorsv1alpha1.Icon{{Data: base64.StdEncoding.EncodeToString(icon), MediaType: "image/svg+xml"}},
		InstallModes: []operatorsv1alpha1.InstallMode{
			{Type: operatorsv1alpha1.InstallModeTypeOwnNamespace, Supported: true},
			{Type: operatorsv1alpha1.InstallModeTypeSingleNamespace, Supported: true},
			{Type: operatorsv1alpha1.InstallModeTypeMultiNamespace, Supported: false},
			{Type: operatorsv1alpha1.InstallModeTypeAllNamespaces, Supported: false},
		},
		Replaces:                  replaces(o.replaces),
		CustomResourceDefinitions: operatorsv1alpha1.CustomResourceDefinitions{Owned: owned},
		InstallStrategy: operatorsv1alpha1.NamedInstallStrategy{
			StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment,
			StrategySpec: operatorsv1alpha1.StrategyDetailsDeployment{
				DeploymentSpecs:    []operatorsv1alpha1.StrategyDeploymentSpec{{Name: deployment.Name, Spec: *spec, Label: deployment.Labels}},
				Permissions:        permissions,
				ClusterPermissions: clusterPermissions,
			},
		},
		RelatedImages: related,
	}
	return csv, others, nil
}

func replaces(v string) string {
	if v == "" {
		return ""
	}
	return "itemops.v" + v
}

// targetNamespace makes the manager take Velero's namespace from the
// OperatorGroup's target (the annotation OLM sets on its pods) where the
// chart wrote the namespace it was rendered in; anything else naming that
// namespace is an error.
func targetNamespace(spec *appsv1.DeploymentSpec) error {
	c := &spec.Template.Spec.Containers[0]
	found := false
	for i, a := range c.Args {
		if a == "--velero-namespace="+Namespace {
			c.Args[i] = "--velero-namespace=$(" + targetNamespaces + ")"
			found = true
		}
	}
	if !found {
		return fmt.Errorf("the manager has no --velero-namespace=%s", Namespace)
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: targetNamespaces, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['olm.targetNamespaces']"}}})
	data, err := yaml.Marshal(spec)
	if err != nil {
		return err
	}
	if strings.Contains(string(data), Namespace) {
		return fmt.Errorf("the Deployment names the namespace it was rendered in beyond --velero-namespace:\n%s", data)
	}
	return nil
}

// clean drops what only helm or the rendering namespace put on an object.
func clean(u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	u.SetNamespace("")
	annotations := u.GetAnnotations()
	for k := range annotations {
		if strings.HasPrefix(k, "helm.sh/") || strings.HasPrefix(k, "meta.helm.sh/") {
			delete(annotations, k)
		}
	}
	if len(annotations) == 0 {
		annotations = nil
	}
	u.SetAnnotations(annotations)
	labels := u.GetLabels()
	delete(labels, "helm.sh/chart")
	delete(labels, "app.kubernetes.io/managed-by")
	u.SetLabels(labels)
	return u
}

// validate checks the bundle in dir with operator-framework's validators
// of a bundle, and its OperatorHub and good-practices validators; errors
// fail, warnings are printed.
func validate(dir string) error {
	bundle, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		return fmt.Errorf("loading the bundle: %w", err)
	}
	objs := bundle.ObjectsToValidate()
	validators := append(slices.Clone(validation.DefaultBundleValidators), validation.OperatorHubV2Validator,
		validation.GoodPracticesValidator, validation.ObjectValidator, validation.AlphaDeprecatedAPIsValidator)
	results := validators.Validate(objs...)
	var failures []string
	for _, r := range results {
		for _, e := range r.Errors {
			failures = append(failures, describe(r, e))
		}
		for _, w := range r.Warnings {
			fmt.Fprintln(os.Stderr, "bundle: warning:", describe(r, w))
		}
	}
	if len(failures) > 0 {
		return fmt.Errorf("the bundle fails operator-framework's validators:\n  %s", strings.Join(failures, "\n  "))
	}
	return nil
}

func describe(r validationerrors.ManifestResult, e validationerrors.Error) string {
	return fmt.Sprintf("%s: %s", r.Name, e.Error())
}
