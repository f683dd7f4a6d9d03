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

package why

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerotypes "github.com/vmware-tanzu/velero/pkg/types"
)

// nodeAgent is the name of node-agent's DaemonSet, as velero install makes it.
const nodeAgent = "node-agent"

// defaultConcurrency is node-agent's loadConcurrency when its ConfigMap sets none.
const defaultConcurrency = 1

func (g *Gatherer) nodeAgentPods(ctx context.Context, m *Movement) error {
	facts, err := g.nodeAgent(ctx, m.Namespace)
	if err != nil {
		return err
	}
	m.NodeAgentPods = facts.pods
	return nil
}

// nodeAgentFacts is what node-agent's DaemonSet, ConfigMap and pods say,
// read once per Every for all operations, and the labels of the nodes
// asked about since. Read only: operations share it.
type nodeAgentFacts struct {
	at   time.Time
	pods []corev1.Pod
	// prepareTimeout is its --data-mover-prepare-timeout.
	prepareTimeout time.Duration
	// load is its ConfigMap's loadConcurrency, nil when none.
	load *velerotypes.LoadConcurrency
	// nodes are the labels of the nodes asked about, read when load has
	// per-node rules (nil: the node could not be read, and its
	// concurrency is unknown).
	nodes map[string]labels.Set
}

// nodeAgent is what node-agent in namespace says, read again once it is
// older than Every.
func (g *Gatherer) nodeAgent(ctx context.Context, namespace string) (*nodeAgentFacts, error) {
	c := g.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := c.Now()
	if f := g.agent[namespace]; f != nil && g.Every > 0 && now.Sub(f.at) < g.Every {
		return f, nil
	}
	f := &nodeAgentFacts{at: now, prepareTimeout: DefaultPrepareTimeout, nodes: map[string]labels.Set{}}
	pods := &corev1.PodList{}
	if err := g.Reader.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{"role": nodeAgent}); err != nil {
		return nil, fmt.Errorf("listing node-agent's pods: %w", err)
	}
	f.pods = pods.Items
	ds, err := g.nodeAgentDaemonSet(ctx, namespace)
	if err != nil {
		return nil, err
	}
	f.prepareTimeout = prepareTimeout(ds)
	if f.load, err = g.loadConcurrency(ctx, namespace, ds); err != nil {
		return nil, err
	}
	if g.agent == nil {
		g.agent = map[string]*nodeAgentFacts{}
	}
	g.agent[namespace] = f
	return f, nil
}

// concurrencyOn is node-agent's loadConcurrency on node: its global
// number, else the least per-node rule matching the node's labels.
func (g *Gatherer) concurrencyOn(ctx context.Context, f *nodeAgentFacts, node string) int {
	if f.load == nil {
		return defaultConcurrency
	}
	if len(f.load.PerNodeConfig) == 0 {
		return Concurrency(f.load, nil)
	}
	g.mu.Lock()
	nodeLabels, known := f.nodes[node]
	g.mu.Unlock()
	if !known {
		n := &corev1.Node{}
		if err := g.direct().Get(ctx, client.ObjectKey{Name: node}, n); err == nil {
			nodeLabels = labels.Set(n.Labels)
			if nodeLabels == nil {
				nodeLabels = labels.Set{}
			}
		}
		g.mu.Lock()
		f.nodes[node] = nodeLabels
		g.mu.Unlock()
	}
	if nodeLabels == nil {
		// A rule may match the node, which could not be read: unknown,
		// and no claim made of it.
		return 0
	}
	return Concurrency(f.load, nodeLabels)
}

// loadConcurrency is node-agent's loadConcurrency, read as node-agent
// reads it at its start: from the ConfigMap its DaemonSet names with
// --node-agent-configmap. nil when none is set.
func (g *Gatherer) loadConcurrency(ctx context.Context, namespace string, ds *appsv1.DaemonSet) (*velerotypes.LoadConcurrency, error) {
	if ds == nil {
		return nil, nil
	}
	name := configMapName(ds)
	if name == "" {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	if err := g.direct().Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading node-agent's ConfigMap %s: %w", name, err)
	}
	configs, err := parseConfigs(cm)
	if err != nil {
		// node-agent does not start with a ConfigMap it cannot read; one
		// changed since is not its configuration yet.
		return nil, nil
	}
	return configs.LoadConcurrency, nil
}

// Concurrency is the number of data paths node-agent runs at once on a
// node with nodeLabels, as node-agent computes it.
func Concurrency(lc *velerotypes.LoadConcurrency, nodeLabels labels.Set) int {
	global := lc.GlobalConfig
	if global <= 0 {
		global = defaultConcurrency
	}
	least := 0
	for _, rule := range lc.PerNodeConfig {
		selector, err := metav1.LabelSelectorAsSelector(&rule.NodeSelector)
		if err != nil || rule.Number <= 0 || nodeLabels == nil {
			continue
		}
		if selector.Matches(nodeLabels) && (least == 0 || rule.Number < least) {
			least = rule.Number
		}
	}
	if least > 0 {
		return least
	}
	return global
}

// nodeAgentDaemonSet reads node-agent's DaemonSet; nil when there is none.
func (g *Gatherer) nodeAgentDaemonSet(ctx context.Context, namespace string) (*appsv1.DaemonSet, error) {
	ds := &appsv1.DaemonSet{}
	if err := g.direct().Get(ctx, client.ObjectKey{Namespace: namespace, Name: nodeAgent}, ds); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading node-agent's DaemonSet: %w", err)
	}
	return ds, nil
}

// configMapName is the ConfigMap node-agent's container is started with.
func configMapName(ds *appsv1.DaemonSet) string {
	return nodeAgentFlag(ds, "node-agent-configmap")
}

// prepareTimeout is node-agent's --data-mover-prepare-timeout, as its
// DaemonSet starts it; the default when it sets none or one node-agent
// would refuse.
func prepareTimeout(ds *appsv1.DaemonSet) time.Duration {
	if ds == nil {
		return DefaultPrepareTimeout
	}
	if d, err := time.ParseDuration(nodeAgentFlag(ds, "data-mover-prepare-timeout")); err == nil && d > 0 {
		return d
	}
	return DefaultPrepareTimeout
}

// nodeAgentFlag is the value of a flag node-agent's container is started
// with, or "".
func nodeAgentFlag(ds *appsv1.DaemonSet, name string) string {
	for _, c := range ds.Spec.Template.Spec.Containers {
		args := append(append([]string(nil), c.Command...), c.Args...)
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
			if a == "--"+name && i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	return ""
}

// parseConfigs reads node-agent's ConfigMap as node-agent does: its one key
// holds the configuration in JSON.
func parseConfigs(cm *corev1.ConfigMap) (*velerotypes.NodeAgentConfigs, error) {
	if len(cm.Data) != 1 {
		return nil, fmt.Errorf("ConfigMap %s has %d keys, node-agent wants one", cm.Name, len(cm.Data))
	}
	configs := &velerotypes.NodeAgentConfigs{}
	for _, v := range cm.Data {
		if err := json.Unmarshal([]byte(v), configs); err != nil {
			return nil, err
		}
	}
	return configs, nil
}
