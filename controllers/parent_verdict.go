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

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/rollup"
	"github.com/itemops/itemops/internal/store"
)

// Velero records the end of an operation in two places: its operations
// controller uploads the operations file whenever an operation fails and
// again when the parent moves to Finalizing (updateBackupAndOperationsJSON
// in Velero's backup_operations_controller.go; restores alike), and it
// patches the parent's counters as operations end, after the upload. Where
// the counters say more than the ItemOperations show, the file is read
// again and every end Velero recorded that an ItemOperation does not show
// is copied into its record-status annotation, from which the ItemOperation
// reconciler makes its status Velero's (see itemoperation_verdict.go).

// verdictState is what a parent looked like when its file was last read
// for Velero's verdicts: it is read again only once the parent changed.
type verdictState struct {
	phase    rollup.Phase
	counters parentCounters
	errors   int
}

// postOperations reports whether Velero has finished with a parent's
// operations and uploaded their final records: Finalizing* and the ends
// it moves to from there.
func postOperations(phase rollup.Phase) bool {
	switch phase {
	case rollup.Finalizing, rollup.FinalizingPartiallyFailed, rollup.PartiallyFailed, "Completed":
		return true
	}
	return false
}

// verdictsDue reports whether Velero may have recorded ends of a parent's
// operations that its ItemOperations do not show: the parent's counters
// (Velero's, or in manage mode those Velero left before itemops took over)
// count more failures than the ItemOperations show, or, in observe mode,
// Velero is done with the operations and its counters differ from theirs,
// some operation has not ended, or some failed: Velero's words for a
// failure may not be those itemops' polls saw (an operation Velero timed
// out and cancelled answers the plugin's own error when itemops polls it
// first), and the counters cannot tell.
func verdictsDue(manage bool, phase rollup.Phase, recorded parentCounters, counts rollup.Counts) bool {
	switch {
	case rollup.Owned(phase):
		return recorded.Failed > counts.Failed
	case manage || !postOperations(phase):
		return false
	}
	return recorded.Completed != counts.Completed || recorded.Failed != counts.Failed || counts.Unfinished() > 0 || counts.Failed > 0
}

// followVerdicts reads the operations file when verdictsDue says so and
// copies every end Velero recorded that an ItemOperation does not show
// into the operation's record-status annotation. It returns how many it
// copied; the ItemOperations' own reconciles take them on from there.
func (r *parentReconciler[T]) followVerdicts(ctx context.Context, parent T, phase rollup.Phase, old parentCounters,
	ops []*itemopsv1alpha1.ItemOperation, invalid rollup.Counts) (int, error) {
	if r.opts.Store == nil {
		return 0, nil
	}
	counts := countOperations(ops)
	counts.Total += invalid.Total
	counts.Failed += invalid.Failed
	counts.Completed += invalid.Completed
	state := verdictState{phase: phase, counters: old, errors: r.kind.errors(parent)}
	if !verdictsDue(r.opts.Manage, phase, old, counts) {
		r.verdictsRead(parent, nil)
		return 0, nil
	}
	if r.verdictsReadAt(parent, state) {
		return 0, nil
	}
	records, err := r.kind.read(ctx, r.opts.Store, parent)
	if err != nil {
		if errors.Is(err, store.ErrMalformed) || errors.Is(err, store.ErrNoLocation) || errors.Is(err, store.ErrTooLarge) {
			// The ingestion reports what is wrong with the file; nothing
			// here will change until the parent does.
			r.verdictsRead(parent, &state)
			return 0, nil
		}
		return 0, fmt.Errorf("reading Velero's records of %s %s: %w", r.kind.kind, parent.GetName(), err)
	}
	byName := make(map[string]*itemopsv1alpha1.ItemOperation, len(ops))
	for _, op := range ops {
		byName[op.Name] = op
	}
	copied := 0
	for _, rec := range records {
		if !recordEnded(rec.Status.Phase) || rec.ParentUID != "" && rec.ParentUID != string(parent.GetUID()) {
			continue
		}
		op := byName[operationName(parent.GetName(), string(parent.GetUID()), rec.Plugin, rec.OperationID)]
		if op == nil || op.Status.Phase.IsTerminal() && shows(&op.Status, &rec.Status) {
			continue
		}
		ok, err := r.copyVerdict(ctx, op, rec.Status)
		if err != nil {
			return copied, err
		}
		if ok {
			copied++
		}
	}
	if copied > 0 {
		ctrl.LoggerFrom(ctx).Info("copied the ends Velero recorded", "operations", copied)
	}
	r.verdictsRead(parent, &state)
	return copied, nil
}

// copyVerdict puts Velero's record of an operation's end into its
// record-status annotation, unless it holds it already.
func (r *parentReconciler[T]) copyVerdict(ctx context.Context, op *itemopsv1alpha1.ItemOperation, rec itemoperation.OperationStatus) (bool, error) {
	rec.Error = bounded(rec.Error, maxMessageBytes)
	value, err := json.Marshal(rec)
	if err != nil {
		return false, fmt.Errorf("encoding Velero's record of %s: %w", op.Name, err)
	}
	if op.Annotations[itemopsv1alpha1.AnnotationRecordStatus] == string(value) {
		return false, nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{itemopsv1alpha1.AnnotationRecordStatus: string(value)}}})
	if err != nil {
		return false, err
	}
	// A new object: op is the cache's own and must not be written into.
	target := &itemopsv1alpha1.ItemOperation{}
	target.Namespace, target.Name = op.Namespace, op.Name
	if err := r.client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body)); err != nil {
		return false, client.IgnoreNotFound(fmt.Errorf("copying Velero's record to %s: %w", op.Name, err))
	}
	return true, nil
}

// verdictsReadAt reports whether the file was read for verdicts when the
// parent was as it is now.
func (r *parentReconciler[T]) verdictsReadAt(parent T, state verdictState) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.verdicts[parent.GetUID()]
	return ok && last == state
}

// verdictsRead remembers the parent's state at a read for verdicts; nil
// forgets it.
func (r *parentReconciler[T]) verdictsRead(parent T, state *verdictState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if state == nil {
		delete(r.verdicts, parent.GetUID())
		return
	}
	if r.verdicts == nil {
		r.verdicts = map[types.UID]verdictState{}
	}
	r.verdicts[parent.GetUID()] = *state
}
