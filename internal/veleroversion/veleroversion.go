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

package veleroversion

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// The releases itemops is tested with (test/compat), oldest first, and the
// first one without asynchronous plugin operations' records.
var (
	// Tested are the newest patch of each minor test/compat runs.
	Tested = []string{"v1.15.2", "v1.16.2", "v1.17.2", "v1.18.3"}
	// oldestTested and newestTested bound the minors of Tested.
	oldestTested = version.MustParseSemantic(Tested[0])
	newestTested = version.MustParseSemantic(Tested[len(Tested)-1])
	// firstWithOperations is the first release with BackupItemAction v2 and
	// RestoreItemAction v2 and the item operations' counters on Backups and
	// Restores: before it there is nothing for itemops to follow.
	firstWithOperations = version.MustParseSemantic("v1.11.0")
)

// Support is what itemops makes of a Velero release.
type Support string

const (
	// Supported: a minor test/compat runs.
	Supported Support = "Supported"
	// Untested: a minor between v1.11 and the oldest tested, or newer than
	// the newest: the protocol and records are the same, but nothing here
	// has run it.
	Untested Support = "Untested"
	// Unsupported: a release with no asynchronous plugin operations.
	Unsupported Support = "Unsupported"
	// Unknown: no version could be read (an image tag of one's own).
	Unknown Support = "Unknown"
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

// Assess says what a Velero release means for itemops, and why.
func Assess(v *version.Version) (Support, string) {
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
	minors := make([]string, len(Tested))
	for i, t := range Tested {
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
