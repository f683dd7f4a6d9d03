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
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
)

// awsPluginVersion is the velero-plugin-for-aws every release runs with
// (test/veleroenv).
const awsPluginVersion = "v1.14.3"

// release is what ran of one Velero release.
type release struct {
	specs, passed int
	took          time.Duration
	failures      []string
}

// The results table, written when ITEMOPS_COMPAT_RESULTS names a file.
var _ = ReportAfterSuite("the results of each release", func(r Report) {
	path := os.Getenv("ITEMOPS_COMPAT_RESULTS")
	if path == "" {
		return
	}
	releases := map[string]*release{}
	var order, specs []string
	for _, s := range r.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt || len(s.ContainerHierarchyTexts) < 2 || s.State == types.SpecStateSkipped {
			continue
		}
		name := s.ContainerHierarchyTexts[1]
		rel := releases[name]
		if rel == nil {
			rel = &release{}
			releases[name] = rel
			order = append(order, name)
		}
		rel.specs++
		rel.took += s.RunTime
		if s.State == types.SpecStatePassed {
			rel.passed++
		} else {
			rel.failures = append(rel.failures, fmt.Sprintf("%s: %s", s.LeafNodeText, firstLine(s.Failure.Message)))
		}
		text := strings.Join(append(slices.Clone(s.ContainerHierarchyTexts[2:]), s.LeafNodeText), ": ")
		if !slices.Contains(specs, text) {
			specs = append(specs, text)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# itemops beside each Velero release\n\n")
	fmt.Fprintf(&b, "Written by `make test-compat` (test/compat) on %s: %s/%s, %d cores, %s. "+
		"Each release runs its own `velero server` and CRDs, velero-plugin-for-aws %s (the only minor the module proxy serves), "+
		"its own velero binary for the built-in plugins in itemops' plugin directory, and itemops as the chart's ServiceAccount "+
		"rendered with `builtinPlugins.image.tag` at that release. The time includes starting the API server, versitygw and Velero; "+
		"the binaries were built before.\n\n",
		r.StartTime.UTC().Format("2006-01-02"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), awsPluginVersion)
	fmt.Fprintf(&b, "Per release, in order:\n\n")
	for _, s := range specs {
		fmt.Fprintf(&b, "- %s\n", s)
	}
	fmt.Fprintf(&b, "\n| Velero | result | specs passed | time |\n|---|---|---|---|\n")
	for _, name := range order {
		rel := releases[name]
		result := "passed"
		if rel.passed != rel.specs {
			result = "**failed**"
		}
		fmt.Fprintf(&b, "| %s | %s | %d of %d | %s |\n", name, result, rel.passed, rel.specs, rel.took.Round(time.Second))
	}
	for _, name := range order {
		for _, f := range releases[name].failures {
			fmt.Fprintf(&b, "\n- %s failed: %s", name, f)
		}
	}
	if err := os.WriteFile(path, []byte(strings.TrimRight(b.String(), "\n")+"\n"), 0o644); err != nil {
		Fail(fmt.Sprintf("writing the results: %v", err))
	}
})

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
