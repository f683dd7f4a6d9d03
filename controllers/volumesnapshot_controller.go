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
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
	"github.com/itemops/itemops/internal/store"
)

// +kubebuilder:rbac:groups=velero.io,namespace=velero,resources=volumesnapshotlocations,verbs=get;list;watch

// SnapshotStore reads the native volume snapshots Velero recorded for a
// backup and the locations they were taken with; *store.Store is the real one.
type SnapshotStore interface {
	BackupVolumeSnapshots(ctx context.Context, backup *velerov1api.Backup) ([]store.VolumeSnapshot, error)
	MarkSnapshotsNotDurable(ctx context.Context, backup *velerov1api.Backup, pvs []string) error
	SnapshotLocations
}

// NonDurableSnapshots is what manage mode does with a Backup whose native
// snapshot did not become durable (docs/velero.md, "Native volume
// snapshots").
type NonDurableSnapshots string

const (
	// NonDurablePartiallyFail ends the Backup PartiallyFailed, with an
	// error per such snapshot, and says which volumes in Velero's files.
	NonDurablePartiallyFail NonDurableSnapshots = "PartiallyFail"
	// NonDurableWarn leaves the Backup as Velero ended it; only Events say.
	NonDurableWarn NonDurableSnapshots = "Warn"
)

var _ SnapshotStore = (*store.Store)(nil)

// Event reasons of the volume snapshot reconciler, on Backups.
const (
	reasonSnapshotsIngested    = "VolumeSnapshotsIngested"
	reasonSnapshotsUnreadable  = "VolumeSnapshotsFileUnreadable"
	reasonSnapshotIgnored      = "VolumeSnapshotRecordIgnored"
	reasonSnapshotsDurable     = "VolumeSnapshotsDurable"
	reasonSnapshotsNotDurable  = "VolumeSnapshotsNotDurable"
	reasonRestoreNotDurable    = "RestoreFromNonDurableSnapshots"
	snapshotResource           = "persistentvolumes"
	snapshotOperationKindInKey = "VolumeSnapshotter/"
)

// VolumeSnapshotReconciler follows the native volume snapshots of Backups
// until their data is durable: one ItemOperation of plugin kind
// VolumeSnapshotter per snapshot Velero recorded in
// <backup>-volumesnapshots.json.gz, the snapshot ID as operation ID, polled
// through the plugin's VolumeSnapshotter v2 Progress.
//
// Velero takes native snapshots with the v1 interface and does not wait for
// them: a Backup may be Completed while its snapshots still upload. So this
// reconciler never moves a Backup's phase, in either mode; it reports
// durability as ItemOperations and as events on the Backup.
type VolumeSnapshotReconciler struct {
	Client   client.Client
	Recorder record.EventRecorder
	Store    SnapshotStore
	Clock    clock.Clock
	// Stores reads a Backup's ItemOperations from the cache's store;
	// through Client when nil.
	Stores *kube.Stores
	// Manage lets the reconciler end a Backup PartiallyFailed as
	// NonDurable says; observe mode never writes to a Backup.
	Manage     bool
	NonDurable NonDurableSnapshots

	reported sync.Map // backup namespace/name -> uid and summary last reported, so each is told once
}

// reportedSummary is what was last reported of a backup.
type reportedSummary struct {
	uid     types.UID
	summary string
}

// forget drops what was reported of a backup that is gone.
func (r *VolumeSnapshotReconciler) forget(key types.NamespacedName) { r.reported.Delete(key) }

// SetupWithManager registers the reconciler; a change of a snapshot's
// ItemOperation that its Backup acts on wakes the Backup. The other
// operations' writes (the progress of every data mover upload) do not.
func (r *VolumeSnapshotReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("volumesnapshot").
		For(&velerov1api.Backup{}).
		Watches(&itemopsv1alpha1.ItemOperation{}, handler.EnqueueRequestsFromMapFunc(parentRequestForOperation(itemopsv1alpha1.ParentKindBackup)),
			builder.WithPredicates(snapshotOperation(), operationChangeMatters())).
		Complete(kube.QuietConflicts{Reconciler: r})
}

// snapshotOperation passes the events of volume snapshot ItemOperations.
func snapshotOperation() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool {
		op, ok := obj.(*itemopsv1alpha1.ItemOperation)
		return ok && op.Spec.Plugin.Kind == itemopsv1alpha1.PluginKindVolumeSnapshotter
	})
}

// snapshotsWritten reports whether Velero has uploaded a backup's volume
// snapshots file: it does so before it leaves InProgress.
func snapshotsWritten(phase velerov1api.BackupPhase) bool {
	switch phase {
	case velerov1api.BackupPhaseWaitingForPluginOperations, velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed,
		velerov1api.BackupPhaseFinalizing, velerov1api.BackupPhaseFinalizingPartiallyFailed,
		velerov1api.BackupPhaseCompleted, velerov1api.BackupPhasePartiallyFailed:
		return true
	}
	return false
}

// Reconcile implements reconcile.Reconciler.
func (r *VolumeSnapshotReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	backup := &velerov1api.Backup{}
	if err := r.Client.Get(ctx, req.NamespacedName, backup); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	expected := backup.Status.VolumeSnapshotsCompleted
	if expected == 0 || !snapshotsWritten(backup.Status.Phase) {
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("backup", klog.KObj(backup)))
	ops, err := r.snapshotOperations(ctx, backup)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(ops) < expected && r.Store != nil && r.Clock.Now().Before(snapshotDeadline(backup)) {
		// Snapshots older than the timeout would only be timed out: a
		// backup from before itemops was installed costs nothing.
		ignored, err := r.ingest(ctx, backup, ops)
		if err != nil {
			kube.Emitf(r.Recorder, backup, corev1.EventTypeWarning, reasonSnapshotsUnreadable, "%v", err)
			return ctrl.Result{}, retryable(err)
		}
		if ops, err = r.snapshotOperations(ctx, backup); err != nil {
			return ctrl.Result{}, err
		}
		expected = min(expected, len(ops)+ignored)
	}
	r.reportDurability(backup, ops, expected)
	if r.Manage && r.NonDurable == NonDurablePartiallyFail {
		return ctrl.Result{}, r.failBackup(ctx, backup, ops)
	}
	return ctrl.Result{}, nil
}

// notDurable returns, sorted, the PersistentVolumes whose snapshot ended
// Failed or Canceled.
func notDurable(ops []*itemopsv1alpha1.ItemOperation) []string {
	var pvs []string
	for _, op := range ops {
		if op.Status.Phase == itemopsv1alpha1.OperationPhaseFailed || op.Status.Phase == itemopsv1alpha1.OperationPhaseCanceled {
			pvs = append(pvs, op.Spec.Resource.Name)
		}
	}
	slices.Sort(pvs)
	return slices.Compact(pvs)
}

// failBackup ends a Backup PartiallyFailed once Velero has ended it, with
// one more error for each PersistentVolume whose snapshot did not become
// durable, listed in the Backup's itemops.io/non-durable-snapshots
// annotation; Velero's files in object storage say the same first. A
// Backup Velero has not ended yet is left to Velero's finalizer, which
// would overwrite the phase; its end wakes this reconciler again.
func (r *VolumeSnapshotReconciler) failBackup(ctx context.Context, backup *velerov1api.Backup, ops []*itemopsv1alpha1.ItemOperation) error {
	if backup.Status.Phase != velerov1api.BackupPhaseCompleted && backup.Status.Phase != velerov1api.BackupPhasePartiallyFailed {
		return nil
	}
	counted := splitList(backup.Annotations[itemopsv1alpha1.AnnotationNonDurableSnapshots])
	var added []string
	for _, pv := range notDurable(ops) {
		if !slices.Contains(counted, pv) {
			added = append(added, pv)
		}
	}
	if len(added) == 0 {
		return nil
	}
	original := backup.DeepCopy()
	from := backup.Status.Phase
	backup.Status.Phase = velerov1api.BackupPhasePartiallyFailed
	backup.Status.Errors += len(added)
	all := append(counted, added...)
	slices.Sort(all)
	if backup.Annotations == nil {
		backup.Annotations = map[string]string{}
	}
	backup.Annotations[itemopsv1alpha1.AnnotationNonDurableSnapshots] = strings.Join(all, ",")
	if err := r.Store.MarkSnapshotsNotDurable(ctx, backup, all); err != nil {
		kube.Emitf(r.Recorder, backup, corev1.EventTypeWarning, reasonNotWritten, "%v", err)
		return retryable(err)
	}
	if err := r.Client.Patch(ctx, backup, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("ending backup %s PartiallyFailed: %w", backup.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("volume snapshots did not become durable: backup ended PartiallyFailed", "from", from,
		"persistentVolumes", added)
	if from == backup.Status.Phase {
		return nil // VolumeSnapshotsNotDurable names them all once the last snapshot ends
	}
	kube.Emitf(r.Recorder, backup, corev1.EventTypeWarning, "PhaseChanged",
		"%s -> %s: the volume snapshots of PersistentVolumes %s did not become durable; a restore cannot use them",
		from, velerov1api.BackupPhasePartiallyFailed, strings.Join(added, ", "))
	return nil
}

// splitList is a comma-separated annotation as a list.
func splitList(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// snapshotDeadline is when the snapshots of a backup have timed out.
func snapshotDeadline(backup *velerov1api.Backup) time.Time {
	start := backup.CreationTimestamp.Time
	if backup.Status.StartTimestamp != nil {
		start = backup.Status.StartTimestamp.Time
	}
	timeout := backup.Spec.ItemOperationTimeout.Duration
	if timeout <= 0 {
		timeout = DefaultOperationTimeout
	}
	return start.Add(timeout)
}

// snapshotOperations returns the VolumeSnapshotter ItemOperations of a backup.
func (r *VolumeSnapshotReconciler) snapshotOperations(ctx context.Context, backup *velerov1api.Backup) ([]*itemopsv1alpha1.ItemOperation, error) {
	ops, err := listAllOperations(ctx, r.Client, r.Stores, backup.Namespace, backup.UID)
	if err != nil {
		return nil, err
	}
	out := ops[:0]
	for _, op := range ops {
		if op.Spec.Plugin.Kind == itemopsv1alpha1.PluginKindVolumeSnapshotter {
			out = append(out, op)
		}
	}
	return out, nil
}

// ingest creates the ItemOperation of every snapshot Velero took that has
// none yet, and returns how many taken snapshots cannot have one.
func (r *VolumeSnapshotReconciler) ingest(ctx context.Context, backup *velerov1api.Backup, existing []*itemopsv1alpha1.ItemOperation) (int, error) {
	snapshots, err := r.Store.BackupVolumeSnapshots(ctx, backup)
	if err != nil {
		return 0, err
	}
	have := map[string]bool{}
	for _, op := range existing {
		have[op.Name] = true
	}
	plugins := map[string]string{} // location -> plugin name
	created, ignored := 0, 0
	for i, snap := range snapshots {
		if snap.SnapshotID == "" || snap.Phase == "Failed" {
			continue // CreateSnapshot failed: Velero already counted it, nothing uploads
		}
		if snap.BackupUID != "" && snap.BackupUID != string(backup.UID) {
			kube.Emitf(r.Recorder, backup, corev1.EventTypeWarning, reasonSnapshotIgnored,
				"record %d of the volume snapshots file belongs to Backup UID %s, not this one; ignored", i, snap.BackupUID)
			continue
		}
		name, ok := plugins[snap.Location]
		if !ok {
			location, err := r.Store.SnapshotLocation(ctx, snap.Location)
			if err != nil && !errors.Is(err, store.ErrNoSnapshotLocation) {
				return 0, err
			}
			name = location.Plugin
			plugins[snap.Location] = name
		}
		if name == "" {
			ignored++
			kube.Emitf(r.Recorder, backup, corev1.EventTypeWarning, reasonSnapshotIgnored,
				"snapshot %s of PersistentVolume %s cannot be followed: its VolumeSnapshotLocation %q does not exist",
				snap.SnapshotID, snap.PersistentVolumeName, snap.Location)
			continue
		}
		op, err := newSnapshotOperation(backup, i, name, snap)
		if err != nil {
			return 0, err
		}
		if have[op.Name] {
			continue
		}
		made, refused, err := createOperation(ctx, r.Client, op)
		if err != nil {
			return 0, err
		}
		if refused != nil {
			ignored++
			kube.Emitf(r.Recorder, backup, corev1.EventTypeWarning, reasonSnapshotIgnored,
				"snapshot %q of PersistentVolume %s cannot be followed: %v", snap.SnapshotID, snap.PersistentVolumeName, refused)
			continue
		}
		if made {
			created++
		}
	}
	if created > 0 {
		ctrl.LoggerFrom(ctx).Info("ingested volume snapshots", "created", created, "records", len(snapshots))
		kube.Emitf(r.Recorder, backup, corev1.EventTypeNormal, reasonSnapshotsIngested,
			"following %d volume snapshots until their data is durable", created)
	}
	return ignored, nil
}

// newSnapshotOperation is the ItemOperation of one volume snapshot, made as
// that of an operations file's record. Its timeout clock runs from the
// backup's start, as the snapshot was taken during the backup.
func newSnapshotOperation(backup *velerov1api.Backup, index int, pluginName string, snap store.VolumeSnapshot) (*itemopsv1alpha1.ItemOperation, error) {
	created := backup.Status.StartTimestamp.DeepCopy()
	if created == nil {
		created = backup.CreationTimestamp.DeepCopy()
	}
	record := opRecord{Plugin: pluginName, OperationID: snap.SnapshotID,
		Status: itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseNew, Created: created}}
	op, err := newItemOperation(backup, velerov1api.SchemeGroupVersion.WithKind("Backup"), itemopsv1alpha1.ParentKindBackup,
		itemopsv1alpha1.PluginKindVolumeSnapshotter, index, record)
	if err != nil {
		return nil, fmt.Errorf("the snapshot's ItemOperation: %w", err)
	}
	// A VolumeSnapshotter may share its name and an operation ID with an
	// item action: the plugin's kind is part of the name's key.
	op.Name = operationName(backup.Name, string(backup.UID), snapshotOperationKindInKey+pluginName, snap.SnapshotID)
	op.Spec.Resource = itemopsv1alpha1.ResourceIdentifier{Resource: snapshotResource, Name: snap.PersistentVolumeName}
	op.Spec.SnapshotLocation = snap.Location
	return op, nil
}

// reportDurability tells, once, whether every snapshot of the backup became
// durable, when the last of them finished.
func (r *VolumeSnapshotReconciler) reportDurability(backup *velerov1api.Backup, ops []*itemopsv1alpha1.ItemOperation, expected int) {
	if len(ops) == 0 || len(ops) < expected {
		return
	}
	durable, failed := 0, []string{}
	for _, op := range ops {
		switch op.Status.Phase {
		case itemopsv1alpha1.OperationPhaseCompleted:
			durable++
		case itemopsv1alpha1.OperationPhaseFailed, itemopsv1alpha1.OperationPhaseCanceled:
			failed = append(failed, op.Spec.Resource.Name)
		default:
			return // still uploading
		}
	}
	slices.Sort(failed)
	key := types.NamespacedName{Namespace: backup.Namespace, Name: backup.Name}
	now := reportedSummary{uid: backup.UID, summary: fmt.Sprintf("%d/%d", durable, len(ops))}
	if last, ok := r.reported.Load(key); ok && last == now {
		return
	}
	r.reported.Store(key, now)
	if len(failed) == 0 {
		kube.Emitf(r.Recorder, backup, corev1.EventTypeNormal, reasonSnapshotsDurable,
			"all %d volume snapshots are durable", len(ops))
		return
	}
	kube.Emitf(r.Recorder, backup, corev1.EventTypeWarning, reasonSnapshotsNotDurable,
		"%d of %d volume snapshots did not become durable (PersistentVolumes %v); see their ItemOperations",
		len(failed), len(ops), failed)
}
