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

package velerochaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/veleroenv"
)

// invariants are what the end state must show, as figures.
type invariants struct {
	// phases: how many Backups and Restores ended in each phase, e.g.
	// "Backup Completed"; failedBy: Velero's reasons for those it failed.
	phases   map[string]int
	failedBy []string
	// deleted: Backups gone after a DeleteBackupRequest.
	deleted int
	// resynced: Backups deleted on request whose name Velero's backup sync
	// gave to a new Backup made from what the bucket still held.
	resynced []string
	// stranded: Backups a killed velero server left ReadyToStart, which
	// Velero v1.18 never starts again.
	stranded   []string
	operations int
	// What must stay zero.
	wrongPhase, notEnded, fileDisagrees, lost, duplicated, cancelledTwice, unreadable int
	leftPlugins                                                                       []int
	selfExits                                                                         int
	goroutines                                                                        []string
	// details say which operation, Backup or Restore broke an invariant.
	details []string
}

func (inv *invariants) fail(counter *int, format string, args ...any) {
	*counter++
	inv.details = append(inv.details, fmt.Sprintf(format, args...))
}

func (inv *invariants) failures() []string {
	out := append([]string{}, inv.details...)
	if len(inv.leftPlugins) > 0 {
		out = append(out, fmt.Sprintf("itemops' plugin processes left after shutdown: %v", inv.leftPlugins))
	}
	return out
}

// parent is what check needs of a Backup or a Restore.
type parent struct {
	kind, name, uid string
	phase           string
	attempted       int
	// errors Velero logged; failure: its reason for failing it.
	errors  int
	failure string
	// records of its operations file, when it ended Completed or
	// PartiallyFailed: operation ID and phase.
	records map[string]itemoperation.OperationPhase
	// recordsErr: the file could not be read.
	recordsErr error
}

// check compares every Backup and Restore with its ItemOperations, its
// operations file and Velero's rules.
func check(ctx context.Context, t testing.TB, load *workload) *invariants {
	t.Helper()
	inv := &invariants{phases: map[string]int{}}
	list := &itemopsv1alpha1.ItemOperationList{}
	if err := env.Client.List(ctx, list, client.InNamespace(envtest.VeleroNamespace)); err != nil {
		t.Fatal(err)
	}
	inv.operations = len(list.Items)
	byParent := map[string][]itemopsv1alpha1.ItemOperation{}
	for _, op := range list.Items {
		key := string(op.Spec.Parent.Kind) + "/" + op.Spec.Parent.Name
		byParent[key] = append(byParent[key], op)
	}

	for _, name := range load.backupNames() {
		b := &velerov1api.Backup{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: name}, b)
		if apierrors.IsNotFound(err) {
			load.mu.Lock()
			requested := load.deleteRequested[name]
			load.mu.Unlock()
			if !requested {
				inv.fail(&inv.lost, "Backup %s is gone, though no one asked to delete it", name)
			}
			inv.deleted++
			// Its operations end too: cancelled, or done before.
			for _, op := range byParent["Backup/"+name] {
				if !op.Status.Phase.IsTerminal() {
					inv.fail(&inv.notEnded, "operation %s of the deleted Backup %s is %q", op.Spec.OperationID, name, op.Status.Phase)
				}
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		load.mu.Lock()
		requested, created := load.deleteRequested[name], load.uids[name]
		load.mu.Unlock()
		if b.UID != created {
			// Not the Backup the workload made: one of its name that
			// Velero's backup sync made from what the bucket held.
			if !requested {
				inv.fail(&inv.lost, "Backup %s was replaced (UID %s, created as %s), though no one asked to delete it", name, b.UID, created)
			}
			inv.resynced = append(inv.resynced, fmt.Sprintf("Backup %s: deleted on request, then made again by Velero's backup sync from the bucket, %s", name, b.Status.Phase))
			continue
		}
		if load.isStranded(b) {
			// Never started: Velero made no operation for it.
			inv.stranded = append(inv.stranded, name)
			inv.phases["Backup ReadyToStart"]++
			for _, op := range byParent["Backup/"+name] {
				inv.fail(&inv.wrongPhase, "operation %s of Backup %s, which Velero never started, exists (%s)", op.Spec.OperationID, name, op.Status.Phase)
			}
			continue
		}
		p := parent{kind: "Backup", name: name, uid: string(b.UID), phase: string(b.Status.Phase),
			attempted: b.Status.BackupItemOperationsAttempted, errors: b.Status.Errors, failure: b.Status.FailureReason}
		if b.Status.Phase == velerov1api.BackupPhaseCompleted || b.Status.Phase == velerov1api.BackupPhasePartiallyFailed {
			recs, err := veleroenv.ReadBackupOperations(velero.BucketDir, name)
			p.records, p.recordsErr = map[string]itemoperation.OperationPhase{}, err
			for _, rec := range recs {
				p.records[rec.Spec.OperationID] = rec.Status.Phase
			}
		}
		inv.parent(p, byParent["Backup/"+name])
		if out, err := velero.Describe("backup", name); err != nil || !strings.Contains(out, "Phase:") {
			inv.fail(&inv.unreadable, "velero backup describe --details %s: %v\n%s", name, err, out)
		}
	}
	for _, name := range load.restoreNames() {
		r := &velerov1api.Restore{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: name}, r); err != nil {
			t.Fatal(err)
		}
		p := parent{kind: "Restore", name: name, uid: string(r.UID), phase: string(r.Status.Phase),
			attempted: r.Status.RestoreItemOperationsAttempted, errors: r.Status.Errors, failure: r.Status.FailureReason}
		if r.Status.Phase == velerov1api.RestorePhaseCompleted || r.Status.Phase == velerov1api.RestorePhasePartiallyFailed {
			recs, err := veleroenv.ReadRestoreOperations(velero.BucketDir, name)
			p.records, p.recordsErr = map[string]itemoperation.OperationPhase{}, err
			for _, rec := range recs {
				p.records[rec.Spec.OperationID] = rec.Status.Phase
			}
		}
		inv.parent(p, byParent["Restore/"+name])
	}

	// Cancel reached every sample operation at most once.
	store, err := sim.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(id, "volume-") {
			continue
		}
		if st, err := store.Load(id); err == nil && st.Cancels > 1 {
			inv.fail(&inv.cancelledTwice, "operation %s (%s) was cancelled %d times", id, st.Item, st.Cancels)
		}
	}
	return inv
}

// parent checks one Backup or Restore against its ItemOperations: ended,
// in the phase Velero's rules give its operations, and its operations
// file agreeing with them.
func (inv *invariants) parent(p parent, ops []itemopsv1alpha1.ItemOperation) {
	inv.phases[p.kind+" "+p.phase]++
	var mine []itemopsv1alpha1.ItemOperation
	for _, op := range ops {
		if op.Spec.Parent.UID == p.uid {
			mine = append(mine, op)
		}
	}
	byID := map[string]int{}
	completed := 0
	for _, op := range mine {
		byID[op.Spec.OperationID]++
		if byID[op.Spec.OperationID] == 2 {
			inv.fail(&inv.duplicated, "operation %s of %s %s has more than one ItemOperation", op.Spec.OperationID, p.kind, p.name)
		}
		switch {
		case !op.Status.Phase.IsTerminal():
			inv.fail(&inv.notEnded, "operation %s of %s %s (%s) is %q", op.Spec.OperationID, p.kind, p.name, p.phase, op.Status.Phase)
		case op.Status.Phase == itemopsv1alpha1.OperationPhaseCompleted:
			completed++
		}
	}
	if p.failure != "" {
		inv.failedBy = append(inv.failedBy, fmt.Sprintf("%s %s: %s", p.kind, p.name, p.failure))
	}
	switch p.phase {
	case "Completed":
		if completed != p.attempted || len(byID) != p.attempted {
			inv.fail(&inv.wrongPhase, "%s %s is Completed with %d of %d operations completed (%d ItemOperations)", p.kind, p.name, completed, p.attempted, len(byID))
		}
	case "PartiallyFailed":
		if completed == p.attempted && len(byID) == p.attempted && p.errors == 0 {
			inv.fail(&inv.wrongPhase, "%s %s is PartiallyFailed, though all %d operations completed and Velero logged no error", p.kind, p.name, p.attempted)
		}
	case "Failed", "FailedValidation":
		// Velero failed it itself (a server restart during the backup, the
		// bucket away as it uploaded); its reason is listed.
	default:
		inv.fail(&inv.wrongPhase, "%s %s ended the run %s", p.kind, p.name, p.phase)
	}
	if p.records == nil {
		return
	}
	if p.recordsErr != nil {
		if p.attempted == 0 && len(mine) == 0 && errors.Is(p.recordsErr, fs.ErrNotExist) {
			// No operation to record, and no file: Velero's one upload of
			// it may meet the bucket away, which it logs and goes on.
			return
		}
		inv.fail(&inv.fileDisagrees, "the operations file of %s %s (%s, %d operations attempted, %d ItemOperations, %d errors) cannot be read: %v",
			p.kind, p.name, p.phase, p.attempted, len(mine), p.errors, p.recordsErr)
		return
	}
	if len(p.records) != p.attempted {
		inv.fail(&inv.fileDisagrees, "the operations file of %s %s holds %d operations, %d attempted", p.kind, p.name, len(p.records), p.attempted)
	}
	phaseOf := map[string]itemopsv1alpha1.OperationPhase{}
	for _, op := range mine {
		phaseOf[op.Spec.OperationID] = op.Status.Phase
	}
	for _, id := range slices.Sorted(maps.Keys(p.records)) {
		got, ok := phaseOf[id]
		switch {
		case !ok:
			inv.fail(&inv.lost, "operation %s of %s %s is in its file but has no ItemOperation", id, p.kind, p.name)
		case !veleroenv.WrittenAs(p.records[id], got):
			inv.fail(&inv.fileDisagrees, "operation %s of %s %s is %q in its file and %q as an ItemOperation", id, p.kind, p.name, p.records[id], got)
		}
	}
}

func backupEnded(phase velerov1api.BackupPhase) bool {
	switch phase {
	case velerov1api.BackupPhaseCompleted, velerov1api.BackupPhasePartiallyFailed, velerov1api.BackupPhaseFailed, velerov1api.BackupPhaseFailedValidation:
		return true
	}
	return false
}

func restoreEnded(phase velerov1api.RestorePhase) bool {
	switch phase {
	case velerov1api.RestorePhaseCompleted, velerov1api.RestorePhasePartiallyFailed, velerov1api.RestorePhaseFailed, velerov1api.RestorePhaseFailedValidation:
		return true
	}
	return false
}

// result is a run's report.
type result struct {
	cfg     config
	faults  faultCounts
	inv     *invariants
	settled time.Duration
	ran     time.Duration
	load    *workload
}

func (r result) markdown() string {
	var b strings.Builder
	inv := r.inv
	fmt.Fprintf(&b, "# Chaos with the real Velero\n\n%s of faults (seed %d), %d Backups started, %d Restores; everything ended %s after the last fault; the run took %s.\n\n",
		r.cfg.duration, r.cfg.seed, len(r.load.backupNames()), len(r.load.restoreNames()), r.settled.Round(time.Second), r.ran.Round(time.Second))
	b.WriteString("## Faults\n\n| fault | drawn | its moment came |\n|---|---|---|\n")
	for _, f := range faultOrder {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", f, r.faults.drawn[f], r.faults.injected[f])
	}
	b.WriteString("\n## How they ended\n\n| | |\n|---|---|\n")
	for _, k := range slices.Sorted(maps.Keys(inv.phases)) {
		fmt.Fprintf(&b, "| %s | %d |\n", k, inv.phases[k])
	}
	fmt.Fprintf(&b, "| Backups deleted by a DeleteBackupRequest | %d |\n| ItemOperations | %d |\n", inv.deleted, inv.operations)
	b.WriteString("\n## Invariants\n\n| invariant | violations |\n|---|---|\n")
	for _, row := range []struct {
		name string
		n    int
	}{
		{"a Backup or Restore in a phase its operations do not give it, by Velero's rules", inv.wrongPhase},
		{"an operation not ended (or a parent still waiting) once everything settled", inv.notEnded},
		{"an operations file disagreeing with the ItemOperations", inv.fileDisagrees},
		{"an operation lost", inv.lost},
		{"an operation with two ItemOperations", inv.duplicated},
		{"an operation cancelled twice", inv.cancelledTwice},
		{"`velero backup describe --details` unreadable", inv.unreadable},
		{"itemops' plugin processes left after it stopped", len(inv.leftPlugins)},
	} {
		fmt.Fprintf(&b, "| %s | %d |\n", row.name, row.n)
	}
	fmt.Fprintf(&b, "\nReplicas that exited on their own and were started again: %d. Goroutines of each replica, idle at the end: %s.\n",
		inv.selfExits, strings.Join(inv.goroutines, ", "))
	if len(inv.failedBy) > 0 {
		b.WriteString("\n## Failed by Velero itself\n\n")
		for _, f := range inv.failedBy {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	if len(inv.stranded) > 0 {
		b.WriteString("\n## Left ReadyToStart by velero server's restart\n\n" +
			"Velero v1.18 starts a ReadyToStart Backup only when it enters that phase, and at start-up fails only InProgress ones: " +
			"these were ReadyToStart as the server was killed, and stay so until deleted.\n\n")
		for _, n := range inv.stranded {
			fmt.Fprintf(&b, "- Backup %s\n", n)
		}
	}
	if len(inv.resynced) > 0 {
		b.WriteString("\n## Deleted, then synced back by Velero\n\n")
		for _, r := range inv.resynced {
			fmt.Fprintf(&b, "- %s\n", r)
		}
	}
	if len(inv.details) > 0 {
		b.WriteString("\n## Violations\n\n")
		for _, d := range inv.details {
			fmt.Fprintf(&b, "- %s\n", d)
		}
	}
	return b.String()
}
