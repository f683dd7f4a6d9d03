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

// Command promql-names reads a JSON array of PromQL expressions on standard
// input and writes, for each in order, the metric names it selects, sorted,
// or why it does not parse: [{"names": [...]}, {"error": "..."}]. It parses
// with Prometheus' own parser; test/monitoring uses it to check the alerts'
// and the dashboard's queries against what itemops exports.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type answer struct {
	Names []string `json:"names"`
	Error string   `json:"error,omitempty"`
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintln(os.Stderr, "reading a JSON array of expressions:", err)
		os.Exit(2)
	}
	answers := make([]answer, len(exprs))
	for i, e := range exprs {
		answers[i] = names(e)
	}
	if err := json.NewEncoder(os.Stdout).Encode(answers); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func names(input string) answer {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(input)
	if err != nil {
		return answer{Names: []string{}, Error: err.Error()}
	}
	found := []string{}
	var unnamed []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			unnamed = append(unnamed, vs.String())
			return nil
		}
		found = append(found, name)
		return nil
	})
	slices.Sort(found)
	found = slices.Compact(found)
	if len(unnamed) > 0 {
		return answer{Names: found, Error: fmt.Sprintf("selectors without a metric name: %v", unnamed)}
	}
	return answer{Names: found}
}
