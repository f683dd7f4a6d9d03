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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/internal/kube"
	"github.com/itemops/itemops/internal/rollup"
	"github.com/itemops/itemops/internal/store"
)

// mustGiveUp reports whether the parent's operations can no longer be
// known or recorded: the location or file is wrong, or the object store has
// been failing for longer than any of the parent's operations may run.
func (r *parentReconciler[T]) mustGiveUp(parent T, err error) bool {
	if errors.Is(err, store.ErrNoLocation) || errors.Is(err, store.ErrMalformed) || errors.Is(err, store.ErrTooLarge) {
		return true
	}
	started := r.kind.started(parent)
	if started == nil {
		return false
	}
	timeout := r.kind.timeout(parent)
	if timeout <= 0 {
		timeout = defaultParentTimeout
	}
	return !r.opts.Clock.Now().Before(started.Add(timeout))
}

// giveUp ends a parent whose operations cannot be known or recorded in
// PartiallyFailed, as Velero does for a missing or read-only location,
// rather than leave it waiting for ever.
func (r *parentReconciler[T]) giveUp(ctx context.Context, parent T, phase rollup.Phase, cause error) error {
	patch := client.MergeFromWithOptions(parent.DeepCopyObject().(T), client.MergeFromWithOptimisticLock{})
	r.kind.finish(parent, parentPartiallyFailed, metav1.NewTime(r.opts.Clock.Now()))
	r.kind.setErrors(parent, r.kind.errors(parent)+1)
	if err := r.client.Patch(ctx, parent, patch); err != nil {
		return fmt.Errorf("updating %s %s: %w", r.kind.kind, parent.GetName(), err)
	}
	ctrl.LoggerFrom(ctx).Info("gave up on the operations of "+string(r.kind.kind), "from", phase, "to", parentPartiallyFailed, "cause", cause.Error())
	kube.Emitf(r.recorder, parent, corev1.EventTypeWarning, reasonGaveUp, "%s -> %s: its plugin operations cannot be tracked: %v",
		phase, parentPartiallyFailed, cause)
	return nil
}
