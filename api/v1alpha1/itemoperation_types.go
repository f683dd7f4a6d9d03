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

package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels put on every ItemOperation so that the operations of one parent can
// be listed with a label selector, and annotations on those read from Velero's
// operations files.
const (
	// LabelParentKind holds spec.parent.kind.
	LabelParentKind = "itemops.io/parent-kind"
	// LabelParentName holds spec.parent.name, cut to the 63 characters a
	// label value can hold; select by LabelParentUID to be exact.
	LabelParentName = "itemops.io/parent-name"
	// LabelParentUID holds spec.parent.uid.
	LabelParentUID = "itemops.io/parent-uid"

	// AnnotationNonDurableSnapshots, on a Backup, lists (comma-separated,
	// sorted) the PersistentVolumes whose native snapshot did not become
	// durable and for which manage mode counted an error in the Backup.
	AnnotationNonDurableSnapshots = "itemops.io/non-durable-snapshots"

	// AnnotationRecordIndex is the position of the operation's record in
	// Velero's operations file, kept so the file is written back in order.
	AnnotationRecordIndex = "itemops.io/record-index"
	// AnnotationRecords is how many records of the operations file name
	// this operation (the same plugin and operation ID), when more than one.
	// Velero polls each record, so the operation counts once per record.
	AnnotationRecords = "itemops.io/records"
	// AnnotationRecordStatus is the status Velero recorded for the operation
	// in its operations file: when it was read first, from which the status
	// starts, and later the end Velero recorded, which the status then
	// follows (Velero's verdict).
	AnnotationRecordStatus = "itemops.io/record-status"
)

// ParentNameLabelValue is the value of LabelParentName for a parent's name:
// the name cut to the 63 characters a label value holds, without the
// separators a label value may not end with.
func ParentNameLabelValue(name string) string {
	if len(name) > 63 {
		name = name[:63]
	}
	return strings.TrimRight(name, "-._")
}

// ParentKind is the kind of the Velero object an operation belongs to.
// +kubebuilder:validation:Enum=Backup;Restore
type ParentKind string

const (
	// ParentKindBackup is a velero.io/v1 Backup.
	ParentKindBackup ParentKind = "Backup"
	// ParentKindRestore is a velero.io/v1 Restore.
	ParentKindRestore ParentKind = "Restore"
)

// PluginKind is the kind of Velero plugin that started an operation.
// +kubebuilder:validation:Enum=BackupItemAction;RestoreItemAction;VolumeSnapshotter
type PluginKind string

const (
	// PluginKindBackupItemAction is a BackupItemAction (v2 for asynchronous operations).
	PluginKindBackupItemAction PluginKind = "BackupItemAction"
	// PluginKindRestoreItemAction is a RestoreItemAction (v2 for asynchronous operations).
	PluginKindRestoreItemAction PluginKind = "RestoreItemAction"
	// PluginKindVolumeSnapshotter is a VolumeSnapshotter; the operation ID is the snapshot ID.
	PluginKindVolumeSnapshotter PluginKind = "VolumeSnapshotter"
)

// MirrorKind is the kind of a Velero object that moves data outside any
// plugin operation, which an ItemOperation may mirror.
// +kubebuilder:validation:Enum=PodVolumeBackup;PodVolumeRestore
type MirrorKind string

const (
	// MirrorKindPodVolumeBackup is a velero.io/v1 PodVolumeBackup: one pod
	// volume of a file-system backup, moved by node-agent.
	MirrorKindPodVolumeBackup MirrorKind = "PodVolumeBackup"
	// MirrorKindPodVolumeRestore is a velero.io/v1 PodVolumeRestore: one
	// pod volume of a file-system restore, moved by node-agent.
	MirrorKindPodVolumeRestore MirrorKind = "PodVolumeRestore"
)

// OperationPhase is where an operation is in its life.
// +kubebuilder:validation:Enum=New;InProgress;Canceling;Completed;Failed;Canceled
type OperationPhase string

const (
	// OperationPhaseNew means the plugin has not reported that the operation started.
	OperationPhaseNew OperationPhase = "New"
	// OperationPhaseInProgress means the plugin reports the operation as running.
	OperationPhaseInProgress OperationPhase = "InProgress"
	// OperationPhaseCanceling means a cancel was requested (spec.cancel, a
	// DeleteBackupRequest) and the plugin was asked to cancel, but the
	// operation has not ended yet: it ends Canceled, Completed or Failed
	// only as Velero records it (observe mode) or the plugin's Progress
	// reports it (manage mode).
	OperationPhaseCanceling OperationPhase = "Canceling"
	// OperationPhaseCompleted means the plugin reported success. Terminal.
	OperationPhaseCompleted OperationPhase = "Completed"
	// OperationPhaseFailed means the plugin reported an error, the operation
	// timed out, or progress could not be read within the retry budget. Terminal.
	OperationPhaseFailed OperationPhase = "Failed"
	// OperationPhaseCanceled means the operation ended after a cancel was
	// requested (its end recorded by Velero, or reported by the plugin, as
	// a failure), or its parent is gone or failed. Terminal.
	OperationPhaseCanceled OperationPhase = "Canceled"
)

// IsTerminal reports whether no further change of phase can happen.
func (p OperationPhase) IsTerminal() bool {
	switch p {
	case OperationPhaseCompleted, OperationPhaseFailed, OperationPhaseCanceled:
		return true
	}
	return false
}

// Condition types owned by the ItemOperation reconciler.
const (
	// ConditionProgressing is True while the operation is running and its
	// progress can be read.
	ConditionProgressing = "Progressing"
	// ConditionStalled is True when progress has not advanced for the
	// configured stall period.
	ConditionStalled = "Stalled"
	// ConditionCanceled records that Cancel was requested and what the
	// plugin answered. It is True from the request on: the phase
	// (Canceling, then an end) says whether the operation has ended.
	ConditionCanceled = "Canceled"
	// ConditionDiffersFromVelero is True when Velero recorded another end
	// of the operation than itemops' own Progress calls saw. The phase,
	// error and counts are Velero's; the message says what itemops saw.
	ConditionDiffersFromVelero = "DiffersFromVelero"
	// ConditionWaiting is True while an unfinished operation waits on a
	// cause itemops found (its reason, one of the Waiting reasons below),
	// with the evidence and what to do in its message; False once the wait
	// ended. See docs/velero.md, "When an operation waits".
	ConditionWaiting = "Waiting"
)

// Reasons of the Waiting condition: the causes an operation waits on. Most
// are found from what Velero's data mover and the cluster say (the
// DataUpload or DataDownload, the objects it exposes, node-agent, the
// BackupStorageLocation, the BackupRepository); NoProgress, NotMoving,
// VeleroNotRunning and CancelPending apply to every plugin.
const (
	// WaitingSnapshotNotReady: the CSI VolumeSnapshot the data mover reads
	// is not ready to use yet.
	WaitingSnapshotNotReady = "SnapshotNotReady"
	// WaitingSnapshotFailed: the CSI driver or snapshot controller reports
	// an error for that VolumeSnapshot.
	WaitingSnapshotFailed = "SnapshotFailed"
	// WaitingVolumeNotProvisioned: the volume the data mover exposes (its
	// backup or restore PersistentVolumeClaim) is Pending with an error of
	// its provisioner.
	WaitingVolumeNotProvisioned = "VolumeNotProvisioned"
	// WaitingPodUnschedulable: the data mover's backup or restore pod
	// cannot be scheduled.
	WaitingPodUnschedulable = "PodUnschedulable"
	// WaitingPodNotRunning: the data mover's pod was scheduled but its
	// container cannot run: its image cannot be pulled, or it crashes.
	WaitingPodNotRunning = "PodNotRunning"
	// WaitingNoNodeAgent: no node-agent pod runs where the data movement
	// needs one.
	WaitingNoNodeAgent = "NoNodeAgent"
	// WaitingNodeAgentBusy: the node already runs node-agent's
	// loadConcurrency data paths; the operation waits its turn.
	WaitingNodeAgentBusy = "NodeAgentBusy"
	// WaitingRepositoryNotReady: the BackupRepository the data moves
	// through is not Ready.
	WaitingRepositoryNotReady = "RepositoryNotReady"
	// WaitingNoProgress: the operation runs but its progress has not moved
	// for the stall period.
	WaitingNoProgress = "NoProgress"
	// WaitingNotMoving: progress has not moved for the short not-moving
	// window and nothing itemops checked explains it; the message lists
	// what was checked.
	WaitingNotMoving = "NotMoving"
	// WaitingPodGone: the data mover's pod is gone while its DataUpload or
	// DataDownload is Accepted: node-agent does not make it again and
	// waits for its prepare timeout.
	WaitingPodGone = "PodGone"
	// WaitingNodeAgentRestarted: node-agent restarted after it accepted the
	// DataUpload or DataDownload and before it exposed a pod for it:
	// nothing exposes it any more until the prepare timeout.
	WaitingNodeAgentRestarted = "NodeAgentRestarted"
	// WaitingLocationUnavailable: the BackupStorageLocation the data moves
	// to or from is Unavailable, as Velero's own validation says.
	WaitingLocationUnavailable = "LocationUnavailable"
	// WaitingVeleroNotRunning: Velero's Deployment has no ready pod, so
	// nothing records the operation's end, initializes repositories or
	// finalizes the Backup or Restore.
	WaitingVeleroNotRunning = "VeleroNotRunning"
	// WaitingCancelPending: a cancel was requested and the plugin asked,
	// and the operation has not ended yet; the message says who holds it
	// and when Velero acts on the request.
	WaitingCancelPending = "CancelPending"
	// ReasonNotWaiting is the reason of Waiting=False.
	ReasonNotWaiting = "NotWaiting"
)

// Condition reasons.
const (
	// ReasonTimedOut is the reason of a Failed operation whose timeout passed.
	ReasonTimedOut = "TimedOut"
	// ReasonCancelRequested: spec.cancel was set.
	ReasonCancelRequested = "CancelRequested"
	// ReasonParentDeleted: the parent Backup or Restore is gone (or was replaced).
	ReasonParentDeleted = "ParentDeleted"
	// ReasonParentFailed: the parent Backup or Restore went Failed.
	ReasonParentFailed = "ParentFailed"
	// ReasonBackupDeletionRequested: a DeleteBackupRequest names the parent Backup.
	ReasonBackupDeletionRequested = "BackupDeletionRequested"
	// ReasonObjectDeleted: the ItemOperation itself was deleted while unfinished.
	ReasonObjectDeleted = "ObjectDeleted"
	// ReasonPolling: progress is being read from the plugin.
	ReasonPolling = "Polling"
	// ReasonPollFailing: progress could not be read; retrying within the budget.
	ReasonPollFailing = "PollFailing"
	// ReasonPluginRestarting: the plugin's process exited and waits out its
	// restart backoff; the poll was not made and is not counted as failed.
	ReasonPluginRestarting = "PluginRestarting"
	// ReasonPluginNotFound: no discovered plugin binary serves the plugin name.
	ReasonPluginNotFound = "PluginNotFound"
	// ReasonPluginBinaryChanged: the binary serving the plugin is no longer
	// the file discovery found, and is not run.
	ReasonPluginBinaryChanged = "PluginBinaryChanged"
	// ReasonPluginForbidden: the plugin's own request to the API server was
	// refused; plugin processes run with itemops' identity, which lacks the
	// permission the message names. Retried within the failure budget.
	ReasonPluginForbidden = "PluginForbidden"
	// ReasonSnapshotLocationUnavailable: the VolumeSnapshotLocation a
	// VolumeSnapshotter is initialised with cannot be read.
	ReasonSnapshotLocationUnavailable = "SnapshotLocationUnavailable"
	// ReasonFinished: the operation is terminal.
	ReasonFinished = "Finished"
	// ReasonNoProgress: progress has not advanced for the stall period.
	ReasonNoProgress = "NoProgress"
	// ReasonAdvancing: progress advanced within the stall period.
	ReasonAdvancing = "Advancing"
	// ReasonVeleroRecorded: Velero recorded the operation's end in its
	// operations file, and the status shows Velero's record.
	ReasonVeleroRecorded = "VeleroRecorded"
	// ReasonPolledCompleted, ReasonPolledFailed, ReasonPolledCanceled and
	// ReasonPolledInProgress are the reasons of DiffersFromVelero: what
	// itemops' own Progress calls saw.
	ReasonPolledCompleted  = "PolledCompleted"
	ReasonPolledFailed     = "PolledFailed"
	ReasonPolledCanceled   = "PolledCanceled"
	ReasonPolledInProgress = "PolledInProgress"
)

// Finalizer makes sure an unfinished operation is cancelled through its
// plugin before its ItemOperation disappears.
const Finalizer = "itemops.io/cancel-unfinished"

// ParentReference names the Velero Backup or Restore an operation belongs to.
type ParentReference struct {
	// Kind is Backup or Restore.
	// +required
	Kind ParentKind `json:"kind"`

	// Name of the Backup or Restore, in the ItemOperation's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// UID of the Backup or Restore, so that an operation never attaches to a
	// different parent that reuses the name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	UID string `json:"uid"`
}

// PluginReference names the plugin that started an operation by its registered
// name. It is never a path: itemops only calls plugins it discovered itself.
type PluginReference struct {
	// Kind of the plugin.
	// +required
	Kind PluginKind `json:"kind"`

	// Name the plugin registered with Velero, <DNS subdomain>/<name>, for
	// example velero.io/csi-pvc-backupper.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[^/]+$')",message="must be a registered Velero plugin name of the form <DNS subdomain>/<name>, such as velero.io/csi-pvc-backupper; a path is not a plugin name"
	Name string `json:"name"`
}

// ResourceIdentifier identifies a Kubernetes object, as Velero's
// velero.ResourceIdentifier does.
type ResourceIdentifier struct {
	// Group of the resource; empty for the core group.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`

	// Resource is the plural resource name, for example persistentvolumeclaims.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Resource string `json:"resource"`

	// Namespace of the object; empty for cluster-scoped objects.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// Name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// MirrorReference names the Velero object an ItemOperation mirrors: a data
// movement Velero runs itself, outside any plugin operation. itemops reads
// it and never drives it: Velero and node-agent are the authority.
type MirrorReference struct {
	// Kind is PodVolumeBackup or PodVolumeRestore.
	// +required
	Kind MirrorKind `json:"kind"`

	// Name of the object, in the ItemOperation's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// UID of the object, so that the mirror never follows another object
	// that reuses the name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	UID string `json:"uid"`

	// Volume is the name of the pod's volume the object moves.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Volume string `json:"volume,omitempty"`
}

// ItemOperationSpec identifies one asynchronous operation. Everything but
// cancel is fixed when the object is created.
//
// +kubebuilder:validation:XValidation:rule="has(self.plugin) != has(self.mirror)",message="an ItemOperation names either the plugin that started the operation (plugin) or the Velero object it mirrors (mirror), not both"
// +kubebuilder:validation:XValidation:rule="has(self.plugin) == has(self.operationID)",message="operationID is required for, and only for, a plugin's operation",fieldPath=".operationID"
// +kubebuilder:validation:XValidation:rule="has(self.plugin) == has(oldSelf.plugin) && has(self.mirror) == has(oldSelf.mirror) && has(self.operationID) == has(oldSelf.operationID)",message="plugin, mirror and operationID are immutable"
// +kubebuilder:validation:XValidation:rule="!has(self.plugin) || (self.plugin.kind == 'RestoreItemAction' ? self.parent.kind == 'Restore' : self.parent.kind == 'Backup')",message="a RestoreItemAction operation belongs to a Restore; BackupItemAction and VolumeSnapshotter operations belong to a Backup",fieldPath=".parent.kind"
// +kubebuilder:validation:XValidation:rule="!has(self.mirror) || (self.mirror.kind == 'PodVolumeRestore' ? self.parent.kind == 'Restore' : self.parent.kind == 'Backup')",message="a PodVolumeRestore belongs to a Restore; a PodVolumeBackup belongs to a Backup",fieldPath=".parent.kind"
// +kubebuilder:validation:XValidation:rule="!has(self.postOperationItems) || self.parent.kind == 'Backup'",message="postOperationItems apply only to operations of a Backup",fieldPath=".postOperationItems"
// +kubebuilder:validation:XValidation:rule="has(self.postOperationItems) == has(oldSelf.postOperationItems) && (!has(self.postOperationItems) || self.postOperationItems == oldSelf.postOperationItems)",message="postOperationItems is immutable",fieldPath=".postOperationItems"
// +kubebuilder:validation:XValidation:rule="has(self.timeout) == has(oldSelf.timeout) && (!has(self.timeout) || self.timeout == oldSelf.timeout)",message="timeout is immutable",fieldPath=".timeout"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",message="cancel cannot be withdrawn once requested",fieldPath=".cancel"
// +kubebuilder:validation:XValidation:rule="has(self.plugin) && self.plugin.kind == 'VolumeSnapshotter' ? has(self.snapshotLocation) : !has(self.snapshotLocation)",message="snapshotLocation is required for, and only for, VolumeSnapshotter operations",fieldPath=".snapshotLocation"
// +kubebuilder:validation:XValidation:rule="has(self.snapshotLocation) == has(oldSelf.snapshotLocation) && (!has(self.snapshotLocation) || self.snapshotLocation == oldSelf.snapshotLocation)",message="snapshotLocation is immutable",fieldPath=".snapshotLocation"
type ItemOperationSpec struct {
	// Parent is the Backup or Restore the operation belongs to.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="parent is immutable"
	Parent ParentReference `json:"parent"`

	// Plugin is the plugin that started the operation and is asked for its
	// progress. Unset on a mirror (see mirror).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="plugin is immutable"
	Plugin PluginReference `json:"plugin,omitzero"`

	// Mirror names the Velero object this ItemOperation mirrors, a data
	// movement Velero runs outside any plugin operation (a file-system
	// backup's PodVolumeBackup, a file-system restore's PodVolumeRestore).
	// A mirror is never polled through a plugin: its status is read from
	// the object, it ends as the object ends, and a cancel sets the
	// object's own spec.cancel. Unset on a plugin's operation.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="mirror is immutable"
	Mirror *MirrorReference `json:"mirror,omitempty"`

	// OperationID is the ID the plugin returned when it started the operation
	// (for a VolumeSnapshotter, the snapshot ID). Unset on a mirror.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="operationID is immutable"
	OperationID string `json:"operationID,omitempty"`

	// Resource is the item whose backup or restore started the operation
	// (for a mirror, the pod whose volume moves).
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="resource is immutable"
	Resource ResourceIdentifier `json:"resource"`

	// PostOperationItems are the items Velero backs up again once every
	// operation of the Backup has finished. Backups only.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	PostOperationItems []ResourceIdentifier `json:"postOperationItems,omitempty"`

	// SnapshotLocation is the VolumeSnapshotLocation, in the operation's
	// namespace, whose spec.config and spec.credential the VolumeSnapshotter
	// plugin is initialised with, as Velero does before it takes the
	// snapshot. VolumeSnapshotter operations only.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SnapshotLocation string `json:"snapshotLocation,omitempty"`

	// Timeout is how long after status.created the operation may run before
	// it is cancelled and failed with reason TimedOut. When unset, the
	// parent's spec.itemOperationTimeout applies, else 4h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="timeout must be a positive duration such as 4h or 90m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// Cancel, once set to true, asks itemops to cancel the operation through
	// its plugin (for a mirror: by setting the mirrored object's own
	// spec.cancel). It is the only field that can change and cannot be
	// withdrawn.
	// +optional
	Cancel bool `json:"cancel,omitempty"`
}

// ItemOperationStatus is what itemops last learned about the operation.
type ItemOperationStatus struct {
	// Phase is New, InProgress, Canceling, Completed, Failed or Canceled. An
	// operation itemops has not written a status for yet reads as New.
	// +optional
	// +kubebuilder:default=New
	Phase OperationPhase `json:"phase,omitempty"`

	// NCompleted is the amount of work done, in operationUnits.
	// +optional
	// +kubebuilder:validation:Minimum=0
	NCompleted int64 `json:"nCompleted,omitempty"`

	// NTotal is the amount of work in all, in operationUnits.
	// +optional
	// +kubebuilder:validation:Minimum=0
	NTotal int64 `json:"nTotal,omitempty"`

	// OperationUnits is the unit of nCompleted and nTotal, for example bytes.
	// +optional
	OperationUnits string `json:"operationUnits,omitempty"`

	// Description is the plugin's own account of the progress.
	// +optional
	Description string `json:"description,omitempty"`

	// Error is why the operation failed or was canceled.
	// +optional
	Error string `json:"error,omitempty"`

	// Created is when the plugin started the operation, as Velero recorded it.
	// The timeout runs from here.
	// +optional
	Created *metav1.Time `json:"created,omitempty"`

	// Started is when the plugin reports the operation started.
	// +optional
	Started *metav1.Time `json:"started,omitempty"`

	// Updated is when the plugin last reported a change.
	// +optional
	Updated *metav1.Time `json:"updated,omitempty"`

	// LastPolled is when itemops last asked the plugin for progress.
	// +optional
	LastPolled *metav1.Time `json:"lastPolled,omitempty"`

	// CompletionTimestamp is when the operation reached a terminal phase.
	// +optional
	CompletionTimestamp *metav1.Time `json:"completionTimestamp,omitempty"`

	// EstimatedCompletion is when the operation should finish at the
	// observed rate of progress.
	// +optional
	EstimatedCompletion *metav1.Time `json:"estimatedCompletion,omitempty"`

	// Progress is nCompleted of nTotal for people, for example "4.2Gi/10Gi (42%)".
	// +optional
	Progress string `json:"progress,omitempty"`

	// WaitingFor is why an unfinished operation does not move, in one word:
	// the reason of the Waiting condition, else the reason its progress
	// cannot be read (the Progressing condition's, such as PollFailing).
	// Empty while it moves and once it ended.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	WaitingFor string `json:"waitingFor,omitempty"`

	// Throughput is how fast the operation moved over about the last
	// minute, for people, for example "12.5Mi/s". Empty when unknown and
	// once the operation ended.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Throughput string `json:"throughput,omitempty"`

	// UnitsPerSecond is Throughput in operationUnits per second.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UnitsPerSecond int64 `json:"unitsPerSecond,omitempty"`

	// Conditions are Progressing, Stalled, Waiting, Canceled and DiffersFromVelero.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// LastProgressTime is when nCompleted last changed, for stall detection.
	// +optional
	LastProgressTime *metav1.Time `json:"lastProgressTime,omitempty"`

	// PollFailures counts the Progress calls in a row that failed with a
	// transport error or deadline.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PollFailures int32 `json:"pollFailures,omitempty"`

	// ObservedGeneration is the metadata.generation this status was computed for.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ItemOperation is one asynchronous operation started by a Velero plugin
// during a backup or restore, or one data movement Velero runs itself
// (a mirror, see spec.mirror), and its progress.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=itemop,categories={velero,itemops}
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.parent.name`,description="Backup or Restore the operation belongs to"
// +kubebuilder:printcolumn:name="Plugin",type=string,JSONPath=`.spec.plugin.name`,description="Plugin that started the operation; empty for a mirror"
// +kubebuilder:printcolumn:name="Mirrors",type=string,JSONPath=`.spec.mirror.kind`,description="Kind of the Velero object a mirror follows (PodVolumeBackup, PodVolumeRestore); empty for a plugin's operation"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Waiting For",type=string,JSONPath=`.status.waitingFor`,priority=1,description="Why the operation does not move (see the Waiting condition)"
// +kubebuilder:printcolumn:name="Elapsed",type=date,JSONPath=`.status.started`,priority=1,description="Time since the plugin started the operation"
// +kubebuilder:printcolumn:name="Rate",type=string,JSONPath=`.status.throughput`,priority=1,description="Throughput over about the last minute"
// +kubebuilder:printcolumn:name="ETA",type=string,JSONPath=`.status.estimatedCompletion`,priority=1,description="Estimated completion at the observed rate"
// +kubebuilder:printcolumn:name="Operation ID",type=string,JSONPath=`.spec.operationID`,priority=1
type ItemOperation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ItemOperationSpec `json:"spec"`

	// +optional
	// +kubebuilder:default={}
	Status ItemOperationStatus `json:"status,omitempty"`
}

// ItemOperationList is a list of ItemOperations.
//
// +kubebuilder:object:root=true
type ItemOperationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ItemOperation `json:"items"`
}
