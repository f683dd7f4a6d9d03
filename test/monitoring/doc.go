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

// Package monitoring checks what itemops ships for monitoring it: the
// alerts of config/prometheus/rules.yaml (the chart's, kept equal by
// test/chart) and the Grafana dashboard of the chart.
//
// The alerts are tested the Prometheus way: promtool (pinned in
// hack/tools/prometheus/go.mod) checks the rules and runs the unit tests of
// rules.test.yaml against them, in which each alert fires when it should
// and stays silent when it should not; each alert's tests are shown able to
// fail, with its expression replaced by one that never fires and by one
// that always does. The dashboard's JSON must decode strictly into the
// dashboard types of Grafana's foundation SDK, every panel must name its
// data source and unit, and every query must parse as PromQL.
//
// The queries of both are gathered here (Queries), and the metric names
// they read are found with Prometheus' own PromQL parser (MetricNames), so
// that test/e2e can check each name against what a running itemops exports.
package monitoring
