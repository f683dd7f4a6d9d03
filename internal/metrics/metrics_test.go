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
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
	stalled := []metav1.Condition{{Type: itemopsv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "NoProgress"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		operation("a", "velero", itemopsv1alpha1.PluginKindBackupItemAction, "example.io/mover",
			itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress, NCompleted: 10, NTotal: 100, OperationUnits: "Bytes"}),
		operation("b", "velero", itemopsv1alpha1.PluginKindBackupItemAction, "example.io/mover",
			itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseInProgress, NCompleted: 5, NTotal: 50, OperationUnits: "bytes", Conditions: stalled}),
		operation("c", "velero", itemopsv1alpha1.PluginKindBackupItemAction, "example.io/mover",
			itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseCompleted, NCompleted: 7, NTotal: 7, OperationUnits: "Bytes"}),
		operation("d", "velero", itemopsv1alpha1.PluginKindVolumeSnapshotter, "example.io/disks",
			itemopsv1alpha1.ItemOperationStatus{NCompleted: 3, NTotal: 4, OperationUnits: "Snapshots"}),
		// Another namespace is not this installation's.
		operation("e", "other", itemopsv1alpha1.PluginKindBackupItemAction, "example.io/mover",
			itemopsv1alpha1.ItemOperationStatus{Phase: itemopsv1alpha1.OperationPhaseFailed}),
	).Build()

	want := `
# HELP itemops_operations ItemOperations by plugin, parent kind and phase.
# TYPE itemops_operations gauge
itemops_operations{parent_kind="Backup",phase="Completed",plugin="example.io/mover",plugin_kind="BackupItemAction"} 1
itemops_operations{parent_kind="Backup",phase="InProgress",plugin="example.io/mover",plugin_kind="BackupItemAction"} 2
itemops_operations{parent_kind="Backup",phase="New",plugin="example.io/disks",plugin_kind="VolumeSnapshotter"} 1
# HELP itemops_operations_stalled Unfinished ItemOperations whose progress has not moved for the stall period (condition Stalled=True), by plugin.
# TYPE itemops_operations_stalled gauge
itemops_operations_stalled{plugin="example.io/disks",plugin_kind="VolumeSnapshotter"} 0
itemops_operations_stalled{plugin="example.io/mover",plugin_kind="BackupItemAction"} 1
# HELP itemops_operation_bytes_done Bytes moved so far by unfinished operations that count in bytes, by plugin.
# TYPE itemops_operation_bytes_done gauge
itemops_operation_bytes_done{plugin="example.io/mover",plugin_kind="BackupItemAction"} 15
# HELP itemops_operation_bytes_total Bytes to move in all by unfinished operations that count in bytes, by plugin.
# TYPE itemops_operation_bytes_total gauge
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
