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
)

// root is the repository's root, two levels above this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// documents are the files whose links are checked, relative to the root.
func documents(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md", "CONTRIBUTING.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		out = append(out, rel)
	}
	return out
}

var (
	// link is a Markdown link or image: [text](target) or ![alt](target).
	link = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// fence opens or closes a code block, whose text holds no links.
	fence = regexp.MustCompile("^\\s*```")
	// inlineCode is text between backticks, which holds no links either.
	inlineCode = regexp.MustCompile("`[^`]*`")
)

// links returns the relative links of a Markdown text, outside code.
func links(text string) []string {
	var out []string
	inCode := false
	for line := range strings.Lines(text) {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		for _, m := range link.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			out = append(out, target)
		}
	}
	return out
}

// anchors are the ids GitHub gives a Markdown text's headings: lower case,
// punctuation dropped but hyphens, spaces turned into hyphens, and a
// repeated one suffixed -1, -2, ….
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	drop := regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
	for line := range strings.Lines(text) {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		id := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(heading), ""), " ", "-")
		if n := seen[id]; n > 0 {
			out[id+"-"+string(rune('0'+n))] = true
		} else {
			out[id] = true
		}
		seen[id]++
	}
	return out
}

func TestAnchors(t *testing.T) {
	got := anchors("# itemops\n## Install beside Velero\n### `velero backup describe --details` while operations run\n" +
		"```\n# not a heading\n```\n## Trying it: `make demo`, `make cluster`, `make run`\n## Notes\n## Notes\n")
	for _, want := range []string{"itemops", "install-beside-velero", "velero-backup-describe---details-while-operations-run",
		"trying-it-make-demo-make-cluster-make-run", "notes", "notes-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line in a code block became a heading")
	}
}

func TestLinks(t *testing.T) {
	r := root(t)
	checked := 0
	for _, doc := range documents(t, r) {
		text, err := os.ReadFile(filepath.Join(r, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range links(string(text)) {
			checked++
			path, anchor, _ := strings.Cut(target, "#")
			file := filepath.Join(r, doc)
			if path != "" {
				file = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: %s leads nowhere: %v", doc, target, err)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			linked, err := os.ReadFile(file)
			if err != nil {
				t.Errorf("%s: %s: %v", doc, target, err)
				continue
			}
			if !anchors(string(linked))[anchor] {
				t.Errorf("%s: %s names no heading of %s", doc, target, filepath.Base(file))
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d links checked: the documents were not found or not read", checked)
	}
}
