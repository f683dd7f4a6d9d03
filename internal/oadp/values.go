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

package oadp

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersionKind is the DataProtectionApplication's.
var GroupVersionKind = schema.GroupVersionKind{Group: "oadp.openshift.io", Version: "v1alpha1", Kind: "DataProtectionApplication"}

// VeleroDeployment is the name OADP gives Velero's Deployment, in the
// DPA's namespace.
const VeleroDeployment = "velero"

// The controllers manage mode takes over from Velero.
const (
	backupOperations  = "backup-operations"
	restoreOperations = "restore-operations"
)

// Values are the chart values read from a DPA; what is not here keeps the
// chart's default.
type Values struct {
	Mode           string          `json:"mode"`
	InitContainers []InitContainer `json:"initContainers,omitempty"`
	BuiltinPlugins BuiltinPlugins  `json:"builtinPlugins"`
	PluginArgs     []string        `json:"pluginArgs,omitempty"`
	SyncFrequency  string          `json:"syncFrequency,omitempty"`
	Credentials    *Credentials    `json:"credentials,omitempty"`
}

// InitContainer copies one plugin image's binaries into /target, as OADP's
// init container for it does. Its securityContext is left to the chart,
// which gives it the manager's (restricted); OADP's own is not.
type InitContainer struct {
	Name            string               `json:"name"`
	Image           string               `json:"image"`
	ImagePullPolicy corev1.PullPolicy    `json:"imagePullPolicy,omitempty"`
	VolumeMounts    []corev1.VolumeMount `json:"volumeMounts"`
}

// BuiltinPlugins is Velero's own image, whose velero binary serves the
// built-in plugins (the CSI data mover).
type BuiltinPlugins struct {
	Image Image `json:"image"`
}

// Image is an image reference as the chart takes it; Digest wins over Tag.
type Image struct {
	Repository string `json:"repository"`
	Tag        string `json:"tag,omitempty"`
	Digest     string `json:"digest,omitempty"`
}

// Credentials is the Secret mounted for locations that name none.
type Credentials struct {
	ExistingSecret string `json:"existingSecret"`
	Key            string `json:"key"`
}

// credentialVariables are the variables through which Velero's container
// names a provider's credentials file (OADP sets the first three, one per
// default cloud plugin), in the order a Secret is picked when several are.
var credentialVariables = []string{"AWS_SHARED_CREDENTIALS_FILE", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_CREDENTIALS_FILE", "ALIBABA_CLOUD_CREDENTIALS_FILE"}

// ErrNotApplied: Velero's Deployment is not (yet) what OADP makes of the
// DPA as it is now.
var ErrNotApplied = errors.New("the DataProtectionApplication is not applied to Velero's Deployment")

// FromDPA reads the values for itemops beside the Velero that OADP runs
// for dpa, from dpa and the Deployment velero OADP made from it. Warnings
// say what the values cannot carry.
func FromDPA(dpa *unstructured.Unstructured, velero *appsv1.Deployment) (Values, []string, error) {
	var v Values
	var warnings []string
	if owner := metav1.GetControllerOf(velero); owner == nil || owner.Kind != GroupVersionKind.Kind || owner.Name != dpa.GetName() ||
		(dpa.GetUID() != "" && owner.UID != dpa.GetUID()) {
		return v, nil, fmt.Errorf("Deployment %s/%s is not made by DataProtectionApplication %s (its controller: %s): "+
			"OADP makes Velero's Deployment from the DPA of its namespace; name that DPA", velero.Namespace, velero.Name, dpa.GetName(), describeOwner(owner))
	}
	server := container(velero, "velero")
	if server == nil {
		return v, nil, fmt.Errorf("Deployment %s/%s has no container named velero", velero.Namespace, velero.Name)
	}
	args := serverArgs(server)

	// The mode: what the DPA asks of Velero, which the Deployment must run.
	disabled, _, err := unstructured.NestedStringSlice(dpa.Object, "spec", "configuration", "velero", "args", "disabled-controllers")
	if err != nil {
		return v, nil, fmt.Errorf("DataProtectionApplication %s: spec.configuration.velero.args.disabled-controllers: %w", dpa.GetName(), err)
	}
	backup, restore := slices.Contains(disabled, backupOperations), slices.Contains(disabled, restoreOperations)
	switch {
	case backup && restore:
		v.Mode = "manage"
	case !backup && !restore:
		v.Mode = "observe"
	default:
		return v, nil, fmt.Errorf("DataProtectionApplication %s disables only one of %s and %s (spec.configuration.velero.args.disabled-controllers: %s): "+
			"manage mode needs both disabled, observe mode neither; Velero would run one while itemops runs the other",
			dpa.GetName(), backupOperations, restoreOperations, strings.Join(disabled, ","))
	}
	running := flagValues(args, "disable-controllers")
	runsBackup, runsRestore := !containsListed(running, backupOperations), !containsListed(running, restoreOperations)
	if runsBackup == backup || runsRestore == restore {
		return v, nil, fmt.Errorf("%w: the DPA disables [%s], Velero's Deployment runs with --disable-controllers=%s; "+
			"wait for the OADP operator to reconcile the DPA (its Reconciled condition) and run this again",
			ErrNotApplied, strings.Join(disabled, ","), strings.Join(running, ","))
	}

	for _, c := range velero.Spec.Template.Spec.InitContainers {
		if !mountsAt(c, "/target") {
			continue
		}
		// The chart renders initContainers as a template (tpl): what
		// comes from the cluster must not be one.
		for _, s := range []string{c.Name, c.Image, string(c.ImagePullPolicy)} {
			if strings.Contains(s, "{{") || strings.Contains(s, "}}") {
				return v, nil, fmt.Errorf("Velero's init container %q holds %q, which the chart would evaluate as a template: "+
					"not a name or an image; fix Velero's Deployment (the DPA's plugins)", c.Name, s)
			}
		}
		v.InitContainers = append(v.InitContainers, InitContainer{Name: c.Name, Image: c.Image, ImagePullPolicy: c.ImagePullPolicy,
			VolumeMounts: []corev1.VolumeMount{{Name: "plugins", MountPath: "/target"}}})
	}
	v.BuiltinPlugins.Image = splitImage(server.Image)
	v.PluginArgs = args
	if frequencies := flagValues(args, "item-operation-sync-frequency"); len(frequencies) > 0 {
		f := frequencies[len(frequencies)-1]
		if _, err := time.ParseDuration(f); err != nil {
			return v, nil, fmt.Errorf("Velero's --item-operation-sync-frequency=%s: %w", f, err)
		}
		v.SyncFrequency = f
	}

	secrets := credentialSecrets(velero, server)
	if len(secrets) > 0 {
		v.Credentials = &secrets[0]
		for _, s := range secrets[1:] {
			warnings = append(warnings, fmt.Sprintf("Velero's pod mounts the credentials Secret %s too; itemops mounts one (%s) for locations that name no credential: "+
				"a location that uses %s must name it in its spec.credential (the DPA's backupLocations[].velero.credential)", s.ExistingSecret, secrets[0].ExistingSecret, s.ExistingSecret))
		}
	}
	return v, warnings, nil
}

func describeOwner(owner *metav1.OwnerReference) string {
	if owner == nil {
		return "none"
	}
	return owner.Kind + " " + owner.Name
}

func container(d *appsv1.Deployment, name string) *corev1.Container {
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == name {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

// serverArgs are the velero server's flags: its arguments after "server"
// (the command may be /velero with args server, … or all in command).
func serverArgs(c *corev1.Container) []string {
	all := append(slices.Clone(c.Command), c.Args...)
	if i := slices.Index(all, "server"); i >= 0 {
		return slices.Clone(all[i+1:])
	}
	return slices.Clone(c.Args)
}

// flagValues are the values of every --name=value or --name value in args.
func flagValues(args []string, name string) []string {
	var values []string
	for i, a := range args {
		if rest, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			values = append(values, rest)
		} else if a == "--"+name && i+1 < len(args) {
			values = append(values, args[i+1])
		}
	}
	return values
}

// containsListed says whether any comma-separated list of lists holds item.
func containsListed(lists []string, item string) bool {
	for _, l := range lists {
		for _, e := range strings.Split(l, ",") {
			if strings.TrimSpace(e) == item {
				return true
			}
		}
	}
	return false
}

func mountsAt(c corev1.Container, mountPath string) bool {
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) == mountPath {
			return true
		}
	}
	return false
}

// splitImage reads registry/repo:tag@digest into the chart's fields; an
// image with neither tag nor digest is :latest, as the runtime reads it.
func splitImage(image string) Image {
	var img Image
	image, img.Digest, _ = strings.Cut(image, "@")
	slash, colon := strings.LastIndex(image, "/"), strings.LastIndex(image, ":")
	if colon > slash {
		image, img.Tag = image[:colon], image[colon+1:]
	}
	img.Repository = image
	if img.Tag == "" && img.Digest == "" {
		img.Tag = "latest"
	}
	return img
}

// credentialSecrets are the Secrets whose keys Velero's container names
// as a provider's credentials file, each once, in credentialVariables'
// order.
func credentialSecrets(d *appsv1.Deployment, c *corev1.Container) []Credentials {
	var found []Credentials
	for _, name := range credentialVariables {
		file := ""
		for _, e := range c.Env {
			if e.Name == name && e.ValueFrom == nil {
				file = e.Value
			}
		}
		if file == "" {
			continue
		}
		mount, key := mountOf(c, file)
		if mount == nil {
			continue
		}
		for _, vol := range d.Spec.Template.Spec.Volumes {
			if vol.Name != mount.Name || vol.Secret == nil {
				continue
			}
			if i := slices.IndexFunc(vol.Secret.Items, func(k corev1.KeyToPath) bool { return k.Path == key }); i >= 0 {
				key = vol.Secret.Items[i].Key
			}
			s := Credentials{ExistingSecret: vol.Secret.SecretName, Key: key}
			if !slices.ContainsFunc(found, func(f Credentials) bool { return f.ExistingSecret == s.ExistingSecret }) {
				found = append(found, s)
			}
		}
	}
	return found
}

// mountOf is the volume mount of c that holds file, the deepest one, and
// file's path inside it.
func mountOf(c *corev1.Container, file string) (*corev1.VolumeMount, string) {
	var best *corev1.VolumeMount
	var rel string
	for i, m := range c.VolumeMounts {
		dir := path.Clean(m.MountPath)
		r, ok := strings.CutPrefix(path.Clean(file), dir+"/")
		if !ok || m.SubPath != "" || (best != nil && len(dir) <= len(path.Clean(best.MountPath))) {
			continue
		}
		best, rel = &c.VolumeMounts[i], r
	}
	return best, rel
}
