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
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
	"github.com/itemops/itemops/internal/rollup"
	"github.com/itemops/itemops/internal/store"
)

// known is what a reconcile knows of a parent's operations.
type known struct {
	// ops are the parent's ItemOperations.
	ops []*itemopsv1alpha1.ItemOperation
	// expected is how many operations the parent waits for.
	expected int
	// invalid are records that cannot become ItemOperations; they count as failed.
	invalid rollup.Counts
	// readErr is why the operations file could not be read, or why
	// operations Velero attempted are still missing.
	readErr error
	// recheck: operations made from the file are not listed by the cache
	// yet; reconcile again after this long if nothing else does.
	recheck time.Duration
}

// knownOperations lists the parent's ItemOperations and, while fewer exist
// than Velero attempted, reads the operations file and creates the missing
// ones. A parent whose operations are all known costs no object storage request.
func (r *parentReconciler[T]) knownOperations(ctx context.Context, parent T, old parentCounters) (known, error) {
	ops, err := listOperations(ctx, r.client, r.opts.Stores, parent.GetNamespace(), parent.GetUID())
	if err != nil {
		return known{}, err
	}
	k := known{ops: ops, expected: old.Attempted}
	if r.opts.Store == nil || recordCounts(ops) >= max(old.Attempted, 1) {
		// Everything made from the last reading is listed: an operation
		// that disappears from now on is read from the file again at once.
		r.settled(parent)
		return k, nil
	}
	if last, pending, ok := r.lastIngestion(parent, ops); ok {
		// The file was read a moment ago and its operations created: the
		// cache has not caught up yet, and every creation it sees wakes
		// this parent again. Reading the file and creating again on each
		// of those events would cost an object storage read and a create
		// per record per event.
		k.ops, k.invalid = mergeOperations(ops, pending), last.invalid
		k.expected = max(old.Attempted, last.expected)
		k.recheck = ingestSettle // in case one never shows up
		return k, nil
	}
	records, err := r.kind.read(ctx, r.opts.Store, parent)
	if err != nil {
		k.readErr = err
		return k, nil
	}
	ingested, err := r.ingest(ctx, parent, records, ops)
	if err != nil {
		return known{}, err
	}
	r.ingested(parent, ingested)
	k.invalid = ingested.invalid
	k.expected = max(old.Attempted, ingested.expected)
	k.ops = mergeOperations(ops, ingested.made)
	if n := recordCounts(k.ops) + k.invalid.Total; n < old.Attempted {
		// Velero uploads the file before it records the attempts, so
		// records were lost: wait for them until no operation could
		// still be running, then give up.
		k.readErr = fmt.Errorf("%w: Velero attempted %d plugin operations, %d are known, the operations file lists %d",
			errMissingOperations, old.Attempted, n, ingested.expected)
	}
	return k, nil
}

// retryable is err when a later attempt may succeed, so the workqueue backs
// off and retries; a location or file that is wrong waits for a change instead.
func retryable(err error) error {
	if err == nil || errors.Is(err, store.ErrNoLocation) || errors.Is(err, store.ErrMalformed) || errors.Is(err, store.ErrTooLarge) {
		return nil
	}
	return err
}

// ingestResult is what reading the operations file found.
type ingestResult struct {
	// expected is the number of records of this parent.
	expected int
	// invalid are records that cannot become ItemOperations; they count as failed.
	invalid rollup.Counts
	// made are the ItemOperations of the records that the cache did not
	// list: created now, or found to exist already.
	made []*itemopsv1alpha1.ItemOperation
}

// ingest creates the ItemOperation of every record that has none yet.
// Names are deterministic, so a second read or a restart creates nothing twice.
func (r *parentReconciler[T]) ingest(ctx context.Context, parent T, records []opRecord, existing []*itemopsv1alpha1.ItemOperation) (ingestResult, error) {
	have := map[string]bool{}
	for _, op := range existing {
		have[op.Name] = true
	}
	// A record repeated in the file (the same plugin and operation ID) is
	// one operation: one ItemOperation follows it and counts for each record.
	names := make([]string, len(records))
	repeats, first := map[string]int{}, map[string]int{}
	for i, rec := range records {
		if rec.ParentUID != "" && rec.ParentUID != string(parent.GetUID()) {
			kube.Emitf(r.recorder, parent, corev1.EventTypeWarning, reasonForeignRecord,
				"record %d of the operations file belongs to %s UID %s, not this one; ignored", i, r.kind.kind, rec.ParentUID)
			continue
		}
		names[i] = operationName(parent.GetName(), string(parent.GetUID()), rec.Plugin, rec.OperationID)
		repeats[names[i]]++
		if j, seen := first[names[i]]; seen {
			kube.Emitf(r.recorder, parent, corev1.EventTypeWarning, reasonDuplicateRecord,
				"record %d of the operations file repeats record %d (operation %q of plugin %q); one ItemOperation follows both and counts for each",
				i, j, rec.OperationID, rec.Plugin)
			continue
		}
		first[names[i]] = i
	}
	result := ingestResult{}
	created := 0
	for i, rec := range records {
		if names[i] == "" {
			continue
		}
		result.expected++
		if first[names[i]] != i {
			continue
		}
		op, err := newItemOperation(parent, r.kind.gvk, r.kind.kind, r.kind.pluginKind, i, rec)
		if err != nil {
			return ingestResult{}, err
		}
		n := repeats[op.Name]
		if n > 1 {
			op.Annotations[itemopsv1alpha1.AnnotationRecords] = strconv.Itoa(n)
		}
		if have[op.Name] {
			continue
		}
		made, refused, err := createOperation(ctx, r.client, op)
		if err != nil {
			return ingestResult{}, err
		}
		if refused != nil {
			// Nothing can poll it: count it failed rather than wait for it forever.
			kube.Emitf(r.recorder, parent, corev1.EventTypeWarning, reasonInvalidRecord,
				"operation %q of plugin %q cannot be tracked and counts as failed: %v", rec.OperationID, rec.Plugin, refused)
			result.invalid.Total += n
			if rec.Status.Phase != itemoperation.OperationPhaseCompleted {
				result.invalid.Failed += n
			} else {
				result.invalid.Completed += n
			}
			continue
		}
		result.made = append(result.made, op)
		if made {
			created++
		}
	}
	if created > 0 {
		ctrl.LoggerFrom(ctx).Info("ingested operations", "created", created, "records", len(records))
		kube.Emitf(r.recorder, parent, corev1.EventTypeNormal, reasonIngested, "created %d ItemOperations from the %d records of the operations file", created, len(records))
	}
	return result, nil
}
