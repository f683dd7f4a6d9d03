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
	"fmt"
	"strings"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// advancing reads from a cluster that advances once, after its first
// `after` reads: what a poll sees when the movement moves on while it reads.
type advancing struct {
	client.Client
	after, reads int
	advance      func(client.Client) error
}

func (a *advancing) step() error {
	a.reads++
	if a.reads == a.after+1 {
		return a.advance(a.Client)
	}
	return nil
}

func (a *advancing) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := a.step(); err != nil {
		return err
	}
	return a.Client.Get(ctx, key, obj, opts...)
}

func (a *advancing) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := a.step(); err != nil {
		return err
	}
	return a.Client.List(ctx, list, opts...)
}

// withIndexes gives a fake client the indexes the gatherer reads through.
func withIndexes(b *fake.ClientBuilder) *fake.ClientBuilder {
	for _, i := range Indexes() {
		b = b.WithIndex(i.Object, i.Field, i.Extract)
	}
	return b
}

// A poll that reads while the snapshot becomes ready and the volume Velero
// exposes from it cannot be provisioned sees one of the two causes, at
// whichever of its reads the change comes.
func TestMovementReadWhileItMovesOn(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, velerov1api.AddToScheme, AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	op := &itemopsv1alpha1.ItemOperation{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "op"},
		Spec: itemopsv1alpha1.ItemOperationSpec{OperationID: "du-1",
			Plugin: itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: itemopsv1alpha1.DataUploadPlugin}}}
	for after := 0; ; after++ {
		du := &velerov2alpha1.DataUpload{
			ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "b1-x7k2p", Labels: map[string]string{velerov1api.AsyncOperationIDLabel: "du-1"}},
			Spec: velerov2alpha1.DataUploadSpec{SnapshotType: velerov2alpha1.SnapshotTypeCSI, SourcePVC: "data", SourceNamespace: "app",
				CSISnapshot: &velerov2alpha1.CSISnapshotSpec{VolumeSnapshot: "velero-data-abc"}},
			Status: velerov2alpha1.DataUploadStatus{Phase: velerov2alpha1.DataUploadPhaseAccepted, AcceptedByNode: "node-1"},
		}
		vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "velero-data-abc"},
			Status: &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(false), Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("the disk is full")}}}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "b1-x7k2p", UID: "pvc-uid"},
			Spec:   corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("missing")},
			Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
		agent := nodeAgentPod("node-1", corev1.PodRunning)
		index := func(field string, value func(*corev1.Event) string) (client.Object, string, client.IndexerFunc) {
			return &corev1.Event{}, field, func(o client.Object) []string { return []string{value(o.(*corev1.Event))} }
		}
		c := withIndexes(fake.NewClientBuilder().WithScheme(scheme)).WithObjects(du, vs, pvc, &agent).
			WithIndex(index("involvedObject.kind", func(e *corev1.Event) string { return e.InvolvedObject.Kind })).
			WithIndex(index("involvedObject.name", func(e *corev1.Event) string { return e.InvolvedObject.Name })).
			WithIndex(index("involvedObject.uid", func(e *corev1.Event) string { return string(e.InvolvedObject.UID) })).
			Build()
		world := &advancing{Client: c, after: after, advance: func(c client.Client) error {
			// As the cluster does it: the provisioner's complaint, then the
			// snapshot ready.
			if err := c.Create(context.Background(), &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Namespace: "velero", Name: "b1-x7k2p.1"},
				InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "velero", Name: "b1-x7k2p", UID: "pvc-uid"},
				Type:           corev1.EventTypeWarning, Reason: "ProvisioningFailed", Message: `storageclass.storage.k8s.io "missing" not found`,
			}); err != nil {
				return err
			}
			vs.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}
			return c.Update(context.Background(), vs)
		}}
		found, err := (&Gatherer{Reader: world}).Cause(context.Background(), op, When{Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		cause := found.Cause
		if world.reads <= after {
			// The poll ended before the change: every read point was tried.
			break
		}
		if cause == nil {
			t.Fatalf("the cluster moved on after %d read(s) of %d: no cause, want SnapshotFailed or VolumeNotProvisioned", after, world.reads)
		}
		if want := []string{itemopsv1alpha1.WaitingSnapshotFailed, itemopsv1alpha1.WaitingVolumeNotProvisioned}; cause.Reason != want[0] && cause.Reason != want[1] {
			t.Fatalf("the cluster moved on after %d read(s): %s, want one of %v", after, cause.Reason, want)
		}
		t.Logf("moved on after %d read(s): %s", after, cause.Reason)
	}
}

// counted counts the reads made through it, by kind of object.
type counted struct {
	client.Reader
	gets, lists map[string]int
	// unindexed are the lists of DataUploads or DataDownloads made without
	// a field selector: each would read every one Velero keeps.
	unindexed int
}

func (c *counted) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets[fmt.Sprintf("%T", obj)]++
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *counted) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.lists[fmt.Sprintf("%T", list)]++
	switch list.(type) {
	case *velerov2alpha1.DataUploadList, *velerov2alpha1.DataDownloadList:
		o := &client.ListOptions{}
		o.ApplyOptions(opts)
		if o.FieldSelector == nil || o.FieldSelector.Empty() {
			c.unindexed++
		}
	}
	return c.Reader.List(ctx, list, opts...)
}

// Finding why Prepared movements wait reads node-agent's DaemonSet and
// ConfigMap once per Every for all of them, and the movements through the
// cache's indexes only, however many finished ones Velero keeps.
func TestPreparedMovementsCostNoReadPerOperation(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, velerov1api.AddToScheme, AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	upload := func(name, id string, phase velerov2alpha1.DataUploadPhase, node string) *velerov2alpha1.DataUpload {
		return &velerov2alpha1.DataUpload{
			ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: name, Labels: map[string]string{velerov1api.AsyncOperationIDLabel: id}},
			Status:     velerov2alpha1.DataUploadStatus{Phase: phase, Node: node},
		}
	}
	agent := nodeAgentPod("node-1", corev1.PodRunning)
	objects := []client.Object{&agent,
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "node-agent"},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "node-agent", Args: []string{"node-agent", "server", "--node-agent-configmap=node-agent-config"}}}}}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "node-agent-config"},
			Data: map[string]string{"config": `{"loadConcurrency":{"globalConfig":2}}`}},
		upload("running-1", "r1", velerov2alpha1.DataUploadPhaseInProgress, "node-1"),
		upload("running-2", "r2", velerov2alpha1.DataUploadPhaseInProgress, "node-1"),
		upload("elsewhere", "r3", velerov2alpha1.DataUploadPhaseInProgress, "node-2"),
	}
	for i := range 500 {
		objects = append(objects, upload(fmt.Sprintf("kept-%d", i), fmt.Sprintf("kept-%d", i), velerov2alpha1.DataUploadPhaseCompleted, "node-1"))
	}
	const waiting = 20
	var ops []*itemopsv1alpha1.ItemOperation
	for i := range waiting {
		id := fmt.Sprintf("w%d", i)
		objects = append(objects, upload("waiting-"+id, id, velerov2alpha1.DataUploadPhasePrepared, "node-1"))
		ops = append(ops, &itemopsv1alpha1.ItemOperation{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "op-" + id},
			Spec: itemopsv1alpha1.ItemOperationSpec{OperationID: id,
				Plugin: itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: itemopsv1alpha1.DataUploadPlugin}}})
	}
	c := withIndexes(fake.NewClientBuilder().WithScheme(scheme)).WithObjects(objects...).Build()
	cache := &counted{Reader: c, gets: map[string]int{}, lists: map[string]int{}}
	direct := &counted{Reader: c, gets: map[string]int{}, lists: map[string]int{}}
	clk := clocktesting.NewFakePassiveClock(time.Now())
	g := &Gatherer{Reader: cache, Direct: direct, Every: 10 * time.Second, Clock: clk}
	poll := func() {
		t.Helper()
		for _, op := range ops {
			found, err := g.Cause(context.Background(), op, When{Now: clk.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if found.Cause == nil || found.Cause.Reason != itemopsv1alpha1.WaitingNodeAgentBusy ||
				!strings.Contains(found.Cause.Evidence, "loadConcurrency of 2 data path(s): 2 ahead (DataUpload/running-1, DataUpload/running-2)") {
				t.Fatalf("%s: %+v, want NodeAgentBusy behind the two running on node-1", op.Name, found.Cause)
			}
		}
	}
	poll()
	poll()
	if want := map[string]int{"*v1.DaemonSet": 1, "*v1.ConfigMap": 1}; !equality.Semantic.DeepEqual(direct.gets, want) || len(direct.lists) != 0 {
		t.Fatalf("reads around the cache in two polls of %d operations: gets %v, lists %v; want %v", waiting, direct.gets, direct.lists, want)
	}
	if cache.unindexed != 0 {
		t.Fatalf("%d lists of DataUploads or DataDownloads without an index", cache.unindexed)
	}
	if cache.lists["*v1.PodList"] != 1 {
		t.Fatalf("node-agent's pods listed %d times in two polls, want once per Every", cache.lists["*v1.PodList"])
	}
	clk.SetTime(clk.Now().Add(10 * time.Second))
	poll()
	if direct.gets["*v1.DaemonSet"] != 2 || direct.gets["*v1.ConfigMap"] != 2 {
		t.Fatalf("after Every: gets %v, want node-agent read again once", direct.gets)
	}
}

// A per-node rule of node-agent's ConfigMap and a node that cannot be read:
// its concurrency is unknown, and no NodeAgentBusy is claimed.
func TestUnreadableNodeMakesNoClaimOfItsLoad(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, velerov1api.AddToScheme, AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	agent := nodeAgentPod("node-1", corev1.PodRunning)
	c := withIndexes(fake.NewClientBuilder().WithScheme(scheme)).WithObjects(&agent,
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "node-agent"},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "node-agent", Args: []string{"--node-agent-configmap", "node-agent-config"}}}}}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "node-agent-config"},
			Data: map[string]string{"config": `{"loadConcurrency":{"globalConfig":1,"perNodeConfig":[{"nodeSelector":{"matchLabels":{"disk":"fast"}},"number":3}]}}`}},
		&velerov2alpha1.DataUpload{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "running",
			Labels: map[string]string{velerov1api.AsyncOperationIDLabel: "r"}},
			Status: velerov2alpha1.DataUploadStatus{Phase: velerov2alpha1.DataUploadPhaseInProgress, Node: "node-1"}},
		&velerov2alpha1.DataUpload{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "waiting",
			Labels: map[string]string{velerov1api.AsyncOperationIDLabel: "w"}},
			Status: velerov2alpha1.DataUploadStatus{Phase: velerov2alpha1.DataUploadPhasePrepared, Node: "node-1"}},
	).Build()
	op := &itemopsv1alpha1.ItemOperation{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "op"},
		Spec: itemopsv1alpha1.ItemOperationSpec{OperationID: "w",
			Plugin: itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: itemopsv1alpha1.DataUploadPlugin}}}
	found, err := (&Gatherer{Reader: c}).Cause(context.Background(), op, When{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if found.Cause != nil {
		t.Fatalf("the node's labels unread: %+v, want no cause", found.Cause)
	}
	// The node readable and matching the rule: 1 of its 3 paths busy.
	if err := c.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"disk": "fast"}}}); err != nil {
		t.Fatal(err)
	}
	m, _, err := (&Gatherer{Reader: c}).Movement(context.Background(), op)
	if err != nil {
		t.Fatal(err)
	}
	if m.Concurrency != 3 || len(m.Running) != 1 {
		t.Fatalf("concurrency %d, running %v; want 3 and one", m.Concurrency, m.Running)
	}
}
