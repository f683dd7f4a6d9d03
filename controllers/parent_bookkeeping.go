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
	"time"

	"k8s.io/apimachinery/pkg/types"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/rollup"
)

// ingestSettle bounds how long after reading a parent's operations file
// the ItemOperations created from it that the cache does not list yet are
// taken as known without reading the file again.
const ingestSettle = 10 * time.Second

// ingestion is the last reading of a parent's operations file.
type ingestion struct {
	at       time.Time
	expected int
	invalid  rollup.Counts
	// pending are the ItemOperations made from it that the cache has not
	// listed yet, by name.
	pending map[string]*itemopsv1alpha1.ItemOperation
}

func (r *parentReconciler[T]) ingested(parent T, result ingestResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ingestions == nil {
		r.ingestions = map[types.UID]ingestion{}
	}
	last := ingestion{at: r.now(), expected: result.expected, invalid: result.invalid,
		pending: make(map[string]*itemopsv1alpha1.ItemOperation, len(result.made))}
	for _, op := range result.made {
		last.pending[op.Name] = op
	}
	r.ingestions[parent.GetUID()] = last
}

// lastIngestion returns the operations made from the file that the cache
// does not list yet, if it was read a moment ago. An operation the cache
// has listed since is no longer pending: when it disappears (deleted), the
// file is read again and it is made again.
func (r *parentReconciler[T]) lastIngestion(parent T, cached []*itemopsv1alpha1.ItemOperation) (ingestion, []*itemopsv1alpha1.ItemOperation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.ingestions[parent.GetUID()]
	if !ok || r.now().Sub(last.at) >= ingestSettle {
		return ingestion{}, nil, false
	}
	for _, op := range cached {
		delete(last.pending, op.Name)
	}
	if len(last.pending) == 0 {
		return ingestion{}, nil, false
	}
	pending := make([]*itemopsv1alpha1.ItemOperation, 0, len(last.pending))
	for _, op := range last.pending {
		pending = append(pending, op)
	}
	return last, pending, true
}

// mergeOperations adds to the cached operations those made since that the
// cache does not list yet.
func mergeOperations(cached, made []*itemopsv1alpha1.ItemOperation) []*itemopsv1alpha1.ItemOperation {
	listed := make(map[string]bool, len(cached))
	for _, op := range cached {
		listed[op.Name] = true
	}
	out := cached
	for _, op := range made {
		if !listed[op.Name] {
			out = append(out, op)
		}
	}
	return out
}

// counterWait is how long a patch that only moves a parent's completed count
// must wait: Velero's own controller updates it once per sync, and with
// thousands of operations ending together a patch per ending would be a
// write storm on the parent.
func (r *parentReconciler[T]) counterWait(parent T) time.Duration {
	if r.opts.CounterInterval <= 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.counted[parent.GetUID()]
	if !ok {
		return 0
	}
	return r.opts.CounterInterval - r.now().Sub(last)
}

func (r *parentReconciler[T]) counterPatched(parent T) {
	if r.opts.CounterInterval <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counted == nil {
		r.counted = map[types.UID]time.Time{}
	}
	r.counted[parent.GetUID()] = r.now()
}

// forget drops what is kept of a parent that itemops no longer moves.
func (r *parentReconciler[T]) forget(parent T, phase rollup.Phase) {
	if rollup.Owned(phase) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.counted, parent.GetUID())
	delete(r.ingestions, parent.GetUID())
	delete(r.moved, parent.GetUID())
}

func (r *parentReconciler[T]) settled(parent T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ingestions, parent.GetUID())
}

func (r *parentReconciler[T]) markMoved(parent T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.moved == nil {
		r.moved = map[types.UID]bool{}
	}
	r.moved[parent.GetUID()] = true
}

func (r *parentReconciler[T]) wasMoved(parent T) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.moved[parent.GetUID()]
}

// now is the time by the reconciler's clock (its constructor's default,
// the real one).
func (r *parentReconciler[T]) now() time.Time { return r.opts.Clock.Now() }
