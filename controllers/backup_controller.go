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

// NewBackupReconciler returns the reconciler that creates a Backup's
// ItemOperations from its operations file and, in manage mode, rolls them up
// into its phase and backupItemOperations* counters.
func NewBackupReconciler(c client.Client, recorder record.EventRecorder, opts ParentOptions) *parentReconciler[*velerov1api.Backup] {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &parentReconciler[*velerov1api.Backup]{client: c, recorder: recorder, opts: opts, kind: parentKind[*velerov1api.Backup]{
		kind:        itemopsv1alpha1.ParentKindBackup,
		gvk:         velerov1api.SchemeGroupVersion.WithKind("Backup"),
		pluginKind:  itemopsv1alpha1.PluginKindBackupItemAction,
		controlName: "backup",
		newObject:   func() *velerov1api.Backup { return &velerov1api.Backup{} },
		phase:       func(b *velerov1api.Backup) rollup.Phase { return rollup.Phase(b.Status.Phase) },
		counters: func(b *velerov1api.Backup) parentCounters {
			return parentCounters{b.Status.BackupItemOperationsAttempted, b.Status.BackupItemOperationsCompleted, b.Status.BackupItemOperationsFailed}
		},
		setStatus: func(b *velerov1api.Backup, phase rollup.Phase, c parentCounters) {
			b.Status.Phase = velerov1api.BackupPhase(phase)
			b.Status.BackupItemOperationsAttempted = c.Attempted
			b.Status.BackupItemOperationsCompleted = c.Completed
			b.Status.BackupItemOperationsFailed = c.Failed
		},
		errors:    func(b *velerov1api.Backup) int { return b.Status.Errors },
		setErrors: func(b *velerov1api.Backup, n int) { b.Status.Errors = n },
		started:   func(b *velerov1api.Backup) *metav1.Time { return b.Status.StartTimestamp },
		timeout:   func(b *velerov1api.Backup) time.Duration { return b.Spec.ItemOperationTimeout.Duration },
		finish: func(b *velerov1api.Backup, phase rollup.Phase, now metav1.Time) {
			b.Status.Phase = velerov1api.BackupPhase(phase)
			b.Status.CompletionTimestamp = &now
		},
		read: func(ctx context.Context, s OperationsStore, b *velerov1api.Backup) ([]opRecord, error) {
			ops, err := s.BackupOperations(ctx, b)
			return fromBackupOperations(ops), err
		},
		update: func(ctx context.Context, s OperationsStore, b *velerov1api.Backup, update func([]opRecord, error) ([]opRecord, error)) error {
			return s.UpdateBackupOperations(ctx, b, func(ops []*itemoperation.BackupOperation, err error) ([]*itemoperation.BackupOperation, error) {
				records, err := update(fromBackupOperations(ops), err)
				if err != nil {
					return nil, err
				}
				return toBackupOperations(b, records), nil
			})
		},
	}}
}
