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

// NewRestoreReconciler returns the reconciler that rolls a Restore's
// operations up into its phase and restoreItemOperations* counters (manage
// mode). Velero v1.18 restores pass through Finalizing* too.
func NewRestoreReconciler(c client.Client, recorder record.EventRecorder) *parentReconciler[*velerov1api.Restore] {
	return &parentReconciler[*velerov1api.Restore]{client: c, recorder: recorder, kind: parentKind[*velerov1api.Restore]{
		kind:        itemopsv1alpha1.ParentKindRestore,
		controlName: "restore",
		newObject:   func() *velerov1api.Restore { return &velerov1api.Restore{} },
		phase:       func(r *velerov1api.Restore) rollup.Phase { return rollup.Phase(r.Status.Phase) },
		counters: func(r *velerov1api.Restore) parentCounters {
			return parentCounters{r.Status.RestoreItemOperationsAttempted, r.Status.RestoreItemOperationsCompleted, r.Status.RestoreItemOperationsFailed}
		},
		setStatus: func(r *velerov1api.Restore, phase rollup.Phase, c parentCounters) {
			r.Status.Phase = velerov1api.RestorePhase(phase)
			r.Status.RestoreItemOperationsAttempted = c.Attempted
			r.Status.RestoreItemOperationsCompleted = c.Completed
			r.Status.RestoreItemOperationsFailed = c.Failed
		},
	}}
}
