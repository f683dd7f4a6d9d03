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

package scrape

import (
	"strings"
	"testing"
)

const exposition = `# TYPE itemops_progress_calls_total counter
itemops_progress_calls_total{plugin="a",result="ok"} 3
# TYPE itemops_operation_duration_seconds histogram
itemops_operation_duration_seconds_bucket{le="1"} 0
itemops_operation_duration_seconds_bucket{le="+Inf"} 1
itemops_operation_duration_seconds_sum 2
itemops_operation_duration_seconds_count 1
# TYPE rpc_seconds summary
rpc_seconds{quantile="0.5"} 1
rpc_seconds_sum 1
rpc_seconds_count 1
# TYPE itemops_empty_total counter
`

func TestExportsNamesAsQueriesWriteThem(t *testing.T) {
	f, err := Parse(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"itemops_progress_calls_total":              true,
		"itemops_operation_duration_seconds_bucket": true,
		"itemops_operation_duration_seconds_count":  true,
		"itemops_operation_duration_seconds_sum":    true,
		"itemops_operation_duration_seconds":        true,
		"rpc_seconds_count":                         true,
		"rpc_seconds_bucket":                        false,
		"itemops_progress_calls_total_count":        false,
		"itemops_empty_total":                       false,
		"itemops_cancel_calls_total":                false,
	} {
		if got := f.Exports(name); got != want {
			t.Errorf("Exports(%s) = %v, want %v", name, got, want)
		}
	}
}
