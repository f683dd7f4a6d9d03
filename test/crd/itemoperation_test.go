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

package crd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
)

var seq atomic.Int64

// newOperation returns a valid operation of a backup with a unique name.
func newOperation() *itemopsv1alpha1.ItemOperation {
	n := seq.Add(1)
	return &itemopsv1alpha1.ItemOperation{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("op-%d", n),
			Namespace: envtest.VeleroNamespace,
		},
		Spec: itemopsv1alpha1.ItemOperationSpec{
			Parent: itemopsv1alpha1.ParentReference{
				Kind: itemopsv1alpha1.ParentKindBackup,
				Name: "nightly",
				UID:  "3f9d2f0a-7c55-4d8e-9b61-0c2a4f6e9a10",
			},
			Plugin: itemopsv1alpha1.PluginReference{
				Kind: itemopsv1alpha1.PluginKindBackupItemAction,
				Name: "velero.io/csi-pvc-backupper",
			},
			OperationID: fmt.Sprintf("du-%d.2a4b6c8d", n),
			Resource: itemopsv1alpha1.ResourceIdentifier{
				Resource:  "persistentvolumeclaims",
				Namespace: "shop",
				Name:      "data-postgres-0",
			},
			PostOperationItems: []itemopsv1alpha1.ResourceIdentifier{
				{Group: "velero.io", Resource: "datauploads", Namespace: "velero", Name: "nightly-x7k2p"},
			},
			Timeout: &metav1.Duration{Duration: 4 * time.Hour},
		},
	}
}

// mirrorOf makes op the mirror of a movement of kind: no plugin, no
// operation ID, no post-operation items.
func mirrorOf(op *itemopsv1alpha1.ItemOperation, kind itemopsv1alpha1.MirrorKind) {
	op.Spec.Plugin, op.Spec.OperationID, op.Spec.PostOperationItems = itemopsv1alpha1.PluginReference{}, "", nil
	op.Spec.Mirror = &itemopsv1alpha1.MirrorReference{Kind: kind, Name: op.Spec.Parent.Name + "-x7k2p", UID: "9b1e0c1a-5d0e-4a3b-8f8e-2b9c1d7e6f00", Volume: "data"}
	op.Spec.Resource = itemopsv1alpha1.ResourceIdentifier{Resource: "pods", Namespace: "shop", Name: "postgres-0"}
}

func toUnstructured(t testing.TB, op *itemopsv1alpha1.ItemOperation) *unstructured.Unstructured {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(op)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetAPIVersion(itemopsv1alpha1.GroupVersion.String())
	u.SetKind("ItemOperation")
	return u
}

func expectInvalid(g Gomega, err error, messages ...string) {
	g.ExpectWithOffset(1, err).To(HaveOccurred(), "the API server accepted an invalid ItemOperation")
	g.ExpectWithOffset(1, apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got %v", err)
	for _, m := range messages {
		g.ExpectWithOffset(1, err.Error()).To(ContainSubstring(m))
	}
}

var _ = Describe("The ItemOperation CRD", func() {
	It("valid operation is accepted", func() {
		g := NewWithT(GinkgoT())
		ctx := context.Background()
		op := newOperation()
		g.Expect(env.Client.Create(ctx, op)).To(Succeed())

		now := metav1.NewTime(time.Now().Truncate(time.Second))
		op.Status = itemopsv1alpha1.ItemOperationStatus{
			Phase:               itemopsv1alpha1.OperationPhaseInProgress,
			NCompleted:          4509715660,
			NTotal:              10737418240,
			OperationUnits:      "Bytes",
			Description:         "uploading",
			Created:             &now,
			Started:             &now,
			Updated:             &now,
			LastPolled:          &now,
			EstimatedCompletion: &now,
			Progress:            "4.2Gi/10Gi (42%)",
			ObservedGeneration:  op.Generation,
			Conditions: []metav1.Condition{{
				Type:               itemopsv1alpha1.ConditionProgressing,
				Status:             metav1.ConditionTrue,
				Reason:             "Polling",
				Message:            "progress read from the plugin",
				LastTransitionTime: now,
			}},
		}
		g.Expect(env.Client.Status().Update(ctx, op)).To(Succeed())

		got := &itemopsv1alpha1.ItemOperation{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(op), got)).To(Succeed())
		g.Expect(got.Spec).To(Equal(op.Spec))
		g.Expect(got.Status).To(Equal(op.Status))
	})

	It("a mirror of each kind is accepted with its parent kind, and stays a mirror", func() {
		g := NewWithT(GinkgoT())
		ctx := context.Background()
		for kind, parent := range map[itemopsv1alpha1.MirrorKind]itemopsv1alpha1.ParentKind{
			itemopsv1alpha1.MirrorKindPodVolumeBackup: itemopsv1alpha1.ParentKindBackup, itemopsv1alpha1.MirrorKindPodVolumeRestore: itemopsv1alpha1.ParentKindRestore,
		} {
			op := newOperation()
			op.Spec.Parent.Kind = parent
			mirrorOf(op, kind)
			g.Expect(env.Client.Create(ctx, op)).To(Succeed(), "a %s's mirror", kind)
			got := &itemopsv1alpha1.ItemOperation{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(op), got)).To(Succeed())
			g.Expect(got.Spec).To(Equal(op.Spec))

			plugin := got.DeepCopy()
			plugin.Spec.Mirror, plugin.Spec.OperationID = nil, "du-1"
			plugin.Spec.Plugin = itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: "velero.io/csi-pvc-backupper"}
			expectInvalid(g, env.Client.Update(ctx, plugin), "plugin, mirror and operationID are immutable")
			other := got.DeepCopy()
			other.Spec.Mirror.Name += "-other"
			expectInvalid(g, env.Client.Update(ctx, other), "mirror is immutable")
			canceled := got.DeepCopy()
			canceled.Spec.Cancel = true
			g.Expect(env.Client.Update(ctx, canceled)).To(Succeed(), "a mirror's cancel is requested as any other's")
		}
	})

	Describe("every plugin kind is accepted with its parent kind", func() {
		cases := []struct {
			plugin itemopsv1alpha1.PluginKind
			parent itemopsv1alpha1.ParentKind
		}{
			{itemopsv1alpha1.PluginKindBackupItemAction, itemopsv1alpha1.ParentKindBackup},
			{itemopsv1alpha1.PluginKindVolumeSnapshotter, itemopsv1alpha1.ParentKindBackup},
			{itemopsv1alpha1.PluginKindRestoreItemAction, itemopsv1alpha1.ParentKindRestore},
		}
		for _, tc := range cases {
			It(string(tc.plugin), func() {
				g := NewWithT(GinkgoT())
				op := newOperation()
				op.Spec.Plugin.Kind = tc.plugin
				op.Spec.Parent.Kind = tc.parent
				if tc.parent == itemopsv1alpha1.ParentKindRestore {
					op.Spec.PostOperationItems = nil
				}
				if tc.plugin == itemopsv1alpha1.PluginKindVolumeSnapshotter {
					op.Spec.SnapshotLocation = "default"
				}
				g.Expect(env.Client.Create(context.Background(), op)).To(Succeed())
			})
		}
	})

	Describe("invalid spec is rejected", func() {
		cases := []struct {
			name   string
			mutate func(*itemopsv1alpha1.ItemOperation)
			want   []string
		}{
			{"unknown parent kind", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Parent.Kind = "Schedule" },
				[]string{`spec.parent.kind: Unsupported value: "Schedule"`, `"Backup", "Restore"`}},
			{"unknown plugin kind", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Plugin.Kind = "ObjectStore" },
				[]string{`spec.plugin.kind: Unsupported value: "ObjectStore"`, `"BackupItemAction", "RestoreItemAction", "VolumeSnapshotter"`}},
			{"plugin named by an absolute path", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Plugin.Name = "/usr/local/bin/evil" },
				[]string{"spec.plugin.name", "a path is not a plugin name"}},
			{"plugin name climbing out of a directory", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Plugin.Name = "velero.io/../../bin/sh" },
				[]string{"spec.plugin.name", "must be a registered Velero plugin name"}},
			{"plugin name without a prefix", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Plugin.Name = "csi-pvc-backupper" },
				[]string{"spec.plugin.name", "<DNS subdomain>/<name>"}},
			{"plugin name with an empty name part", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Plugin.Name = "velero.io/" },
				[]string{"spec.plugin.name", "must be a registered Velero plugin name"}},
			{"empty operation ID", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.OperationID = "" },
				[]string{"spec.operationID", "operationID is required for, and only for, a plugin's operation"}},
			{"empty parent name", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Parent.Name = "" },
				[]string{"spec.parent.name", "at least 1 chars long"}},
			{"empty parent UID", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Parent.UID = "" },
				[]string{"spec.parent.uid", "at least 1 chars long"}},
			{"empty resource name", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Resource.Name = "" },
				[]string{"spec.resource.name", "at least 1 chars long"}},
			{"restore action on a backup", func(op *itemopsv1alpha1.ItemOperation) {
				op.Spec.Plugin.Kind = itemopsv1alpha1.PluginKindRestoreItemAction
			}, []string{"spec.parent.kind", "a RestoreItemAction operation belongs to a Restore"}},
			{"backup action on a restore", func(op *itemopsv1alpha1.ItemOperation) {
				op.Spec.Parent.Kind = itemopsv1alpha1.ParentKindRestore
				op.Spec.PostOperationItems = nil
			}, []string{"spec.parent.kind", "BackupItemAction and VolumeSnapshotter operations belong to a Backup"}},
			{"post-operation items on a restore", func(op *itemopsv1alpha1.ItemOperation) {
				op.Spec.Parent.Kind = itemopsv1alpha1.ParentKindRestore
				op.Spec.Plugin.Kind = itemopsv1alpha1.PluginKindRestoreItemAction
			}, []string{"spec.postOperationItems", "postOperationItems apply only to operations of a Backup"}},
			{"volume snapshot without its location", func(op *itemopsv1alpha1.ItemOperation) {
				op.Spec.Plugin.Kind = itemopsv1alpha1.PluginKindVolumeSnapshotter
			}, []string{"spec.snapshotLocation", "snapshotLocation is required for, and only for, VolumeSnapshotter operations"}},
			{"snapshot location on an item action", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.SnapshotLocation = "default" },
				[]string{"spec.snapshotLocation", "snapshotLocation is required for, and only for, VolumeSnapshotter operations"}},
			{"a plugin's operation that also mirrors", func(op *itemopsv1alpha1.ItemOperation) {
				op.Spec.Mirror = &itemopsv1alpha1.MirrorReference{Kind: itemopsv1alpha1.MirrorKindPodVolumeBackup, Name: "nightly-abcde", UID: "u"}
			}, []string{"not both"}},
			{"a mirror with an operation ID", func(op *itemopsv1alpha1.ItemOperation) {
				op.Spec.Plugin = itemopsv1alpha1.PluginReference{}
				op.Spec.Mirror = &itemopsv1alpha1.MirrorReference{Kind: itemopsv1alpha1.MirrorKindPodVolumeBackup, Name: "nightly-abcde", UID: "u"}
			}, []string{"spec.operationID", "operationID is required for, and only for, a plugin's operation"}},
			{"a PodVolumeRestore's mirror on a backup", func(op *itemopsv1alpha1.ItemOperation) {
				mirrorOf(op, itemopsv1alpha1.MirrorKindPodVolumeRestore)
			}, []string{"spec.parent.kind", "a PodVolumeRestore belongs to a Restore"}},
			{"a mirror of an unknown kind", func(op *itemopsv1alpha1.ItemOperation) { mirrorOf(op, "DataUpload") },
				[]string{"spec.mirror.kind", "Unsupported value"}},
			{"a mirror without the object's UID", func(op *itemopsv1alpha1.ItemOperation) {
				mirrorOf(op, itemopsv1alpha1.MirrorKindPodVolumeBackup)
				op.Spec.Mirror.UID = ""
			}, []string{"spec.mirror.uid", "at least 1 chars long"}},
			{"zero timeout", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Timeout = &metav1.Duration{} },
				[]string{"spec.timeout", "timeout must be a positive duration"}},
			{"negative timeout", func(op *itemopsv1alpha1.ItemOperation) {
				op.Spec.Timeout = &metav1.Duration{Duration: -5 * time.Minute}
			},
				[]string{"spec.timeout", "timeout must be a positive duration"}},
		}
		for _, tc := range cases {
			It(tc.name, func() {
				g := NewWithT(GinkgoT())
				op := newOperation()
				tc.mutate(op)
				expectInvalid(g, env.Client.Create(context.Background(), op), tc.want...)
			})
		}
	})

	// It sends objects without the field at all,
	// which the typed client cannot express.
	Describe("missing required fields are rejected", func() {
		cases := []struct {
			path []string
			want string
		}{
			{[]string{"spec"}, "spec: Required value"},
			{[]string{"spec", "parent"}, "spec.parent: Required value"},
			{[]string{"spec", "plugin"}, "an ItemOperation names either the plugin that started the operation (plugin) or the Velero object it mirrors (mirror)"},
			{[]string{"spec", "operationID"}, "operationID is required for, and only for, a plugin's operation"},
			{[]string{"spec", "resource"}, "spec.resource: Required value"},
			{[]string{"spec", "parent", "kind"}, "spec.parent.kind: Required value"},
			{[]string{"spec", "parent", "name"}, "spec.parent.name: Required value"},
			{[]string{"spec", "parent", "uid"}, "spec.parent.uid: Required value"},
			{[]string{"spec", "plugin", "kind"}, "spec.plugin.kind: Required value"},
			{[]string{"spec", "plugin", "name"}, "spec.plugin.name: Required value"},
			{[]string{"spec", "resource", "resource"}, "spec.resource.resource: Required value"},
			{[]string{"spec", "resource", "name"}, "spec.resource.name: Required value"},
		}
		for _, tc := range cases {
			It(strings.Join(tc.path, "."), func() {
				t := GinkgoTB()
				g := NewWithT(t)
				u := toUnstructured(t, newOperation())
				unstructured.RemoveNestedField(u.Object, tc.path...)
				expectInvalid(g, env.Client.Create(context.Background(), u), tc.want)
			})
		}
	})

	It("malformed timeout is rejected", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		u := toUnstructured(t, newOperation())
		g.Expect(unstructured.SetNestedField(u.Object, "soon", "spec", "timeout")).To(Succeed())
		expectInvalid(g, env.Client.Create(context.Background(), u), "spec.timeout", "timeout must be a positive duration")
	})

	Describe("invalid status is rejected", func() {
		cases := []struct {
			name   string
			mutate func(*itemopsv1alpha1.ItemOperationStatus)
			want   []string
		}{
			{"unknown phase", func(s *itemopsv1alpha1.ItemOperationStatus) { s.Phase = "Done" },
				[]string{`status.phase: Unsupported value: "Done"`, `"New", "InProgress", "Canceling", "Completed", "Failed", "Canceled"`}},
			{"negative completed", func(s *itemopsv1alpha1.ItemOperationStatus) { s.NCompleted = -1 },
				[]string{"status.nCompleted", "should be greater than or equal to 0"}},
			{"negative total", func(s *itemopsv1alpha1.ItemOperationStatus) { s.NTotal = -10 },
				[]string{"status.nTotal", "should be greater than or equal to 0"}},
			{"negative observed generation", func(s *itemopsv1alpha1.ItemOperationStatus) { s.ObservedGeneration = -1 },
				[]string{"status.observedGeneration", "should be greater than or equal to 0"}},
			{"condition without a reason", func(s *itemopsv1alpha1.ItemOperationStatus) {
				s.Conditions = []metav1.Condition{{Type: itemopsv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, LastTransitionTime: metav1.Now()}}
			}, []string{"status.conditions[0].reason"}},
		}
		for _, tc := range cases {
			It(tc.name, func() {
				g := NewWithT(GinkgoT())
				ctx := context.Background()
				op := newOperation()
				g.Expect(env.Client.Create(ctx, op)).To(Succeed())
				tc.mutate(&op.Status)
				expectInvalid(g, env.Client.Status().Update(ctx, op), tc.want...)
			})
		}
	})

	Describe("spec is immutable but cancel", func() {
		cases := []struct {
			name   string
			mutate func(*itemopsv1alpha1.ItemOperation)
			want   []string
		}{
			{"operationID", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.OperationID += "-other" }, []string{"spec.operationID: Invalid value", "operationID is immutable"}},
			{"parent name", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Parent.Name = "weekly" }, []string{"parent is immutable"}},
			{"parent uid", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Parent.UID = "00000000-0000-0000-0000-000000000000" }, []string{"parent is immutable"}},
			{"plugin name", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Plugin.Name = "example.io/other" }, []string{"plugin is immutable"}},
			{"plugin kind", func(op *itemopsv1alpha1.ItemOperation) {
				op.Spec.Plugin.Kind = itemopsv1alpha1.PluginKindVolumeSnapshotter
			}, []string{"plugin is immutable"}},
			{"resource", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Resource.Name = "data-postgres-1" }, []string{"resource is immutable"}},
			{"timeout changed", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Timeout = &metav1.Duration{Duration: 8 * time.Hour} }, []string{"spec.timeout: Invalid value", "timeout is immutable"}},
			{"timeout removed", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.Timeout = nil }, []string{"timeout is immutable"}},
			{"post-operation items changed", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.PostOperationItems[0].Name = "other" }, []string{"postOperationItems is immutable"}},
			{"post-operation items removed", func(op *itemopsv1alpha1.ItemOperation) { op.Spec.PostOperationItems = nil }, []string{"postOperationItems is immutable"}},
		}
		for _, tc := range cases {
			It(tc.name, func() {
				g := NewWithT(GinkgoT())
				ctx := context.Background()
				op := newOperation()
				g.Expect(env.Client.Create(ctx, op)).To(Succeed())
				tc.mutate(op)
				expectInvalid(g, env.Client.Update(ctx, op), tc.want...)
			})
		}

		It("snapshot location changed", func() {
			g := NewWithT(GinkgoT())
			ctx := context.Background()
			op := newOperation()
			op.Spec.Plugin.Kind = itemopsv1alpha1.PluginKindVolumeSnapshotter
			op.Spec.SnapshotLocation = "default"
			g.Expect(env.Client.Create(ctx, op)).To(Succeed())
			op.Spec.SnapshotLocation = "other"
			expectInvalid(g, env.Client.Update(ctx, op), "snapshotLocation is immutable")
		})

		It("timeout added", func() {
			g := NewWithT(GinkgoT())
			ctx := context.Background()
			op := newOperation()
			op.Spec.Timeout = nil
			g.Expect(env.Client.Create(ctx, op)).To(Succeed())
			op.Spec.Timeout = &metav1.Duration{Duration: time.Hour}
			expectInvalid(g, env.Client.Update(ctx, op), "timeout is immutable")
		})
	})

	It("cancel can be requested but not withdrawn", func() {
		g := NewWithT(GinkgoT())
		ctx := context.Background()
		op := newOperation()
		g.Expect(env.Client.Create(ctx, op)).To(Succeed())

		// Writing the same spec again is not a change: ingestion relies on it.
		g.Expect(env.Client.Update(ctx, op)).To(Succeed())

		patch := client.MergeFrom(op.DeepCopy())
		op.Spec.Cancel = true
		g.Expect(env.Client.Patch(ctx, op, patch)).To(Succeed())
		got := &itemopsv1alpha1.ItemOperation{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(op), got)).To(Succeed())
		g.Expect(got.Spec.Cancel).To(BeTrue())
		g.Expect(got.Generation).To(Equal(int64(2)), "a cancel request is a spec change")

		got.Spec.Cancel = false
		expectInvalid(g, env.Client.Update(ctx, got), "spec.cancel", "cancel cannot be withdrawn once requested")
	})

	It("status is a subresource", func() {
		g := NewWithT(GinkgoT())
		ctx := context.Background()
		op := newOperation()
		g.Expect(env.Client.Create(ctx, op)).To(Succeed())

		// A status written through the main resource is dropped...
		op.Status.Phase = itemopsv1alpha1.OperationPhaseCompleted
		g.Expect(env.Client.Update(ctx, op)).To(Succeed())
		got := &itemopsv1alpha1.ItemOperation{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(op), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseNew), "no status written yet reads as New (the CRD's default)")
		g.Expect(got.Status.Created).To(BeNil())

		// ...and a spec written through the status subresource is dropped.
		got.Status.Phase = itemopsv1alpha1.OperationPhaseInProgress
		got.Spec.Cancel = true
		g.Expect(env.Client.Status().Update(ctx, got)).To(Succeed())
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(op), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseInProgress))
		g.Expect(got.Spec.Cancel).To(BeFalse())
	})

	// It asks the API server for the table that `kubectl get
	// itemoperations` prints (kubectl requests the same server-side table).
	It("kubectl columns", func() {
		g := NewWithT(GinkgoT())
		ctx := context.Background()
		op := newOperation()
		op.Labels = map[string]string{"test": "columns"}
		g.Expect(env.Client.Create(ctx, op)).To(Succeed())
		mirror := newOperation()
		mirror.Labels = map[string]string{"test": "columns"}
		mirrorOf(mirror, itemopsv1alpha1.MirrorKindPodVolumeBackup)
		g.Expect(env.Client.Create(ctx, mirror)).To(Succeed())
		eta := metav1.NewTime(time.Date(2026, 11, 22, 21, 4, 5, 0, time.UTC))
		started := metav1.NewTime(time.Now().Add(-10*time.Minute - 30*time.Second))
		op.Status = itemopsv1alpha1.ItemOperationStatus{
			Phase:               itemopsv1alpha1.OperationPhaseInProgress,
			Progress:            "4.2Gi/10Gi (42%)",
			EstimatedCompletion: &eta,
			Started:             &started,
			WaitingFor:          itemopsv1alpha1.WaitingNodeAgentBusy,
			Throughput:          "12.5MiB/s",
		}
		g.Expect(env.Client.Status().Update(ctx, op)).To(Succeed())

		httpClient, err := rest.HTTPClientFor(env.Config)
		g.Expect(err).NotTo(HaveOccurred())
		url := fmt.Sprintf("%s/apis/itemops.io/v1alpha1/namespaces/%s/itemoperations?labelSelector=test%%3Dcolumns",
			strings.TrimSuffix(env.Config.Host, "/"), envtest.VeleroNamespace)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		resp, err := httpClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		table := &metav1.Table{}
		g.Expect(json.NewDecoder(resp.Body).Decode(table)).To(Succeed())

		type column struct {
			Name     string
			Priority int32
		}
		var columns []column
		for _, c := range table.ColumnDefinitions {
			columns = append(columns, column{c.Name, c.Priority})
		}
		g.Expect(columns).To(Equal([]column{
			{"Name", 0}, {"Parent", 0}, {"Plugin", 0}, {"Mirrors", 0}, {"Phase", 0}, {"Progress", 0}, {"Age", 0},
			{"Waiting For", 1}, {"Elapsed", 1}, {"Rate", 1}, {"ETA", 1}, {"Operation ID", 1},
		}))
		g.Expect(table.Rows).To(HaveLen(2))
		rows := map[string][]any{}
		for _, r := range table.Rows {
			rows[r.Cells[0].(string)] = r.Cells
		}
		cells := rows[op.Name]
		g.Expect(cells).To(HaveLen(12))
		g.Expect(cells[1]).To(Equal("nightly"))
		g.Expect(cells[2]).To(Equal("velero.io/csi-pvc-backupper"))
		g.Expect(cells[3]).To(BeNil(), "a plugin's operation mirrors nothing")
		g.Expect(cells[4]).To(Equal("InProgress"))
		g.Expect(cells[5]).To(Equal("4.2Gi/10Gi (42%)"))
		g.Expect(cells[6]).To(MatchRegexp(`^\d+s$`))
		g.Expect(cells[7]).To(Equal(itemopsv1alpha1.WaitingNodeAgentBusy))
		g.Expect(cells[8]).To(Equal("10m"))
		g.Expect(cells[9]).To(Equal("12.5MiB/s"))
		g.Expect(cells[10]).To(Equal("2026-11-22T21:04:05Z"))
		g.Expect(cells[11]).To(Equal(op.Spec.OperationID))
		mirrorCells := rows[mirror.Name]
		g.Expect(mirrorCells).To(HaveLen(12))
		g.Expect(mirrorCells[2]).To(BeNil(), "a mirror names no plugin")
		g.Expect(mirrorCells[3]).To(Equal("PodVolumeBackup"))
		g.Expect(mirrorCells[11]).To(BeNil(), "a mirror has no operation ID")
	})

	It("short name and categories", func() {
		g := NewWithT(GinkgoT())
		dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
		g.Expect(err).NotTo(HaveOccurred())
		list, err := dc.ServerResourcesForGroupVersion(itemopsv1alpha1.GroupVersion.String())
		g.Expect(err).NotTo(HaveOccurred())
		var found *metav1.APIResource
		for i := range list.APIResources {
			if list.APIResources[i].Name == "itemoperations" {
				found = &list.APIResources[i]
			}
		}
		g.Expect(found).NotTo(BeNil())
		g.Expect(found.Namespaced).To(BeTrue())
		g.Expect(found.Kind).To(Equal("ItemOperation"))
		g.Expect(found.ShortNames).To(ConsistOf("itemop"))
		g.Expect(found.Categories).To(ConsistOf("velero", "itemops"))
	})
})
