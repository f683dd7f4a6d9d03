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
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

// running is an operation that moved done of total bytes in the minute
// before t0, measured at t0.
func running(done, total int64) *itemopsv1alpha1.ItemOperation {
	return &itemopsv1alpha1.ItemOperation{
		ObjectMeta: metav1.ObjectMeta{Name: "op"},
		Status: itemopsv1alpha1.ItemOperationStatus{
			Phase: itemopsv1alpha1.OperationPhaseInProgress, NCompleted: done, NTotal: total, OperationUnits: "bytes",
			Started: &metav1.Time{Time: t0.Add(-time.Minute)}, Updated: &metav1.Time{Time: t0},
		},
	}
}

func TestExtrapolate(t *testing.T) {
	stalled := running(600, 6000)
	stalled.Status.Conditions = []metav1.Condition{{Type: itemopsv1alpha1.ConditionStalled, Status: metav1.ConditionTrue}}
	polledOnly := running(600, 6000)
	polledOnly.Status.Updated = nil
	polledOnly.Status.LastPolled = &metav1.Time{Time: t0}
	noStart := running(600, 6000)
	noStart.Status.Started = nil
	completed := running(6000, 6000)
	completed.Status.Phase = itemopsv1alpha1.OperationPhaseCompleted

	for _, c := range []struct {
		name         string
		op           *itemopsv1alpha1.ItemOperation
		at           time.Duration
		horizon      time.Duration
		done         int64
		extrapolated bool
	}{
		// 600 in 60 s is 10 a second.
		{"advances at the measured rate", running(600, 6000), 5 * time.Second, time.Minute, 650, true},
		{"from the poll when the plugin gives no time", polledOnly, 5 * time.Second, time.Minute, 650, true},
		{"no further than the horizon", running(600, 6000), 10 * time.Minute, time.Minute, 1200, true},
		{"never to the total", running(600, 1000), time.Hour, time.Hour, 999, true},
		{"not when at the total less one", running(999, 1000), time.Hour, time.Hour, 999, false},
		{"not before the measurement", running(600, 6000), -5 * time.Second, time.Minute, 600, false},
		{"not when stalled", stalled, 5 * time.Second, time.Minute, 600, false},
		{"not without a start", noStart, 5 * time.Second, time.Minute, 600, false},
		{"not when finished", completed, 5 * time.Second, time.Minute, 6000, false},
		{"not when nothing was done", running(0, 6000), 5 * time.Second, time.Minute, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			o := Extrapolate(row(c.op), c.op, t0.Add(c.at), c.horizon)
			g.Expect(o.Done).To(Equal(c.done))
			g.Expect(o.Extrapolated).To(Equal(c.extrapolated))
			g.Expect(o.Amount()).To(HavePrefix(map[bool]string{true: "~", false: ""}[c.extrapolated]))
		})
	}
}

func TestSummarize(t *testing.T) {
	mirror := func(op itemopsv1alpha1.ItemOperation) itemopsv1alpha1.ItemOperation {
		op.Spec.Plugin = itemopsv1alpha1.PluginReference{}
		op.Spec.Mirror = &itemopsv1alpha1.MirrorReference{Kind: itemopsv1alpha1.MirrorKindPodVolumeBackup, Name: "b-x", UID: "u"}
		return op
	}
	op := func(phase itemopsv1alpha1.OperationPhase, done, total int64, units string) itemopsv1alpha1.ItemOperation {
		return itemopsv1alpha1.ItemOperation{Spec: itemopsv1alpha1.ItemOperationSpec{Plugin: itemopsv1alpha1.PluginReference{Name: "p/" + units}},
			Status: itemopsv1alpha1.ItemOperationStatus{Phase: phase, NCompleted: done, NTotal: total, OperationUnits: units}}
	}
	for _, c := range []struct {
		name      string
		attempted int
		ops       []itemopsv1alpha1.ItemOperation
		percent   int
		amounts   string
		counts    [4]int // total, completed, failed, running
	}{
		{"bytes weigh by bytes", 0, []itemopsv1alpha1.ItemOperation{
			op(itemopsv1alpha1.OperationPhaseInProgress, 1, 4, "bytes"), op(itemopsv1alpha1.OperationPhaseInProgress, 0, 4, "Bytes")},
			12, "[1/8]", [4]int{2, 0, 0, 2}},
		{"a finished operation counts whole", 0, []itemopsv1alpha1.ItemOperation{
			op(itemopsv1alpha1.OperationPhaseFailed, 1, 4, "bytes"), op(itemopsv1alpha1.OperationPhaseInProgress, 0, 4, "bytes")},
			50, "[1/8]", [4]int{2, 0, 1, 1}},
		{"other units weigh each operation the same", 0, []itemopsv1alpha1.ItemOperation{
			op(itemopsv1alpha1.OperationPhaseInProgress, 1, 2, "tables"), op(itemopsv1alpha1.OperationPhaseInProgress, 1, 100, "bytes")},
			25, "[1/100 1/2 tables]", [4]int{2, 0, 0, 2}},
		{"operations not listed yet count as not started", 4, []itemopsv1alpha1.ItemOperation{
			op(itemopsv1alpha1.OperationPhaseCompleted, 4, 4, "bytes"), op(itemopsv1alpha1.OperationPhaseCanceled, 0, 4, "bytes")},
			50, "[4/8]", [4]int{4, 1, 1, 0}},
		{"nothing yet", 3, nil, 0, "[]", [4]int{3, 0, 0, 0}},
		{"mirrors of file-system backups come on top of Velero's count", 2, []itemopsv1alpha1.ItemOperation{
			mirror(op(itemopsv1alpha1.OperationPhaseCompleted, 4, 4, "bytes")), mirror(op(itemopsv1alpha1.OperationPhaseInProgress, 0, 4, "bytes")),
			op(itemopsv1alpha1.OperationPhaseCompleted, 4, 4, "bytes")},
			50, "[8/12]", [4]int{4, 2, 0, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			s := Summarize(Snapshot{Found: true, Attempted: c.attempted, Operations: c.ops})
			g.Expect(int(s.Fraction * 100)).To(Equal(c.percent))
			g.Expect([4]int{s.Total, s.Completed, s.Failed, s.Running}).To(Equal(c.counts))
			var amounts []string
			for _, a := range s.Amounts {
				amounts = append(amounts, a.String())
			}
			g.Expect(fmt.Sprint(amounts)).To(Equal(c.amounts))
		})
	}
}

// Snapshots that ended Failed or Canceled are named, and only those: an
// item action's failed operation or a snapshot still copying is not.
func TestNotDurableSnapshotsAreNamed(t *testing.T) {
	g := NewWithT(t)
	op := func(kind itemopsv1alpha1.PluginKind, pv string, phase itemopsv1alpha1.OperationPhase) itemopsv1alpha1.ItemOperation {
		return itemopsv1alpha1.ItemOperation{
			Spec:   itemopsv1alpha1.ItemOperationSpec{Plugin: itemopsv1alpha1.PluginReference{Kind: kind, Name: "example.io/disks"}, Resource: itemopsv1alpha1.ResourceIdentifier{Name: pv}},
			Status: itemopsv1alpha1.ItemOperationStatus{Phase: phase},
		}
	}
	vs, bia := itemopsv1alpha1.PluginKindVolumeSnapshotter, itemopsv1alpha1.PluginKindBackupItemAction
	s := Summarize(Snapshot{Found: true, Parent: Parent{Kind: itemopsv1alpha1.ParentKindBackup, Name: "nightly"}, Operations: []itemopsv1alpha1.ItemOperation{
		op(vs, "pv-c", itemopsv1alpha1.OperationPhaseCanceled), op(vs, "pv-a", itemopsv1alpha1.OperationPhaseFailed),
		op(vs, "pv-ok", itemopsv1alpha1.OperationPhaseCompleted), op(vs, "pv-copying", itemopsv1alpha1.OperationPhaseInProgress),
		op(bia, "shop/data", itemopsv1alpha1.OperationPhaseFailed),
	}})
	g.Expect(s.NotDurable).To(Equal([]string{"pv-a", "pv-c"}))
	g.Expect(NotDurableWarning(s)).To(Equal("Warning: backup/nightly: the volume snapshots of PersistentVolumes pv-a, pv-c " +
		"did not become durable; a restore cannot use them"))
	g.Expect(NotDurableWarning(Summarize(Snapshot{Found: true}))).To(BeEmpty())
}

func TestEnded(t *testing.T) {
	for phase, want := range map[string]struct {
		code  int
		ended bool
	}{
		"New": {0, false}, "InProgress": {0, false}, "WaitingForPluginOperations": {0, false},
		"WaitingForPluginOperationsPartiallyFailed": {0, false}, "Finalizing": {0, false}, "FinalizingPartiallyFailed": {0, false},
		"Completed": {ExitCompleted, true}, "PartiallyFailed": {ExitPartiallyFailed, true}, "Failed": {ExitFailed, true},
		"FailedValidation": {ExitFailed, true}, "Deleting": {ExitGone, true},
	} {
		code, ended := Ended(Snapshot{Found: true, Phase: phase})
		if code != want.code || ended != want.ended {
			t.Errorf("%s: got %d, %t; want %d, %t", phase, code, ended, want.code, want.ended)
		}
	}
	if code, ended := Ended(Snapshot{}); code != ExitGone || !ended {
		t.Errorf("a parent not found: got %d, %t", code, ended)
	}
}

func TestVisibleKeepsUnfinishedOperationsFirst(t *testing.T) {
	g := NewWithT(t)
	var rows []Operation
	for i, phase := range []itemopsv1alpha1.OperationPhase{"Completed", "InProgress", "Completed", "Failed", "InProgress", "Completed"} {
		o := Operation{Name: fmt.Sprint(i), Item: fmt.Sprint(i), Phase: phase}
		if phase == "Failed" {
			o.Error = "broken"
		}
		rows = append(rows, o)
	}
	g.Expect(visible(rows, 7)).To(HaveLen(6), "everything fits")
	items := func(rs []Operation) []string {
		var s []string
		for _, r := range rs {
			s = append(s, r.Item)
		}
		return s
	}
	g.Expect(items(visible(rows, 5))).To(Equal([]string{"1", "3", "4", "  … 3 more operations (3 completed)"}))
	g.Expect(items(visible(rows, 3))).To(Equal([]string{"1", "  … 5 more operations (3 completed)"}))
}

// Plugins and whoever writes the bucket control an operation's error,
// units and identifiers: what kubectl itemops prints of them can neither
// drive the terminal (escape sequences, a carriage return over the line)
// nor reorder what is shown.
func TestPluginTextIsPrintable(t *testing.T) {
	cases := map[string]string{
		"copy failed: disk full":                              "copy failed: disk full",
		"\x1b]0;owned\x07title changed":                       "title changed",
		"\x1b[31mred\x1b[0m and \x1b[2J cleared":              "red and  cleared",
		"all good\rFAILED":                                    "all good FAILED",
		"bell\a and back\bspace":                              "bell? and back?space",
		"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\": "link",
		"evil\u202egnp.exe":                                   "evil?gnp.exe",
		"\u009b31m C1 CSI":                                    "?31m C1 CSI",
		"千 GiB, ü":                                            "千 GiB, ü",
	}
	for in, want := range cases {
		t.Run(fmt.Sprintf("%q", in), func(t *testing.T) {
			NewWithT(t).Expect(Printable(in)).To(Equal(want))
		})
	}

	g := NewWithT(t)
	op := running(1, 2)
	op.Spec.OperationID = "du-1\x1b[2K"
	op.Spec.Plugin.Name = "example.io/\x1b[8mhidden"
	op.Status.Error = "\x1b]0;owned\x07failed\r\x1b[1A"
	op.Status.OperationUnits = "bytes\x1b[5m"
	row := row(op)
	for _, s := range []string{row.ID, row.Plugin, row.Error, row.Units, row.Item} {
		g.Expect(s).NotTo(ContainSubstring("\x1b"))
		g.Expect(s).NotTo(ContainSubstring("\r"))
		g.Expect(s).NotTo(ContainSubstring("\x07"))
	}
	g.Expect(row.Error).To(Equal("failed "))
}
