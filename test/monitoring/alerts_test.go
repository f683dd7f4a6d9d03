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
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func readRules(t *testing.T) RuleGroups {
	t.Helper()
	g, err := ReadRules(root(t))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// withExpr returns a copy of g in which alert's expression is expr.
func withExpr(t *testing.T, g RuleGroups, alert, expr string) RuleGroups {
	t.Helper()
	data, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var c RuleGroups
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	for _, grp := range c.Groups {
		for _, r := range grp.Rules {
			if r["alert"] == alert {
				r["expr"] = expr
			}
		}
	}
	return c
}

// promtool writes the rules beside a copy of rules.test.yaml in a directory
// of their own and runs the pinned promtool with args, in which "RULES" and
// "TESTS" stand for the two files.
func promtool(t *testing.T, g RuleGroups, args ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	rules, err := yaml.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("rules.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{"RULES": filepath.Join(dir, "rules.yaml"), "TESTS": filepath.Join(dir, "rules.test.yaml")}
	if err := os.WriteFile(paths["RULES"], rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths["TESTS"], tests, 0o644); err != nil {
		t.Fatal(err)
	}
	argv := []string{"run", "-tags", PromtoolTags, "github.com/prometheus/prometheus/cmd/promtool"}
	for _, a := range args {
		if p, ok := paths[a]; ok {
			a = p
		}
		argv = append(argv, a)
	}
	cmd := exec.Command("go", argv...)
	cmd.Dir = filepath.Join(root(t), PrometheusTools)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestRulesAreValid(t *testing.T) {
	if out, err := promtool(t, readRules(t), "check", "rules", "--lint=all", "--lint-fatal", "RULES"); err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", RulesFile, err, out)
	}
}

func TestAlertsFireWhenTheyShould(t *testing.T) {
	g := readRules(t)
	tests, err := os.ReadFile("rules.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, alert := range g.Alerts() {
		if !strings.Contains(string(tests), "alertname: "+alert+"\n") {
			t.Errorf("rules.test.yaml has no test of alert %s", alert)
		}
	}
	if out, err := promtool(t, g, "test", "rules", "TESTS"); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestAlertTestsCanFail replaces each alert's expression in turn by one that
// never fires and one that always does: its tests must then fail, naming it.
func TestAlertTestsCanFail(t *testing.T) {
	g := readRules(t)
	for _, alert := range g.Alerts() {
		for what, expr := range map[string]string{"never fires": "vector(1) < 0", "always fires": "vector(1)"} {
			out, err := promtool(t, withExpr(t, g, alert, expr), "test", "rules", "TESTS")
			if err == nil {
				t.Errorf("%s replaced by an expression that %s: promtool test rules passed", alert, what)
				continue
			}
			if _, isExit := err.(*exec.ExitError); !isExit || !strings.Contains(out, "alertname: "+alert) {
				t.Errorf("%s replaced by an expression that %s: promtool did not report that alert: %v\n%s", alert, what, err, out)
			}
		}
	}
}
