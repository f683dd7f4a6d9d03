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
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

func operation(name, namespace string, kind itemopsv1alpha1.PluginKind, plugin string, status itemopsv1alpha1.ItemOperationStatus) *itemopsv1alpha1.ItemOperation {
	return &itemopsv1alpha1.ItemOperation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: itemopsv1alpha1.ItemOperationSpec{
			Parent: itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindBackup, Name: "b", UID: "u"},
			Plugin: itemopsv1alpha1.PluginReference{Kind: kind, Name: plugin},
		},
		Status: status,
	}
}

func TestStateIsComputedFromTheOperations(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := itemopsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	stalled := []metav1.Condition{{Type: itemopsv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "NoProgress"},
		{Type: itemopsv1alpha1.ConditionWaiting, Status: metav1.ConditionTrue, Reason: itemopsv1alpha1.WaitingNoProgress}}
	busy := []metav1.Condition{{Type: itemopsv1alpha1.ConditionWaiting, Status: metav1.ConditionTrue, Reason: itemopsv1alpha1.WaitingNodeAgentBusy}}
	waited := []metav1.Condition{{Type: itemopsv1alpha1.ConditionWaiting, Status: metav1.ConditionFalse, Reason: itemopsv1alpha1.ReasonNotWaiting}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		operation("a", "velero", itemopsv1alpha1.PluginKindBackupItemAction, "example.io/mover",
			itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress, NCompleted: 10, NTotal: 100, OperationUnits: "Bytes"}),
		operation("b", "velero", itemopsv1alpha1.PluginKindBackupItemAction, "example.io/mover",
			itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress, NCompleted: 5, NTotal: 50, OperationUnits: "bytes", Conditions: stalled}),
		operation("c", "velero", itemopsv1alpha1.PluginKindBackupItemAction, "example.io/mover",
			itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseCompleted, NCompleted: 7, NTotal: 7, OperationUnits: "Bytes"}),
		operation("d", "velero", itemopsv1alpha1.PluginKindVolumeSnapshotter, "example.io/disks",
			itemopsv1alpha1.ItemOperationStatus{NCompleted: 3, NTotal: 4, OperationUnits: "Snapshots"}),
		// Every operation of this plugin has ended: its gauges are 0.
		operation("f", "velero", itemopsv1alpha1.PluginKindBackupItemAction, "example.io/done",
			itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseCompleted, NCompleted: 9, NTotal: 9, OperationUnits: "Bytes"}),
		// Velero's data mover: one waits its turn, one waited and runs.
		operation("g", "velero", itemopsv1alpha1.PluginKindBackupItemAction, "velero.io/csi-pvc-backupper",
			itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseNew, Conditions: busy}),
		operation("h", "velero", itemopsv1alpha1.PluginKindBackupItemAction, "velero.io/csi-pvc-backupper",
			itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress, Conditions: waited}),
		// Another namespace is not this installation's.
		operation("e", "other", itemopsv1alpha1.PluginKindBackupItemAction, "example.io/mover",
			itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseFailed}),
	).Build()

	want := `
# HELP itemops_operations ItemOperations by plugin, parent kind and phase.
# TYPE itemops_operations gauge
itemops_operations{parent_kind="Backup",phase="Completed",plugin="example.io/done",plugin_kind="BackupItemAction"} 1
itemops_operations{parent_kind="Backup",phase="Completed",plugin="example.io/mover",plugin_kind="BackupItemAction"} 1
itemops_operations{parent_kind="Backup",phase="InProgress",plugin="example.io/mover",plugin_kind="BackupItemAction"} 2
itemops_operations{parent_kind="Backup",phase="New",plugin="example.io/disks",plugin_kind="VolumeSnapshotter"} 1
itemops_operations{parent_kind="Backup",phase="InProgress",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 1
itemops_operations{parent_kind="Backup",phase="New",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 1
# HELP itemops_operations_stalled Unfinished ItemOperations whose progress has not moved for the stall period (condition Stalled=True), by plugin.
# TYPE itemops_operations_stalled gauge
itemops_operations_stalled{plugin="example.io/disks",plugin_kind="VolumeSnapshotter"} 0
itemops_operations_stalled{plugin="example.io/done",plugin_kind="BackupItemAction"} 0
itemops_operations_stalled{plugin="example.io/mover",plugin_kind="BackupItemAction"} 1
itemops_operations_stalled{plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
# HELP itemops_operations_waiting Unfinished ItemOperations waiting on a cause (condition Waiting=True), by plugin and cause (its reason).
# TYPE itemops_operations_waiting gauge
itemops_operations_waiting{cause="NoProgress",plugin="example.io/disks",plugin_kind="VolumeSnapshotter"} 0
itemops_operations_waiting{cause="NotMoving",plugin="example.io/disks",plugin_kind="VolumeSnapshotter"} 0
itemops_operations_waiting{cause="VeleroNotRunning",plugin="example.io/disks",plugin_kind="VolumeSnapshotter"} 0
itemops_operations_waiting{cause="CancelPending",plugin="example.io/disks",plugin_kind="VolumeSnapshotter"} 0
itemops_operations_waiting{cause="NoProgress",plugin="example.io/done",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="NotMoving",plugin="example.io/done",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="VeleroNotRunning",plugin="example.io/done",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="CancelPending",plugin="example.io/done",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="NoProgress",plugin="example.io/mover",plugin_kind="BackupItemAction"} 1
itemops_operations_waiting{cause="NotMoving",plugin="example.io/mover",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="VeleroNotRunning",plugin="example.io/mover",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="CancelPending",plugin="example.io/mover",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="SnapshotNotReady",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="SnapshotFailed",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="VolumeNotProvisioned",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="PodUnschedulable",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="PodNotRunning",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="NoNodeAgent",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="NodeAgentBusy",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 1
itemops_operations_waiting{cause="RepositoryNotReady",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="PodGone",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="NodeAgentRestarted",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="LocationUnavailable",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="NoProgress",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="NotMoving",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="VeleroNotRunning",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
itemops_operations_waiting{cause="CancelPending",plugin="velero.io/csi-pvc-backupper",plugin_kind="BackupItemAction"} 0
# HELP itemops_operation_bytes_done Bytes moved so far by unfinished operations that count in bytes, by plugin.
# TYPE itemops_operation_bytes_done gauge
itemops_operation_bytes_done{plugin="example.io/done",plugin_kind="BackupItemAction"} 0
itemops_operation_bytes_done{plugin="example.io/mover",plugin_kind="BackupItemAction"} 15
# HELP itemops_operation_bytes_total Bytes to move in all by unfinished operations that count in bytes, by plugin.
# TYPE itemops_operation_bytes_total gauge
itemops_operation_bytes_total{plugin="example.io/done",plugin_kind="BackupItemAction"} 0
itemops_operation_bytes_total{plugin="example.io/mover",plugin_kind="BackupItemAction"} 150
# HELP itemops_operations_scrape_error 1 when the ItemOperations could not be listed for this scrape.
# TYPE itemops_operations_scrape_error gauge
itemops_operations_scrape_error 0
`
	if err := testutil.CollectAndCompare(&stateCollector{reader: c, namespace: "velero"}, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}

	failing := interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("cache not synced")
		},
	})
	wantErr := `
# HELP itemops_operations_scrape_error 1 when the ItemOperations could not be listed for this scrape.
# TYPE itemops_operations_scrape_error gauge
itemops_operations_scrape_error 1
`
	if err := testutil.CollectAndCompare(&stateCollector{reader: failing, namespace: "velero"}, strings.NewReader(wantErr)); err != nil {
		t.Fatal(err)
	}
}

// A plugin's series start at zero so that its first failure counts in
// increase() and rate() (test/monitoring's alert tests assume it), and a call is then
// counted once, in its own result.
func TestAPluginsSeriesStartAtZero(t *testing.T) {
	const kind, plugin = itemopsv1alpha1.PluginKindRestoreItemAction, "example.io/zero"
	if got := seriesWith(t, progressCalls, map[string]string{"plugin": plugin}); got != 0 {
		t.Fatalf("%d Progress call series of a plugin never seen, want 0", got)
	}
	Plugin(kind, plugin)
	if got := seriesWith(t, progressCalls, map[string]string{"plugin": plugin}); got != 9 {
		t.Errorf("%d Progress call series, want one per result (9)", got)
	}
	for _, result := range []string{ResultOK, ResultOperationFailed, ResultPluginError, ResultInvalidOperation,
		ResultNotSupported, ResultPluginNotFound, ResultTransport, ResultLocation, ResultBinaryChanged} {
		if got := testutil.ToFloat64(progressCalls.WithLabelValues(string(kind), plugin, result)); got != 0 {
			t.Errorf("Progress calls %s: %v, want 0", result, got)
		}
	}
	for _, phase := range []string{"Completed", "Failed", "Canceled"} {
		if got := seriesWith(t, operationDuration, map[string]string{"plugin": plugin, "result": phase}); got != 1 {
			t.Errorf("%d operation duration series for result %s, want 1", got, phase)
		}
	}

	ProgressCall(kind, plugin, ResultTransport, 0)
	Plugin(kind, plugin)
	if got := testutil.ToFloat64(progressCalls.WithLabelValues(string(kind), plugin, ResultTransport)); got != 1 {
		t.Errorf("Progress calls transport_error after one call: %v, want 1", got)
	}
	if got := testutil.ToFloat64(progressCalls.WithLabelValues(string(kind), plugin, ResultOK)); got != 0 {
		t.Errorf("Progress calls ok after a failed call: %v, want 0", got)
	}

	PluginBinary("velero-plugin-zero")
	if got := seriesWith(t, pluginRestarts, map[string]string{"binary": "velero-plugin-zero"}); got != 1 {
		t.Errorf("%d restart series for a discovered binary, want 1", got)
	}
	PluginRestarted("velero-plugin-zero")
	if got := testutil.ToFloat64(pluginRestarts.WithLabelValues("velero-plugin-zero")); got != 1 {
		t.Errorf("restarts after one: %v, want 1", got)
	}
}

// itemops_plugins is the list discovery made, one series per plugin,
// replaced as a whole when a binary answers later.
func TestPluginsListTheDiscoveredPlugins(t *testing.T) {
	Plugins([]Discovered{
		{Kind: "VolumeSnapshotter", Name: "example.io/disks", Interface: "v2", Binary: "disks"},
		{Kind: "VolumeSnapshotter", Name: "velero.io/aws", Interface: "v1", Binary: "velero-plugin-for-aws"},
	})
	if got := testutil.CollectAndCount(plugins); got != 2 {
		t.Errorf("%d series, want 2", got)
	}
	if got := testutil.ToFloat64(plugins.WithLabelValues("VolumeSnapshotter", "example.io/disks", "v2", "disks")); got != 1 {
		t.Errorf("example.io/disks as v2: %v, want 1", got)
	}
	Plugins([]Discovered{
		{Kind: "VolumeSnapshotter", Name: "example.io/disks", Interface: "v2", Binary: "disks"},
		{Kind: "BackupItemAction", Name: "example.io/mover", Interface: "v2", Binary: "mover"},
	})
	if got := seriesWith(t, plugins, map[string]string{"name": "velero.io/aws"}); got != 0 {
		t.Errorf("%d series of a plugin no longer listed, want 0", got)
	}
	if got := testutil.CollectAndCount(plugins); got != 2 {
		t.Errorf("%d series after the second list, want 2", got)
	}
}

// seriesWith counts the metrics c collects whose labels include labels.
func seriesWith(t *testing.T, c prometheus.Collector, labels map[string]string) int {
	t.Helper()
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	n := 0
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		matched := 0
		for _, l := range pb.GetLabel() {
			if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
				matched++
			}
		}
		if matched == len(labels) {
			n++
		}
	}
	return n
}

// Plugin names come from operations files, which whoever writes the bucket
// controls: past MaxPlugins of them, a new name counts as OtherPlugin and
// makes no series of its own.
func TestPluginNamesAreBounded(t *testing.T) {
	g := NewWithT(t)
	kind := itemopsv1alpha1.PluginKindRestoreItemAction
	for i := range MaxPlugins + 50 {
		ProgressCall(kind, fmt.Sprintf("example.io/bounded-%d", i), ResultPluginNotFound, time.Millisecond)
	}
	names := map[string]bool{}
	ch := make(chan prometheus.Metric, 100000)
	progressCalls.Collect(ch)
	close(ch)
	for m := range ch {
		var d dto.Metric
		g.Expect(m.Write(&d)).To(Succeed())
		for _, l := range d.GetLabel() {
			if l.GetName() == "plugin" {
				names[l.GetValue()] = true
			}
		}
	}
	g.Expect(len(names)).To(BeNumerically("<=", MaxPlugins+1), "plugin label values")
	g.Expect(names).To(HaveKey(OtherPlugin))
	g.Expect(names).NotTo(HaveKey(fmt.Sprintf("example.io/bounded-%d", MaxPlugins+49)))
	g.Expect(testutil.ToFloat64(progressCalls.WithLabelValues(string(kind), OtherPlugin, ResultPluginNotFound))).To(BeNumerically(">=", 50))
	// A name that has its series keeps them.
	ProgressCall(kind, "example.io/bounded-0", ResultOK, time.Millisecond)
	g.Expect(testutil.ToFloat64(progressCalls.WithLabelValues(string(kind), "example.io/bounded-0", ResultOK))).To(Equal(1.0))
}

// A mirror of a file-system backup has the series of its kind, moved by
// node-agent: the causes that apply to it (no snapshot, no exposed volume),
// its bytes, its stall; no Progress call series, as none is made.
func TestMirrorsHaveTheSeriesOfTheirKind(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := itemopsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mirror := func(name string, status itemopsv1alpha1.ItemOperationStatus) *itemopsv1alpha1.ItemOperation {
		op := operation(name, "velero", "", "", status)
		op.Spec.Plugin = itemopsv1alpha1.PluginReference{}
		op.Spec.Mirror = &itemopsv1alpha1.MirrorReference{Kind: itemopsv1alpha1.MirrorKindPodVolumeBackup, Name: name, UID: "u-" + name}
		return op
	}
	stalled := []metav1.Condition{{Type: itemopsv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "NoProgress"},
		{Type: itemopsv1alpha1.ConditionWaiting, Status: metav1.ConditionTrue, Reason: itemopsv1alpha1.WaitingNodeAgentBusy}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		mirror("pvb-1", itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress, NCompleted: 10, NTotal: 40, OperationUnits: "bytes", Conditions: stalled}),
		mirror("pvb-2", itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseCompleted, NCompleted: 5, NTotal: 5, OperationUnits: "bytes"}),
	).Build()
	want := `
# HELP itemops_operations_stalled Unfinished ItemOperations whose progress has not moved for the stall period (condition Stalled=True), by plugin.
# TYPE itemops_operations_stalled gauge
itemops_operations_stalled{plugin="node-agent",plugin_kind="PodVolumeBackup"} 1
# HELP itemops_operations_waiting Unfinished ItemOperations waiting on a cause (condition Waiting=True), by plugin and cause (its reason).
# TYPE itemops_operations_waiting gauge
itemops_operations_waiting{cause="PodNotRunning",plugin="node-agent",plugin_kind="PodVolumeBackup"} 0
itemops_operations_waiting{cause="NoNodeAgent",plugin="node-agent",plugin_kind="PodVolumeBackup"} 0
itemops_operations_waiting{cause="NodeAgentBusy",plugin="node-agent",plugin_kind="PodVolumeBackup"} 1
itemops_operations_waiting{cause="RepositoryNotReady",plugin="node-agent",plugin_kind="PodVolumeBackup"} 0
itemops_operations_waiting{cause="PodGone",plugin="node-agent",plugin_kind="PodVolumeBackup"} 0
itemops_operations_waiting{cause="NodeAgentRestarted",plugin="node-agent",plugin_kind="PodVolumeBackup"} 0
itemops_operations_waiting{cause="LocationUnavailable",plugin="node-agent",plugin_kind="PodVolumeBackup"} 0
itemops_operations_waiting{cause="NoProgress",plugin="node-agent",plugin_kind="PodVolumeBackup"} 0
itemops_operations_waiting{cause="NotMoving",plugin="node-agent",plugin_kind="PodVolumeBackup"} 0
itemops_operations_waiting{cause="VeleroNotRunning",plugin="node-agent",plugin_kind="PodVolumeBackup"} 0
itemops_operations_waiting{cause="CancelPending",plugin="node-agent",plugin_kind="PodVolumeBackup"} 0
# HELP itemops_operation_bytes_done Bytes moved so far by unfinished operations that count in bytes, by plugin.
# TYPE itemops_operation_bytes_done gauge
itemops_operation_bytes_done{plugin="node-agent",plugin_kind="PodVolumeBackup"} 10
`
	if err := testutil.CollectAndCompare(&stateCollector{reader: c, namespace: "velero"}, strings.NewReader(want),
		"itemops_operations_stalled", "itemops_operations_waiting", "itemops_operation_bytes_done"); err != nil {
		t.Fatal(err)
	}
	Plugin(itemopsv1alpha1.PluginKind(itemopsv1alpha1.MirrorKindPodVolumeBackup), MirrorPlugin)
	if got := seriesWith(t, progressCalls, map[string]string{"plugin": MirrorPlugin}); got != 0 {
		t.Errorf("%d Progress call series of file-system backups, which are never called, want 0", got)
	}
	if got := seriesWith(t, operationDuration, map[string]string{"plugin": MirrorPlugin, "result": "Failed"}); got != 1 {
		t.Errorf("%d duration series of failed file-system backups, want 1 (at zero)", got)
	}
}
