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

package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// excerpt is a Go code block that a document says it copied from a file.
var excerpt = regexp.MustCompile("(?s)<!-- from ([^ ]+) -->\\n```go\\n(.*?)```\\n")

// TestExcerptsAreTheCode: a code block marked "<!-- from FILE -->" appears
// in FILE as it is, so the guide cannot drift from the plugin that the
// tests build and run.
func TestExcerptsAreTheCode(t *testing.T) {
	root := root(t)
	found := 0
	for _, doc := range documents(t, root) {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range excerpt.FindAllStringSubmatch(string(text), -1) {
			found++
			code, err := os.ReadFile(filepath.Join(root, m[1]))
			if err != nil {
				t.Errorf("%s: excerpt of %s: %v", doc, m[1], err)
				continue
			}
			if !strings.Contains(string(code), m[2]) {
				t.Errorf("%s: this excerpt is no longer in %s:\n%s", doc, m[1], m[2])
			}
		}
	}
	if found == 0 {
		t.Fatal("no excerpt found: the marker or the pattern changed")
	}
}

// sdkRow is a row of the SDK versions table: modules, then the version.
var sdkRow = regexp.MustCompile("(?m)^\\| (`[^|]+`) \\| (v[^ ]+) \\|$")

// TestSDKVersionsAreGoMods: the versions docs/plugins.md says a plugin
// author's module moves to are those in itemops' go.mod.
func TestSDKVersionsAreGoMods(t *testing.T) {
	root := root(t)
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	required := map[string]string{}
	for _, r := range mod.Require {
		required[r.Mod.Path] = r.Mod.Version
	}
	text, err := os.ReadFile(filepath.Join(root, "docs", "plugins.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(text), "<!-- sdk-versions: checked against go.mod by test/docs -->")
	if !ok {
		t.Fatal("docs/plugins.md has no SDK versions table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	rows := sdkRow.FindAllStringSubmatch(table, -1)
	if len(rows) < 3 {
		t.Fatalf("%d rows in the SDK versions table:\n%s", len(rows), table)
	}
	for _, row := range rows {
		for _, module := range strings.Split(row[1], ", ") {
			module = strings.Trim(module, "`")
			if got := required[module]; got != row[2] {
				t.Errorf("docs/plugins.md says %s %s; go.mod requires %q", module, row[2], got)
			}
		}
	}
}
