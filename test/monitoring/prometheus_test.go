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
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestPrometheusScrapesAndAlerts runs the real Prometheus StartPrometheus
// starts against an endpoint that answers as itemops' secure metrics do
// (https, a bearer token, else 401) with a Backup queued for 4000 s behind
// a running one: the series carry the target's namespace, and of the
// shipped alerts ItemOpsBackupWaitingInQueue fires, with its description,
// and ItemOpsBackupQueueStuck does not. test/cluster does the same against
// itemops on the real node.
func TestPrometheusScrapesAndAlerts(t *testing.T) {
	const token = "reader-token"
	var unauthorized atomic.Int32
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			unauthorized.Add(1)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(strings.Join([]string{
			"# TYPE itemops_backup_queue_backups gauge",
			`itemops_backup_queue_backups{phase="Queued"} 3`,
			`itemops_backup_queue_backups{phase="ReadyToStart"} 0`,
			`itemops_backup_queue_backups{phase="InProgress"} 1`,
			"# TYPE itemops_backup_queue_oldest_seconds gauge",
			`itemops_backup_queue_oldest_seconds{phase="Queued"} 4000`,
			`itemops_backup_queue_oldest_seconds{phase="ReadyToStart"} 0`,
			"",
		}, "\n")))
	}))
	defer server.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	target := ScrapeTarget{Address: strings.TrimPrefix(server.URL, "https://"), Token: token, Labels: map[string]string{"namespace": "velero"}}
	prom, err := StartPrometheus(ctx, root(t), t.TempDir(), target, readRules(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := prom.Stop(); err != nil {
			t.Error(err)
		}
	}()

	var alerts []Alert
	firing := func() bool {
		alerts, err = prom.Alerts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range alerts {
			if a.Labels["alertname"] == "ItemOpsBackupWaitingInQueue" && a.State == "firing" {
				return true
			}
		}
		return false
	}
	if !eventually(ctx, firing) {
		t.Fatalf("ItemOpsBackupWaitingInQueue never fired; alerts: %+v", alerts)
	}
	for _, a := range alerts {
		switch a.Labels["alertname"] {
		case "ItemOpsBackupWaitingInQueue":
			if a.Labels["namespace"] != "velero" {
				t.Errorf("the alert's namespace is %q, not the target's", a.Labels["namespace"])
			}
			if !strings.HasPrefix(a.Annotations["description"], "A Backup has been Queued for 1h 6m 40s behind Backups") {
				t.Errorf("description: %q", a.Annotations["description"])
			}
		case "ItemOpsBackupQueueStuck":
			t.Errorf("ItemOpsBackupQueueStuck is %s behind a running Backup", a.State)
		}
	}
	samples, err := prom.Query(ctx, `itemops_backup_queue_backups{namespace="velero",phase="Queued"}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 1 || samples[0].Value[1] != "3" {
		t.Errorf("the Queued series: %+v", samples)
	}
	if n := unauthorized.Load(); n != 0 {
		t.Errorf("%d scrapes came without the token", n)
	}
}

// eventually polls cond every ScrapeInterval until it holds or ctx ends.
func eventually(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(ScrapeInterval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}
