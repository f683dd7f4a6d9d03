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
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
)

func TestFromImage(t *testing.T) {
	for _, tc := range []struct {
		image string
		want  string // "" when no version
	}{
		{"velero/velero:v1.18.3", "1.18.3"},
		{"docker.io/velero/velero:v1.15.2", "1.15.2"},
		{"registry.local:5000/velero/velero:v1.17.2-linux-amd64", "1.17.2"},
		{"velero/velero:v1.16.2@sha256:0123", "1.16.2"},
		{"registry.local:5000/velero/velero", ""},
		{"velero/velero@sha256:0123", ""},
		{"velero/velero:latest", ""},
		{"velero/velero:main", ""},
	} {
		v, ok := FromImage(tc.image)
		if ok {
			if got := v.String(); got != tc.want {
				t.Errorf("FromImage(%q) = %s, want %q", tc.image, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("FromImage(%q) found no version, want %s", tc.image, tc.want)
		}
	}
}

func TestFromVersionOutput(t *testing.T) {
	v, ok := FromVersionOutput("Client:\n\tVersion: v1.17.2\n\tGit commit: -\n")
	if !ok || v.String() != "1.17.2" {
		t.Errorf("got %v, %v; want 1.17.2", v, ok)
	}
	if _, ok := FromVersionOutput("Client:\n\tVersion: main\n"); ok {
		t.Error("a version that is none was read as one")
	}
	if _, ok := FromVersionOutput("unknown command \"version\"\n"); ok {
		t.Error("an error was read as a version")
	}
}

func TestAssessVelero(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    Support
	}{
		{"1.10.3", Unsupported},
		{"1.11.0", Untested},
		{"1.14.1", Untested},
		{"1.15.0", Supported},
		{"1.15.2", Supported},
		{"1.16.2", Supported},
		{"1.17.0", Supported},
		{"1.18.3", Supported},
		{"1.18.9", Supported},
		{"1.19.0", Untested},
		{"2.0.0", Untested},
	} {
		got, why := AssessVelero(version.MustParseSemantic(tc.release))
		if got != tc.want || why == "" {
			t.Errorf("AssessVelero(%s) = %s (%q), want %s", tc.release, got, why, tc.want)
		}
	}
	if got, _ := AssessVelero(nil); got != Unknown {
		t.Errorf("AssessVelero(nil) = %s, want %s", got, Unknown)
	}
}

func TestMismatch(t *testing.T) {
	v := version.MustParseSemantic
	if got := Mismatch(v("1.17.2"), v("1.17.2")); got != "" {
		t.Errorf("same release: %q", got)
	}
	if got := Mismatch(v("1.17.2"), nil); got != "" {
		t.Errorf("unknown built-in release: %q", got)
	}
	want := "the built-in plugins in itemops' plugin directory are velero v1.18.3, but Velero runs v1.17.2: set the chart's builtinPlugins.image.tag to v1.17.2, as Velero's image"
	if got := Mismatch(v("1.17.2"), v("1.18.3")); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
