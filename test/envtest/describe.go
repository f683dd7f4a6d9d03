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

package envtest

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// DescribeBackup tells, for a failure message, where a Backup stands now
// and every ItemOperation it has, with their conditions: what a spec that
// failed on a Backup's phase needs to be understood from its log alone.
func (e *Environment) DescribeBackup(ctx context.Context, b *velerov1api.Backup) string {
	var sb strings.Builder
	got := &velerov1api.Backup{}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
		fmt.Fprintf(&sb, "Backup %s: %v\n", b.Name, err)
	} else {
		fmt.Fprintf(&sb, "Backup %s is %s (attempted %d, completed %d, failed %d)\n", got.Name, got.Status.Phase,
			got.Status.BackupItemOperationsAttempted, got.Status.BackupItemOperationsCompleted, got.Status.BackupItemOperationsFailed)
	}
	ops := &itemopsv1alpha1.ItemOperationList{}
	if err := e.Client.List(ctx, ops, client.InNamespace(b.Namespace),
		client.MatchingLabels{itemopsv1alpha1.LabelParentUID: string(b.UID)}); err != nil {
		fmt.Fprintf(&sb, "listing its operations: %v\n", err)
		return sb.String()
	}
	for _, op := range ops.Items {
		fmt.Fprintf(&sb, "  %s %s deleting=%t error=%q failures=%d\n", op.Name, op.Status.Phase,
			op.DeletionTimestamp != nil, op.Status.Error, op.Status.PollFailures)
		for _, c := range op.Status.Conditions {
			fmt.Fprintf(&sb, "    %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return sb.String()
}
