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
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// ConflictRetry is when a reconcile that lost an optimistic-lock race runs
// again at the latest. The write that won the race wakes it sooner through
// the watch; this only covers a wake-up that never comes.
const ConflictRetry = time.Second

// QuietConflicts runs a reconciler, but takes an optimistic-lock conflict
// for what it is: someone else (Velero, for one, on its Backups) wrote the
// object first, and the next reconcile works on the newer copy. That is
// normal, so it is a debug line, not a "Reconciler error" that an
// administrator would think needs acting on.
type QuietConflicts struct {
	reconcile.Reconciler
}

// Reconcile implements reconcile.Reconciler.
func (q QuietConflicts) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	result, err := q.Reconciler.Reconcile(ctx, req)
	if err != nil && apierrors.IsConflict(err) {
		ctrl.LoggerFrom(ctx).V(1).Info("the object changed meanwhile; the newer copy is reconciled next", "error", err.Error())
		return ctrl.Result{RequeueAfter: ConflictRetry}, nil
	}
	return result, err
}
