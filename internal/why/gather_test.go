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
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
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
			Plugin: itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: DataUploadPlugin}}}
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
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(du, vs, pvc, &agent).
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
