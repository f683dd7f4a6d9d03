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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
)

// parentState is what the operation needs to know about its Backup or Restore.
type parentState struct {
	// gone: deleted, or replaced by another object of the same name.
	gone    bool
	failed  bool
	backup  *velerov1api.Backup
	restore *velerov1api.Restore
	timeout *metav1.Duration
	// deletionRequested: a DeleteBackupRequest names the Backup.
	deletionRequested bool
}

// parent reads the operation's Backup or Restore.
func (r *ItemOperationReconciler) parent(ctx context.Context, op *itemopsv1alpha1.ItemOperation) (*parentState, error) {
	key := types.NamespacedName{Namespace: op.Namespace, Name: op.Spec.Parent.Name}
	state := &parentState{}
	// A new object for the client to read into; the cache's own is never
	// written to.
	fresh := func() client.Object {
		if op.Spec.Parent.Kind == itemopsv1alpha1.ParentKindRestore {
			state.restore = &velerov1api.Restore{}
			return state.restore
		}
		state.backup = &velerov1api.Backup{}
		return state.backup
	}
	// Read only, and passed on to the plugin read only: not copied out of
	// the cache, which every poll of every operation would otherwise do.
	var obj client.Object
	var found, usable bool
	var err error
	if op.Spec.Parent.Kind == itemopsv1alpha1.ParentKindRestore {
		state.restore, found, usable, err = kube.Stored[*velerov1api.Restore](r.Stores, key)
		obj = state.restore
	} else {
		state.backup, found, usable, err = kube.Stored[*velerov1api.Backup](r.Stores, key)
		obj = state.backup
	}
	switch {
	case err != nil:
	case usable && found && string(obj.GetUID()) == op.Spec.Parent.UID:
	case usable:
		found, obj = false, fresh()
	default:
		obj = fresh()
		found, err = readParent(ctx, r.Client, key, op.Spec.Parent.UID, obj, client.UnsafeDisableDeepCopy)
	}
	if err == nil && !found && r.APIReader != nil {
		// Cancel cannot be undone: before a missing parent cancels the
		// operation, the API server itself confirms it. The cache may
		// not have seen a parent created a moment before its operation.
		found, err = readParent(ctx, r.APIReader, key, op.Spec.Parent.UID, obj)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", op.Spec.Parent.Kind, key.Name, err)
	}
	if !found {
		state.gone = true
		return state, nil
	}
	if state.backup != nil {
		state.failed = state.backup.Status.Phase == velerov1api.BackupPhaseFailed
		state.deletionRequested = state.backup.Status.Phase == velerov1api.BackupPhaseDeleting
		if state.backup.Spec.ItemOperationTimeout.Duration > 0 {
			state.timeout = &state.backup.Spec.ItemOperationTimeout
		}
		if !state.deletionRequested {
			requested, err := r.deletionRequested(ctx, state.backup)
			if err != nil {
				return nil, err
			}
			state.deletionRequested = requested
		}
	} else {
		state.failed = state.restore.Status.Phase == velerov1api.RestorePhaseFailed
		if state.restore.Spec.ItemOperationTimeout.Duration > 0 {
			state.timeout = &state.restore.Spec.ItemOperationTimeout
		}
	}
	return state, nil
}

// readParent reads the parent named key into obj with reader, and reports
// whether it exists with the given UID.
func readParent(ctx context.Context, reader client.Reader, key types.NamespacedName, uid string, obj client.Object, opts ...client.GetOption) (bool, error) {
	if err := reader.Get(ctx, key, obj, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return string(obj.GetUID()) == uid, nil
}

// deletionRequested reports whether a DeleteBackupRequest made since the
// backup was created names it.
func (r *ItemOperationReconciler) deletionRequested(ctx context.Context, backup *velerov1api.Backup) (bool, error) {
	requests, usable, err := kube.StoredByIndex[*velerov1api.DeleteBackupRequest](r.Stores, storeIndexBackupName, backup.Name)
	if err != nil {
		return false, err
	}
	if !usable {
		list := &velerov1api.DeleteBackupRequestList{}
		if err := r.Client.List(ctx, list, client.InNamespace(backup.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			return false, fmt.Errorf("listing DeleteBackupRequests: %w", err)
		}
		for i := range list.Items {
			requests = append(requests, &list.Items[i])
		}
	}
	for _, dbr := range requests {
		if dbr.Namespace != backup.Namespace || dbr.Spec.BackupName != backup.Name || dbr.CreationTimestamp.Before(&backup.CreationTimestamp) {
			continue
		}
		if uid, ok := dbr.Labels[velerov1api.BackupUIDLabel]; ok && uid != string(backup.UID) {
			continue
		}
		// A processed request for a backup that still exists is one Velero
		// refused ("backup is still in progress"): the deletion was still
		// asked for, and cancelling lets the backup end so it can be deleted.
		return true, nil
	}
	return false, nil
}

// noDeadline is the deadline of an operation itemops never times out.
var noDeadline = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// timeout is the operation's own timeout, else its parent's, else the default.
func (r *ItemOperationReconciler) timeout(op *itemopsv1alpha1.ItemOperation, parent *parentState) time.Duration {
	if op.Spec.Timeout != nil {
		return op.Spec.Timeout.Duration
	}
	if parent != nil && parent.timeout != nil {
		return parent.timeout.Duration
	}
	return DefaultOperationTimeout
}

// deadline is when itemops cancels and fails the operation for its
// timeout, and the error it then gives. Where Velero times operations out
// itself (VeleroTimesOut), that is VeleroTimeoutGrace later, unless the
// ItemOperation sets a timeout of its own.
func (r *ItemOperationReconciler) deadline(op *itemopsv1alpha1.ItemOperation, parent *parentState) (time.Time, string) {
	if op.IsMirror() {
		// Velero's to time out (its --fs-backup-timeout, node-agent's
		// prepare timeout): a mirror never drives what it follows.
		return noDeadline, ""
	}
	limit := r.timeout(op, parent)
	why := fmt.Sprintf("the operation did not finish within its timeout of %s", limit)
	at := op.Status.Created.Add(limit)
	if r.VeleroTimesOut && op.Spec.Timeout == nil {
		return at.Add(VeleroTimeoutGrace), fmt.Sprintf("%s, and Velero had not recorded its end %s later", why, VeleroTimeoutGrace)
	}
	return at, why
}

// cancelReason says why the operation must be cancelled now, if it must.
// A parent gone or failed comes first: it ends the operation, where a
// request (spec.cancel, a deletion requested) waits for the outcome.
func cancelReason(op *itemopsv1alpha1.ItemOperation, parent *parentState) (kube.EventReason, string) {
	kind, name := op.Spec.Parent.Kind, op.Spec.Parent.Name
	switch {
	case parent.gone:
		return itemopsv1alpha1.ReasonParentDeleted, fmt.Sprintf("%s %s (uid %s) no longer exists", kind, name, op.Spec.Parent.UID)
	case parent.failed:
		return itemopsv1alpha1.ReasonParentFailed, fmt.Sprintf("%s %s failed", kind, name)
	case op.Spec.Cancel:
		return itemopsv1alpha1.ReasonCancelRequested, "spec.cancel was set"
	case parent.deletionRequested:
		return itemopsv1alpha1.ReasonBackupDeletionRequested, fmt.Sprintf("deletion of Backup %s was requested", name)
	}
	return "", ""
}

// awaitsOutcome reports whether a cancel for reason is a request whose
// outcome the operation waits for (Canceling): asked for by someone while
// the parent still runs. A parent gone or failed ends the operation at
// once: Velero has ended the parent, or nothing is left to record in.
func awaitsOutcome(reason kube.EventReason) bool {
	return reason == itemopsv1alpha1.ReasonCancelRequested || reason == itemopsv1alpha1.ReasonBackupDeletionRequested
}
