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
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vmware-tanzu/velero/pkg/itemoperation"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
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

// writeStatus patches the status when it really changed: at once for a new
// phase, condition, error or failure count; for moving progress alone at
// most once per ProgressUpdateInterval.
//
// Writes that only tell how far a running operation got (its progress, and
// its first move to InProgress) share the StatusWrites budget and are
// skipped when it is spent: the plugin stays the source of truth and the
// next poll reads it again, so polls never wait for the API server. Every
// other change (an end, an error, a failure count, a condition that needs
// attention) is always written.
func (r *ItemOperationReconciler) writeStatus(ctx context.Context, original, op *itemopsv1alpha1.ItemOperation, now time.Time) error {
	if op.Status.Phase.IsTerminal() {
		endWait(op, now)
	}
	boundStatus(&op.Status)
	significant := significantChange(&original.Status, &op.Status)
	switch {
	case original.Status.Created == nil && quiet(&op.Status):
		// Nothing written yet, and nothing to say but that the operation
		// runs: its first status is a progress write, once a progress
		// interval after itemops began to watch it. An operation that ends
		// sooner gets its end as its only status write (see
		// docs/controllers.md, "API writes").
		if now.Sub(watchedSince(op)) < r.ProgressUpdateInterval {
			return nil
		}
		significant = false
	case !significant:
		if equality.Semantic.DeepEqual(progressOnly(&original.Status), progressOnly(&op.Status)) {
			return nil
		}
		if last := original.Status.LastPolled; last != nil && now.Sub(last.Time) < r.ProgressUpdateInterval {
			return nil
		}
	}
	if (!significant || onlyRunning(&original.Status, &op.Status)) && r.StatusWrites != nil && !r.StatusWrites.Allow() {
		ctrl.LoggerFrom(ctx).V(1).Info("progress not written: the status write budget is spent")
		return nil
	}
	op.Status.LastPolled = &metav1.Time{Time: now}
	// A phase change is written only over the status it was decided from:
	// a reconcile of a stale cached copy (one that has not seen the
	// operation finish yet) must not finish it a second time, with a second
	// Event and a second count in the metrics.
	patch := statusPatch(original, original.Status.Phase != op.Status.Phase)
	if err := r.patch(ctx, op, patch, true); err != nil {
		if apierrors.IsConflict(err) {
			ctrl.LoggerFrom(ctx).V(1).Info("status changed meanwhile; the newer copy is reconciled next")
			return errStale
		}
		return fmt.Errorf("writing status: %w", err)
	}
	if original.Status.Phase != op.Status.Phase {
		r.phaseEvent(op)
		if op.Status.Phase.IsTerminal() && !(original.Status.Created == nil && finishedBeforeIngestion(op)) {
			metrics.OperationFinished(op)
		}
	}
	if changedTo(original, op, itemopsv1alpha1.ConditionStalled, metav1.ConditionTrue) {
		c := meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionStalled)
		kube.Emit(r.Recorder, op, corev1.EventTypeWarning, "Stalled", c.Message)
	}
	r.waitEvent(original, op)
	if changedTo(original, op, itemopsv1alpha1.ConditionDiffersFromVelero, metav1.ConditionTrue) {
		c := meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionDiffersFromVelero)
		kube.Emit(r.Recorder, op, corev1.EventTypeWarning, itemopsv1alpha1.ConditionDiffersFromVelero, c.Message)
	}
	if c := meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionProgressing); c != nil &&
		!hasReason(&original.Status, itemopsv1alpha1.ConditionProgressing, c.Reason) {
		if reason, ok := installationProblems[c.Reason]; ok {
			kube.Emit(r.Recorder, op, corev1.EventTypeWarning, reason, c.Message)
		}
	}
	return nil
}

// installationProblems are the Progressing reasons that an administrator
// fixes (a plugin to install, a permission to grant, a location to restore):
// each gets a Warning Event of the same reason when it appears.
var installationProblems = map[string]kube.EventReason{
	itemopsv1alpha1.ReasonPluginNotFound:              itemopsv1alpha1.ReasonPluginNotFound,
	itemopsv1alpha1.ReasonSnapshotLocationUnavailable: itemopsv1alpha1.ReasonSnapshotLocationUnavailable,
	itemopsv1alpha1.ReasonPluginForbidden:             itemopsv1alpha1.ReasonPluginForbidden,
	itemopsv1alpha1.ReasonPluginBinaryChanged:         itemopsv1alpha1.ReasonPluginBinaryChanged,
}

// statusPatch is the merge patch from original's status to an
// ItemOperation's (kube.StatusPatch); with lock, refused when the operation
// changed meanwhile.
func statusPatch(original *itemopsv1alpha1.ItemOperation, lock bool) kube.StatusPatch[*itemopsv1alpha1.ItemOperation] {
	return kube.StatusPatch[*itemopsv1alpha1.ItemOperation]{Original: original, Lock: lock,
		Status: func(op *itemopsv1alpha1.ItemOperation) any { return &op.Status }}
}

// phaseEvent reports the ends that need a person: a failure or a cancel.
// An operation that starts or completes gets no Event: the phase in its
// status says so, the parent's PhaseChanged Event sums them up, and an
// Event per operation would be two API writes more for each (see
// docs/controllers.md).
func (r *ItemOperationReconciler) phaseEvent(op *itemopsv1alpha1.ItemOperation) {
	switch op.Status.Phase {
	case itemopsv1alpha1.OperationPhaseFailed:
		kube.Emit(r.Recorder, op, corev1.EventTypeWarning, "Failed", op.Status.Error)
	case itemopsv1alpha1.OperationPhaseCanceled:
		kube.Emit(r.Recorder, op, corev1.EventTypeWarning, "Canceled", op.Status.Error)
	}
}

// significantChange reports a change worth a write at once.
func significantChange(before, after *itemopsv1alpha1.ItemOperationStatus) bool {
	if before.Phase != after.Phase || before.Error != after.Error || before.PollFailures != after.PollFailures ||
		before.WaitingFor != after.WaitingFor ||
		before.ObservedGeneration != after.ObservedGeneration || before.Created == nil {
		return true
	}
	if len(before.Conditions) != len(after.Conditions) {
		return true
	}
	for _, c := range after.Conditions {
		old := meta.FindStatusCondition(before.Conditions, c.Type)
		if old == nil || old.Status != c.Status || old.Reason != c.Reason {
			return true
		}
		// The evidence of a wait is what a user reads: new evidence for
		// the same cause (a cancel node-agent has now seen) is written.
		// Its messages name times, not durations, so they do not change
		// at every poll.
		if c.Type == itemopsv1alpha1.ConditionWaiting && c.Status == metav1.ConditionTrue && old.Message != c.Message {
			return true
		}
	}
	return false
}

// onlyRunning reports whether the only significant change is that a new or
// running operation is seen running: its first InProgress, its Progressing
// condition, and the status fields initialised with it.
func onlyRunning(before, after *itemopsv1alpha1.ItemOperationStatus) bool {
	if after.Phase != itemopsv1alpha1.OperationPhaseInProgress && after.Phase != itemopsv1alpha1.OperationPhaseNew {
		return false
	}
	if before.Phase != after.Phase && before.Phase != itemopsv1alpha1.OperationPhaseNew && before.Phase != "" {
		return false
	}
	if before.Error != after.Error || before.PollFailures != after.PollFailures {
		return false
	}
	for _, c := range after.Conditions {
		old := meta.FindStatusCondition(before.Conditions, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason {
			continue
		}
		if c.Type != itemopsv1alpha1.ConditionProgressing || c.Reason != itemopsv1alpha1.ReasonPolling {
			return false
		}
	}
	return len(before.Conditions) <= len(after.Conditions)
}

// quiet reports whether a status says only that the operation is new or
// running: no error, no failed poll, no condition but Progressing=True/Polling.
func quiet(s *itemopsv1alpha1.ItemOperationStatus) bool {
	return onlyRunning(&itemopsv1alpha1.ItemOperationStatus{}, s)
}

// watchedSince is when itemops began to watch an operation: its object's
// creation (Velero's record may be far older).
func watchedSince(op *itemopsv1alpha1.ItemOperation) time.Time {
	if !op.CreationTimestamp.IsZero() {
		return op.CreationTimestamp.Time
	}
	return op.Status.Created.Time
}

// progressOnly is the part of the status that moves on every poll.
func progressOnly(s *itemopsv1alpha1.ItemOperationStatus) itemopsv1alpha1.ItemOperationStatus {
	return itemopsv1alpha1.ItemOperationStatus{
		NCompleted: s.NCompleted, NTotal: s.NTotal, OperationUnits: s.OperationUnits, Description: s.Description,
		Started: s.Started, Updated: s.Updated, Progress: s.Progress, EstimatedCompletion: s.EstimatedCompletion,
		LastProgressTime: s.LastProgressTime, Throughput: s.Throughput, UnitsPerSecond: s.UnitsPerSecond,
	}
}

func changedTo(before, after *itemopsv1alpha1.ItemOperation, kind string, status metav1.ConditionStatus) bool {
	now := meta.FindStatusCondition(after.Status.Conditions, kind)
	was := meta.FindStatusCondition(before.Status.Conditions, kind)
	return now != nil && now.Status == status && (was == nil || was.Status != status)
}

// hasReason reports whether a status has the condition kind with reason.
func hasReason(s *itemopsv1alpha1.ItemOperationStatus, kind, reason string) bool {
	c := meta.FindStatusCondition(s.Conditions, kind)
	return c != nil && c.Reason == reason
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

// boundStatus cuts what a plugin reported to lengths the API accepts.
func boundStatus(s *itemopsv1alpha1.ItemOperationStatus) {
	s.Error = bounded(s.Error, maxMessageBytes)
	s.Description = bounded(s.Description, maxDescriptionBytes)
	s.OperationUnits = bounded(s.OperationUnits, maxUnitsBytes)
	for i := range s.Conditions {
		s.Conditions[i].Message = bounded(s.Conditions[i].Message, maxMessageBytes)
	}
}

// bounded cuts s to at most n bytes of valid UTF-8, marking the cut with "…".
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := s[:n-len(mark)]
	// Drop a rune the cut split (at most three bytes of it).
	for i := 0; i < utf8.UTFMax-1 && cut != ""; i++ {
		if r, size := utf8.DecodeLastRuneInString(cut); r != utf8.RuneError || size > 1 {
			break
		}
		cut = cut[:len(cut)-1]
	}
	return cut + mark
}
