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

// Package scrape reads Prometheus metrics as Prometheus does, from an
// endpoint's text exposition, for the programs that watch itemops and the
// API server (the soak, the bench), over HTTPS with a reader's token
// where itemops serves them so (Client, ReaderToken).
package scrape

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one scrape, by name.
type Families map[string]*dto.MetricFamily

// Get scrapes url with client (http.DefaultClient when nil), in at most 10 s.
func Get(client *http.Client, url string) (Families, error) {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return Parse(resp.Body)
}

// Parse reads the text exposition format.
func Parse(r io.Reader) (Families, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	return Families(families), err
}

// Sum adds up the samples of a counter, gauge or untyped metric whose labels
// include every pair of match; -1 when there is no such metric.
func (f Families) Sum(name string, match map[string]string) float64 {
	family, ok := f[name]
	if !ok {
		return -1
	}
	total := 0.0
	for _, m := range family.GetMetric() {
		if !matches(m, match) {
			continue
		}
		switch {
		case m.GetGauge() != nil:
			total += m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			total += m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

// Histogram is the first histogram of the family name whose labels include
// every pair of match.
func (f Families) Histogram(name string, match map[string]string) (*dto.Histogram, bool) {
	family, ok := f[name]
	if !ok {
		return nil, false
	}
	for _, m := range family.GetMetric() {
		if matches(m, match) && m.GetHistogram() != nil {
			return m.GetHistogram(), true
		}
	}
	return nil, false
}

func matches(m *dto.Metric, match map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if want, ok := match[l.GetName()]; ok {
			if l.GetValue() != want {
				return false
			}
			found++
		}
	}
	return found == len(match)
}

// Exports reports whether the scrape holds a series of the metric name, as
// a query names it: a family's own name, or a histogram's or summary's
// name_bucket, name_count or name_sum.
func (f Families) Exports(name string) bool {
	if family, ok := f[name]; ok && len(family.GetMetric()) > 0 {
		return true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		family, ok := f[base]
		if !ok || len(family.GetMetric()) == 0 {
			continue
		}
		switch family.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			return true
		case dto.MetricType_SUMMARY:
			return suffix != "_bucket"
		}
	}
	return false
}
