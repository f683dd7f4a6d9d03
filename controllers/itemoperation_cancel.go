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
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
	"github.com/itemops/itemops/internal/metrics"
	"github.com/itemops/itemops/internal/plugin"
)

// reconcileDelete cancels an unfinished operation before letting it go.
func (r *ItemOperationReconciler) reconcileDelete(ctx context.Context, op *itemopsv1alpha1.ItemOperation) error {
	r.polled.Delete(client.ObjectKeyFromObject(op))
	if !controllerutil.ContainsFinalizer(op, itemopsv1alpha1.Finalizer) {
		return nil
	}
	if !op.Status.Phase.IsTerminal() {
		parent, err := r.parent(ctx, op)
		if err != nil {
			return err
		}
		original := op.DeepCopy()
		now := r.Clock.Now()
		r.initialize(op, now)
		var reason kube.EventReason = itemopsv1alpha1.ReasonObjectDeleted
		message := "the ItemOperation was deleted before the operation finished"
		if parent.gone {
			reason, message = cancelReason(op, parent)
		}
		if err := r.cancel(ctx, op, parent, reason, message, itemopsv1alpha1.OperationPhaseCanceled, now); err != nil {
			var retry *cancelRetry
			if errors.Is(err, errStale) || errors.As(err, &retry) {
				return err // retried on a fresh copy, or once the plugin is back
			}
			return client.IgnoreNotFound(err)
		}
		if err := r.writeStatus(ctx, original, op, now); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return r.removeFinalizer(ctx, op)
}

func (r *ItemOperationReconciler) removeFinalizer(ctx context.Context, op *itemopsv1alpha1.ItemOperation) error {
	if !controllerutil.ContainsFinalizer(op, itemopsv1alpha1.Finalizer) {
		return nil
	}
	// The merge patch MergeFrom would compute, without encoding the whole
	// object twice to find it: a list in a merge patch replaces the list.
	controllerutil.RemoveFinalizer(op, itemopsv1alpha1.Finalizer)
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": op.Finalizers}})
	if err != nil {
		return fmt.Errorf("removing the finalizer: %w", err)
	}
	if err := r.patch(ctx, op, client.RawPatch(types.MergePatchType, body), false); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer: %w", err)
	}
	return nil
}

// maxCancelAttempts bounds the Cancel calls made for one operation when the
// plugin cannot be reached; they are a second apart, then two, four, eight.
const maxCancelAttempts = 5

// cancelRetry: Cancel could not reach the plugin (its process died during
// the call, say) and is tried again after a wait, once the process is back.
type cancelRetry struct {
	after time.Duration
	err   error
}

func (e *cancelRetry) Error() string {
	return fmt.Sprintf("cancel will be tried again in %s: %v", e.after, e.err)
}

func (e *cancelRetry) Unwrap() error { return e.err }

// cancel calls the plugin's Cancel once per operation, records the answer in
// the Canceled condition and an Event, and ends the operation in phase.
// Cancel has an effect outside the API server, so it is only called on a copy
// that is the API server's latest: a reconcile woken by several events at
// once must not cancel again on a stale cache. A Cancel that did not reach
// the plugin is tried again, up to maxCancelAttempts times: an operation
// is not recorded Canceled when the plugin was never told.
func (r *ItemOperationReconciler) cancel(ctx context.Context, op *itemopsv1alpha1.ItemOperation, parent *parentState,
	reason kube.EventReason, why string, phase itemopsv1alpha1.OperationPhase, now time.Time) error {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	live := &itemopsv1alpha1.ItemOperation{}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(op), live); err != nil {
		return fmt.Errorf("reading the operation before cancelling it: %w", err)
	}
	if live.ResourceVersion != op.ResourceVersion {
		return errStale
	}
	if op.Status.Phase == itemopsv1alpha1.OperationPhaseCanceling {
		// The plugin was asked already: the operation now ends for this
		// reason, without a second request.
		message := why + "; the plugin had been asked to cancel it"
		if op.IsMirror() {
			message = why + "; its spec.cancel had been set"
		}
		ctrl.LoggerFrom(ctx).Info("ending a canceling operation", "reason", string(reason), "message", message)
		kube.Emit(r.Recorder, op, corev1.EventTypeWarning, reason, message)
		setCondition(op, itemopsv1alpha1.ConditionCanceled, metav1.ConditionTrue, string(reason), message, now)
		op.Status.Error = why
		r.finish(op, phase, now)
		return nil
	}
	if op.IsMirror() {
		answer, err := r.cancelMirror(ctx, op)
		if err != nil {
			return err
		}
		r.recordCancel(ctx, op, reason, why, answer, phase, now)
		return nil
	}
	answer := "the plugin accepted the cancel request"
	target, err := r.pluginOperation(ctx, op, parent)
	if err == nil {
		err = r.Plugins.Cancel(ctx, target)
	}
	metrics.CancelCall(op.Spec.Plugin.Kind, op.Spec.Plugin.Name, string(reason), callResult(err))
	if at, ok := plugin.RestartAt(err); ok {
		// The plugin was not called: its process waits out a restart
		// backoff. Not an attempt; the next comes with the process.
		return &cancelRetry{after: max(at.Sub(r.Clock.Now()), 10*time.Millisecond), err: err}
	}
	key := client.ObjectKeyFromObject(op)
	tries := 1
	if v, ok := r.cancelTries.Load(key); ok {
		tries += v.(int)
	}
	if plugin.IsUnreachable(err) && tries < maxCancelAttempts {
		r.cancelTries.Store(key, tries)
		after := time.Second << (tries - 1)
		ctrl.LoggerFrom(ctx).Info("cancel did not reach the plugin; trying again", "attempt", tries,
			"of", maxCancelAttempts, "after", after.String(), "error", err.Error())
		return &cancelRetry{after: after, err: err}
	}
	r.cancelTries.Delete(key)
	switch {
	case errors.Is(err, errSnapshotLocation):
		answer = "the plugin could not be asked to cancel it: " + err.Error()
	case plugin.IsUnreachable(err):
		answer = fmt.Sprintf("the plugin could not be reached in %d attempts: %v", tries, err)
	case err != nil:
		answer = "the plugin could not cancel it: " + err.Error()
	}
	r.recordCancel(ctx, op, reason, why, answer, phase, now)
	return nil
}

// recordCancel records a cancel asked for reason (why), and its answer: in
// the Canceled condition and an Event, the operation then Canceling
// (phase) or ended in phase.
func (r *ItemOperationReconciler) recordCancel(ctx context.Context, op *itemopsv1alpha1.ItemOperation,
	reason kube.EventReason, why, answer string, phase itemopsv1alpha1.OperationPhase, now time.Time) {
	message := why + "; " + answer
	if phase == itemopsv1alpha1.OperationPhaseCanceling {
		message += "; " + r.outcomeFrom(op)
		ctrl.LoggerFrom(ctx).Info("asked the plugin to cancel the operation", "reason", string(reason), "message", message)
		kube.Emit(r.Recorder, op, corev1.EventTypeWarning, reason, "Cancel: "+message)
		setCondition(op, itemopsv1alpha1.ConditionCanceled, metav1.ConditionTrue, string(reason), message, now)
		op.Status.Phase = phase
		return
	}
	ctrl.LoggerFrom(ctx).Info("cancelled operation", "reason", string(reason), "message", message)
	kube.Emit(r.Recorder, op, corev1.EventTypeWarning, reason, "Cancel: "+message)
	setCondition(op, itemopsv1alpha1.ConditionCanceled, metav1.ConditionTrue, string(reason), message, now)
	op.Status.Error = why
	r.finish(op, phase, now)
}

// veleroRecords reports whether Velero records op's end: a mirror's, always;
// in observe mode (VeleroRecordsEnds), an operation read from Velero's
// operations file.
// Velero does not follow the snapshots of VolumeSnapshotters (itemops
// follows them from its records of the Backup's volume snapshots), nor
// operations it has no record of.
func (r *ItemOperationReconciler) veleroRecords(op *itemopsv1alpha1.ItemOperation) bool {
	if op.IsMirror() {
		// The mirrored object is Velero's record, in every mode.
		return true
	}
	_, recorded := op.Annotations[itemopsv1alpha1.AnnotationRecordStatus]
	return r.VeleroRecordsEnds && recorded && op.Spec.Plugin.Kind != itemopsv1alpha1.PluginKindVolumeSnapshotter
}

// outcomeFrom says who records the end of an operation whose cancel was
// requested.
func (r *ItemOperationReconciler) outcomeFrom(op *itemopsv1alpha1.ItemOperation) string {
	if r.veleroRecords(op) {
		return "it ends as Velero records it"
	}
	return "it ends as the plugin's progress reports it"
}

// pluginReported begins the Progressing message of a Canceling operation
// whose plugin reported its end before Velero recorded it.
const pluginReported = "the plugin reports the operation "

// end ends the operation in phase, as its plugin's Progress reported it
// (reported) or as itemops judged it. An operation whose cancel was
// requested is not ended by what itemops read where Velero records the
// ends (observe mode): it stays Canceling, the plugin's answer in its
// Progressing condition, until Velero's record comes. Elsewhere a failure
// the plugin reports for it is its cancel's outcome: Canceled.
func (r *ItemOperationReconciler) end(op *itemopsv1alpha1.ItemOperation, phase itemopsv1alpha1.OperationPhase, reported bool, now time.Time) {
	if op.Status.Phase != itemopsv1alpha1.OperationPhaseCanceling {
		r.finish(op, phase, now)
		return
	}
	if r.veleroRecords(op) {
		said := pluginReported + string(phase)
		if op.Status.Error != "" {
			said += ": " + op.Status.Error
		}
		op.Status.Error = ""
		setCondition(op, itemopsv1alpha1.ConditionProgressing, metav1.ConditionTrue, itemopsv1alpha1.ReasonPolling,
			said+"; the cancel's outcome is Velero's to record", now)
		return
	}
	if reported && phase == itemopsv1alpha1.OperationPhaseFailed {
		phase = itemopsv1alpha1.OperationPhaseCanceled
	}
	r.finish(op, phase, now)
}
