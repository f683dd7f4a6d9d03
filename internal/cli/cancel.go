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
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/view"
)

func newCancelCommand(o *options) *cobra.Command {
	var (
		ids     []string
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "cancel backup|restore NAME [--operation ID]... [--wait]",
		Short: "Ask itemops to cancel a Backup's or Restore's unfinished operations through their plugins",
		Long: `cancel sets spec.cancel on the unfinished operations of a Backup or Restore
(all of them, or those named by --operation: an operation ID, an
ItemOperation name, or the PodVolumeBackup or PodVolumeRestore a mirror of
a file-system backup or restore follows), and says which. itemops then
calls each plugin's Cancel (for a mirror, sets its object's spec.cancel)
and the operation is Canceling until its end is recorded: by Velero in
observe mode, by the plugin's progress in manage mode, by node-agent for a
mirror (Canceled, or Completed if it finished first; the parent then goes
on to PartiallyFailed). A cancel is a request: the plugin, and Velero's data
mover, carry it out on their own schedule (docs/velero.md, "A cancel is a
request"; kubectl itemops why shows what holds it). With --wait it waits
for every operation it asked to cancel to end.

It needs permission to patch itemoperations.itemops.io in Velero's namespace,
which the aggregated edit and admin roles grant.`,
		Example: `  # Cancel what is still running of a backup and wait for it
  kubectl itemops cancel backup nightly-20261122 --wait

  # Cancel one upload
  kubectl itemops cancel backup nightly-20261122 --operation du-7f3k2`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: o.completeKindAndName(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, cfg, c, err := o.parent(args)
			if err != nil {
				return err
			}
			requested, err := requestCancel(cmd.Context(), c, p, ids, o.streams.Out)
			if err != nil || !wait || len(requested) == 0 {
				return err
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			return waitForEnd(ctx, cfg, p, requested, o.streams.Out)
		},
	}
	cmd.Flags().StringArrayVar(&ids, "operation", nil, "Cancel only this operation (its operation ID or ItemOperation name); repeatable")
	cmd.Flags().BoolVar(&wait, "wait", false, "Wait until every operation asked to cancel has ended")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "With --wait, give up waiting after this long (0: no limit)")
	mustRegister(cmd.RegisterFlagCompletionFunc("operation", o.completeOperation))
	return cmd
}

// requestCancel sets spec.cancel on the parent's unfinished operations
// among ids (all when none), says what it did for each to out, and returns
// the names of those now asked to cancel (by it or before).
func requestCancel(ctx context.Context, c client.Client, p view.Parent, ids []string, out io.Writer) ([]string, error) {
	s, err := view.Read(ctx, c, p)
	if err != nil {
		return nil, err
	}
	if !s.Found {
		return nil, apierrors.NewNotFound(groupResource(p.Kind), p.Name)
	}
	ops := s.Operations
	if len(ids) > 0 {
		var chosen []itemopsv1alpha1.ItemOperation
		for _, id := range ids {
			i := slices.IndexFunc(ops, func(op itemopsv1alpha1.ItemOperation) bool {
				return op.Name == id || (op.Spec.OperationID != "" && op.Spec.OperationID == id) ||
					(op.Spec.Mirror != nil && op.Spec.Mirror.Name == id)
			})
			if i < 0 {
				return nil, fmt.Errorf("%s has no operation %q (by operation ID, ItemOperation name or the name of the PodVolumeBackup or PodVolumeRestore it mirrors); nothing was canceled", p, id)
			}
			chosen = append(chosen, ops[i])
		}
		ops = chosen
	}
	if len(ops) == 0 {
		fmt.Fprintf(out, "Nothing to cancel: %s has no operations.\n", p)
		return nil, nil
	}
	var requested []string
	for i := range ops {
		op := &ops[i]
		name := describe(op)
		switch {
		case op.Status.Phase.IsTerminal():
			fmt.Fprintf(out, "%s already %s\n", name, op.Status.Phase)
			continue
		case op.Spec.Cancel:
			fmt.Fprintf(out, "%s cancel already requested\n", name)
			requested = append(requested, op.Name)
			continue
		}
		original := op.DeepCopy()
		op.Spec.Cancel = true
		if err := c.Patch(ctx, op, client.MergeFrom(original)); err != nil {
			if apierrors.IsForbidden(err) {
				return requested, fmt.Errorf("not allowed to cancel %s: %w\n"+
					"Canceling needs patch on itemoperations.itemops.io in namespace %s, which the aggregated edit and admin roles grant",
					name, err, p.Namespace)
			}
			return requested, fmt.Errorf("canceling %s: %w", name, err)
		}
		fmt.Fprintf(out, "%s cancel requested\n", name)
		requested = append(requested, op.Name)
	}
	if len(requested) == 0 {
		fmt.Fprintf(out, "Nothing to cancel: every operation of %s has already ended.\n", p)
	}
	return requested, nil
}

// describe names an operation for people: its ItemOperation, item and plugin.
func describe(op *itemopsv1alpha1.ItemOperation) string {
	item := op.Spec.Resource.Name
	if op.Spec.Resource.Namespace != "" {
		item = op.Spec.Resource.Namespace + "/" + item
	}
	if op.IsMirror() {
		return fmt.Sprintf("itemoperation/%s (%s, %s)", op.Name, view.Printable(view.ItemOf(op)), view.Printable(op.MoverName()))
	}
	return fmt.Sprintf("itemoperation/%s (%s, %s, operation %s)", op.Name, view.Printable(item), view.Printable(op.Spec.Plugin.Name), view.Printable(op.Spec.OperationID))
}

// waitForEnd watches the parent until every named operation has ended,
// saying how each ended.
func waitForEnd(ctx context.Context, cfg *rest.Config, p view.Parent, names []string, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	snapshots := make(chan view.Snapshot)
	watchErr := make(chan error, 1)
	go func() { watchErr <- view.Watch(ctx, cfg, p, snapshots) }()
	waiting := map[string]bool{}
	for _, n := range names {
		waiting[n] = true
	}
	fmt.Fprintf(out, "Waiting for %d operation(s) to end…\n", len(waiting))
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("still running: %s: %w", strings.Join(sortedKeys(waiting), ", "), context.Cause(ctx))
		case err := <-watchErr:
			if err == nil {
				err = ctx.Err()
			}
			return err
		case s := <-snapshots:
			if !s.Found {
				fmt.Fprintf(out, "%s is gone, and its operations with it\n", p)
				return nil
			}
			present := map[string]bool{}
			for i := range s.Operations {
				op := &s.Operations[i]
				present[op.Name] = true
				if waiting[op.Name] && op.Status.Phase.IsTerminal() {
					delete(waiting, op.Name)
					line := fmt.Sprintf("%s %s", describe(op), op.Status.Phase)
					if op.Status.Error != "" {
						line += ": " + view.Printable(op.Status.Error)
					}
					fmt.Fprintln(out, line)
				}
			}
			for _, name := range sortedKeys(waiting) {
				if !present[name] {
					delete(waiting, name)
					fmt.Fprintf(out, "itemoperation/%s is gone\n", name)
				}
			}
			if len(waiting) == 0 {
				return nil
			}
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// mustRegister panics on a flag completion registered wrongly: a mistake in
// this file, not in what a person typed.
func mustRegister(err error) {
	if err != nil {
		panic(err)
	}
}
