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
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/rollup"
)

// NewBackupReconciler returns the reconciler that rolls a Backup's operations
// up into its phase and backupItemOperations* counters (manage mode).
func NewBackupReconciler(c client.Client, recorder record.EventRecorder) *parentReconciler[*velerov1api.Backup] {
	return &parentReconciler[*velerov1api.Backup]{client: c, recorder: recorder, kind: parentKind[*velerov1api.Backup]{
		kind:        itemopsv1alpha1.ParentKindBackup,
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
	}}
}
