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
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// The dashboard decodes strictly into the Grafana dashboard types of the
// foundation SDK (unknown fields, wrong types and missing required fields
// are errors, panel options included) and passes their validation.
func TestDashboardMatchesGrafanasSchema(t *testing.T) {
	_, data, err := ReadDashboard(root(t))
	if err != nil {
		t.Fatal(err)
	}
	plugins.RegisterDefaultPlugins()
	var d dashboard.Dashboard
	// The strict decoder returns its list of errors even when it is empty.
	if err := d.UnmarshalJSONStrict(data); err != nil {
		if errs, ok := err.(cog.BuildErrors); !ok || len(errs) > 0 {
			t.Fatalf("%s does not match Grafana's dashboard schema: %v", DashboardFile, err)
		}
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("%s: %v", DashboardFile, err)
	}
	if d.Uid == nil || *d.Uid != "itemops" {
		t.Errorf("%s: uid %v, want itemops (the chart's NOTES and docs link to it)", DashboardFile, d.Uid)
	}
	if d.SchemaVersion < 39 {
		t.Errorf("%s: schemaVersion %d, older than Grafana 11's (39)", DashboardFile, d.SchemaVersion)
	}
}

// Every panel reads Prometheus through the dashboard's data source variable
// and says the unit of what it shows; every target has a query.
func TestDashboardPanelsNameTheirDataSourceAndUnit(t *testing.T) {
	d, _, err := ReadDashboard(root(t))
	if err != nil {
		t.Fatal(err)
	}
	var source *Variable
	for i, v := range d.Templating.List {
		if v.Type == "datasource" {
			source = &d.Templating.List[i]
		}
	}
	if source == nil || !strings.Contains(string(source.Query), "prometheus") {
		t.Fatalf("%s has no data source variable of type prometheus", DashboardFile)
	}
	want := Datasource{Type: "prometheus", UID: "${" + source.Name + "}"}
	panels := d.AllPanels()
	if len(panels) == 0 {
		t.Fatalf("%s has no panels", DashboardFile)
	}
	for _, p := range panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || *p.Datasource != want {
			t.Errorf("panel %q: data source %+v, want %+v", p.Title, p.Datasource, want)
		}
		if p.FieldConfig.Defaults.Unit == "" {
			t.Errorf("panel %q sets no unit", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, target := range p.Targets {
			if strings.TrimSpace(target.Expr) == "" || target.RefID == "" || refs[target.RefID] {
				t.Errorf("panel %q: a target without a query or with a missing or repeated refId: %+v", p.Title, target)
			}
			refs[target.RefID] = true
			if target.Datasource != nil && *target.Datasource != want {
				t.Errorf("panel %q, target %s: data source %+v, want %+v", p.Title, target.RefID, target.Datasource, want)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && (v.Datasource == nil || *v.Datasource != want) {
			t.Errorf("variable %s: data source %+v, want %+v", v.Name, v.Datasource, want)
		}
	}
}

// Every query of the dashboard and the alerts is PromQL that reads only
// itemops' own metrics (test/e2e checks that a running itemops exports each).
func TestQueriesParseAndReadItemopsMetrics(t *testing.T) {
	queries, err := Queries(root(t))
	if err != nil {
		t.Fatal(err)
	}
	names, err := MetricNames(root(t), queries)
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range queries {
		if len(names[i]) == 0 {
			t.Errorf("%s reads no metric: %s", q.Where, q.Expr)
		}
		for _, name := range names[i] {
			if !strings.HasPrefix(name, "itemops_") {
				t.Errorf("%s reads %s, which is not one of itemops' metrics", q.Where, name)
			}
		}
	}
	// The parser is shown to refuse what is not PromQL.
	if _, err := MetricNames(root(t), []Query{{Where: "a broken query", Expr: `sum(rate(itemops_progress_calls_total[5m])`}}); err == nil ||
		!strings.Contains(err.Error(), "a broken query") {
		t.Errorf("a query missing a parenthesis: %v, want an error naming it", err)
	}
}
