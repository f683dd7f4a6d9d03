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

// writeBack uploads the operations file with the status of every
// ItemOperation. Records with no ItemOperation are kept as Velero wrote them.
func (r *parentReconciler[T]) writeBack(ctx context.Context, parent T, ops []*itemopsv1alpha1.ItemOperation) error {
	if r.opts.Store == nil {
		return nil
	}
	start := time.Now()
	written := 0
	err := r.kind.update(ctx, r.opts.Store, parent, func(records []opRecord, err error) ([]opRecord, error) {
		if err != nil && !errors.Is(err, store.ErrMalformed) {
			return nil, err
		}
		out := mergeRecords(parent, records, ops)
		written = len(out)
		return out, nil
	})
	if err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("wrote the operations file back", "records", written, "took", time.Since(start).String())
	return nil
}

// mergeRecords gives each record of the file the status of its
// ItemOperation; records with no ItemOperation are kept as Velero wrote them,
// and operations that are not in the file (created by hand) go last, in
// record order.
func mergeRecords[T client.Object](parent T, records []opRecord, ops []*itemopsv1alpha1.ItemOperation) []opRecord {
	byName := map[string]*itemopsv1alpha1.ItemOperation{}
	for _, op := range ops {
		byName[op.Name] = op
	}
	out := make([]opRecord, 0, max(len(records), len(ops)))
	inFile := map[string]bool{}
	for _, rec := range records {
		name := operationName(parent.GetName(), string(parent.GetUID()), rec.Plugin, rec.OperationID)
		// Every record of a repeated operation gets its status.
		if op, ok := byName[name]; ok {
			rec = toRecord(op)
			inFile[name] = true
		}
		out = append(out, rec)
	}
	rest := make([]*itemopsv1alpha1.ItemOperation, 0, len(byName))
	for name, op := range byName {
		if !inFile[name] {
			rest = append(rest, op)
		}
	}
	slices.SortFunc(rest, func(a, b *itemopsv1alpha1.ItemOperation) int {
		if d := recordIndex(a) - recordIndex(b); d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, op := range rest {
		out = append(out, toRecord(op))
	}
	return out
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
	if err := r.writeBack(ctx, parent, ops); err != nil {
		return fmt.Errorf("writing back the operations of %s %s: %w", r.kind.kind, key.Name, err)
	}
	return nil
}
