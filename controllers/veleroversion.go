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

package controllers

import (
	"bytes"
	"context"
	"os/exec"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/internal/veleroversion"
)

// +kubebuilder:rbac:groups=apps,namespace=velero,resources=deployments,verbs=get,resourceNames=velero

// VeleroDeployment is the name Velero's Deployment has, as both `velero
// install` and Velero's helm chart (release "velero") name it; Velero's own
// restore code looks it up by this name.
const VeleroDeployment = "velero"

// The reasons of the Warning Events the version check puts on Velero's
// Deployment.
const (
	ReasonVeleroUnsupported     = "VeleroUnsupported"
	ReasonVeleroUntested        = "VeleroUntested"
	ReasonBuiltinPluginsRelease = "BuiltinPluginsRelease"
)

// VeleroVersionCheck reads once, at start, which Velero release runs (the
// image of Velero's Deployment) and which serves the built-in plugins (the
// velero binary in itemops' plugin directory), and says what that means: a
// log line always; a Warning Event on the Deployment for a release itemops
// does not support or was not tested with, and for built-in plugins of
// another release than Velero's. It changes nothing: a release it cannot
// read or does not know is reported, never refused.
type VeleroVersionCheck struct {
	// Reader reads the Deployment once; uncached, so that no Deployment
	// informer is started for it.
	Reader    client.Reader
	Recorder  record.EventRecorder
	Namespace string
	// Deployment is the name of Velero's Deployment; VeleroDeployment
	// when empty.
	Deployment string
	// BuiltinPlugins is the velero binary in the plugin directory; "" when
	// there is none. Binaries runs it, only as discovery found it.
	BuiltinPlugins string
	Binaries       BinaryRunner
	// Timeout bounds the read and running BuiltinPlugins.
	Timeout time.Duration
}

// BinaryRunner gives commands that run a plugin binary only if it is the
// file discovery found (plugin.Manager).
type BinaryRunner interface {
	Command(ctx context.Context, path string, args ...string) (cmd *exec.Cmd, release func(), err error)
}

// NeedLeaderElection: the leader alone reports, so that replicas do not
// repeat the same Events.
func (c *VeleroVersionCheck) NeedLeaderElection() bool { return true }

// Start runs the check once; it never fails the manager.
func (c *VeleroVersionCheck) Start(ctx context.Context) error {
	c.Check(ctx)
	return nil
}

// Check reads both releases and reports them.
func (c *VeleroVersionCheck) Check(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx).WithName("velero-version")
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()

	builtin := c.builtinRelease(ctx)
	deployment := &appsv1.Deployment{}
	name := c.Deployment
	if name == "" {
		name = VeleroDeployment
	}
	err := c.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, deployment)
	if apierrors.IsNotFound(err) {
		log.Info("no Deployment "+name+" in Velero's namespace: Velero's release is not checked", "namespace", c.Namespace)
		return
	}
	if err != nil {
		log.Error(err, "reading Velero's Deployment: Velero's release is not checked")
		return
	}
	image := veleroImage(deployment)
	server, _ := veleroversion.FromImage(image)
	support, why := veleroversion.Assess(server)
	log.Info("Velero's release", "image", image, "support", support, "builtinPlugins", versionString(builtin), "why", why)
	switch support {
	case veleroversion.Unsupported:
		emit(c.Recorder, deployment, corev1.EventTypeWarning, ReasonVeleroUnsupported, why)
	case veleroversion.Untested:
		emit(c.Recorder, deployment, corev1.EventTypeWarning, ReasonVeleroUntested, why)
	}
	if mismatch := veleroversion.Mismatch(server, builtin); mismatch != "" {
		log.Info("the built-in plugins are of another release than Velero's: " + mismatch)
		emit(c.Recorder, deployment, corev1.EventTypeWarning, ReasonBuiltinPluginsRelease, mismatch)
	}
}

// builtinRelease is the release `velero version --client-only` of the
// built-in plugins' binary prints; nil when there is none or it says none.
func (c *VeleroVersionCheck) builtinRelease(ctx context.Context) *version.Version {
	if c.BuiltinPlugins == "" {
		return nil
	}
	var out bytes.Buffer
	cmd, release, err := c.Binaries.Command(ctx, c.BuiltinPlugins, "version", "--client-only")
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "not asking the built-in plugins' velero binary for its release", "path", c.BuiltinPlugins)
		return nil
	}
	defer release()
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "asking the built-in plugins' velero binary for its release", "path", c.BuiltinPlugins)
		return nil
	}
	v, _ := veleroversion.FromVersionOutput(out.String())
	return v
}

// veleroImage is the image of the Deployment's container named velero, as
// Velero's install and chart name it, else of its first container.
func veleroImage(d *appsv1.Deployment) string {
	containers := d.Spec.Template.Spec.Containers
	for _, c := range containers {
		if c.Name == "velero" {
			return c.Image
		}
	}
	if len(containers) > 0 {
		return containers[0].Image
	}
	return ""
}

func versionString(v *version.Version) string {
	if v == nil {
		return "unknown"
	}
	return "v" + v.String()
}
