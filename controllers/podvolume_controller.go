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

package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
)

// +kubebuilder:rbac:groups=velero.io,namespace=velero,resources=podvolumebackups;podvolumerestores,verbs=get;list;watch;patch

// reasonMirrorRefused: the ItemOperation that mirrors a PodVolumeBackup or
// PodVolumeRestore was refused by the API server.
const reasonMirrorRefused kube.EventReason = "MirrorRefused"

// PodVolumeReconciler makes the ItemOperation that mirrors each
// PodVolumeBackup (Kind PodVolumeBackup) or PodVolumeRestore of Velero's
// file-system backup: one per object, whose parent is the Backup or Restore
// that controls it. What the ItemOperation says is then read from the
// object by the ItemOperation reconciler; itemops never drives it.
//
// Objects that ended with a Backup or Restore that ended too are Velero's
// history and are not mirrored: installing itemops beside a Velero that
// kept ten thousand of them creates nothing for them.
type PodVolumeReconciler struct {
	Client client.Client
	// APIReader reads a parent the cache has not seen yet around it.
	APIReader client.Reader
	Recorder  record.EventRecorder
	// Kind is the kind mirrored: PodVolumeBackup or PodVolumeRestore.
	Kind itemopsv1alpha1.MirrorKind
	// Namespace, when set, is Velero's: objects elsewhere are not Velero's
	// own and are never mirrored (the manager's cache is limited to it
	// too).
	Namespace string
}

// SetupWithManager registers the reconciler. An object is looked at when it
// is created (or first listed) and when its phase changes; the progress it
// reports wakes nothing here.
func (r *PodVolumeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(string(r.Kind)).
		For(newPodVolume(r.Kind), builder.WithPredicates(podVolumePhaseChanged(), predicate.NewPredicateFuncs(func(obj client.Object) bool {
			return r.Namespace == "" || obj.GetNamespace() == r.Namespace
		}))).
		Complete(r)
}

// podVolumePhaseChanged passes a PodVolumeBackup or PodVolumeRestore seen
// for the first time, and one whose phase or spec.cancel changed.
func podVolumePhaseChanged() predicate.Funcs {
	return predicate.Funcs{
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := podVolumeOf(e.ObjectOld)
			now, okNew := podVolumeOf(e.ObjectNew)
			return okOld && okNew && (old.phase != now.phase || old.cancel != now.cancel)
		},
	}
}

// Reconcile implements reconcile.Reconciler.
func (r *PodVolumeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := newPodVolume(r.Kind)
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues(string(r.Kind), klog.KObj(obj))
	pv, _ := podVolumeOf(obj)
	if pv.parent == nil || pv.parent.Kind != string(pv.parentKind()) {
		log.V(1).Info("not mirrored: no Backup or Restore controls it")
		return ctrl.Result{}, nil
	}
	parent, found, err := r.parent(ctx, obj.GetNamespace(), pv)
	if err != nil || !found {
		// A parent gone takes its objects with it (they are its own).
		return ctrl.Result{}, err
	}
	if pv.ended() && parentEnded(parent) {
		return ctrl.Result{}, nil
	}
	op := newMirror(parent, pv)
	created, refused, err := createOperation(ctx, r.Client, op)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case refused != nil:
		// Nothing in it is the user's to fix and a retry would be refused
		// again: said once on the parent, where `kubectl describe` shows it.
		kube.Emitf(r.Recorder, parent, corev1.EventTypeWarning, reasonMirrorRefused,
			"the ItemOperation mirroring %s %s was refused: %v", pv.kind, obj.GetName(), refused)
	case created:
		log.V(1).Info("mirrored", "itemoperation", op.Name)
	}
	return ctrl.Result{}, nil
}

// parent reads the Backup or Restore that controls pv, and reports whether
// it exists with the UID pv names. A parent the cache lacks (or holds with
// another UID) is read again from the API server: Velero creates the
// parent first, but the two kinds reach the cache through informers of
// their own, and an object not mirrored now is looked at again only when
// its phase changes.
func (r *PodVolumeReconciler) parent(ctx context.Context, namespace string, pv podVolume) (client.Object, bool, error) {
	fresh := func() client.Object {
		if pv.parentKind() == itemopsv1alpha1.ParentKindRestore {
			return &velerov1api.Restore{}
		}
		return &velerov1api.Backup{}
	}
	key := types.NamespacedName{Namespace: namespace, Name: pv.parent.Name}
	parent := fresh()
	found, err := readParent(ctx, r.Client, key, string(pv.parent.UID), parent)
	if err == nil && !found && r.APIReader != nil {
		parent = fresh()
		found, err = readParent(ctx, r.APIReader, key, string(pv.parent.UID), parent)
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading %s %s: %w", pv.parentKind(), pv.parent.Name, err)
	}
	return parent, found, nil
}

// parentEnded reports whether a Backup or Restore has ended (or is being
// deleted): Velero waits for none of its file-system backups any more.
func parentEnded(parent client.Object) bool {
	switch p := parent.(type) {
	case *velerov1api.Backup:
		switch p.Status.Phase {
		case velerov1api.BackupPhaseCompleted, velerov1api.BackupPhasePartiallyFailed, velerov1api.BackupPhaseFailed,
			velerov1api.BackupPhaseFailedValidation, velerov1api.BackupPhaseDeleting:
			return true
		}
	case *velerov1api.Restore:
		switch p.Status.Phase {
		case velerov1api.RestorePhaseCompleted, velerov1api.RestorePhasePartiallyFailed, velerov1api.RestorePhaseFailed,
			velerov1api.RestorePhaseFailedValidation:
			return true
		}
	}
	return false
}

// newMirror is the ItemOperation that mirrors pv, a movement of parent.
func newMirror(parent client.Object, pv podVolume) *itemopsv1alpha1.ItemOperation {
	kind, obj := pv.parentKind(), pv.object
	gvk := velerov1api.SchemeGroupVersion.WithKind(string(kind))
	op := &itemopsv1alpha1.ItemOperation{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: parent.GetNamespace(),
			Name:      mirrorName(parent.GetName(), string(parent.GetUID()), pv.kind, obj.GetName()),
			Labels: map[string]string{
				itemopsv1alpha1.LabelParentKind: string(kind),
				itemopsv1alpha1.LabelParentName: itemopsv1alpha1.ParentNameLabelValue(parent.GetName()),
				itemopsv1alpha1.LabelParentUID:  string(parent.GetUID()),
			},
			// As an operation read from a file: removed with its parent,
			// its cancel recorded first by its finalizer.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: parent.GetName(), UID: parent.GetUID(),
			}},
		},
		Spec: itemopsv1alpha1.ItemOperationSpec{
			Parent:   itemopsv1alpha1.ParentReference{Kind: kind, Name: parent.GetName(), UID: string(parent.GetUID())},
			Mirror:   &itemopsv1alpha1.MirrorReference{Kind: pv.kind, Name: obj.GetName(), UID: string(obj.GetUID()), Volume: pv.volume},
			Resource: itemopsv1alpha1.ResourceIdentifier{Resource: "pods", Namespace: pv.pod.Namespace, Name: pv.pod.Name},
		},
	}
	if !pv.ended() {
		op.Finalizers = []string{itemopsv1alpha1.Finalizer}
	}
	return op
}
