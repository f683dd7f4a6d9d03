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
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/rollup"
	"github.com/itemops/itemops/internal/store"
)

// errNothingToWrite: no record of the file has an ItemOperation; the file
// is left as it is.
var errNothingToWrite = errors.New("no record of the operations file has an ItemOperation")

// writeBack uploads the operations file with the status of every
// ItemOperation. Records with no ItemOperation are kept as Velero wrote them.
// Operations that are not in the file are added only when final: before
// the end, while some Velero attempted may still be missing, an added
// record would be read back as one more operation.
func (r *parentReconciler[T]) writeBack(ctx context.Context, parent T, ops []*itemopsv1alpha1.ItemOperation, final bool) error {
	if r.opts.Store == nil {
		return nil
	}
	start := time.Now()
	written := 0
	err := r.kind.update(ctx, r.opts.Store, parent, func(records []opRecord, err error) ([]opRecord, error) {
		if err != nil && !errors.Is(err, store.ErrMalformed) {
			return nil, err
		}
		if !final && err != nil {
			return nil, errNothingToWrite
		}
		out, matched := mergeRecords(parent, records, ops, final)
		if !final && matched == 0 {
			return nil, errNothingToWrite
		}
		written = len(out)
		return out, nil
	})
	if errors.Is(err, errNothingToWrite) {
		return nil
	}
	if err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("wrote the operations file back", "records", written, "took", time.Since(start).String())
	return nil
}

// mergeRecords gives each record of the file the status of its
// ItemOperation; records with no ItemOperation are kept as Velero wrote them,
// and, with rest, operations that are not in the file (created by hand) go
// last, in record order. matched is how many records got a status.
func mergeRecords[T client.Object](parent T, records []opRecord, ops []*itemopsv1alpha1.ItemOperation, rest bool) (out []opRecord, matched int) {
	byName := map[string]*itemopsv1alpha1.ItemOperation{}
	for _, op := range ops {
		byName[op.Name] = op
	}
	out = make([]opRecord, 0, max(len(records), len(ops)))
	inFile := map[string]bool{}
	for _, rec := range records {
		name := operationName(parent.GetName(), string(parent.GetUID()), rec.Plugin, rec.OperationID)
		// Every record of a repeated operation gets its status.
		if op, ok := byName[name]; ok {
			rec = toRecord(op)
			inFile[name] = true
			matched++
		}
		out = append(out, rec)
	}
	if !rest {
		return out, matched
	}
	others := make([]*itemopsv1alpha1.ItemOperation, 0, len(byName))
	for name, op := range byName {
		if !inFile[name] {
			others = append(others, op)
		}
	}
	slices.SortFunc(others, func(a, b *itemopsv1alpha1.ItemOperation) int {
		if d := recordIndex(a) - recordIndex(b); d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, op := range others {
		out = append(out, toRecord(op))
	}
	return out, matched
}

// WriteBack uploads the current state of the named parent's operations, if
// the parent is still waiting for them (a DownloadRequest asked for them).
func (r *parentReconciler[T]) WriteBack(ctx context.Context, key types.NamespacedName) error {
	parent := r.kind.newObject()
	if err := r.client.Get(ctx, key, parent); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !rollup.Owned(r.kind.phase(parent)) {
		return nil
	}
	ops, err := listOperations(ctx, r.client, r.opts.Stores, parent.GetNamespace(), parent.GetUID())
	if err != nil {
		return err
	}
	if err := r.writeBack(ctx, parent, ops, true); err != nil {
		return fmt.Errorf("writing back the operations of %s %s: %w", r.kind.kind, key.Name, err)
	}
	return nil
}
