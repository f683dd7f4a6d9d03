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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// podVolume is what itemops reads of a PodVolumeBackup or a
// PodVolumeRestore, the two kinds of Velero's file-system backup: the same
// steps (New, Accepted, Prepared, InProgress, Canceling, then Completed,
// Failed or Canceled since Velero v1.17; New, InProgress, Completed, Failed
// before), the same progress in bytes, the same spec.cancel.
type podVolume struct {
	kind   itemopsv1alpha1.MirrorKind
	object client.Object
	// parent is the Backup or Restore the object names as its controller.
	parent *metav1.OwnerReference
	pod    corev1.ObjectReference
	volume string
	phase  string
	cancel bool
	// message is Velero's or node-agent's account of the phase, the error
	// of one that failed.
	message                    string
	accepted, started, stopped *metav1.Time
	done, total                int64
}

// podVolumeOf reads obj, a PodVolumeBackup or a PodVolumeRestore.
func podVolumeOf(obj client.Object) (podVolume, bool) {
	pv := podVolume{object: obj, parent: metav1.GetControllerOf(obj)}
	switch o := obj.(type) {
	case *velerov1api.PodVolumeBackup:
		pv.kind, pv.pod, pv.volume, pv.cancel = itemopsv1alpha1.MirrorKindPodVolumeBackup, o.Spec.Pod, o.Spec.Volume, o.Spec.Cancel
		s := &o.Status
		pv.phase, pv.message, pv.accepted, pv.started, pv.stopped = string(s.Phase), s.Message, s.AcceptedTimestamp, s.StartTimestamp, s.CompletionTimestamp
		pv.done, pv.total = s.Progress.BytesDone, s.Progress.TotalBytes
	case *velerov1api.PodVolumeRestore:
		pv.kind, pv.pod, pv.volume, pv.cancel = itemopsv1alpha1.MirrorKindPodVolumeRestore, o.Spec.Pod, o.Spec.Volume, o.Spec.Cancel
		s := &o.Status
		pv.phase, pv.message, pv.accepted, pv.started, pv.stopped = string(s.Phase), s.Message, s.AcceptedTimestamp, s.StartTimestamp, s.CompletionTimestamp
		pv.done, pv.total = s.Progress.BytesDone, s.Progress.TotalBytes
	default:
		return podVolume{}, false
	}
	return pv, true
}

// newPodVolume is an empty object of kind, to read into.
func newPodVolume(kind itemopsv1alpha1.MirrorKind) client.Object {
	if kind == itemopsv1alpha1.MirrorKindPodVolumeRestore {
		return &velerov1api.PodVolumeRestore{}
	}
	return &velerov1api.PodVolumeBackup{}
}

// The phases of a PodVolumeBackup and a PodVolumeRestore (Velero's
// constants are typed per kind, their values the same).
const (
	pvPhaseNew        = "New"
	pvPhaseAccepted   = "Accepted"
	pvPhasePrepared   = "Prepared"
	pvPhaseInProgress = "InProgress"
	pvPhaseCanceling  = "Canceling"
	pvPhaseCanceled   = "Canceled"
	pvPhaseCompleted  = "Completed"
	pvPhaseFailed     = "Failed"
)

// ended reports whether Velero ended the movement.
func (pv podVolume) ended() bool {
	switch pv.phase {
	case pvPhaseCompleted, pvPhaseFailed, pvPhaseCanceled:
		return true
	}
	return false
}

// operationPhase is the ItemOperation phase of the movement's phase: the
// steps before the data moves (Accepted, Prepared) are New, as an
// operation whose plugin has not started it.
func (pv podVolume) operationPhase() itemopsv1alpha1.OperationPhase {
	switch pv.phase {
	case pvPhaseInProgress:
		return itemopsv1alpha1.OperationPhaseInProgress
	case pvPhaseCanceling:
		return itemopsv1alpha1.OperationPhaseCanceling
	case pvPhaseCanceled:
		return itemopsv1alpha1.OperationPhaseCanceled
	case pvPhaseCompleted:
		return itemopsv1alpha1.OperationPhaseCompleted
	case pvPhaseFailed:
		return itemopsv1alpha1.OperationPhaseFailed
	}
	return itemopsv1alpha1.OperationPhaseNew
}

// parentKind is the ItemOperation parent kind of the movement's kind.
func (pv podVolume) parentKind() itemopsv1alpha1.ParentKind {
	if pv.kind == itemopsv1alpha1.MirrorKindPodVolumeRestore {
		return itemopsv1alpha1.ParentKindRestore
	}
	return itemopsv1alpha1.ParentKindBackup
}

// mirrorName is the name of the ItemOperation that mirrors the movement
// name of kind, whose parent is parentName with parentUID: deterministic,
// so that a restart or a second event creates nothing twice.
func mirrorName(parentName, parentUID string, kind itemopsv1alpha1.MirrorKind, name string) string {
	return operationName(parentName, parentUID, string(kind), name)
}
