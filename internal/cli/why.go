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
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/view"
)

func newWhyCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "why backup|restore NAME",
		Short: "Explain what a Backup or Restore waits for: each waiting operation, its cause, the evidence and what to do",
		Long: `why explains a Backup or Restore that does not end: for each unfinished
operation, what holds it (the cause itemops found from the plugin and, for
Velero's data mover, from the DataUpload or DataDownload, its pod, volume and
snapshot, node-agent and the BackupRepository), what the cluster says, and
what to do; failed operations with their error; a Backup still in Velero's
queue with the Backups ahead of it. Causes are those of the Waiting
condition of ItemOperations (docs/velero.md, "When an operation waits").`,
		Example: `  # Why is tonight's backup still WaitingForPluginOperations?
  kubectl itemops why backup nightly-20261122`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: o.completeKindAndName(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, _, c, err := o.parent(args)
			if err != nil {
				return err
			}
			s, err := view.Read(cmd.Context(), c, p)
			if err != nil {
				return err
			}
			if !s.Found {
				return apierrors.NewNotFound(groupResource(p.Kind), args[1])
			}
			var queue []velerov1api.Backup
			if p.Kind == itemopsv1alpha1.ParentKindBackup && s.Phase == string(velerov1api.BackupPhaseQueued) {
				if queue, err = backupsInQueue(cmd.Context(), c, o.namespace()); err != nil {
					return err
				}
			}
			var stuck stuckSince
			if p.Kind == itemopsv1alpha1.ParentKindBackup && s.Phase == string(velerov1api.BackupPhaseReadyToStart) {
				if stuck, err = readyToStartSince(cmd.Context(), c, o.namespace(), args[1], o.clock.Now()); err != nil {
					return err
				}
			}
			explain(o.streams.Out, s, queue, stuck)
			return nil
		},
	}
}

// stuckSince is when Velero last wrote to a Backup left in a phase, and the
// time of the reading; zero when not read.
type stuckSince struct {
	since, now time.Time
}

// readyToStartGrace is how long a Backup may stay ReadyToStart before it
// counts as left there: Velero's backup controller starts one within
// moments of the queue releasing it.
const readyToStartGrace = time.Minute

// readyToStartSince reads when Velero last wrote to the Backup (the latest
// of its managed fields' times: its move to ReadyToStart).
func readyToStartSince(ctx context.Context, c client.Client, namespace, name string, now time.Time) (stuckSince, error) {
	b := &velerov1api.Backup{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, b); err != nil {
		return stuckSince{}, err
	}
	var last time.Time
	for _, f := range b.ManagedFields {
		if f.Time != nil && f.Time.After(last) {
			last = f.Time.Time
		}
	}
	return stuckSince{since: last, now: now}, nil
}

// backupsInQueue are the Backups that Velero's queue holds or runs.
func backupsInQueue(ctx context.Context, c client.Client, namespace string) ([]velerov1api.Backup, error) {
	var backups []velerov1api.Backup
	err := listAll(ctx, c, namespace, &velerov1api.BackupList{}, func(l client.ObjectList) {
		for _, b := range l.(*velerov1api.BackupList).Items {
			switch b.Status.Phase {
			case velerov1api.BackupPhaseQueued, velerov1api.BackupPhaseReadyToStart, velerov1api.BackupPhaseInProgress:
				backups = append(backups, b)
			}
		}
	})
	return backups, err
}

// explain writes why the parent of s waits; queue are the Backups Velero's
// queue holds or runs, for a Queued Backup; stuck when Velero last wrote
// to a ReadyToStart one.
func explain(w io.Writer, s view.Snapshot, queue []velerov1api.Backup, stuck stuckSince) {
	sum := view.Summarize(s)
	phase := cmp.Or(s.Phase, "New")
	fmt.Fprintf(w, "%s %s/%s is %s: %d operation(s), %d completed, %d failed, %d unfinished",
		s.Parent.Kind, s.Parent.Namespace, s.Parent.Name, phase, sum.Total, sum.Completed, sum.Failed, sum.Running)
	if waiting := sum.WaitingString(); waiting != "" && phase != string(velerov1api.BackupPhaseQueued) {
		fmt.Fprintf(w, ", waiting for %s", waiting)
	}
	fmt.Fprintln(w, ".")

	switch velerov1api.BackupPhase(phase) {
	case velerov1api.BackupPhaseQueued:
		explainQueued(w, s, queue)
	case velerov1api.BackupPhaseReadyToStart:
		explainReadyToStart(w, s, stuck)
	}

	listed := 0
	for i := range s.Operations {
		op := &s.Operations[i]
		if op.Status.Phase == itemopsv1alpha1.OperationPhaseCompleted {
			continue
		}
		listed++
		fmt.Fprintf(w, "\n%s\n", operationHeading(op))
		for _, line := range operationReasons(op) {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	if missing := sum.Total - len(s.Operations); missing > 0 {
		fmt.Fprintf(w, "\n%d operation(s) Velero counted are not ItemOperations yet: itemops creates them once Velero has uploaded the operations file.\n", missing)
	}
	if listed == 0 && sum.Running == 0 && sum.Total > 0 {
		fmt.Fprintln(w, "\nEvery operation has completed.")
	}
}

// explainReadyToStart says why a Backup is ReadyToStart: about to start,
// or left there by a restart of velero server. Velero v1.18's backup
// controller starts a Backup only as it becomes ReadyToStart (an update
// event), and velero server at its start fails only InProgress Backups: one
// that was ReadyToStart when the server stopped stays so for good, and
// holds a place of --concurrent-backups.
func explainReadyToStart(w io.Writer, s view.Snapshot, stuck stuckSince) {
	ns, name := s.Parent.Namespace, s.Parent.Name
	if stuck.since.IsZero() || stuck.now.Sub(stuck.since) < readyToStartGrace {
		fmt.Fprintln(w, "\nVelero has taken it from its queue; its backup controller starts it next. If it stays so, check that velero server runs:\n  kubectl -n "+
			ns+" logs deploy/velero")
		return
	}
	fmt.Fprintf(w, "\nwaiting for ReadyToStart: it has been ReadyToStart since %s (Velero's last write to it), and Velero's backup controller "+
		"starts a Backup only as it becomes ReadyToStart: a restart of velero server left it there, and it holds one of the backups "+
		"Velero may run at once (--concurrent-backups).\n", stuck.since.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "  Any change to it makes Velero's backup controller look at it again and start it:\n    kubectl -n %s annotate backup %s itemops.io/restarted-at=%s --overwrite\n",
		ns, name, stuck.now.UTC().Format("20060102T150405Z"))
}

func explainQueued(w io.Writer, s view.Snapshot, queue []velerov1api.Backup) {
	var ahead, running []string
	slices.SortFunc(queue, func(a, b velerov1api.Backup) int {
		return cmp.Or(cmp.Compare(a.Status.QueuePosition, b.Status.QueuePosition), a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
			strings.Compare(a.Name, b.Name))
	})
	for _, b := range queue {
		switch {
		case b.Name == s.Parent.Name:
		case b.Status.Phase == velerov1api.BackupPhaseQueued && b.Status.QueuePosition < s.QueuePosition:
			ahead = append(ahead, fmt.Sprintf("%s (#%d)", b.Name, b.Status.QueuePosition))
		case b.Status.Phase != velerov1api.BackupPhaseQueued:
			running = append(running, fmt.Sprintf("%s (%s)", b.Name, b.Status.Phase))
		}
	}
	fmt.Fprintf(w, "\nwaiting for Queued: it is #%d in Velero's backup queue", s.QueuePosition)
	if len(ahead) > 0 {
		fmt.Fprintf(w, ", behind %s", strings.Join(ahead, ", "))
	}
	if len(running) > 0 {
		fmt.Fprintf(w, "; running now: %s", strings.Join(running, ", "))
	}
	fmt.Fprintln(w, ".")
	fmt.Fprintln(w, "  It starts when Velero may run one more backup (velero server's --concurrent-backups) and no running backup "+
		"includes one of its namespaces. Its operations appear once it runs.")
}

// operationHeading is one line naming an operation: name, item, plugin,
// phase, progress and rate.
func operationHeading(op *itemopsv1alpha1.ItemOperation) string {
	st := op.Status
	parts := []string{fmt.Sprintf("%s (%s, %s)", op.Name, view.Printable(view.ItemOf(op)), view.Printable(op.MoverName())),
		string(cmp.Or(st.Phase, itemopsv1alpha1.OperationPhaseNew))}
	if st.Progress != "" {
		parts = append(parts, view.Printable(st.Progress))
	}
	if st.Throughput != "" && !st.Phase.IsTerminal() {
		parts = append(parts, view.Printable(st.Throughput))
	}
	return strings.Join(parts, "  ")
}

// operationReasons are the lines that say why an operation is where it is.
func operationReasons(op *itemopsv1alpha1.ItemOperation) []string {
	st := op.Status
	if st.Phase.IsTerminal() {
		return []string{fmt.Sprintf("%s: %s", strings.ToLower(string(st.Phase)), view.Printable(cmp.Or(st.Error, "no error recorded")))}
	}
	var lines []string
	if c := meta.FindStatusCondition(st.Conditions, itemopsv1alpha1.ConditionWaiting); c != nil && c.Status == metav1.ConditionTrue {
		lines = append(lines, fmt.Sprintf("waiting for %s: %s", c.Reason, view.Printable(c.Message)))
	}
	if c := meta.FindStatusCondition(st.Conditions, itemopsv1alpha1.ConditionProgressing); c != nil && c.Status == metav1.ConditionFalse {
		lines = append(lines, fmt.Sprintf("progress cannot be read (%s): %s", c.Reason, view.Printable(c.Message)))
	}
	if c := meta.FindStatusCondition(st.Conditions, itemopsv1alpha1.ConditionCanceled); c != nil && c.Status == metav1.ConditionTrue {
		lines = append(lines, fmt.Sprintf("cancel requested (%s), not ended yet: %s", c.Reason, view.Printable(c.Message)))
	} else if op.Spec.Cancel {
		lines = append(lines, "cancel requested: itemops has not asked the plugin yet")
	}
	if len(lines) == 0 {
		lines = append(lines, movement(op))
	}
	return lines
}

// movement says how an operation that nothing holds moves: moving only
// when its progress moved over the last minute (its rate), else since when
// nothing has moved; never moving without progress.
func movement(op *itemopsv1alpha1.ItemOperation) string {
	st := op.Status
	said := ""
	if st.Description != "" {
		said = "; the plugin says: " + view.Printable(st.Description)
	}
	if st.UnitsPerSecond > 0 && st.Throughput != "" {
		return "moving at " + view.Printable(st.Throughput) + said
	}
	if st.LastProgressTime != nil {
		return "no progress since " + st.LastProgressTime.UTC().Format(time.RFC3339) + " (nothing found holding it yet)" + said
	}
	return "no progress read yet" + said
}
