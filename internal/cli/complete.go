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

package cli

import (
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/view"
)

// completeKindAndName completes a kind, then the names of that kind in
// Velero's namespace (through the __complete command that shells and
// kubectl's plugin completion call). plural is how get spells kinds.
func (o *options) completeKindAndName(plural bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		switch len(args) {
		case 0:
			backup, restore := "backup", "restore"
			if plural {
				backup, restore = "backups", "restores"
			}
			return withPrefix([]cobra.Completion{cobra.CompletionWithDesc(backup, "Velero Backups"),
				cobra.CompletionWithDesc(restore, "Velero Restores")}, toComplete), cobra.ShellCompDirectiveNoFileComp
		case 1:
			kind, err := parentKind(args[0])
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			names, err := o.parentNames(cmd, kind)
			if err != nil {
				cobra.CompErrorln(err.Error())
				return nil, cobra.ShellCompDirectiveError
			}
			return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

// parentNames are the names of the Backups or Restores in Velero's namespace.
func (o *options) parentNames(cmd *cobra.Command, kind itemopsv1alpha1.ParentKind) ([]string, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	var names []string
	var list client.ObjectList = &velerov1api.BackupList{}
	if kind == itemopsv1alpha1.ParentKindRestore {
		list = &velerov1api.RestoreList{}
	}
	err = listAll(cmd.Context(), c, o.namespace(), list, func(l client.ObjectList) {
		switch l := l.(type) {
		case *velerov1api.BackupList:
			for _, b := range l.Items {
				names = append(names, b.Name)
			}
		case *velerov1api.RestoreList:
			for _, r := range l.Items {
				names = append(names, r.Name)
			}
		}
	})
	return names, err
}

// completeOperation completes --operation with the operation IDs of the
// parent's unfinished operations, described by item and plugin.
func (o *options) completeOperation(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) < 2 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	kind, err := parentKind(args[0])
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	c, err := o.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	s, err := view.Read(cmd.Context(), c, view.Parent{Kind: kind, Namespace: o.namespace(), Name: args[1]})
	if err != nil {
		cobra.CompErrorln(err.Error())
		return nil, cobra.ShellCompDirectiveError
	}
	var ids []cobra.Completion
	for _, op := range s.Operations {
		// A mirror by the name of the object it follows.
		id := op.Spec.OperationID
		if op.IsMirror() {
			id = op.Spec.Mirror.Name
		}
		if op.Status.Phase.IsTerminal() || !strings.HasPrefix(id, toComplete) {
			continue
		}
		ids = append(ids, cobra.CompletionWithDesc(id, view.Printable(view.ItemOf(&op)+" "+op.MoverName())))
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

func withPrefix(names []string, prefix string) []cobra.Completion {
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}
