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
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/rollup"
)

// NewRestoreReconciler returns the reconciler that creates a Restore's
// ItemOperations from its operations file and, in manage mode, rolls them up
// into its phase and restoreItemOperations* counters.
func NewRestoreReconciler(c client.Client, recorder record.EventRecorder, opts ParentOptions) *parentReconciler[*velerov1api.Restore] {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &parentReconciler[*velerov1api.Restore]{client: c, recorder: recorder, opts: opts, kind: parentKind[*velerov1api.Restore]{
		kind:        itemopsv1alpha1.ParentKindRestore,
		gvk:         velerov1api.SchemeGroupVersion.WithKind("Restore"),
		pluginKind:  itemopsv1alpha1.PluginKindRestoreItemAction,
		controlName: "restore",
		newObject:   func() *velerov1api.Restore { return &velerov1api.Restore{} },
		phase:       func(b *velerov1api.Restore) rollup.Phase { return rollup.Phase(b.Status.Phase) },
		counters: func(b *velerov1api.Restore) parentCounters {
			return parentCounters{b.Status.RestoreItemOperationsAttempted, b.Status.RestoreItemOperationsCompleted, b.Status.RestoreItemOperationsFailed}
		},
		setStatus: func(b *velerov1api.Restore, phase rollup.Phase, c parentCounters) {
			b.Status.Phase = velerov1api.RestorePhase(phase)
			b.Status.RestoreItemOperationsAttempted = c.Attempted
			b.Status.RestoreItemOperationsCompleted = c.Completed
			b.Status.RestoreItemOperationsFailed = c.Failed
		},
		errors:    func(b *velerov1api.Restore) int { return b.Status.Errors },
		setErrors: func(b *velerov1api.Restore, n int) { b.Status.Errors = n },
		started:   func(b *velerov1api.Restore) *metav1.Time { return b.Status.StartTimestamp },
		timeout:   func(b *velerov1api.Restore) time.Duration { return b.Spec.ItemOperationTimeout.Duration },
		finish: func(b *velerov1api.Restore, phase rollup.Phase, now metav1.Time) {
			b.Status.Phase = velerov1api.RestorePhase(phase)
			b.Status.CompletionTimestamp = &now
		},
		read: func(ctx context.Context, s OperationsStore, b *velerov1api.Restore) ([]opRecord, error) {
			ops, err := s.RestoreOperations(ctx, b)
			return fromRestoreOperations(ops), err
		},
		update: func(ctx context.Context, s OperationsStore, b *velerov1api.Restore, update func([]opRecord, error) ([]opRecord, error)) error {
			return s.UpdateRestoreOperations(ctx, b, func(ops []*itemoperation.RestoreOperation, err error) ([]*itemoperation.RestoreOperation, error) {
				records, err := update(fromRestoreOperations(ops), err)
				if err != nil {
					return nil, err
				}
				return toRestoreOperations(b, records), nil
			})
		},
	}}
}
