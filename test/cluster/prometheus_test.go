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

package cluster

import (
	"context"
	"fmt"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/test/monitoring"
	"github.com/itemops/itemops/test/stack"
)

// startPrometheus starts a real Prometheus on this node that scrapes the
// release's metrics Service as the chart's ServiceMonitor does (https, the
// metrics reader's token, the Service's namespace as a target label) and
// evaluates the alerts the chart renders with metrics.prometheusRule
// enabled and set (helm template's flags); it is stopped when the spec
// ends.
func startPrometheus(ctx context.Context, set string) *monitoring.Prometheus {
	GinkgoHelper()
	manifests := run(ctx, "helm template itemops charts/itemops -n "+s.Namespace+" --set metrics.prometheusRule.enabled=true "+set+" --show-only templates/metrics.yaml")
	rules, err := monitoring.RulesIn([]byte(manifests))
	Expect(err).NotTo(HaveOccurred())
	svc := &corev1.Service{}
	Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: stack.Release + "-metrics"}, svc)).To(Succeed())
	target := monitoring.ScrapeTarget{
		Address: fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port),
		Token:   metricsToken,
		Labels:  map[string]string{"namespace": s.Namespace},
	}
	prom, err := monitoring.StartPrometheus(ctx, s.Root, GinkgoT().TempDir(), target, rules)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(prom.Stop)
	return prom
}

// alertStates are the Prometheus' alerts of Velero's namespace, by name:
// pending or firing.
func alertStates(ctx context.Context, g Gomega, prom *monitoring.Prometheus) map[string]string {
	alerts, err := prom.Alerts(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	states := map[string]string{}
	for _, a := range alerts {
		if a.Labels["namespace"] == s.Namespace {
			states[a.Labels["alertname"]] = a.State
		}
	}
	return states
}

// queryValues are the values of an instant query's series.
func queryValues(ctx context.Context, g Gomega, prom *monitoring.Prometheus, expr string) []float64 {
	samples, err := prom.Query(ctx, expr)
	g.Expect(err).NotTo(HaveOccurred())
	values := make([]float64, 0, len(samples))
	for _, sample := range samples {
		text, ok := sample.Value[1].(string)
		g.Expect(ok).To(BeTrue(), "the value of %v", sample)
		v, err := strconv.ParseFloat(text, 64)
		g.Expect(err).NotTo(HaveOccurred())
		values = append(values, v)
	}
	return values
}
