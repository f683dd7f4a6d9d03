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

package monitoring

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Where the monitoring files lie in the checkout.
const (
	RulesFile     = "config/prometheus/rules.yaml"
	DashboardFile = "charts/itemops/files/dashboards/itemops.json"
	// PrometheusTools is the module that pins promtool and the PromQL parser.
	PrometheusTools = "hack/tools/prometheus"
	// PromtoolTags are promtool's build tags: checking and testing rules
	// needs none of Prometheus' service discoveries, which are most of what
	// a first build compiles (make test builds promtool with the same tags).
	PromtoolTags = "remove_all_sd"
)

// Query is one PromQL expression itemops ships: an alert's expression, a
// dashboard panel's target or a dashboard variable's query.
type Query struct {
	// Where names it for a reader: "alert ItemOperationStalled", "panel
	// Stalled, target A", "variable namespace".
	Where string
	Expr  string
}

// Queries returns every query of the alerts and of the dashboard in the
// checkout at root. Grafana's variables are replaced as Grafana would
// before it sends a query: time ranges by 5m, the dashboard's own
// variables by a regular expression matching anything.
func Queries(root string) ([]Query, error) {
	alerts, err := AlertQueries(root)
	if err != nil {
		return nil, err
	}
	panels, err := DashboardQueries(root)
	if err != nil {
		return nil, err
	}
	return append(alerts, panels...), nil
}

// RuleGroups are a rule file's groups, as a PrometheusRule's spec holds them.
type RuleGroups struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of rules.
type RuleGroup struct {
	Name  string           `json:"name"`
	Rules []map[string]any `json:"rules"`
}

// ReadRules reads the rule groups of the PrometheusRule in RulesFile.
func ReadRules(root string) (RuleGroups, error) {
	data, err := os.ReadFile(filepath.Join(root, RulesFile))
	if err != nil {
		return RuleGroups{}, err
	}
	g, err := RulesIn(data)
	if err != nil {
		return RuleGroups{}, fmt.Errorf("%s: %w", RulesFile, err)
	}
	return g, nil
}

// RulesIn returns the rule groups of the one PrometheusRule among
// manifests: YAML documents, as helm template renders them.
func RulesIn(manifests []byte) (RuleGroups, error) {
	var found []RuleGroups
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	for {
		var doc struct {
			Kind string     `json:"kind"`
			Spec RuleGroups `json:"spec"`
		}
		if err := decoder.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return RuleGroups{}, err
		}
		if doc.Kind == "PrometheusRule" {
			found = append(found, doc.Spec)
		}
	}
	if len(found) != 1 || len(found[0].Groups) == 0 {
		return RuleGroups{}, fmt.Errorf("%d PrometheusRules, not one with rule groups", len(found))
	}
	return found[0], nil
}

// Alerts returns the names of the alerts, in order.
func (g RuleGroups) Alerts() []string {
	var names []string
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			if name, ok := r["alert"].(string); ok {
				names = append(names, name)
			}
		}
	}
	return names
}

// AlertQueries returns the expression of every rule in RulesFile.
func AlertQueries(root string) ([]Query, error) {
	g, err := ReadRules(root)
	if err != nil {
		return nil, err
	}
	var queries []Query
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			name, _ := r["alert"].(string)
			if name == "" {
				name, _ = r["record"].(string)
			}
			expr, _ := r["expr"].(string)
			if expr == "" {
				return nil, fmt.Errorf("%s: rule %q has no expression", RulesFile, name)
			}
			queries = append(queries, Query{Where: "alert " + name, Expr: expr})
		}
	}
	return queries, nil
}

// Dashboard is the part of a Grafana dashboard's JSON that holds queries.
type Dashboard struct {
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a dashboard panel.
type Panel struct {
	Title       string      `json:"title"`
	Type        string      `json:"type"`
	Datasource  *Datasource `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []Target `json:"targets"`
	Panels  []Panel  `json:"panels"`
}

// Datasource is a panel's or a target's data source.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *Datasource `json:"datasource"`
}

// Variable is a dashboard variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Definition string          `json:"definition"`
	Datasource *Datasource     `json:"datasource"`
	Query      json.RawMessage `json:"query"`
}

// ReadDashboard reads DashboardFile.
func ReadDashboard(root string) (Dashboard, []byte, error) {
	data, err := os.ReadFile(filepath.Join(root, DashboardFile))
	if err != nil {
		return Dashboard{}, nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return Dashboard{}, nil, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	return d, data, nil
}

// AllPanels returns the panels, those inside rows included.
func (d Dashboard) AllPanels() []Panel {
	var all []Panel
	var walk func([]Panel)
	walk = func(panels []Panel) {
		for _, p := range panels {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return all
}

// grafanaVariable is a reference to a variable: $name, ${name} or ${name:format}.
var grafanaVariable = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(:[^}]*)?\}|\$([A-Za-z0-9_]+)`)

// labelValues is Grafana's label_values(metric, label) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// DashboardQueries returns the query of every panel target and query variable.
func DashboardQueries(root string) ([]Query, error) {
	d, _, err := ReadDashboard(root)
	if err != nil {
		return nil, err
	}
	own := map[string]bool{}
	for _, v := range d.Templating.List {
		own[v.Name] = true
	}
	expand := func(where, expr string) (Query, error) {
		var unknown []string
		expr = grafanaVariable.ReplaceAllStringFunc(expr, func(ref string) string {
			m := grafanaVariable.FindStringSubmatch(ref)
			name := m[1] + m[3]
			switch {
			case name == "__rate_interval" || name == "__interval" || name == "__range":
				return "5m"
			case own[name]:
				return ".*"
			}
			unknown = append(unknown, ref)
			return ref
		})
		if len(unknown) > 0 {
			return Query{}, fmt.Errorf("%s: %s names variables the dashboard does not define: %s", DashboardFile, where, strings.Join(unknown, ", "))
		}
		return Query{Where: where, Expr: expr}, nil
	}
	var queries []Query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		def := v.Definition
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) == nil && q.Query != "" {
			def = q.Query
		} else if s := ""; json.Unmarshal(v.Query, &s) == nil && s != "" {
			def = s
		}
		if m := labelValues.FindStringSubmatch(def); m != nil {
			def = m[1]
		}
		query, err := expand("variable "+v.Name, def)
		if err != nil {
			return nil, err
		}
		queries = append(queries, query)
	}
	for _, p := range d.AllPanels() {
		for _, t := range p.Targets {
			query, err := expand(fmt.Sprintf("panel %q, target %s", p.Title, t.RefID), t.Expr)
			if err != nil {
				return nil, err
			}
			queries = append(queries, query)
		}
	}
	return queries, nil
}

// MetricNames returns, for each query in order, the metric names it reads,
// found by Prometheus' own PromQL parser (hack/tools/prometheus/promql-names,
// built from the Prometheus module pinned in hack/tools/prometheus/go.mod).
// A query that does not parse is an error naming it.
func MetricNames(root string, queries []Query) ([][]string, error) {
	exprs := make([]string, len(queries))
	for i, q := range queries {
		exprs[i] = q.Expr
	}
	in, err := json.Marshal(exprs)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "run", "./promql-names")
	cmd.Dir = filepath.Join(root, PrometheusTools)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("hack/tools/prometheus/promql-names: %w: %s", err, stderr.String())
	}
	var answers []struct {
		Names []string `json:"names"`
		Error string   `json:"error"`
	}
	if err := json.Unmarshal(out, &answers); err != nil {
		return nil, err
	}
	if len(answers) != len(queries) {
		return nil, fmt.Errorf("hack/tools/prometheus/promql-names answered for %d of %d queries", len(answers), len(queries))
	}
	names := make([][]string, len(answers))
	var bad []string
	for i, a := range answers {
		if a.Error != "" {
			bad = append(bad, fmt.Sprintf("%s (%s): %s", queries[i].Where, queries[i].Expr, a.Error))
		}
		names[i] = a.Names
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("queries that are not PromQL: %s", strings.Join(bad, "; "))
	}
	return names, nil
}
