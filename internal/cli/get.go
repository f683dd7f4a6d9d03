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
	"context"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/view"
)

// listChunk is how many objects one list request asks for, as kubectl's
// --chunk-size does by default.
const listChunk = 500

func newGetCommand(o *options) *cobra.Command {
	printFlags := genericclioptions.NewPrintFlags("")
	var noHeaders bool
	cmd := &cobra.Command{
		Use:   "get [backups|restores] [NAME]",
		Short: "Show one row per Backup and Restore with operations: phase, counts, bytes, progress, ETA, stalled",
		Example: `  # Every Backup and Restore with operations, newest first
  kubectl itemops get

  # One Backup, with the plugins its operations came from
  kubectl itemops get backup nightly-20261122 -o wide`,
		Args:              cobra.MaximumNArgs(2),
		ValidArgsFunction: o.completeKindAndName(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			kinds := []itemopsv1alpha1.ParentKind{itemopsv1alpha1.ParentKindBackup, itemopsv1alpha1.ParentKindRestore}
			name := ""
			if len(args) > 0 {
				kind, err := parentKind(args[0])
				if err != nil {
					return err
				}
				kinds = kinds[:0:0]
				kinds = append(kinds, kind)
			}
			if len(args) > 1 {
				name = args[1]
			}
			format := ""
			if printFlags.OutputFormat != nil {
				format = *printFlags.OutputFormat
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			sums, err := summaries(cmd.Context(), c, o.namespace(), kinds, name)
			if err != nil {
				return err
			}
			switch format {
			case "", "wide":
				if len(sums) == 0 {
					fmt.Fprintf(o.streams.ErrOut, "No Backups or Restores with operations found in %s namespace.\n", o.namespace())
					return nil
				}
				table := view.SummaryTable(sums, o.clock.Now(), len(kinds) > 1)
				if err := printers.NewTablePrinter(printers.PrintOptions{Wide: format == "wide", NoHeaders: noHeaders}).
					PrintObj(table, o.streams.Out); err != nil {
					return err
				}
				// As kubectl prints the API server's warnings: on stderr,
				// so that scripts reading the table are not disturbed.
				for _, s := range sums {
					if w := view.NotDurableWarning(s); w != "" {
						fmt.Fprintln(o.streams.ErrOut, w)
					}
				}
				return nil
			}
			printer, err := printFlags.ToPrinter()
			if err != nil {
				return err
			}
			list, err := view.SummaryList(sums)
			if err != nil {
				return err
			}
			if name != "" && len(list.Items) == 1 {
				return printer.PrintObj(&list.Items[0], o.streams.Out)
			}
			return printer.PrintObj(list, o.streams.Out)
		},
	}
	printFlags.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "Output format: wide, json, yaml, name, jsonpath=…, go-template=… (json and yaml print OperationsSummary objects)"
	cmd.Flags().BoolVar(&noHeaders, "no-headers", false, "Print the table without its header")
	return cmd
}

// summaries are the summaries of the parents of those kinds in namespace
// that have operations (the one named, if any, whether or not it has),
// newest first.
func summaries(ctx context.Context, c client.Client, namespace string, kinds []itemopsv1alpha1.ParentKind, name string) ([]view.Summary, error) {
	var sums []view.Summary
	if name != "" {
		p := view.Parent{Kind: kinds[0], Namespace: namespace, Name: name}
		s, err := view.Read(ctx, c, p)
		if err != nil {
			return nil, err
		}
		if !s.Found {
			return nil, apierrors.NewNotFound(groupResource(kinds[0]), name)
		}
		return []view.Summary{view.Summarize(s)}, nil
	}
	var ops []itemopsv1alpha1.ItemOperation
	if err := listAll(ctx, c, namespace, &itemopsv1alpha1.ItemOperationList{}, func(l client.ObjectList) {
		ops = append(ops, l.(*itemopsv1alpha1.ItemOperationList).Items...)
	}); err != nil {
		return nil, err
	}
	byParent := map[string][]itemopsv1alpha1.ItemOperation{}
	for _, op := range ops {
		byParent[op.Spec.Parent.UID] = append(byParent[op.Spec.Parent.UID], op)
	}
	for _, kind := range kinds {
		var snaps []view.Snapshot
		switch kind {
		case itemopsv1alpha1.ParentKindBackup:
			err := listAll(ctx, c, namespace, &velerov1api.BackupList{}, func(l client.ObjectList) {
				for i := range l.(*velerov1api.BackupList).Items {
					b := &l.(*velerov1api.BackupList).Items[i]
					snaps = append(snaps, view.BackupSnapshot(b, byParent[string(b.UID)]))
				}
			})
			if err != nil {
				return nil, err
			}
		case itemopsv1alpha1.ParentKindRestore:
			err := listAll(ctx, c, namespace, &velerov1api.RestoreList{}, func(l client.ObjectList) {
				for i := range l.(*velerov1api.RestoreList).Items {
					r := &l.(*velerov1api.RestoreList).Items[i]
					snaps = append(snaps, view.RestoreSnapshot(r, byParent[string(r.UID)]))
				}
			})
			if err != nil {
				return nil, err
			}
		}
		for _, s := range snaps {
			if len(s.Operations) > 0 || s.Attempted > 0 {
				sums = append(sums, view.Summarize(s))
			}
		}
	}
	view.SortNewestFirst(sums)
	return sums, nil
}

// listAll lists in chunks, handing each chunk to add.
func listAll(ctx context.Context, c client.Client, namespace string, list client.ObjectList, add func(client.ObjectList)) error {
	opts := []client.ListOption{client.InNamespace(namespace), client.Limit(listChunk)}
	for {
		if err := c.List(ctx, list, opts...); err != nil {
			return err
		}
		add(list)
		next := list.GetContinue()
		if next == "" {
			return nil
		}
		opts = []client.ListOption{client.InNamespace(namespace), client.Limit(listChunk), client.Continue(next)}
	}
}
