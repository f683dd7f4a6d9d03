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

// Package kube holds the results of make test-kube (hack/test-kube.sh) and
// checks that what itemops says it supports is what passed there.
package kube

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/itemops/itemops/internal/compat"
)

// row is one Kubernetes release of the results table.
type row struct {
	minor  int
	passed bool
	cells  []string
}

// readResults parses the table of results.md.
func readResults(t *testing.T) []row {
	t.Helper()
	raw, err := os.ReadFile("results.md")
	if err != nil {
		t.Fatalf("the results of make test-kube: %v", err)
	}
	release := regexp.MustCompile(`^v1\.(\d+)\.\d+$`)
	var rows []row
	for _, line := range strings.Split(string(raw), "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		m := release.FindStringSubmatch(cells[0])
		if !strings.HasPrefix(line, "|") || m == nil {
			continue
		}
		if len(cells) != 7 {
			t.Fatalf("results.md: a row of %d cells, not 7: %q", len(cells), line)
		}
		minor, _ := strconv.Atoi(m[1])
		rows = append(rows, row{minor: minor, passed: cells[3] == "passed", cells: cells})
	}
	if len(rows) == 0 {
		t.Fatal("results.md has no row")
	}
	return rows
}

// supported is the range of minors that passed: from the oldest that passed
// to the newest, every one of them passed.
func supported(t *testing.T, rows []row) (oldest, newest int) {
	t.Helper()
	first, last := -1, -1
	for i, r := range rows {
		if r.passed {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		t.Fatal("no Kubernetes release passed")
	}
	for i := first; i <= last; i++ {
		if !rows[i].passed {
			t.Errorf("Kubernetes 1.%d failed between releases that passed: %s", rows[i].minor, strings.Join(rows[i].cells, " | "))
		}
		if i > first && rows[i].minor != rows[i-1].minor+1 {
			t.Errorf("the results skip from Kubernetes 1.%d to 1.%d", rows[i-1].minor, rows[i].minor)
		}
	}
	return rows[first].minor, rows[last].minor
}

func TestChartKubeVersionIsTheOldestThatPassed(t *testing.T) {
	oldest, _ := supported(t, readResults(t))
	raw, err := os.ReadFile(filepath.Join("..", "..", "charts", "itemops", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		KubeVersion string `json:"kubeVersion"`
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(">=1.%d.0-0", oldest); chart.KubeVersion != want {
		t.Errorf("Chart.yaml's kubeVersion is %q; the oldest Kubernetes that passed make test-kube asks for %q", chart.KubeVersion, want)
	}
}

func TestDocsNameTheReleasesThatPassed(t *testing.T) {
	oldest, newest := supported(t, readResults(t))
	for _, doc := range []struct{ path, says, link string }{
		{"README.md", "Kubernetes 1.%d–1.%d", "(test/kube/results.md)"},
		{"docs/install.md", "| Kubernetes | 1.%d to 1.%d |", "(../test/kube/results.md)"},
		{"charts/itemops/README.md", "tested on 1.%d to 1.%d", "(../../test/kube/results.md)"},
	} {
		raw, err := os.ReadFile(filepath.Join("..", "..", doc.path))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(doc.says, oldest, newest)
		if !strings.Contains(string(raw), want) || !strings.Contains(string(raw), doc.link) {
			t.Errorf("%s does not say %q with a link to test/kube/results.md", doc.path, want)
		}
	}
}

func TestItemopsNamesTheReleasesThatPassed(t *testing.T) {
	oldest, newest := supported(t, readResults(t))
	if compat.OldestKubernetesMinor != oldest || compat.NewestKubernetesMinor != newest {
		t.Errorf("internal/compat says 1.%d to 1.%d at start; make test-kube passed 1.%d to 1.%d",
			compat.OldestKubernetesMinor, compat.NewestKubernetesMinor, oldest, newest)
	}
}
