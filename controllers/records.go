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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// opRecord is one entry of a Backup's or Restore's operations file, whichever
// kind of parent it belongs to.
type opRecord struct {
	ParentUID          string
	Plugin             string
	OperationID        string
	Resource           velero.ResourceIdentifier
	PostOperationItems []velero.ResourceIdentifier
	Status             itemoperation.OperationStatus
}

func fromBackupOperations(ops []*itemoperation.BackupOperation) []opRecord {
	out := make([]opRecord, 0, len(ops))
	for _, op := range ops {
		if op == nil {
			continue
		}
		out = append(out, opRecord{ParentUID: op.Spec.BackupUID, Plugin: op.Spec.BackupItemAction, OperationID: op.Spec.OperationID,
			Resource: op.Spec.ResourceIdentifier, PostOperationItems: op.Spec.PostOperationItems, Status: op.Status})
	}
	return out
}

func toBackupOperations(backup *velerov1api.Backup, records []opRecord) []*itemoperation.BackupOperation {
	out := make([]*itemoperation.BackupOperation, 0, len(records))
	for _, r := range records {
		out = append(out, &itemoperation.BackupOperation{
			Spec: itemoperation.BackupOperationSpec{BackupName: backup.Name, BackupUID: r.ParentUID, BackupItemAction: r.Plugin,
				ResourceIdentifier: r.Resource, OperationID: r.OperationID, PostOperationItems: r.PostOperationItems},
			Status: r.Status,
		})
	}
	return out
}

func fromRestoreOperations(ops []*itemoperation.RestoreOperation) []opRecord {
	out := make([]opRecord, 0, len(ops))
	for _, op := range ops {
		if op == nil {
			continue
		}
		out = append(out, opRecord{ParentUID: op.Spec.RestoreUID, Plugin: op.Spec.RestoreItemAction, OperationID: op.Spec.OperationID,
			Resource: op.Spec.ResourceIdentifier, Status: op.Status})
	}
	return out
}

func toRestoreOperations(restore *velerov1api.Restore, records []opRecord) []*itemoperation.RestoreOperation {
	out := make([]*itemoperation.RestoreOperation, 0, len(records))
	for _, r := range records {
		out = append(out, &itemoperation.RestoreOperation{
			Spec: itemoperation.RestoreOperationSpec{RestoreName: restore.Name, RestoreUID: r.ParentUID, RestoreItemAction: r.Plugin,
				ResourceIdentifier: r.Resource, OperationID: r.OperationID},
			Status: r.Status,
		})
	}
	return out
}

// maxNameLength keeps operation names usable as label values too.
const maxNameLength = 63

// operationName is the deterministic name of the ItemOperation of one record:
// the parent's name, cut so the whole stays within 63 characters, and a hash
// of what makes the operation unique (parent UID, plugin, operation ID).
func operationName(parentName, parentUID, plugin, operationID string) string {
	sum := sha256.Sum256([]byte(parentUID + "\x00" + plugin + "\x00" + operationID))
	hash := hex.EncodeToString(sum[:])[:10]
	prefix := parentName
	if len(prefix) > maxNameLength-len(hash)-1 {
		prefix = prefix[:maxNameLength-len(hash)-1]
	}
	prefix = strings.TrimRight(prefix, "-.")
	if prefix == "" {
		prefix = "op"
	}
	return prefix + "-" + hash
}

// newItemOperation is the ItemOperation of record number index of parent.
// Velero's record of the status travels in an annotation, from which the
// ItemOperation reconciler seeds the status (the status subresource cannot
// be set on create), so the timeout clock and a terminal phase survive.
func newItemOperation(parent client.Object, gvk schema.GroupVersionKind, kind itemopsv1alpha1.ParentKind,
	pluginKind itemopsv1alpha1.PluginKind, index int, r opRecord) (*itemopsv1alpha1.ItemOperation, error) {
	status, err := json.Marshal(r.Status)
	if err != nil {
		return nil, fmt.Errorf("encoding the record's status: %w", err)
	}
	op := &itemopsv1alpha1.ItemOperation{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: parent.GetNamespace(),
			Name:      operationName(parent.GetName(), string(parent.GetUID()), r.Plugin, r.OperationID),
			Labels: map[string]string{
				itemopsv1alpha1.LabelParentKind: string(kind),
				itemopsv1alpha1.LabelParentName: itemopsv1alpha1.ParentNameLabelValue(parent.GetName()),
				itemopsv1alpha1.LabelParentUID:  string(parent.GetUID()),
			},
			Annotations: map[string]string{
				itemopsv1alpha1.AnnotationRecordIndex:  strconv.Itoa(index),
				itemopsv1alpha1.AnnotationRecordStatus: string(status),
			},
			// Not a controller reference and never blocking: Velero deletes
			// its Backups without waiting, and the garbage collector then
			// removes the operations, each cancelled first by its finalizer.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: parent.GetName(), UID: parent.GetUID(),
			}},
		},
		Spec: itemopsv1alpha1.ItemOperationSpec{
			Parent:      itemopsv1alpha1.ParentReference{Kind: kind, Name: parent.GetName(), UID: string(parent.GetUID())},
			Plugin:      itemopsv1alpha1.PluginReference{Kind: pluginKind, Name: r.Plugin},
			OperationID: r.OperationID,
			Resource:    resourceFromVelero(r.Resource),
		},
	}
	for _, item := range r.PostOperationItems {
		op.Spec.PostOperationItems = append(op.Spec.PostOperationItems, resourceFromVelero(item))
	}
	if r.Status.Phase != itemoperation.OperationPhaseCompleted && r.Status.Phase != itemoperation.OperationPhaseFailed {
		// Created with the finalizer it will need, rather than patched
		// with it: one API write less per operation.
		op.Finalizers = []string{itemopsv1alpha1.Finalizer}
	}
	return op, nil
}

// createOperation creates an ItemOperation that ingestion made. created is
// false when it exists already (an earlier reconcile made it and the cache
// has not seen it yet); refused is the API server's reason when it is
// invalid (nothing can follow it: the caller counts and reports it).
func createOperation(ctx context.Context, c client.Client, op *itemopsv1alpha1.ItemOperation) (created bool, refused, err error) {
	switch err := c.Create(ctx, op); {
	case err == nil:
		return true, nil, nil
	case apierrors.IsAlreadyExists(err):
		return false, nil, nil
	case apierrors.IsInvalid(err):
		return false, err, nil
	default:
		return false, nil, fmt.Errorf("creating ItemOperation %s: %w", op.Name, err)
	}
}

func resourceFromVelero(r velero.ResourceIdentifier) itemopsv1alpha1.ResourceIdentifier {
	return itemopsv1alpha1.ResourceIdentifier{Group: r.Group, Resource: r.Resource, Namespace: r.Namespace, Name: r.Name}
}

func resourceToVelero(r itemopsv1alpha1.ResourceIdentifier) velero.ResourceIdentifier {
	return velero.ResourceIdentifier{GroupResource: schema.GroupResource{Group: r.Group, Resource: r.Resource},
		Namespace: r.Namespace, Name: r.Name}
}

// recordStatus is Velero's record of the operation that the object was
// created from, if it was.
func recordStatus(op *itemopsv1alpha1.ItemOperation) (*itemoperation.OperationStatus, error) {
	raw, ok := op.Annotations[itemopsv1alpha1.AnnotationRecordStatus]
	if !ok {
		return nil, nil
	}
	status := &itemoperation.OperationStatus{}
	if err := json.Unmarshal([]byte(raw), status); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", itemopsv1alpha1.AnnotationRecordStatus, err)
	}
	return status, nil
}

// toRecord is what the operations file says of op once itemops has seen it
// through: Velero's record format knows no Canceled, so a canceled
// operation is Failed with its reason as the error, as Velero writes a
// timed-out one.
//
// An operation whose status is not written yet is as Velero recorded it:
// counted by its parent from that record (startingPhase), it is written
// back so, never as New over an end Velero recorded.
func toRecord(op *itemopsv1alpha1.ItemOperation) opRecord {
	r := opRecord{ParentUID: op.Spec.Parent.UID, Plugin: op.Spec.Plugin.Name, OperationID: op.Spec.OperationID,
		Resource: resourceToVelero(op.Spec.Resource)}
	for _, item := range op.Spec.PostOperationItems {
		r.PostOperationItems = append(r.PostOperationItems, resourceToVelero(item))
	}
	if op.Status.Created == nil {
		if rec, err := recordStatus(op); err == nil && rec != nil {
			r.Status = *rec
			return r
		}
	}
	s := op.Status
	phase := itemoperation.OperationPhase(s.Phase)
	switch s.Phase {
	case itemopsv1alpha1.OperationPhaseCanceled:
		phase = itemoperation.OperationPhaseFailed
	case itemopsv1alpha1.OperationPhaseCanceling:
		// Velero's records know no cancel under way: still running.
		phase = itemoperation.OperationPhaseInProgress
	case "":
		phase = itemoperation.OperationPhaseNew
	}
	r.Status = itemoperation.OperationStatus{Phase: phase, Error: s.Error, NCompleted: s.NCompleted, NTotal: s.NTotal,
		OperationUnits: s.OperationUnits, Description: s.Description, Created: s.Created, Started: s.Started, Updated: s.Updated}
	if phase == itemoperation.OperationPhaseFailed && r.Status.Error == "" {
		r.Status.Error = "the operation failed"
	}
	return r
}

// recordCount is how many records of the operations file op stands for.
func recordCount(op *itemopsv1alpha1.ItemOperation) int {
	// Nearly every operation stands for one record and has no annotation:
	// Atoi("") would allocate an error on every count of every parent.
	v, ok := op.Annotations[itemopsv1alpha1.AnnotationRecords]
	if !ok {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// recordCounts is how many records of the operations file ops stand for.
func recordCounts(ops []*itemopsv1alpha1.ItemOperation) int {
	n := 0
	for _, op := range ops {
		n += recordCount(op)
	}
	return n
}

// recordIndex is the position of op's record in the operations file.
func recordIndex(op *itemopsv1alpha1.ItemOperation) int {
	v, ok := op.Annotations[itemopsv1alpha1.AnnotationRecordIndex]
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return i
}
