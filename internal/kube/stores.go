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

package kube

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

// Stores reads objects straight from the stores of the cache's informers,
// as the pointers the cache holds. Every poll reads its operation and its
// parent, and every end of an operation reads all of its parent's: the
// cache's Get and List copy what they return (List even with
// UnsafeDisableDeepCopy, into a new list), and at 10,000 operations those
// copies were a third of all that itemops allocated.
//
// Hand NewInformer to the manager's cache (cache.Options.NewInformer).
// Without it, or before an informer has synced, reads go through the client
// instead. What Stores returns is the cache's own: read it, never change it.
type Stores struct {
	// indexes are the kinds kept, each with the indexes added to its
	// informers' stores (none: kept, not indexed).
	indexes map[reflect.Type]toolscache.Indexers

	mu    sync.RWMutex
	kinds map[reflect.Type]*storedKind
}

// NewStores keeps the stores of the kinds in indexes, by the type of their
// objects (*v1.Pod), each with its indexes.
func NewStores(indexes map[reflect.Type]toolscache.Indexers) *Stores {
	return &Stores{indexes: indexes}
}

// storedKind is the informers of one kind, one per namespace the cache watches.
type storedKind struct {
	informers []toolscache.SharedIndexInformer
	// synced is set once every informer has synced, which they then stay:
	// asking an informer takes the lock its event processing holds, which
	// every read of every reconcile would contend for.
	synced atomic.Bool
}

// NewInformer makes the cache's informers as controller-runtime does, and
// keeps those of the kinds Stores keeps, with their indexes.
func (s *Stores) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration,
	indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	informer := toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	kind := reflect.TypeOf(obj)
	own, read := s.indexes[kind]
	if !read {
		return informer
	}
	if err := informer.AddIndexers(own); err != nil {
		// Only an informer that has started refuses; this one has not.
		panic(fmt.Sprintf("indexing the store of %s: %v", kind, err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kinds == nil {
		s.kinds = map[reflect.Type]*storedKind{}
	}
	if s.kinds[kind] == nil {
		s.kinds[kind] = &storedKind{}
	}
	s.kinds[kind].informers = append(s.kinds[kind].informers, informer)
	s.kinds[kind].synced.Store(false)
	return informer
}

// synced returns the informers of T's kind, or false when they cannot be
// read here: none of ours, or one not synced yet.
func synced[T runtime.Object](s *Stores) ([]toolscache.SharedIndexInformer, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	k := s.kinds[reflect.TypeFor[T]()]
	if k == nil {
		return nil, false
	}
	if !k.synced.Load() {
		for _, informer := range k.informers {
			if !informer.HasSynced() {
				return nil, false
			}
		}
		k.synced.Store(true)
	}
	return k.informers, true
}

// Stored returns the cached object of this key and whether it was found;
// usable is false when the stores cannot answer (none of s's kinds, or its
// informers not synced yet): the caller then reads through its client.
func Stored[T runtime.Object](s *Stores, key types.NamespacedName) (obj T, found, usable bool, err error) {
	informers, ok := synced[T](s)
	if !ok {
		return obj, false, false, nil
	}
	for _, informer := range informers {
		item, exists, err := informer.GetIndexer().GetByKey(key.String())
		if err != nil {
			return obj, false, false, fmt.Errorf("reading %s from the cache: %w", key, err)
		}
		if typed, ok := item.(T); exists && ok {
			return typed, true, true, nil
		}
	}
	return obj, false, true, nil
}

// StoredByIndex returns the cached objects whose index holds value, or
// false when the stores cannot answer (see Stored).
func StoredByIndex[T runtime.Object](s *Stores, index, value string) ([]T, bool, error) {
	informers, ok := synced[T](s)
	if !ok {
		return nil, false, nil
	}
	var out []T
	for _, informer := range informers {
		items, err := informer.GetIndexer().ByIndex(index, value)
		if err != nil {
			return nil, false, fmt.Errorf("reading the cache's index %s: %w", index, err)
		}
		if out == nil {
			out = make([]T, 0, len(items))
		}
		for _, item := range items {
			if typed, ok := item.(T); ok {
				out = append(out, typed)
			}
		}
	}
	return out, true, nil
}
