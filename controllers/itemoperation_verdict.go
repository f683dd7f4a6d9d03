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
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/progress"
)

// Velero's verdict. Where Velero's own operations controllers run (observe
// mode), Velero decides how an operation ended: it fails an operation on
// its first failed Progress call, where itemops retries, and it is Velero's
// record that its finalizer, its counters and `velero describe` go by. The
// parent reconciler copies the end Velero recorded in its operations file
// into the operation's record-status annotation; this reconciler then makes
// the status Velero's, and says so where its own polls saw another end.

// veleroVerdict is the end Velero recorded for op when the status does not
// show it yet. An operation read from a file in which it had already ended
// (no status written yet) is not one: it starts from that record.
func veleroVerdict(op *itemopsv1alpha1.ItemOperation) (*itemoperation.OperationStatus, bool) {
	if op.Status.Created == nil {
		return nil, false
	}
	rec, err := recordStatus(op)
	if err != nil || rec == nil || !recordEnded(rec.Phase) {
		return nil, false
	}
	return rec, !shows(&op.Status, rec)
}

// recordEnded reports whether a phase of Velero's record is an end.
func recordEnded(p itemoperation.OperationPhase) bool {
	return p == itemoperation.OperationPhaseCompleted || p == itemoperation.OperationPhaseFailed
}

// shows reports whether a status shows the end Velero recorded: the same
// phase in Velero's terms (a Canceled operation is Failed there) and, for a
// failure, Velero's error. A Canceled operation keeps its own words: Velero
// recorded the failure that itemops' Cancel caused.
func shows(s *itemopsv1alpha1.ItemOperationStatus, rec *itemoperation.OperationStatus) bool {
	switch rec.Phase {
	case itemoperation.OperationPhaseCompleted:
		return s.Phase == itemopsv1alpha1.OperationPhaseCompleted
	case itemoperation.OperationPhaseFailed:
		return s.Phase == itemopsv1alpha1.OperationPhaseCanceled ||
			s.Phase == itemopsv1alpha1.OperationPhaseFailed && (rec.Error == "" || s.Error == bounded(rec.Error, maxMessageBytes))
	}
	return true
}

// inVeleroTerms is the phase of Velero's record format for a phase.
func inVeleroTerms(p itemopsv1alpha1.OperationPhase) itemoperation.OperationPhase {
	if p == itemopsv1alpha1.OperationPhaseCanceled {
		return itemoperation.OperationPhaseFailed
	}
	return itemoperation.OperationPhase(p)
}

// followVelero makes op's status the end Velero recorded, writes it and
// lets the operation go. When Velero failed an operation that itemops has
// not seen end, Progress is called once more first: what it answers is what
// itemops would have gone by (and does in manage mode). Where that, or the
// end itemops saw itself, is another outcome than Velero's, the
// DiffersFromVelero condition and one Event say so.
func (r *ItemOperationReconciler) followVelero(ctx context.Context, original, op *itemopsv1alpha1.ItemOperation,
	rec *itemoperation.OperationStatus, now time.Time) (ctrl.Result, error) {
	own, retried := op.Status.DeepCopy(), false
	canceling := op.Status.Phase == itemopsv1alpha1.OperationPhaseCanceling
	// A failure Velero records for an operation whose cancel was requested
	// is that cancel's outcome: no second look at the plugin.
	if !own.Phase.IsTerminal() && rec.Phase == itemoperation.OperationPhaseFailed && !canceling {
		parent, err := r.parent(ctx, op)
		if err != nil {
			return ctrl.Result{}, err
		}
		probe := op.DeepCopy()
		r.poll(ctx, probe, parent, now)
		own, retried = &probe.Status, true
	}
	ended := op.Status.Phase.IsTerminal()
	applyRecord(op, rec, now)
	if canceling && op.Status.Phase == itemopsv1alpha1.OperationPhaseFailed {
		op.Status.Phase = itemopsv1alpha1.OperationPhaseCanceled
	}
	if message, reason, differs := difference(rec, own, retried); differs {
		setCondition(op, itemopsv1alpha1.ConditionDiffersFromVelero, metav1.ConditionTrue, reason, message, now)
	}
	if !ended {
		setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionFalse, itemopsv1alpha1.ReasonVeleroRecorded,
			"Velero recorded the operation "+string(rec.Phase), now)
		if meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionStalled) != nil {
			setCondition(op, itemopsv1alpha1.ConditionStalled, metav1.ConditionFalse, itemopsv1alpha1.ReasonFinished,
				"the operation is "+string(op.Status.Phase), now)
		}
	}
	ctrl.LoggerFrom(ctx).Info("following Velero's record of the operation's end", "velero", rec.Phase, "polled", own.Phase)
	return r.writeEnd(ctx, original, op, now)
}

// applyRecord copies the end Velero recorded into op's status: its phase,
// error and counts.
func applyRecord(op *itemopsv1alpha1.ItemOperation, rec *itemoperation.OperationStatus, now time.Time) {
	s := &op.Status
	if !s.Phase.IsTerminal() {
		s.CompletionTimestamp = &metav1.Time{Time: now}
	}
	s.Phase = itemopsv1alpha1.OperationPhase(rec.Phase)
	s.Error = ""
	if rec.Phase == itemoperation.OperationPhaseFailed {
		s.Error = rec.Error
		if s.Error == "" {
			s.Error = "Velero recorded the operation Failed"
		}
	}
	if rec.NTotal > 0 || rec.NCompleted > 0 {
		s.NCompleted, s.NTotal, s.OperationUnits = max(rec.NCompleted, 0), max(rec.NTotal, 0), rec.OperationUnits
		s.Progress = progress.Format(s.NCompleted, s.NTotal, s.OperationUnits)
	}
	if rec.Description != "" {
		s.Description = rec.Description
	}
	if rec.Started != nil {
		s.Started = rec.Started.DeepCopy()
	}
	if rec.Updated != nil {
		s.Updated = rec.Updated.DeepCopy()
	}
	s.EstimatedCompletion = nil
}

// difference says how the end itemops saw (own) differs from Velero's
// record: the message and reason of DiffersFromVelero, or false when it
// does not. An operation itemops did not see end, and whose retry got no
// answer (its Progress failed too, or could not be made), does not differ:
// itemops saw nothing else.
func difference(rec *itemoperation.OperationStatus, own *itemopsv1alpha1.ItemOperationStatus, retried bool) (string, string, bool) {
	answered := own.Phase.IsTerminal() ||
		retried && hasReason(own, itemopsv1alpha1.ConditionProgressing, itemopsv1alpha1.ReasonPolling)
	if !answered || inVeleroTerms(own.Phase) == rec.Phase {
		return "", "", false
	}
	recorded := string(rec.Phase)
	if rec.Error != "" {
		recorded += " (" + rec.Error + ")"
	}
	who := "itemops' own Progress calls saw it"
	if retried {
		who = "a retry of Progress answered"
	}
	saw := string(own.Phase)
	switch {
	case own.Error != "":
		saw += " (" + own.Error + ")"
	case own.Progress != "":
		saw += " (" + own.Progress + ")"
	}
	reason := map[itemopsv1alpha1.OperationPhase]string{
		itemopsv1alpha1.OperationPhaseCompleted: itemopsv1alpha1.ReasonPolledCompleted,
		itemopsv1alpha1.OperationPhaseFailed:    itemopsv1alpha1.ReasonPolledFailed,
		itemopsv1alpha1.OperationPhaseCanceled:  itemopsv1alpha1.ReasonPolledCanceled,
	}[own.Phase]
	if reason == "" {
		reason = itemopsv1alpha1.ReasonPolledInProgress
	}
	return fmt.Sprintf("Velero recorded %s; %s %s", recorded, who, saw), reason, true
}

// recordChanged passes the updates that change Velero's record of the
// operation: the parent reconciler copied an end Velero recorded.
func recordChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetAnnotations()[itemopsv1alpha1.AnnotationRecordStatus] !=
			e.ObjectNew.GetAnnotations()[itemopsv1alpha1.AnnotationRecordStatus]
	}}
}
