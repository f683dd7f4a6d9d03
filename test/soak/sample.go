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
	"context"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/scrape"
)

// sample is what is measured every 10 s. A value that could not be read
// (the API server restarting, a scrape timing out) is -1, and left out of
// the trends.
type sample struct {
	at time.Duration
	// rss: itemops' resident memory; heap: its Go heap in use.
	rss  int64
	heap float64
	// goroutines of itemops; files: its open file descriptors.
	goroutines float64
	files      int
	// plugins: plugin processes (itemops' children).
	plugins int
	// watches: the API server's open watch requests (itemops holds all of them).
	watches float64
	// queue: items waiting in itemops' work queues, every controller's.
	queue float64
	// inFlight: operations New or InProgress, by itemops' gauge.
	inFlight float64
}

type sampler struct {
	m *itemops
	// own reads itemops' metrics as a metrics reader.
	own *http.Client
	// api reaches the API server's /metrics as an administrator.
	api    *http.Client
	apiURL string
}

func newSampler(cfg *rest.Config, m *itemops) (*sampler, error) {
	api, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	api.Timeout = 5 * time.Second
	token, err := scrape.ReaderToken(context.Background(), cfg, envtest.VeleroNamespace)
	if err != nil {
		return nil, err
	}
	return &sampler{m: m, own: scrape.Client(token), api: api, apiURL: strings.TrimSuffix(cfg.Host, "/") + "/metrics"}, nil
}

func (s *sampler) sample(at time.Duration) sample {
	pid := s.m.cmd.Process.Pid
	out := sample{at: at, heap: -1, goroutines: -1, watches: -1, queue: -1, inFlight: -1}
	_, out.rss = proc.Usage(pid)
	out.files = proc.OpenFiles(pid)
	out.plugins = len(proc.Children(pid))
	if own, err := scrape.Get(s.own, "https://"+s.m.metrics+"/metrics"); err == nil {
		out.heap = own.Sum("go_memstats_heap_inuse_bytes", nil)
		out.goroutines = own.Sum("go_goroutines", nil)
		out.queue = own.Sum("workqueue_depth", nil)
		out.inFlight = own.Sum("itemops_operations", map[string]string{"phase": "InProgress"})
		if n := own.Sum("itemops_operations", map[string]string{"phase": "New"}); n > 0 {
			out.inFlight += n
		}
	}
	if api, err := scrape.Get(s.api, s.apiURL); err == nil {
		out.watches = api.Sum("apiserver_longrunning_requests", map[string]string{"verb": "WATCH"})
	}
	return out
}
