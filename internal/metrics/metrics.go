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

package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/progress"
)

// Call results, the result label of the call metrics.
const (
	ResultOK               = "ok"
	ResultOperationFailed  = "operation_failed"
	ResultPluginError      = "plugin_error"
	ResultPluginNotFound   = "plugin_not_found"
	ResultNotSupported     = "not_supported"
	ResultInvalidOperation = "invalid_operation_id"
	ResultTransport        = "transport_error"
	ResultLocation         = "location_unavailable"
	ResultBinaryChanged    = "binary_changed"
)

var (
	progressCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itemops_progress_calls_total",
		Help: "Progress calls made to plugins, by plugin and result.",
	}, []string{"plugin_kind", "plugin", "result"})

	progressCallDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "itemops_progress_call_duration_seconds",
		Help:    "Time a Progress call to a plugin took, process start included.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"plugin_kind", "plugin"})

	cancelCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itemops_cancel_calls_total",
		Help: "Cancel calls made to plugins, by plugin, reason and result.",
	}, []string{"plugin_kind", "plugin", "reason", "result"})

	operationDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "itemops_operation_duration_seconds",
		Help:    "Time from an operation's creation to its end, for the operations itemops saw end, by plugin and result.",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800},
	}, []string{"plugin_kind", "plugin", "result"})

	pluginRestarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itemops_plugin_restarts_total",
		Help: "Plugin processes found dead and started again, by plugin binary.",
	}, []string{"binary"})

	plugins = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "itemops_plugins",
		Help: "Plugins discovered in the plugin directory, 1 each, by kind, name, the interface version itemops calls (v1 or v2) and binary.",
	}, []string{"kind", "name", "interface", "binary"})
)

// Register adds every metric to controller-runtime's registry, the one its
// metrics endpoint serves, with the state of the ItemOperations read from
// reader (the manager's cached client) at each scrape.
func Register(reader client.Reader, namespace string) {
	MustRegister(ctrlmetrics.Registry, reader, namespace)
}

// MustRegister adds every metric to registry.
func MustRegister(registry prometheus.Registerer, reader client.Reader, namespace string) {
	registry.MustRegister(progressCalls, progressCallDuration, cancelCalls, operationDuration, pluginRestarts, plugins,
		&stateCollector{reader: reader, namespace: namespace},
		&queueCollector{reader: reader, namespace: namespace, clock: clock.RealClock{}})
}

// started holds the plugins (pluginKey) and binaries (string) whose series
// Plugin and PluginBinary have started at zero.
var started sync.Map

// MaxPlugins bounds the plugin names the metrics have series of: the
// names come from operations files, which whoever writes the bucket
// controls, and counters are never deleted. Names beyond the first
// MaxPlugins (discovered plugins come first) count as OtherPlugin.
const MaxPlugins = 100

// OtherPlugin is the plugin label of every name past MaxPlugins; no real
// plugin is named so (Velero's names have a slash).
const OtherPlugin = "other"

var (
	pluginNamesMu sync.Mutex
	pluginNames   = map[pluginKey]bool{}
)

// pluginLabel is the plugin label of a plugin: its name, or OtherPlugin
// once MaxPlugins names have series.
func pluginLabel(kind itemopsv1alpha1.PluginKind, plugin string) string {
	if isMirror(kind, plugin) {
		return plugin // one of two, not a name from a file
	}
	k := pluginKey{string(kind), plugin}
	pluginNamesMu.Lock()
	defer pluginNamesMu.Unlock()
	if pluginNames[k] {
		return plugin
	}
	if len(pluginNames) >= MaxPlugins {
		return OtherPlugin
	}
	pluginNames[k] = true
	return plugin
}

// MirrorPlugin is the plugin label of the mirrors of file-system backups
// and restores, whose plugin_kind is PodVolumeBackup or PodVolumeRestore:
// no plugin moves their data, node-agent does.
const MirrorPlugin = "node-agent"

// isMirror reports whether kind and plugin are the labels of mirrors.
func isMirror(kind itemopsv1alpha1.PluginKind, plugin string) bool {
	return plugin == MirrorPlugin && (kind == itemopsv1alpha1.PluginKind(itemopsv1alpha1.MirrorKindPodVolumeBackup) ||
		kind == itemopsv1alpha1.PluginKind(itemopsv1alpha1.MirrorKindPodVolumeRestore))
}

// moverLabels are the plugin_kind and plugin labels of op: its plugin's,
// or for a mirror the kind it follows and MirrorPlugin.
func moverLabels(op *itemopsv1alpha1.ItemOperation) (itemopsv1alpha1.PluginKind, string) {
	if op.IsMirror() {
		return itemopsv1alpha1.PluginKind(op.Spec.Mirror.Kind), MirrorPlugin
	}
	return op.Spec.Plugin.Kind, pluginLabel(op.Spec.Plugin.Kind, op.Spec.Plugin.Name)
}

// Plugin starts at zero the series of a plugin that alerts compare over
// time: its Progress calls by result and its operation durations by final
// phase. Prometheus reads a series that first appears at 1 as one that was
// always 1, so without its zero, increase() and rate() would not count a
// plugin's first failure since itemops started. itemops calls it for every
// plugin discovery finds that can start operations, and for any other
// plugin the first time one of its operations is polled, cancelled or ends.
func Plugin(kind itemopsv1alpha1.PluginKind, plugin string) {
	plugin = pluginLabel(kind, plugin)
	if _, done := started.LoadOrStore(pluginKey{string(kind), plugin}, true); done {
		return
	}
	mirror := isMirror(kind, plugin)
	for _, result := range []string{ResultOK, ResultOperationFailed, ResultPluginError, ResultInvalidOperation,
		ResultNotSupported, ResultPluginNotFound, ResultTransport, ResultLocation, ResultBinaryChanged} {
		if !mirror { // a mirror is read, never called
			progressCalls.WithLabelValues(string(kind), plugin, result)
		}
	}
	for _, phase := range []itemopsv1alpha1.OperationPhase{itemopsv1alpha1.OperationPhaseCompleted,
		itemopsv1alpha1.OperationPhaseFailed, itemopsv1alpha1.OperationPhaseCanceled} {
		operationDuration.WithLabelValues(string(kind), plugin, string(phase))
	}
}

// PluginBinary starts a plugin binary's restart count at zero, for the
// reason Plugin gives: the first restarts are then counted too.
func PluginBinary(binary string) {
	if _, done := started.LoadOrStore(binary, true); done {
		return
	}
	pluginRestarts.WithLabelValues(binary)
}

// Discovered is one plugin for Plugins: a kind an administrator names it
// with, its name, the interface version itemops calls it through, and the
// file name of its binary.
type Discovered struct {
	Kind, Name, Interface, Binary string
}

// Plugins makes itemops_plugins the list of the plugins discovered: one
// series per plugin, replacing the last list. Names come from the plugin
// directory, which the administrator controls, so the series are bounded
// by what was installed.
func Plugins(list []Discovered) {
	plugins.Reset()
	for _, p := range list {
		plugins.WithLabelValues(p.Kind, p.Name, p.Interface, p.Binary).Set(1)
	}
}

// ProgressCall records one Progress call.
func ProgressCall(kind itemopsv1alpha1.PluginKind, plugin, result string, took time.Duration) {
	plugin = pluginLabel(kind, plugin)
	Plugin(kind, plugin)
	progressCalls.WithLabelValues(string(kind), plugin, result).Inc()
	progressCallDuration.WithLabelValues(string(kind), plugin).Observe(took.Seconds())
}

// CancelCall records one Cancel call, or an attempt that could not reach the plugin.
func CancelCall(kind itemopsv1alpha1.PluginKind, plugin, reason, result string) {
	plugin = pluginLabel(kind, plugin)
	Plugin(kind, plugin)
	cancelCalls.WithLabelValues(string(kind), plugin, reason, result).Inc()
}

// OperationFinished records an operation itemops saw reach a terminal phase.
func OperationFinished(op *itemopsv1alpha1.ItemOperation) {
	if op.Status.Created == nil || op.Status.CompletionTimestamp == nil {
		return
	}
	kind, plugin := moverLabels(op)
	Plugin(kind, plugin)
	took := op.Status.CompletionTimestamp.Sub(op.Status.Created.Time)
	operationDuration.WithLabelValues(string(kind), plugin, string(op.Status.Phase)).
		Observe(max(took, 0).Seconds())
}

// PluginRestarted records a plugin process started again after it died.
func PluginRestarted(binary string) {
	PluginBinary(binary)
	pluginRestarts.WithLabelValues(binary).Inc()
}

var (
	operationsDesc = prometheus.NewDesc("itemops_operations",
		"ItemOperations by plugin, parent kind and phase.",
		[]string{"plugin_kind", "plugin", "parent_kind", "phase"}, nil)
	stalledDesc = prometheus.NewDesc("itemops_operations_stalled",
		"Unfinished ItemOperations whose progress has not moved for the stall period (condition Stalled=True), by plugin.",
		[]string{"plugin_kind", "plugin"}, nil)
	bytesDoneDesc = prometheus.NewDesc("itemops_operation_bytes_done",
		"Bytes moved so far by unfinished operations that count in bytes, by plugin.",
		[]string{"plugin_kind", "plugin"}, nil)
	bytesTotalDesc = prometheus.NewDesc("itemops_operation_bytes_total",
		"Bytes to move in all by unfinished operations that count in bytes, by plugin.",
		[]string{"plugin_kind", "plugin"}, nil)
	waitingDesc = prometheus.NewDesc("itemops_operations_waiting",
		"Unfinished ItemOperations waiting on a cause (condition Waiting=True), by plugin and cause (its reason).",
		[]string{"plugin_kind", "plugin", "cause"}, nil)
	scrapeErrorsDesc = prometheus.NewDesc("itemops_operations_scrape_error",
		"1 when the ItemOperations could not be listed for this scrape.", nil, nil)
)

// stateCollector computes the ItemOperation gauges from the cache.
type stateCollector struct {
	reader    client.Reader
	namespace string
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{operationsDesc, stalledDesc, waitingDesc, bytesDoneDesc, bytesTotalDesc, scrapeErrorsDesc} {
		ch <- d
	}
}

type pluginKey struct{ kind, plugin string }

type causeKey struct {
	pluginKey
	cause string
}

// pluginCauses are the causes any plugin's operations can wait on;
// dataMoverCauses those of Velero's data mover, which can wait on them too.
var (
	pluginCauses = []string{
		itemopsv1alpha1.WaitingNoProgress, itemopsv1alpha1.WaitingNotMoving, itemopsv1alpha1.WaitingVeleroNotRunning,
		itemopsv1alpha1.WaitingCancelPending,
	}
	dataMoverCauses = append([]string{
		itemopsv1alpha1.WaitingSnapshotNotReady, itemopsv1alpha1.WaitingSnapshotFailed, itemopsv1alpha1.WaitingVolumeNotProvisioned,
		itemopsv1alpha1.WaitingPodUnschedulable, itemopsv1alpha1.WaitingPodNotRunning, itemopsv1alpha1.WaitingNoNodeAgent,
		itemopsv1alpha1.WaitingNodeAgentBusy, itemopsv1alpha1.WaitingRepositoryNotReady, itemopsv1alpha1.WaitingPodGone,
		itemopsv1alpha1.WaitingNodeAgentRestarted, itemopsv1alpha1.WaitingLocationUnavailable,
	}, pluginCauses...)
	// A file-system backup or restore exposes no snapshot and no volume,
	// and its pod is put on its node by node-agent, not the scheduler.
	mirrorCauses = append([]string{
		itemopsv1alpha1.WaitingPodNotRunning, itemopsv1alpha1.WaitingNoNodeAgent,
		itemopsv1alpha1.WaitingNodeAgentBusy, itemopsv1alpha1.WaitingRepositoryNotReady, itemopsv1alpha1.WaitingPodGone,
		itemopsv1alpha1.WaitingNodeAgentRestarted, itemopsv1alpha1.WaitingLocationUnavailable,
	}, pluginCauses...)
)

type phaseKey struct {
	pluginKey
	parent, phase string
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list := &itemopsv1alpha1.ItemOperationList{}
	// Read only: a scrape copies nothing out of the cache.
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if c.namespace != "" {
		opts = append(opts, client.InNamespace(c.namespace))
	}
	if err := c.reader.List(ctx, list, opts...); err != nil {
		ch <- prometheus.MustNewConstMetric(scrapeErrorsDesc, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorsDesc, prometheus.GaugeValue, 0)
	phases := map[phaseKey]float64{}
	stalled := map[pluginKey]float64{}
	waiting := map[causeKey]float64{}
	done := map[pluginKey]float64{}
	total := map[pluginKey]float64{}
	for i := range list.Items {
		op := &list.Items[i]
		kind, plugin := moverLabels(op)
		pk := pluginKey{string(kind), plugin}
		phase := string(op.Status.Phase)
		if phase == "" {
			phase = string(itemopsv1alpha1.OperationPhaseNew)
		}
		phases[phaseKey{pk, string(op.Spec.Parent.Kind), phase}]++
		// Every plugin with operations has the unfinished gauges, at 0 once
		// all have ended: a dashboard then shows 0, not "no data".
		stalled[pk] += 0
		causes := pluginCauses
		switch {
		case op.IsDataMover():
			causes = dataMoverCauses
		case op.IsMirror():
			causes = mirrorCauses
		}
		for _, cause := range causes {
			waiting[causeKey{pk, cause}] += 0
		}
		bytes := progress.IsBytes(op.Status.OperationUnits)
		if bytes {
			done[pk] += 0
			total[pk] += 0
		}
		if op.Status.Phase.IsTerminal() {
			continue
		}
		if meta.IsStatusConditionTrue(op.Status.Conditions, itemopsv1alpha1.ConditionStalled) {
			stalled[pk]++
		}
		if c := meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionWaiting); c != nil && c.Status == metav1.ConditionTrue {
			waiting[causeKey{pk, c.Reason}]++
		}
		if bytes {
			done[pk] += float64(op.Status.NCompleted)
			total[pk] += float64(op.Status.NTotal)
		}
	}
	for k, v := range phases {
		ch <- prometheus.MustNewConstMetric(operationsDesc, prometheus.GaugeValue, v, k.kind, k.plugin, k.parent, k.phase)
	}
	for k, v := range stalled {
		ch <- prometheus.MustNewConstMetric(stalledDesc, prometheus.GaugeValue, v, k.kind, k.plugin)
	}
	for k, v := range waiting {
		ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, v, k.kind, k.plugin, k.cause)
	}
	for k, v := range done {
		ch <- prometheus.MustNewConstMetric(bytesDoneDesc, prometheus.GaugeValue, v, k.kind, k.plugin)
		ch <- prometheus.MustNewConstMetric(bytesTotalDesc, prometheus.GaugeValue, total[k], k.kind, k.plugin)
	}
}
