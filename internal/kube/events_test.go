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

package kube

import (
	"go/ast"
	"go/constant"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// eventsDoc is where every Event reason is listed for administrators.
const eventsDoc = "../../docs/api.md"

// TestEveryEventReasonIsDocumented reads, from the module's code, every
// reason an Event can carry and checks that docs/api.md lists each, and
// lists no reason the code does not emit. Events go through Emit and Emitf,
// whose reason is an EventReason: the reasons are the constant values of
// that type in the code. A recorder called anywhere else, or an EventReason
// made from a value the code does not fix, fails the test, because its
// reasons could not be read.
func TestEveryEventReasonIsDocumented(t *testing.T) {
	pkgs, err := packages.Load(&packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir:  "../..",
	}, ".", "./api/...", "./cmd/...", "./controllers/...", "./internal/...", "./pkg/...") // what itemops runs; its tests emit nothing
	if err != nil {
		t.Fatal(err)
	}
	var reasonType types.Type
	for _, pkg := range pkgs {
		if pkg.PkgPath == "github.com/itemops/itemops/internal/kube" {
			reasonType = pkg.Types.Scope().Lookup("EventReason").Type()
		}
	}
	if reasonType == nil {
		t.Fatal("kube.EventReason not found")
	}
	emitted := map[string]string{} // reason -> where
	for _, pkg := range pkgs {
		for _, e := range pkg.Errors {
			t.Errorf("%s: %v", pkg.PkgPath, e)
		}
		for _, file := range pkg.Syntax {
			name := pkg.Fset.Position(file.Pos()).Filename
			ast.Inspect(file, func(n ast.Node) bool {
				switch n := n.(type) {
				case ast.Expr:
					tv, ok := pkg.TypesInfo.Types[n]
					if !ok || !types.Identical(tv.Type, reasonType) {
						break
					}
					if tv.Value != nil && tv.Value.Kind() == constant.String && constant.StringVal(tv.Value) != "" { // "": no reason, never emitted
						emitted[constant.StringVal(tv.Value)] = pkg.Fset.Position(n.Pos()).String()
					}
					if call, ok := n.(*ast.CallExpr); ok && tv.Value == nil && isType(pkg.TypesInfo, call.Fun) {
						t.Errorf("%s: an EventReason converted from a value that is not constant: its reasons cannot be read from the code",
							pkg.Fset.Position(n.Pos()))
					}
				}
				if call, ok := n.(*ast.CallExpr); ok && callsRecorder(pkg.TypesInfo, call) && !strings.HasSuffix(name, filepath.Join("internal", "kube", "events.go")) {
					t.Errorf("%s: an Event recorded without Emit or Emitf: its reason cannot be read from the code", pkg.Fset.Position(n.Pos()))
				}
				return true
			})
		}
	}
	if len(emitted) == 0 {
		t.Fatal("no Event reason found in the code")
	}
	documented := documentedReasons(t)
	for reason, where := range emitted {
		if !slices.Contains(documented, reason) {
			t.Errorf("Event reason %q (%s) is not listed in %s", reason, where, eventsDoc)
		}
	}
	for _, reason := range documented {
		if _, ok := emitted[reason]; !ok {
			t.Errorf("%s lists Event reason %q, which the code never emits", eventsDoc, reason)
		}
	}
}

func isType(info *types.Info, e ast.Expr) bool {
	tv, ok := info.Types[e]
	return ok && tv.IsType()
}

// callsRecorder reports whether call is a method of client-go's
// EventRecorder, on any value that has it.
func callsRecorder(info *types.Info, call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	fn, ok := info.Uses[sel.Sel].(*types.Func)
	if !ok || fn.Pkg() == nil {
		return false
	}
	recv := fn.Type().(*types.Signature).Recv()
	if recv == nil {
		return false
	}
	switch fn.Name() {
	case "Event", "Eventf", "AnnotatedEventf":
	default:
		return false
	}
	return strings.HasPrefix(fn.Pkg().Path(), "k8s.io/client-go/tools/record") ||
		strings.HasPrefix(fn.Pkg().Path(), "k8s.io/client-go/tools/events")
}

// documentedReasons are the first cells of the rows of the Events table in
// the docs.
func documentedReasons(t *testing.T) []string {
	data, err := os.ReadFile(eventsDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Events\n")
	if !ok {
		t.Fatalf("%s has no Events section", eventsDoc)
	}
	if next := strings.Index(section, "\n## "); next >= 0 {
		section = section[:next]
	}
	var out []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z]+)` \\|").FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	return out
}
