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

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// A record and a report as the Makefile, hack/test.sh and Ginkgo write
// them, read back as testtimes reads them: the table gives each build
// that built, each lane, each suite, and the slowest specs in order.
func TestTable(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	spec := func(text string, took time.Duration, state types.SpecState) types.SpecReport {
		return types.SpecReport{LeafNodeText: text, LeafNodeType: types.NodeTypeIt, State: state, RunTime: took}
	}
	cluster := types.Report{SuitePath: "/x/test/cluster", SuiteLabels: []string{"cluster"}, RunTime: 40 * time.Minute,
		SpecReports: types.SpecReports{
			{LeafNodeType: types.NodeTypeBeforeSuite, RunTime: 5 * time.Minute},
			spec("defaults", 2*time.Minute, types.SpecStatePassed),
			spec("observe", 7*time.Minute, types.SpecStatePassed),
			spec("fs backup", 4*time.Minute, types.SpecStateFailed),
			spec("needs the fs backup", 0, types.SpecStateSkipped),
			spec("fs env", 3*time.Minute, types.SpecStatePassed),
		}}
	for i := range 12 {
		cluster.SpecReports = append(cluster.SpecReports, spec(fmt.Sprintf("short %d", i), time.Second, types.SpecStatePassed))
	}
	// Through JSON, as the report file holds it.
	data, err := json.Marshal([]types.Report{cluster})
	if err != nil {
		t.Fatal(err)
	}
	var reports []types.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		t.Fatal(err)
	}
	steps, err := readSteps(strings.NewReader(strings.Join([]string{
		"build control-plane start 1800000000", "build helm start 1800000000", "build velero start 1800000001",
		"build helm end 1800000001", "build control-plane end 1800001800", "build velero end 1800000901",
		"lane cluster start 1800001800", "lane plain start 1800001860", "lane plain end 1800002100",
		"build release-tools start 1800000000",
		"lane cluster end 1800004200", "",
	}, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	write(&out, t0.Add(-time.Minute), t0.Add(71*time.Minute), steps, reports)
	table := out.String()
	for _, want := range []string{
		`(?m)^the whole run\s+1h?12m00s|the whole run\s+72m00s`,
		`(?s)build\s+began\s+ended\s+took\s*\nvelero\s+\+1m01s\s+\+16m01s\s+15m00s\s*\ncontrol-plane\s+\+1m00s\s+\+31m00s\s+30m00s\s*\nrelease-tools\s+\+1m00s\s+running\s+-`,
		`(?m)^cluster\s+\+31m00s\s+\+71m00s\s+40m00s`,
		`(?m)^plain\s+\+32m00s\s+\+36m00s\s+4m00s`,
		`(?m)^test/cluster|cluster\s+5m00s\s+16m\d\ds\s+40m00s`,
		`(?s)10 slowest specs.*observe\s+passed\s+7m00s.*fs backup\s+failed\s+4m00s.*fs env\s+passed\s+3m00s.*defaults\s+passed\s+2m00s`,
	} {
		if !regexp.MustCompile(want).MatchString(table) {
			t.Errorf("the table does not match %s:\n%s", want, table)
		}
	}
	for _, not := range []string{"helm", "needs the fs backup", "short 11"} {
		if strings.Contains(table, not) {
			t.Errorf("the table names %q (a build that built nothing, a skipped spec, the 13th slowest):\n%s", not, table)
		}
	}
}

func TestNothingBuilt(t *testing.T) {
	steps, err := readSteps(strings.NewReader("build helm start 100\nbuild helm end 101\nlane quick start 101\nlane quick end 400\n"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	write(&out, time.Time{}, time.Unix(400, 0), steps, nil)
	if !strings.Contains(out.String(), "build: none") {
		t.Errorf("a warm run's table does not say nothing was built:\n%s", out.String())
	}
}
