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

package view

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	meta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/progress"
)

// Parent names the Backup or Restore a view is about.
type Parent struct {
	Kind      itemopsv1alpha1.ParentKind
	Namespace string
	Name      string
}

// String is kind/name in lower case, as kubectl names objects: backup/nightly.
func (p Parent) String() string { return strings.ToLower(string(p.Kind)) + "/" + p.Name }

// Snapshot is what the API server said about a parent and its operations at
// one moment.
type Snapshot struct {
	Parent Parent
	// Found is false while the parent does not exist (or no longer does).
	Found bool
	UID   types.UID
	// Phase is the parent's status.phase.
	Phase   string
	Created time.Time
	// Attempted is how many operations Velero counted for the parent; it may
	// be ahead of the ItemOperations while itemops is still reading them.
	Attempted int
	// QueuePosition is a Queued Backup's place in Velero's queue (v1.18).
	QueuePosition int
	// Operations are the parent's ItemOperations (its UID, not only its name).
	Operations []itemopsv1alpha1.ItemOperation
}

// BackupSnapshot is the snapshot of a Backup and the operations among ops that belong to it.
func BackupSnapshot(b *velerov1api.Backup, ops []itemopsv1alpha1.ItemOperation) Snapshot {
	s := Snapshot{Parent: Parent{Kind: itemopsv1alpha1.ParentKindBackup, Namespace: b.Namespace, Name: b.Name},
		Found: true, UID: b.UID, Phase: string(b.Status.Phase), Created: b.CreationTimestamp.Time,
		Attempted: b.Status.BackupItemOperationsAttempted, QueuePosition: b.Status.QueuePosition}
	s.Operations = ownedBy(s.Parent, b.UID, ops)
	return s
}

// RestoreSnapshot is the snapshot of a Restore and the operations among ops that belong to it.
func RestoreSnapshot(r *velerov1api.Restore, ops []itemopsv1alpha1.ItemOperation) Snapshot {
	s := Snapshot{Parent: Parent{Kind: itemopsv1alpha1.ParentKindRestore, Namespace: r.Namespace, Name: r.Name},
		Found: true, UID: r.UID, Phase: string(r.Status.Phase), Created: r.CreationTimestamp.Time,
		Attempted: r.Status.RestoreItemOperationsAttempted}
	s.Operations = ownedBy(s.Parent, r.UID, ops)
	return s
}

// ownedBy keeps the operations of the parent with that UID, sorted by item:
// a Backup deleted and created again under the same name has other operations.
func ownedBy(p Parent, uid types.UID, ops []itemopsv1alpha1.ItemOperation) []itemopsv1alpha1.ItemOperation {
	var owned []itemopsv1alpha1.ItemOperation
	for _, op := range ops {
		if op.Spec.Parent.Kind == p.Kind && op.Spec.Parent.Name == p.Name && op.Spec.Parent.UID == string(uid) {
			owned = append(owned, op)
		}
	}
	slices.SortFunc(owned, func(a, b itemopsv1alpha1.ItemOperation) int {
		return cmp.Or(cmp.Compare(ItemOf(&a), ItemOf(&b)), cmp.Compare(a.MoverName(), b.MoverName()), cmp.Compare(a.Name, b.Name))
	})
	return owned
}

// Amount is how much of something is done.
type Amount struct {
	Units       string
	Done, Total int64
}

// String is "4.2Gi/10Gi" for bytes, "12/40 files" for other units.
func (a Amount) String() string {
	s := progress.Format(a.Done, a.Total, a.Units)
	// Drop the percentage: columns and bars show it on their own.
	if i := strings.LastIndex(s, " ("); i >= 0 {
		s = s[:i]
	}
	if a.Total > 0 && !progress.IsBytes(a.Units) && a.Units != "" && !strings.HasSuffix(s, a.Units) {
		s += " " + a.Units
	}
	return s
}

// Summary is one parent's operations added up.
type Summary struct {
	Parent  Parent
	Found   bool
	UID     types.UID
	Phase   string
	Created time.Time

	// Total is the number of operations: those known, or as many as Velero
	// attempted when more, and the mirrors of its file-system backups.
	Total     int
	Completed int
	// Failed counts Failed and Canceled operations, as Velero counts them.
	Failed  int
	Running int
	Stalled int
	// Waiting counts the unfinished operations by what they wait for
	// (status.waitingFor).
	Waiting map[string]int
	// QueuePosition is a Queued Backup's place in Velero's queue.
	QueuePosition int
	// Rate is how many bytes a second the unfinished operations that count
	// bytes move together, over about the last minute.
	Rate float64
	// Started is when the first operation started, and Ended when the last
	// one ended (zero while one runs): the time the operations took.
	Started, Ended time.Time
	// Amounts are the work done and to do, by unit, bytes first.
	Amounts []Amount
	// Fraction is how much of the whole is done, from 0 to 1.
	Fraction float64
	// ETA is the latest estimated completion of an unfinished operation.
	ETA time.Time
	// Plugins are the plugins that started the operations, and the kinds
	// of the Velero objects mirrors follow (PodVolumeBackup), sorted.
	Plugins []string
	// NotDurable are the PersistentVolumes, sorted, whose native volume
	// snapshot ended Failed or Canceled: a restore cannot use them.
	NotDurable []string
}

// Summarize adds up a snapshot's operations.
//
// The overall fraction weighs operations by bytes when every operation counts
// bytes; otherwise each operation weighs the same. A finished operation counts
// as fully done whatever its counts say, so the whole reaches 1 when every
// operation has ended.
func Summarize(s Snapshot) Summary {
	// Velero's count of attempted operations holds no mirror of a
	// file-system backup: those come on top.
	mirrors := 0
	for i := range s.Operations {
		if s.Operations[i].IsMirror() {
			mirrors++
		}
	}
	sum := Summary{Parent: s.Parent, Found: s.Found, UID: s.UID, Phase: s.Phase, Created: s.Created,
		Total: mirrors + max(len(s.Operations)-mirrors, s.Attempted), QueuePosition: s.QueuePosition}
	if s.Phase == string(velerov1api.BackupPhaseQueued) && s.Parent.Kind == itemopsv1alpha1.ParentKindBackup {
		sum.Waiting = map[string]int{string(velerov1api.BackupPhaseQueued): 1}
	}
	running := false
	amounts := map[string]*Amount{}
	allBytes := len(s.Operations) > 0
	var doneBytes, totalBytes int64
	var fractions float64
	plugins := map[string]bool{}
	for i := range s.Operations {
		op := &s.Operations[i]
		st := op.Status
		plugins[Printable(op.Mover())] = true
		began := st.Created
		if st.Started != nil {
			began = st.Started
		}
		if began != nil && (sum.Started.IsZero() || began.Before(&metav1.Time{Time: sum.Started})) {
			sum.Started = began.Time
		}
		if st.CompletionTimestamp != nil && st.CompletionTimestamp.After(sum.Ended) {
			sum.Ended = st.CompletionTimestamp.Time
		}
		switch st.Phase {
		case itemopsv1alpha1.OperationPhaseCompleted:
			sum.Completed++
		case itemopsv1alpha1.OperationPhaseFailed, itemopsv1alpha1.OperationPhaseCanceled:
			sum.Failed++
			if op.Spec.Plugin.Kind == itemopsv1alpha1.PluginKindVolumeSnapshotter {
				sum.NotDurable = append(sum.NotDurable, Printable(op.Spec.Resource.Name))
			}
		default:
			sum.Running++
			running = true
			if stalled(op) {
				sum.Stalled++
			}
			if w := Printable(st.WaitingFor); w != "" {
				if sum.Waiting == nil {
					sum.Waiting = map[string]int{}
				}
				sum.Waiting[w]++
			}
			if st.Throughput != "" && progress.IsBytes(st.OperationUnits) {
				sum.Rate += float64(st.UnitsPerSecond)
			}
			if st.EstimatedCompletion != nil && st.EstimatedCompletion.After(sum.ETA) {
				sum.ETA = st.EstimatedCompletion.Time
			}
		}
		units := unitsOf(Printable(st.OperationUnits))
		if st.NTotal > 0 || st.NCompleted > 0 {
			a := amounts[units]
			if a == nil {
				a = &Amount{Units: units}
				amounts[units] = a
			}
			a.Done += st.NCompleted
			a.Total += st.NTotal
		}
		if !progress.IsBytes(units) || st.NTotal <= 0 {
			allBytes = false
		} else {
			totalBytes += st.NTotal
			doneBytes += min(st.NCompleted, st.NTotal)
			if st.Phase.IsTerminal() {
				doneBytes += st.NTotal - min(st.NCompleted, st.NTotal)
			}
		}
		fractions += fraction(op)
	}
	if running || len(s.Operations) < sum.Total {
		sum.Ended = time.Time{}
	}
	switch {
	case allBytes && totalBytes > 0:
		sum.Fraction = float64(doneBytes) / float64(totalBytes)
	case sum.Total > 0:
		// Operations Velero attempted but itemops has not listed yet count as not started.
		sum.Fraction = fractions / float64(sum.Total)
	}
	if allBytes && sum.Total > len(s.Operations) {
		// Bytes of the operations not listed yet are unknown; count them by number.
		sum.Fraction = sum.Fraction * float64(len(s.Operations)) / float64(sum.Total)
	}
	for _, a := range amounts {
		sum.Amounts = append(sum.Amounts, *a)
	}
	slices.SortFunc(sum.Amounts, func(a, b Amount) int {
		return cmp.Or(-cmp.Compare(boolInt(progress.IsBytes(a.Units)), boolInt(progress.IsBytes(b.Units))), cmp.Compare(a.Units, b.Units))
	})
	for p := range plugins {
		sum.Plugins = append(sum.Plugins, p)
	}
	slices.Sort(sum.Plugins)
	slices.Sort(sum.NotDurable)
	return sum
}

// NotDurableWarning is the warning about a summary's snapshots that did
// not become durable, or "" when there are none.
func NotDurableWarning(s Summary) string {
	if len(s.NotDurable) == 0 {
		return ""
	}
	return fmt.Sprintf("Warning: %s: the volume snapshots of PersistentVolumes %s did not become durable; a restore cannot use them",
		s.Parent, strings.Join(s.NotDurable, ", "))
}

// fraction is how much of one operation is done, from 0 to 1.
func fraction(op *itemopsv1alpha1.ItemOperation) float64 {
	st := op.Status
	switch {
	case st.Phase.IsTerminal():
		return 1
	case st.NTotal <= 0:
		return 0
	}
	return min(float64(max(st.NCompleted, 0))/float64(st.NTotal), 1)
}

// unitsOf names bytes one way, however the plugin spells them.
func unitsOf(units string) string {
	if progress.IsBytes(units) {
		return "bytes"
	}
	return units
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stalled reports whether itemops saw no progress for its stall period.
func stalled(op *itemopsv1alpha1.ItemOperation) bool {
	return meta.IsStatusConditionTrue(op.Status.Conditions, itemopsv1alpha1.ConditionStalled)
}

// ItemOf is the operation's object as namespace/name.
func ItemOf(op *itemopsv1alpha1.ItemOperation) string {
	item := op.Spec.Resource.Name
	if op.Spec.Resource.Namespace != "" {
		item = op.Spec.Resource.Namespace + "/" + item
	}
	if op.Spec.Mirror != nil && op.Spec.Mirror.Volume != "" {
		// A pod's volume, as Velero names it: pod:volume.
		item += ":" + op.Spec.Mirror.Volume
	}
	return item
}

// Exit codes of a watch, by how the parent ended.
const (
	ExitCompleted       = 0
	ExitPartiallyFailed = 1
	ExitFailed          = 2
	// ExitGone: the parent does not exist, was deleted, or is being deleted.
	ExitGone = 3
	// ExitInterrupted: the watch was stopped (Ctrl-C) before the parent ended.
	ExitInterrupted = 130
)

// Ended reports whether a parent in this snapshot is past its operations
// and finalization, and the exit code that says how it ended. A parent that
// has not reached its operations yet (New, Queued, InProgress, …) has not ended.
func Ended(s Snapshot) (code int, ended bool) {
	if !s.Found {
		return ExitGone, true
	}
	switch s.Phase {
	case string(velerov1api.BackupPhaseCompleted):
		return ExitCompleted, true
	case string(velerov1api.BackupPhasePartiallyFailed):
		return ExitPartiallyFailed, true
	case string(velerov1api.BackupPhaseFailed), string(velerov1api.BackupPhaseFailedValidation):
		return ExitFailed, true
	case string(velerov1api.BackupPhaseDeleting):
		return ExitGone, true
	}
	return 0, false
}

// WaitingString is what a summary's unfinished operations wait for, each
// cause with its count when more than one: "NodeAgentBusy×2, NoProgress";
// a Queued Backup's place in Velero's queue: "Queued (#3)".
func (s Summary) WaitingString() string {
	var causes []string
	for cause := range s.Waiting {
		causes = append(causes, cause)
	}
	slices.Sort(causes)
	for i, cause := range causes {
		switch {
		case cause == string(velerov1api.BackupPhaseQueued) && s.QueuePosition > 0:
			causes[i] = fmt.Sprintf("%s (#%d)", cause, s.QueuePosition)
		case s.Waiting[cause] > 1:
			causes[i] = fmt.Sprintf("%s×%d", cause, s.Waiting[cause])
		}
	}
	return strings.Join(causes, ", ")
}

// RateString is the summary's rate in bytes a second, "" when none is known.
func (s Summary) RateString() string {
	if s.Rate <= 0 {
		return ""
	}
	return progress.FormatRate(s.Rate, "bytes")
}

// Elapsed is how long the operations have run, to now or to the last end.
func (s Summary) Elapsed(now time.Time) time.Duration {
	if s.Started.IsZero() {
		return 0
	}
	end := now
	if !s.Ended.IsZero() {
		end = s.Ended
	}
	return max(end.Sub(s.Started), 0)
}
