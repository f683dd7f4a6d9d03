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
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// ReasonMirrorGone is the Progressing reason of a mirror whose Velero object
// was deleted before it ended.
const ReasonMirrorGone = "MirroredObjectDeleted"

// A mirror (spec.mirror) follows a Velero object that moves data outside
// any plugin operation, a PodVolumeBackup or PodVolumeRestore: its "poll"
// reads the object from the cache, it ends as the object ends, and its
// cancel sets the object's spec.cancel, which node-agent acts on. It has
// no timeout of its own: Velero's --fs-backup-timeout and node-agent's
// prepare timeout are Velero's.

// mirrored reads the object op mirrors. found is false when no object of
// that name and UID exists, which the API server confirms when the cache
// says so: ending a mirror cannot be undone.
func (r *ItemOperationReconciler) mirrored(ctx context.Context, op *itemopsv1alpha1.ItemOperation) (pv podVolume, found bool, err error) {
	m := op.Spec.Mirror
	key := types.NamespacedName{Namespace: op.Namespace, Name: m.Name}
	read := func(reader client.Reader, opts ...client.GetOption) (bool, error) {
		obj := newPodVolume(m.Kind)
		switch err := reader.Get(ctx, key, obj, opts...); {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("reading %s %s: %w", m.Kind, m.Name, err)
		}
		pv, _ = podVolumeOf(obj)
		return string(obj.GetUID()) == m.UID, nil
	}
	// Read only: not copied out of the cache at every poll.
	found, err = read(r.Client, client.UnsafeDisableDeepCopy)
	if err == nil && !found && r.APIReader != nil {
		found, err = read(r.APIReader)
	}
	return pv, found, err
}

// pollMirror reads the mirrored object and maps what it says onto the
// status, as poll does with a plugin's answer.
func (r *ItemOperationReconciler) pollMirror(ctx context.Context, op *itemopsv1alpha1.ItemOperation, now time.Time) {
	m := op.Spec.Mirror
	pv, found, err := r.mirrored(ctx, op)
	switch {
	case err != nil:
		// The cache's or the API server's trouble, not the movement's: said
		// until it passes, never counted against the operation.
		setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionFalse, itemopsv1alpha1.ReasonPollFailing, err.Error(), now)
		return
	case !found:
		op.Status.Error = fmt.Sprintf("%s %s was deleted before it ended (%s when last read): nothing moves its data any more",
			m.Kind, m.Name, cmp.Or(op.Status.Description, "not read yet"))
		r.finish(op, itemopsv1alpha1.OperationPhaseFailed, now)
		setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonMirrorGone, op.Status.Error, now)
		return
	}
	created := metav1.NewTime(pv.object.GetCreationTimestamp().Time)
	op.Status.Created = &created
	p := velero.OperationProgress{NCompleted: pv.done, NTotal: pv.total, OperationUnits: "bytes", Description: pv.describe()}
	if pv.started != nil {
		p.Started = pv.started.Time
	}
	r.applyProgress(op, p, now)
	phase := pv.operationPhase()
	if pv.ended() {
		op.Status.Error = ""
		if phase != itemopsv1alpha1.OperationPhaseCompleted {
			op.Status.Error = cmp.Or(pv.message, fmt.Sprintf("%s %s is %s", m.Kind, m.Name, pv.phase))
		}
		r.finish(op, phase, now)
		if pv.stopped != nil {
			op.Status.CompletionTimestamp = pv.stopped.DeepCopy()
		}
		return
	}
	if op.Status.Phase != itemopsv1alpha1.OperationPhaseCanceling {
		op.Status.Phase = phase
	}
	setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionTrue, itemopsv1alpha1.ReasonPolling,
		fmt.Sprintf("progress is read from %s %s", m.Kind, m.Name), now)
	r.checkStall(op, now)
}

// describe is the movement's phase and Velero's message, for people.
func (pv podVolume) describe() string {
	s := string(pv.kind) + " " + cmp.Or(pv.phase, pvPhaseNew)
	if pv.message != "" {
		s += ": " + pv.message
	}
	return s
}

// cancelMirror sets the mirrored object's spec.cancel, Velero's own way to
// cancel a file-system backup or restore, and says what came of it. The
// patch names the object's UID: an object that replaced it is not touched.
func (r *ItemOperationReconciler) cancelMirror(ctx context.Context, op *itemopsv1alpha1.ItemOperation) (string, error) {
	m := op.Spec.Mirror
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": m.UID},
		"spec":     map[string]any{"cancel": true},
	})
	if err != nil {
		return "", fmt.Errorf("setting spec.cancel of %s %s: %w", m.Kind, m.Name, err)
	}
	obj := newPodVolume(m.Kind)
	obj.SetNamespace(op.Namespace)
	obj.SetName(m.Name)
	switch err := r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, body)); {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("%s %s no longer exists", m.Kind, m.Name), nil
	case apierrors.IsConflict(err), apierrors.IsInvalid(err):
		// The API server refuses a patch whose UID is not the stored
		// object's with 422 (metadata.uid is immutable): the object of
		// that name is another one. Not tried again: the mirror ends as
		// its object is gone, and its finalizer goes with it.
		return fmt.Sprintf("%s %s no longer exists: the object of that name is another one (the API server answered: %v)", m.Kind, m.Name, err), nil
	case err != nil:
		// Not told: tried again (the workqueue's backoff), never recorded
		// as asked.
		return "", fmt.Errorf("setting spec.cancel of %s %s: %w", m.Kind, m.Name, err)
	}
	if pv, _ := podVolumeOf(obj); !pv.cancel {
		// The API server dropped the field: this Velero's CRD has none.
		return fmt.Sprintf("%s %s cannot be canceled: this Velero's %s has no spec.cancel (Velero before v1.17); "+
			"it ends when node-agent finishes it, or at Velero's --fs-backup-timeout", m.Kind, m.Name, m.Kind), nil
	}
	return fmt.Sprintf("spec.cancel was set on %s %s, which node-agent cancels", m.Kind, m.Name), nil
}
