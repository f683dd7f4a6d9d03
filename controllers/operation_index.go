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
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// parentIndex is the name of the OperationIndex's own index of the
// ItemOperation informer: spec.parent.uid.
const parentIndex = "itemops.io/parent-uid"

// OperationIndex reads a parent's ItemOperations straight from the cache's
// store, as the pointers the cache holds. A parent is read on every end of
// one of its operations; the cache's List copies each of its operations
// into a new list every time (even with UnsafeDisableDeepCopy), which at
// 10,000 operations was a quarter of all that itemops allocated.
//
// Hand NewInformer to the manager's cache (cache.Options.NewInformer).
// Without it, or before the ItemOperation informer has synced, reads go
// through the client instead.
type OperationIndex struct {
	mu        sync.RWMutex
	informers []toolscache.SharedIndexInformer
}

// NewInformer makes the cache's informers as controller-runtime does, and
// indexes the ItemOperation informers by parent UID for ofParent.
func (x *OperationIndex) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration,
	indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	informer := toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	if _, ok := obj.(*itemopsv1alpha1.ItemOperation); !ok {
		return informer
	}
	if err := informer.AddIndexers(toolscache.Indexers{parentIndex: indexParentUID}); err != nil {
		// Only an informer that has started refuses; this one has not.
		panic(fmt.Sprintf("indexing ItemOperations by parent: %v", err))
	}
	x.mu.Lock()
	x.informers = append(x.informers, informer)
	x.mu.Unlock()
	return informer
}

func indexParentUID(obj any) ([]string, error) {
	op, ok := obj.(*itemopsv1alpha1.ItemOperation)
	if !ok || op.Spec.Parent.UID == "" {
		return nil, nil
	}
	return []string{op.Spec.Parent.UID}, nil
}

// get returns the cached ItemOperation of this key, and whether it was
// found; usable is false when it cannot be read here (no informer of ours,
// or one not synced yet). It is the cache's own object: read it, never
// change it.
func (x *OperationIndex) get(key types.NamespacedName) (op *itemopsv1alpha1.ItemOperation, found, usable bool, err error) {
	if x == nil {
		return nil, false, false, nil
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(x.informers) == 0 {
		return nil, false, false, nil
	}
	for _, informer := range x.informers {
		if !informer.HasSynced() {
			return nil, false, false, nil
		}
		obj, exists, err := informer.GetIndexer().GetByKey(key.String())
		if err != nil {
			return nil, false, false, fmt.Errorf("reading ItemOperation %s: %w", key, err)
		}
		if op, ok := obj.(*itemopsv1alpha1.ItemOperation); exists && ok {
			return op, true, true, nil
		}
	}
	return nil, false, true, nil
}

// ofParent returns the cached ItemOperations of the parent with this UID,
// or false when they cannot be read here (no informer of ours, or one not
// synced yet). They are the cache's own objects: read them, never change them.
func (x *OperationIndex) ofParent(uid types.UID) ([]*itemopsv1alpha1.ItemOperation, bool, error) {
	if x == nil {
		return nil, false, nil
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(x.informers) == 0 {
		return nil, false, nil
	}
	var ops []*itemopsv1alpha1.ItemOperation
	for _, informer := range x.informers {
		if !informer.HasSynced() {
			return nil, false, nil
		}
		objs, err := informer.GetIndexer().ByIndex(parentIndex, string(uid))
		if err != nil {
			return nil, false, fmt.Errorf("reading the operations of parent %s: %w", uid, err)
		}
		if ops == nil {
			ops = make([]*itemopsv1alpha1.ItemOperation, 0, len(objs))
		}
		for _, obj := range objs {
			if op, ok := obj.(*itemopsv1alpha1.ItemOperation); ok {
				ops = append(ops, op)
			}
		}
	}
	return ops, true, nil
}
