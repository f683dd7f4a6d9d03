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

package compat

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/internal/kube"
)

// The releases itemops is tested with (test/compat), oldest first, and the
// first one without asynchronous plugin operations' records.
var (
	// VeleroTested are the newest patch of each minor test/compat runs.
	VeleroTested = []string{"v1.15.2", "v1.16.2", "v1.17.2", "v1.18.3"}
	// oldestTested and newestTested bound the minors of Tested.
	oldestTested = version.MustParseSemantic(VeleroTested[0])
	newestTested = version.MustParseSemantic(VeleroTested[len(VeleroTested)-1])
	// firstWithOperations is the first release with BackupItemAction v2 and
	// RestoreItemAction v2 and the item operations' counters on Backups and
	// Restores: before it there is nothing for itemops to follow.
	firstWithOperations = version.MustParseSemantic("v1.11.0")
)

// tagVersion is the vX.Y.Z at the start of an image tag, as Velero's
// images are tagged (v1.18.3, v1.18.3-linux-amd64).
var tagVersion = regexp.MustCompile(`^v?(\d+\.\d+\.\d+)`)

// FromImage reads the release from an image reference such as
// velero/velero:v1.18.3 or registry:5000/velero/velero:v1.17.2@sha256:…;
// ok is false when its tag holds no version.
func FromImage(image string) (v *version.Version, ok bool) {
	image, _, _ = strings.Cut(image, "@")
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if colon <= slash {
		return nil, false
	}
	return parse(image[colon+1:])
}

// FromVersionOutput reads the release from what `velero version
// --client-only` prints ("Client:\n\tVersion: v1.18.3\n…").
func FromVersionOutput(out string) (v *version.Version, ok bool) {
	for line := range strings.Lines(out) {
		if rest, found := strings.CutPrefix(strings.TrimSpace(line), "Version:"); found {
			return parse(strings.TrimSpace(rest))
		}
	}
	return nil, false
}

func parse(s string) (*version.Version, bool) {
	m := tagVersion.FindStringSubmatch(s)
	if m == nil {
		return nil, false
	}
	v, err := version.ParseSemantic(m[1])
	return v, err == nil
}

// AssessVelero says what a Velero release means for itemops, and why.
func AssessVelero(v *version.Version) (Support, string) {
	if v == nil {
		return Unknown, "the release of Velero could not be read from its image tag; itemops is tested with " + testedList()
	}
	release := "v" + v.String()
	switch {
	case v.LessThan(firstWithOperations):
		return Unsupported, fmt.Sprintf("Velero %s has no asynchronous plugin operations (they came with v1.11): itemops has nothing to follow; it is tested with %s", release, testedList())
	case minorLess(v, oldestTested):
		return Untested, fmt.Sprintf("Velero %s is older than the releases itemops is tested with (%s); its operations are recorded as in those, but nothing has checked it", release, testedList())
	case minorLess(newestTested, v):
		return Untested, fmt.Sprintf("Velero %s is newer than the releases itemops is tested with (%s)", release, testedList())
	}
	return Supported, fmt.Sprintf("Velero %s is a release itemops is tested with", release)
}

// minorLess compares major.minor only: every patch of a tested minor is
// supported.
func minorLess(a, b *version.Version) bool {
	return a.Major() < b.Major() || a.Major() == b.Major() && a.Minor() < b.Minor()
}

func testedList() string {
	minors := make([]string, len(VeleroTested))
	for i, t := range VeleroTested {
		v := version.MustParseSemantic(t)
		minors[i] = fmt.Sprintf("v%d.%d", v.Major(), v.Minor())
	}
	return strings.Join(minors, ", ")
}

// Mismatch says why the velero binary that serves the built-in plugins
// should be Velero's own release, or "" when it is. The built-in plugins'
// Progress and Cancel read what that release's node-agent and controllers
// write, and the chart grants the permissions of the release it copies
// (builtinPlugins.image.tag).
func Mismatch(server, builtin *version.Version) string {
	if server == nil || builtin == nil || server.EqualTo(builtin) {
		return ""
	}
	return fmt.Sprintf("the built-in plugins in itemops' plugin directory are velero v%s, but Velero runs v%s: set the chart's builtinPlugins.image.tag to v%s, as Velero's image",
		builtin, server, server)
}

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

// VeleroCheck reads once, at start, which Velero release runs (the
// image of Velero's Deployment) and which serves the built-in plugins (the
// velero binary in itemops' plugin directory), and says what that means: a
// log line always; a Warning Event on the Deployment for a release itemops
// does not support or was not tested with, and for built-in plugins of
// another release than Velero's. It changes nothing: a release it cannot
// read or does not know is reported, never refused.
type VeleroCheck struct {
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
func (c *VeleroCheck) NeedLeaderElection() bool { return true }

// Start runs the check once; it never fails the manager.
func (c *VeleroCheck) Start(ctx context.Context) error {
	c.Check(ctx)
	return nil
}

// Check reads both releases and reports them.
func (c *VeleroCheck) Check(ctx context.Context) {
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
	server, _ := FromImage(image)
	support, why := AssessVelero(server)
	log.Info("Velero's release", "image", image, "support", support, "builtinPlugins", versionString(builtin), "why", why)
	switch support {
	case Unsupported:
		kube.Emit(c.Recorder, deployment, corev1.EventTypeWarning, ReasonVeleroUnsupported, why)
	case Untested:
		kube.Emit(c.Recorder, deployment, corev1.EventTypeWarning, ReasonVeleroUntested, why)
	}
	if mismatch := Mismatch(server, builtin); mismatch != "" {
		log.Info("the built-in plugins are of another release than Velero's: " + mismatch)
		kube.Emit(c.Recorder, deployment, corev1.EventTypeWarning, ReasonBuiltinPluginsRelease, mismatch)
	}
}

// builtinRelease is the release `velero version --client-only` of the
// built-in plugins' binary prints; nil when there is none or it says none.
func (c *VeleroCheck) builtinRelease(ctx context.Context) *version.Version {
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
	v, _ := FromVersionOutput(out.String())
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
