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

// Package layers checks that imports run the way CONTRIBUTING.md says:
// the API imports only apimachinery, internal/ never imports controllers,
// and nothing outside test/ imports test/ (the tools in hack/ included).
// Tests themselves may import what they need.
package layers

import (
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

const module = "github.com/itemops/itemops"

func TestImportsRunDownTheLayers(t *testing.T) {
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedImports, Dir: "../.."}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	for _, pkg := range pkgs {
		for _, e := range pkg.Errors {
			t.Errorf("%s: %v", pkg.PkgPath, e)
		}
		path := strings.TrimPrefix(strings.TrimPrefix(pkg.PkgPath, module), "/")
		for imported := range pkg.Imports {
			if problem := refused(path, imported); problem != "" {
				t.Errorf("%s imports %s: %s", pkg.PkgPath, imported, problem)
			}
		}
		for _, top := range []string{"api/", "internal/", "hack/", "controllers"} {
			if strings.HasPrefix(path, top) {
				checked[top] = true
			}
		}
	}
	for _, top := range []string{"api/", "internal/", "hack/", "controllers"} {
		if !checked[top] {
			t.Errorf("no package under %s was loaded: the check saw nothing there", top)
		}
	}
}

// refused says why a package at path (relative to the module) may not
// import imported, or "".
func refused(path, imported string) string {
	own := strings.HasPrefix(imported, module+"/") || imported == module
	rel := strings.TrimPrefix(strings.TrimPrefix(imported, module), "/")
	switch {
	case strings.HasPrefix(path, "api/") && !standard(imported) && !strings.HasPrefix(imported, "k8s.io/apimachinery/"):
		return "the API imports only apimachinery"
	case strings.HasPrefix(path, "internal/") && own && rel == "controllers":
		return "internal/ never imports controllers"
	case !strings.HasPrefix(path, "test/") && own && strings.HasPrefix(rel, "test/"):
		return "only test/ imports test/"
	}
	return ""
}

// standard reports whether path is the standard library's: the first
// element of every other import path has a dot (a domain), as go itself
// tells them apart; no GOROOT is needed, which a -trimpath build lacks.
func standard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		path, imported string
		refused        bool
	}{
		{"api/v1alpha1", "k8s.io/apimachinery/pkg/runtime", false},
		{"api/v1alpha1", "strings", false},
		{"api/v1alpha1", "sigs.k8s.io/controller-runtime/pkg/client", true},
		{"internal/why", module + "/controllers", true},
		{"internal/why", module + "/api/v1alpha1", false},
		{"hack/krew", module + "/test/envtest", true},
		{"test/cmd/demo", module + "/test/envtest", false},
		{"", module + "/controllers", false},
	} {
		if got := refused(tc.path, tc.imported) != ""; got != tc.refused {
			t.Errorf("refused(%q, %q) = %t, want %t", tc.path, tc.imported, got, tc.refused)
		}
	}
}
