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
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
	"github.com/itemops/itemops/internal/progress"
	"github.com/itemops/itemops/internal/why"
)

// Causes finds why an operation of Velero's data mover waits, from what the
// cluster says (*why.Gatherer is the real one).
type Causes interface {
	Cause(ctx context.Context, op *itemopsv1alpha1.ItemOperation, when why.When) (why.Finding, error)
}

var _ Causes = (*why.Gatherer)(nil)

// VeleroServer tells whether velero server runs (*why.ServerWatch is the
// real one).
type VeleroServer interface {
	Server(ctx context.Context) (*why.Server, error)
}

var _ VeleroServer = (*why.ServerWatch)(nil)

// causeReadTimeout bounds the reads of one operation's cause: a kind whose
// informer cannot sync (its permission missing) must not hold the poll.
const causeReadTimeout = 5 * time.Second

// Waiting events: a new cause of waiting, and the end of a wait.
const (
	EventWaiting   kube.EventReason = "Waiting"
	EventWaitEnded kube.EventReason = "WaitEnded"
)

// explain finds what an unfinished operation waits on and says it: the
// Waiting condition (set once a cause appears, False once it is gone) and
// waitingFor. A data movement of Velero's data mover is explained by what
// the cluster says of it; an operation whose cancel was requested waits on
// that (CancelPending); any operation whose progress stood still for the
// stall period (Stalled) and that nothing else explains waits on
// NoProgress, with the plugin's own description; one whose progress stood
// still for NotMovingAfter waits on velero server when it does not run
// (VeleroNotRunning), else on NotMoving, with what was checked. Nothing
// else claims it moves.
func (r *ItemOperationReconciler) explain(ctx context.Context, op *itemopsv1alpha1.ItemOperation, parent *parentState, now time.Time) {
	var cause *why.Cause
	var checked []string
	if r.Causes != nil && (op.IsDataMover() || op.IsMirror()) {
		deadline, _ := r.deadline(op, parent)
		cause, checked = r.dataMoverCause(ctx, op, why.When{Now: now, Deadline: deadline, CancelAt: cancelAt(op), VeleroRecords: r.veleroRecords(op)})
	}
	if cause == nil && op.Status.Phase == itemopsv1alpha1.OperationPhaseCanceling {
		reported := ""
		if c := meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionProgressing); c != nil && strings.HasPrefix(c.Message, pluginReported) {
			reported = c.Message
		}
		c := why.CancelPending(why.PendingCancel{Runner: why.RunnerOf(op), At: cancelAt(op), VeleroRecords: r.veleroRecords(op), Reported: reported})
		cause = &c
	}
	stalled := meta.IsStatusConditionTrue(op.Status.Conditions, itemopsv1alpha1.ConditionStalled)
	if since, still := r.standsStill(op, now); cause == nil && (still || stalled) {
		server := r.veleroServer(ctx)
		if cause = why.NotRunning(server, since); cause == nil && stalled {
			c := why.Stalled(why.RunnerOf(op), op.Status.Description, op.Status.LastProgressTime.Time)
			cause = &c
		}
		if cause == nil {
			if server != nil && checked == nil {
				checked = []string{why.RunnerOf(op).Progress(), server.Summary()}
			}
			c := why.NotMoving(why.RunnerOf(op), op.Status.Description, since, checked)
			cause = &c
		}
	}
	switch {
	case cause != nil:
		setCondition(op, itemopsv1alpha1.ConditionWaiting, metav1.ConditionTrue, cause.Reason, cause.Message(), now)
	case meta.IsStatusConditionTrue(op.Status.Conditions, itemopsv1alpha1.ConditionWaiting):
		setCondition(op, itemopsv1alpha1.ConditionWaiting, metav1.ConditionFalse, itemopsv1alpha1.ReasonNotWaiting,
			"nothing holds the operation any more", now)
	}
	op.Status.WaitingFor = waitingFor(&op.Status)
}

// waitingFor is the one word of why an unfinished operation does not move:
// its cause, else why its progress cannot be read.
func waitingFor(s *itemopsv1alpha1.ItemOperationStatus) string {
	if c := meta.FindStatusCondition(s.Conditions, itemopsv1alpha1.ConditionWaiting); c != nil && c.Status == metav1.ConditionTrue {
		return c.Reason
	}
	if c := meta.FindStatusCondition(s.Conditions, itemopsv1alpha1.ConditionProgressing); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason != itemopsv1alpha1.ReasonFinished {
		return c.Reason
	}
	return ""
}

// dataMoverCause reads the cause of a data movement, within
// causeReadTimeout, and what was checked. A read that fails explains
// nothing: the operation keeps the cause it had, and the error is logged
// once until it changes.
func (r *ItemOperationReconciler) dataMoverCause(ctx context.Context, op *itemopsv1alpha1.ItemOperation, when why.When) (*why.Cause, []string) {
	ctx, cancel := context.WithTimeout(ctx, causeReadTimeout)
	defer cancel()
	found, err := r.Causes.Cause(ctx, op, when)
	if err == nil {
		r.causeErrors.forget(op.Mover())
		return found.Cause, found.Checked
	}
	if r.causeErrors.first(op.Mover(), err) {
		ctrl.LoggerFrom(ctx).Error(err, "reading why the data movement waits (logged once until the error changes)")
	}
	if c := meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionWaiting); c != nil && c.Status == metav1.ConditionTrue {
		return &why.Cause{Reason: c.Reason, Evidence: c.Message}, nil
	}
	return nil, nil
}

// standsStill reports whether the operation's progress has stood still for
// NotMovingAfter, and since when: its last progress, or the end of its last
// wait, whichever came later (an operation just let go by what held it has
// not had its chance to move yet). Only progress read at this poll counts:
// one that cannot be read says why in its Progressing condition.
func (r *ItemOperationReconciler) standsStill(op *itemopsv1alpha1.ItemOperation, now time.Time) (time.Time, bool) {
	if op.Status.LastProgressTime == nil {
		return now, false
	}
	since := op.Status.LastProgressTime.Time
	if c := meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionWaiting); c != nil &&
		c.Status != metav1.ConditionTrue && c.LastTransitionTime.After(since) {
		since = c.LastTransitionTime.Time
	}
	read := meta.IsStatusConditionTrue(op.Status.Conditions, itemopsv1alpha1.ConditionProgressing)
	return since, read && r.NotMovingAfter > 0 && now.Sub(since) >= r.NotMovingAfter
}

// veleroServer is what Velero's Deployment says, or nil when unknown.
func (r *ItemOperationReconciler) veleroServer(ctx context.Context) *why.Server {
	if r.VeleroServer == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, causeReadTimeout)
	defer cancel()
	s, err := r.VeleroServer.Server(ctx)
	if err != nil {
		if r.causeErrors.first("velero-server", err) {
			ctrl.LoggerFrom(ctx).Error(err, "reading Velero's Deployment (logged once until the error changes)")
		}
		return nil
	}
	r.causeErrors.forget("velero-server")
	return s
}

// cancelAt is when itemops asked the plugin to cancel the operation, or zero.
func cancelAt(op *itemopsv1alpha1.ItemOperation) time.Time {
	if c := meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionCanceled); c != nil && c.Status == metav1.ConditionTrue {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// lastErrors remembers the last error of each source, so that a read that
// fails at every poll is logged once.
type lastErrors struct {
	mu   sync.Mutex
	last map[string]string
}

// first reports whether err is new for source.
func (l *lastErrors) first(source string, err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]string{}
	}
	if l.last[source] == err.Error() {
		return false
	}
	l.last[source] = err.Error()
	return true
}

func (l *lastErrors) forget(source string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, source)
}

// measureRate sets the operation's throughput from the readings of about
// the last minute, window, which it returns with this reading added.
func measureRate(op *itemopsv1alpha1.ItemOperation, window []progress.Sample, now time.Time) []progress.Sample {
	s := &op.Status
	if s.NCompleted <= 0 && len(window) == 0 {
		// Nothing moved yet: no rate to tell.
		s.Throughput, s.UnitsPerSecond = "", 0
		return nil
	}
	window = progress.Window(window, progress.Sample{At: measuredAt(s, now), Done: s.NCompleted}, progress.RateSpan)
	perSecond, ok := progress.Rate(window)
	if !ok {
		return window
	}
	s.Throughput = progress.FormatRate(perSecond, s.OperationUnits)
	s.UnitsPerSecond = int64(max(perSecond, 0) + 0.5)
	return window
}

// endWait clears what only an unfinished operation has: its cause and its rate.
func endWait(op *itemopsv1alpha1.ItemOperation, now time.Time) {
	op.Status.WaitingFor, op.Status.Throughput, op.Status.UnitsPerSecond = "", "", 0
	if meta.IsStatusConditionTrue(op.Status.Conditions, itemopsv1alpha1.ConditionWaiting) {
		setCondition(op, itemopsv1alpha1.ConditionWaiting, metav1.ConditionFalse, itemopsv1alpha1.ReasonFinished,
			"the operation is "+string(op.Status.Phase), now)
	}
}

// waitEvent reports a new cause of waiting, and the end of a wait, once
// each: at the write that records it.
func (r *ItemOperationReconciler) waitEvent(original, op *itemopsv1alpha1.ItemOperation) {
	was := meta.FindStatusCondition(original.Status.Conditions, itemopsv1alpha1.ConditionWaiting)
	now := meta.FindStatusCondition(op.Status.Conditions, itemopsv1alpha1.ConditionWaiting)
	waited := was != nil && was.Status == metav1.ConditionTrue
	switch {
	case now == nil:
	case now.Status == metav1.ConditionTrue && (!waited || was.Reason != now.Reason):
		kube.Emit(r.Recorder, op, corev1.EventTypeWarning, EventWaiting, fmt.Sprintf("%s: %s", now.Reason, now.Message))
	case now.Status != metav1.ConditionTrue && waited && !op.Status.Phase.IsTerminal():
		kube.Emit(r.Recorder, op, corev1.EventTypeNormal, EventWaitEnded, fmt.Sprintf("no longer waits on %s", was.Reason))
	}
}
