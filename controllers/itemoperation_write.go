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
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
	"github.com/itemops/itemops/internal/metrics"
)

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
