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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"
)

// ScrapeTarget is what a Prometheus scrapes: itemops' metrics endpoint as the
// chart's ServiceMonitor describes it (https with a self-signed
// certificate, a bearer token), and the target labels the Prometheus
// Operator gives its series (namespace, which the alerts group by).
type ScrapeTarget struct {
	// Address is host:port of the metrics endpoint.
	Address string
	// Token is the bearer token sent with each scrape; empty sends none.
	Token string
	// Labels are added to every series scraped from the target.
	Labels map[string]string
}

// Prometheus is a real Prometheus server, the one the module
// hack/tools/prometheus pins, built with PromtoolTags (a static target
// needs no service discovery), listening on loopback. It scrapes one
// target and evaluates the alerting rules it was given, every second.
type Prometheus struct {
	// URL is the server's address, http://127.0.0.1:PORT.
	URL string
	cmd *exec.Cmd
	// exited is closed once the process has ended.
	exited chan struct{}
	err    error
}

// ScrapeInterval is how often the test Prometheus scrapes and evaluates
// its rules: often, so a test waits for a state for seconds, not minutes.
const ScrapeInterval = time.Second

// StartPrometheus builds the pinned Prometheus of the checkout at root
// (once per machine: Go's build cache keeps it), writes its configuration
// and rules into dir and starts it. Its log goes to dir/log.
// It is ready to answer when StartPrometheus returns; Stop ends it.
func StartPrometheus(ctx context.Context, root, dir string, target ScrapeTarget, rules RuleGroups) (*Prometheus, error) {
	bin := filepath.Join(dir, "prometheus")
	build := exec.CommandContext(ctx, "go", "build", "-tags", PromtoolTags, "-o", bin, "github.com/prometheus/prometheus/cmd/prometheus")
	build.Dir = filepath.Join(root, PrometheusTools)
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building Prometheus: %w\n%s", err, out)
	}
	ruleFile, err := yaml.Marshal(rules)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), ruleFile, 0o644); err != nil {
		return nil, err
	}
	scrape := map[string]any{
		"job_name":       "itemops",
		"scheme":         "https",
		"metrics_path":   "/metrics",
		"tls_config":     map[string]any{"insecure_skip_verify": true},
		"static_configs": []any{map[string]any{"targets": []string{target.Address}, "labels": target.Labels}},
	}
	if target.Token != "" {
		scrape["authorization"] = map[string]any{"credentials": target.Token}
	}
	config, err := yaml.Marshal(map[string]any{
		"global": map[string]any{
			"scrape_interval":     ScrapeInterval.String(),
			"scrape_timeout":      ScrapeInterval.String(),
			"evaluation_interval": ScrapeInterval.String(),
		},
		"rule_files":     []string{"rules.yaml"},
		"scrape_configs": []any{scrape},
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), config, 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	address := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+address,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting Prometheus: %w", err)
	}
	p := &Prometheus{URL: "http://" + address, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	if err := p.waitReady(ctx); err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("%w (its log: %s)", err, filepath.Join(dir, "log"))
	}
	return p, nil
}

// freePort is a loopback port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady waits until the server answers /-/ready, it exits, or ctx ends.
func (p *Prometheus) waitReady(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/-/ready", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("prometheus exited before it was ready: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for Prometheus to be ready: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// Stop ends the server and waits for it.
func (p *Prometheus) Stop() error {
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(30 * time.Second):
		return p.cmd.Process.Kill()
	}
}

// Alert is one alert of the server's /api/v1/alerts: pending or firing.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	Value       string            `json:"value"`
}

// Sample is one series of an instant query's answer.
type Sample struct {
	Metric map[string]string `json:"metric"`
	// Value is [time, "value"], as Prometheus' API writes it.
	Value [2]any `json:"value"`
}

// Alerts returns the server's pending and firing alerts.
func (p *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	if err := p.get(ctx, "/api/v1/alerts", &data); err != nil {
		return nil, err
	}
	return data.Alerts, nil
}

// Query evaluates expr now and returns the samples of its vector.
func (p *Prometheus) Query(ctx context.Context, expr string) ([]Sample, error) {
	var data struct {
		ResultType string   `json:"resultType"`
		Result     []Sample `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query?query="+url.QueryEscape(expr), &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: a %s, not a vector", expr, data.ResultType)
	}
	return data.Result, nil
}

// get decodes the data of one answer of Prometheus' API into v.
func (p *Prometheus) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	var answer struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("GET %s: %d, %w: %s", path, resp.StatusCode, err, body)
	}
	if answer.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, answer.Status, answer.Error)
	}
	return json.Unmarshal(answer.Data, v)
}
