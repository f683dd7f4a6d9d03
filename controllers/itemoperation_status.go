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
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vmware-tanzu/velero/pkg/itemoperation"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/metrics"
	"github.com/itemops/itemops/internal/plugin"
	"github.com/itemops/itemops/internal/progress"
)

// initialize fills what an operation has from the start: its phase and the
// time the timeout runs from (Velero's record, else the object's creation).
func (r *ItemOperationReconciler) initialize(op *itemopsv1alpha1.ItemOperation, now time.Time) {
	if op.Status.Created == nil {
		// Nothing written yet (the API server shows such an operation as New).
		seedFromRecord(op, now)
	}
	if op.Status.Phase == "" {
		op.Status.Phase = itemopsv1alpha1.OperationPhaseNew
	}
	if op.Status.Created == nil {
		created := op.CreationTimestamp
		if created.IsZero() {
			created = metav1.NewTime(now)
		}
		op.Status.Created = &created
	}
	if op.Status.LastProgressTime == nil {
		op.Status.LastProgressTime = op.Status.Created.DeepCopy()
	}
	op.Status.ObservedGeneration = op.Generation
}

// poll asks the plugin for progress and maps the answer onto the status.
func (r *ItemOperationReconciler) poll(ctx context.Context, op *itemopsv1alpha1.ItemOperation, parent *parentState, now time.Time) {
	log := ctrl.LoggerFrom(ctx)
	var p velero.OperationProgress
	target, err := r.pluginOperation(ctx, op, parent)
	if err == nil {
		start := r.Clock.Now()
		p, err = r.Plugins.Progress(ctx, target)
		metrics.ProgressCall(op.Spec.Plugin.Kind, op.Spec.Plugin.Name, callResult(err), r.Clock.Since(start))
	}
	switch {
	case err == nil, errors.Is(err, plugin.ErrOperationFailed):
		op.Status.PollFailures = 0
		r.applyProgress(op, p, now)
		if err != nil {
			op.Status.Error = errMessage(err)
			r.end(op, itemopsv1alpha1.OperationPhaseFailed, true, now)
			return
		}
		if p.Completed {
			r.end(op, itemopsv1alpha1.OperationPhaseCompleted, true, now)
			return
		}
		setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionTrue, itemopsv1alpha1.ReasonPolling,
			"progress is read from the plugin", now)
		r.checkStall(op, now)
	case errors.Is(err, plugin.ErrPluginNotFound):
		// Not the operation's fault: an installation problem that can be
		// fixed. It stays visible until fixed or until the timeout.
		setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionFalse, itemopsv1alpha1.ReasonPluginNotFound,
			err.Error(), now)
	case errors.Is(err, plugin.ErrBinaryChanged):
		// Refused, never run: someone replaced the binary. Not the
		// operation's fault either; visible until fixed or the timeout.
		setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionFalse, itemopsv1alpha1.ReasonPluginBinaryChanged,
			err.Error(), now)
	case errors.Is(err, errSnapshotLocation):
		// Like a missing plugin: fixed by the administrator, visible till then.
		setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionFalse, itemopsv1alpha1.ReasonSnapshotLocationUnavailable,
			err.Error(), now)
	case errors.As(err, new(*plugin.RestartPending)):
		// Not this operation's failure: another call made the process
		// exit, and the plugin was not called. Counting it would fail
		// every operation of a binary that one bad operation crashes;
		// the operation whose calls crash it is still counted.
		setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionFalse, itemopsv1alpha1.ReasonPluginRestarting,
			err.Error(), now)
	case errors.Is(err, plugin.ErrNotSupported), errors.Is(err, plugin.ErrInvalidOperationID):
		op.Status.Error = err.Error()
		r.end(op, itemopsv1alpha1.OperationPhaseFailed, false, now)
	default:
		op.Status.PollFailures++
		log.V(1).Info("reading progress failed", "failuresInARow", op.Status.PollFailures, "error", err.Error())
		reason, cause := itemopsv1alpha1.ReasonPollFailing, err.Error()
		if d, ok := plugin.Forbidden(err); ok {
			// Plugins run with itemops' identity: say which permission it
			// lacks, not just that a poll failed.
			reason = itemopsv1alpha1.ReasonPluginForbidden
			cause = fmt.Sprintf("plugin %s was refused by the API server: %s may not %s; grant it to itemops' ServiceAccount "+
				"(the chart's rbac.pluginRules or pluginClusterRules, config/rbac/velero_plugins_role.yaml); the plugin said: %v",
				op.Spec.Plugin.Name, d.User, d.Permission(), err)
			if d.Resource == "datauploads" && d.Namespace == "" {
				// Velero before v1.18 looks for DataUploads in every namespace.
				cause = "Velero's data mover before v1.18 lists DataUploads at the cluster scope: set the chart's builtinPlugins.image.tag " +
					"to your Velero's release (kustomize: config/velero-before-1.18). " + cause
			}
		}
		if int(op.Status.PollFailures) >= r.MaxProgressFailures {
			op.Status.Error = fmt.Sprintf("progress could not be read %d times in a row; last error: %s", op.Status.PollFailures, cause)
			r.end(op, itemopsv1alpha1.OperationPhaseFailed, false, now)
			return
		}
		setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionFalse, reason,
			fmt.Sprintf("%d of %d allowed failures in a row: %s", op.Status.PollFailures, r.MaxProgressFailures, cause), now)
	}
}

// maxClockSkew is how far ahead of itemops' clock a plugin's may be.
const maxClockSkew = time.Hour

// applyProgress copies what the plugin reported.
func (r *ItemOperationReconciler) applyProgress(op *itemopsv1alpha1.ItemOperation, p velero.OperationProgress, now time.Time) {
	s := &op.Status
	if p.NCompleted != s.NCompleted || s.LastProgressTime == nil {
		s.LastProgressTime = &metav1.Time{Time: now}
	}
	// Counts are clamped: the API refuses negative ones, and a plugin's bad
	// numbers must not stop the status from being written.
	s.NCompleted, s.NTotal = max(0, p.NCompleted), max(0, p.NTotal)
	s.OperationUnits, s.Description = p.OperationUnits, p.Description
	if !p.Started.IsZero() {
		s.Started = &metav1.Time{Time: p.Started}
	}
	if !p.Updated.IsZero() {
		s.Updated = &metav1.Time{Time: p.Updated}
	}
	s.Progress = progress.Format(s.NCompleted, s.NTotal, s.OperationUnits)
	s.EstimatedCompletion = nil
	// A plugin whose times are ahead of ours by more than any clock skew
	// gives no rate to go by.
	if s.Started != nil && !s.Started.After(now.Add(maxClockSkew)) && (s.Updated == nil || !s.Updated.After(now.Add(maxClockSkew))) {
		if eta, ok := progress.ETA(s.Started.Time, measuredAt(s, now), s.NCompleted, s.NTotal); ok {
			s.EstimatedCompletion = &metav1.Time{Time: eta}
		}
	}
	if s.Phase == itemopsv1alpha1.OperationPhaseNew && (!p.Started.IsZero() || p.NCompleted > 0) {
		s.Phase = itemopsv1alpha1.OperationPhaseInProgress
	}
}

// measuredAt is when the progress in s was read: the plugin's own time of
// the reading when it gives one, else now; the reconcile's start may be well
// before the call.
func measuredAt(s *itemopsv1alpha1.ItemOperationStatus, now time.Time) time.Time {
	if s.Updated != nil && s.Started != nil && s.Updated.After(s.Started.Time) {
		return s.Updated.Time
	}
	return now
}

// checkStall sets Stalled when progress has stood still for StallAfter.
func (r *ItemOperationReconciler) checkStall(op *itemopsv1alpha1.ItemOperation, now time.Time) {
	still := now.Sub(op.Status.LastProgressTime.Time)
	if still >= r.StallAfter {
		setCondition(op, itemopsv1alpha1.ConditionStalled, metav1.ConditionTrue, itemopsv1alpha1.ReasonNoProgress,
			fmt.Sprintf("progress has not moved for %s", still.Round(time.Second)), now)
		return
	}
	if meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionStalled) != nil {
		setCondition(op, itemopsv1alpha1.ConditionStalled, metav1.ConditionFalse, itemopsv1alpha1.ReasonAdvancing,
			"progress is moving", now)
	}
}

// finish ends the operation in a terminal phase.
func (r *ItemOperationReconciler) finish(op *itemopsv1alpha1.ItemOperation, phase itemopsv1alpha1.OperationPhase, now time.Time) {
	op.Status.Phase = phase
	op.Status.CompletionTimestamp = &metav1.Time{Time: now}
	op.Status.EstimatedCompletion = nil
	setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionFalse, itemopsv1alpha1.ReasonFinished,
		"the operation is "+string(phase), now)
	if meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionStalled) != nil {
		setCondition(op, itemopsv1alpha1.ConditionStalled, metav1.ConditionFalse, itemopsv1alpha1.ReasonFinished,
			"the operation is "+string(phase), now)
	}
}

func setCondition(op *itemopsv1alpha1.ItemOperation, kind string, status metav1.ConditionStatus, reason, message string, now time.Time) {
	meta.SetStatusCondition(&op.Status.Conditions, metav1.Condition{
		Type: kind, Status: status, Reason: reason, Message: message,
		ObservedGeneration: op.Generation, LastTransitionTime: metav1.NewTime(now),
	})
}

// seedFromRecord starts the status from what Velero recorded for an
// operation read from its operations file: the timeout clock, the progress
// and a phase the operation may already have finished in.
func seedFromRecord(op *itemopsv1alpha1.ItemOperation, now time.Time) {
	rec, err := recordStatus(op)
	if err != nil || rec == nil {
		return
	}
	s := &op.Status
	s.Phase = itemopsv1alpha1.OperationPhase(rec.Phase)
	switch rec.Phase {
	case itemoperation.OperationPhaseNew, itemoperation.OperationPhaseInProgress,
		itemoperation.OperationPhaseCompleted, itemoperation.OperationPhaseFailed:
	default:
		s.Phase = itemopsv1alpha1.OperationPhaseNew
	}
	s.Error, s.NCompleted, s.NTotal = rec.Error, max(rec.NCompleted, 0), max(rec.NTotal, 0)
	s.OperationUnits, s.Description = rec.OperationUnits, rec.Description
	s.Created, s.Started, s.Updated = rec.Created.DeepCopy(), rec.Started.DeepCopy(), rec.Updated.DeepCopy()
	if s.Phase.IsTerminal() {
		done := metav1.NewTime(now)
		if s.Updated != nil {
			done = *s.Updated.DeepCopy()
		}
		s.CompletionTimestamp = &done
	}
	if s.NTotal > 0 {
		s.Progress = progress.Format(s.NCompleted, s.NTotal, s.OperationUnits)
	}
}

// callResult is the result label of a plugin call's metrics.
func callResult(err error) string {
	switch {
	case err == nil:
		return metrics.ResultOK
	case errors.Is(err, errSnapshotLocation):
		return metrics.ResultLocation
	case errors.Is(err, plugin.ErrOperationFailed):
		return metrics.ResultOperationFailed
	case errors.Is(err, plugin.ErrPluginError):
		return metrics.ResultPluginError
	case errors.Is(err, plugin.ErrPluginNotFound):
		return metrics.ResultPluginNotFound
	case errors.Is(err, plugin.ErrBinaryChanged):
		return metrics.ResultBinaryChanged
	case errors.Is(err, plugin.ErrNotSupported):
		return metrics.ResultNotSupported
	case errors.Is(err, plugin.ErrInvalidOperationID):
		return metrics.ResultInvalidOperation
	}
	return metrics.ResultTransport
}

// finishedBeforeIngestion reports whether op was read from an operations
// file in which it had already finished: itemops did not see it end.
func finishedBeforeIngestion(op *itemopsv1alpha1.ItemOperation) bool {
	rec, err := recordStatus(op)
	return err == nil && rec != nil && recordEnded(rec.Phase)
}

// Bounds of the strings a plugin controls. A condition message longer than
// the API's 32 KiB, or a status beyond the request size limit, would make
// every status write of the operation fail and leave it stuck.
const (
	maxMessageBytes     = 32768
	maxDescriptionBytes = 4096
	maxUnitsBytes       = 256
)
