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
	"fmt"

	"github.com/spf13/cobra"

	"github.com/itemops/itemops/internal/view"
)

func newWatchCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "watch backup|restore NAME",
		Short: "Show a Backup's or Restore's operations move as progress bars until it ends; the exit code says how",
		Long: `watch follows a Backup or Restore and its operations until the parent has
passed its operations and finalization, and exits with:

  0  Completed
  1  PartiallyFailed
  2  Failed (or FailedValidation)
  3  the parent does not exist, was deleted, or is being deleted
  4  the watch could not run (the error is printed)
  130  stopped before the parent ended (q or Ctrl-C)

On a terminal it draws an overall bar and one bar per operation; between two
status updates (itemops writes progress every --progress-update-interval)
running operations advance at their own measured rate, marked "~", and snap
to the real figure at the next update. Elsewhere (a pipe, a CI log), or with
-o plain, it prints one line per change.`,
		Example: `  # Wait for tonight's backup in a script
  kubectl itemops watch backup nightly-20261122 -o plain; echo "exit code $?"`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: o.completeKindAndName(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := parentKind(args[0]); err != nil {
				return err
			}
			if output != "" && output != "plain" {
				return fmt.Errorf("unknown output %q: plain, or nothing for bars on a terminal", output)
			}
			// The watch reads with a client of its own.
			p, cfg, _, err := o.parent(args)
			if err != nil {
				return err
			}
			code, err := view.Run(cmd.Context(), view.Options{
				Config: cfg,
				Parent: p,
				Out:    o.streams.Out,
				In:     o.streams.In,
				Plain:  output == "plain",
				Now:    o.clock.Now,
			})
			if err != nil {
				return &exitCode{code: ExitWatchError, err: err}
			}
			if code != 0 {
				return &exitCode{code: code}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "plain: one line per change, as when not on a terminal")
	mustRegister(cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"plain"}, cobra.ShellCompDirectiveNoFileComp)))
	return cmd
}
