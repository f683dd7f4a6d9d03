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

package why

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	"github.com/vmware-tanzu/velero/pkg/label"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// Gatherer reads what the cluster says about data movements.
type Gatherer struct {
	// Server, when set, reads Velero's Deployment.
	Server *ServerWatch
	// Reader reads what is read at every poll, in Velero's namespace, from
	// the manager's cache: DataUploads and DataDownloads through Indexes,
	// pods, PersistentVolumeClaims, BackupStorageLocations and
	// BackupRepositories.
	Reader client.Reader
	// Direct reads, around the cache, what is read once per Every for all
	// operations (node-agent's DaemonSet and ConfigMap, a node's labels),
	// and what only a movement held at one step reads, one object at a
	// time: the VolumeSnapshot an Accepted DataUpload waits for, the
	// Events of an exposed volume that is Pending. Reader when nil.
	Direct client.Reader
	// Every is how long what node-agent's DaemonSet, ConfigMap, pods and
	// nodes say is kept: read once per Every however many operations
	// ask; at every poll when zero.
	Every time.Duration
	// Clock tells the time of those reads (the real clock when nil).
	Clock clock.PassiveClock

	mu    sync.Mutex
	agent map[string]*nodeAgentFacts
}

func (g *Gatherer) direct() client.Reader {
	if g.Direct != nil {
		return g.Direct
	}
	return g.Reader
}

// When is what the caller knows of an operation's times: now, when its
// timeout ends it, and when itemops asked its plugin to cancel it (zero
// when unknown or never).
type When struct {
	Now, Deadline, CancelAt time.Time
	// VeleroRecords: Velero records the operation's end (observe mode).
	VeleroRecords bool
}

// Finding is what the reading of a data movement found: the cause it
// waits on (nil when none), and what was looked at.
type Finding struct {
	Cause   *Cause
	Checked []string
}

// Cause is why the data mover operation op waits (no cause when nothing
// holds it or its DataUpload or DataDownload is not there yet), and what
// was checked.
func (g *Gatherer) Cause(ctx context.Context, op *itemopsv1alpha1.ItemOperation, when When) (Finding, error) {
	m, found, err := g.Movement(ctx, op)
	if err != nil || !found {
		return Finding{}, err
	}
	m.Now, m.Deadline, m.CancelAt, m.VeleroRecords = when.Now, when.Deadline, when.CancelAt, when.VeleroRecords
	return Finding{Cause: Diagnose(m), Checked: m.Checked()}, nil
}

// Movement reads the data movement of op (a data mover operation, or a
// mirror of a file-system backup or restore) and what it depends on in
// its phase. found is false when no DataUpload or DataDownload carries the
// operation's ID yet, or the mirrored object is gone.
func (g *Gatherer) Movement(ctx context.Context, op *itemopsv1alpha1.ItemOperation) (m Movement, found bool, err error) {
	m.Namespace, m.Runner = op.Namespace, RunnerOf(op)
	var src source
	if op.IsMirror() {
		src, found, err = g.podVolume(ctx, op, &m)
	} else {
		src, found, err = g.dataMover(ctx, op, &m)
	}
	if err != nil || !found {
		return m, false, err
	}

	switch m.Phase {
	case "", phaseNew, phaseAccepted, phasePrepared:
		if err := g.nodeAgentPods(ctx, &m); err != nil {
			return m, true, err
		}
	}
	switch m.Phase {
	case phaseAccepted:
		err = g.exposed(ctx, &m, src.namespace, src.snapshot)
		if err == nil && m.Pod == nil && !m.AcceptedAt.IsZero() {
			err = g.unexposed(ctx, &m)
		}
	case phasePrepared:
		err = g.load(ctx, &m, m.Node)
	case phaseInProgress:
		if err = g.location(ctx, &m, src.location); err == nil {
			err = g.repository(ctx, &m, src.namespace, src.location, src.repository)
		}
	}
	if err == nil && g.Server != nil {
		m.Server, err = g.Server.Server(ctx)
	}
	return m, true, err
}

// source is what a movement reads from and through: the application's
// namespace, the CSI snapshot a DataUpload reads, the
// BackupStorageLocation and the type of the repository.
type source struct {
	namespace, snapshot, location, repository string
}

// dataMover reads the DataUpload or DataDownload of a data mover operation
// into m.
func (g *Gatherer) dataMover(ctx context.Context, op *itemopsv1alpha1.ItemOperation, m *Movement) (source, bool, error) {
	src := source{repository: dataMoverRepository}
	selector := client.MatchingFields{IndexOperationID: op.Spec.OperationID}
	switch op.Spec.Plugin.Name {
	case itemopsv1alpha1.DataUploadPlugin:
		list := &velerov2alpha1.DataUploadList{}
		if err := g.Reader.List(ctx, list, client.InNamespace(m.Namespace), selector); err != nil {
			return src, false, fmt.Errorf("listing DataUploads: %w", err)
		}
		if len(list.Items) != 1 {
			return src, false, nil
		}
		du := &list.Items[0]
		m.Kind, m.Name, m.Phase = "DataUpload", du.Name, string(du.Status.Phase)
		m.Node, m.AcceptedBy = du.Status.Node, du.Status.AcceptedByNode
		src.namespace, src.location = du.Spec.SourceNamespace, du.Spec.BackupStorageLocation
		m.Cancel = du.Spec.Cancel
		if t := du.Status.AcceptedTimestamp; t != nil {
			m.AcceptedAt = t.Time
		}
		if du.Spec.CSISnapshot != nil {
			src.snapshot = du.Spec.CSISnapshot.VolumeSnapshot
		}
	case itemopsv1alpha1.DataDownloadPlugin:
		list := &velerov2alpha1.DataDownloadList{}
		if err := g.Reader.List(ctx, list, client.InNamespace(m.Namespace), selector); err != nil {
			return src, false, fmt.Errorf("listing DataDownloads: %w", err)
		}
		if len(list.Items) != 1 {
			return src, false, nil
		}
		dd := &list.Items[0]
		m.Kind, m.Name, m.Phase = "DataDownload", dd.Name, string(dd.Status.Phase)
		m.Node, m.AcceptedBy = dd.Status.Node, dd.Status.AcceptedByNode
		src.namespace, src.location = dd.Spec.SourceNamespace, dd.Spec.BackupStorageLocation
		m.Cancel = dd.Spec.Cancel
		if t := dd.Status.AcceptedTimestamp; t != nil {
			m.AcceptedAt = t.Time
		}
	default:
		return src, false, nil
	}
	return src, true, nil
}

// podVolume reads the PodVolumeBackup or PodVolumeRestore a mirror
// follows into m. node-agent on the node of the pod whose volume moves
// accepts it (a PodVolumeBackup names that node; a PodVolumeRestore's is
// the node that accepted it), exposes a pod of its name in Velero's
// namespace on that node, and moves the data through the repository of
// its uploader.
func (g *Gatherer) podVolume(ctx context.Context, op *itemopsv1alpha1.ItemOperation, m *Movement) (source, bool, error) {
	mirror := op.Spec.Mirror
	key := client.ObjectKey{Namespace: m.Namespace, Name: mirror.Name}
	var src source
	var obj client.Object
	switch mirror.Kind {
	case itemopsv1alpha1.MirrorKindPodVolumeBackup:
		pvb := &velerov1api.PodVolumeBackup{}
		obj = pvb
		if err := g.Reader.Get(ctx, key, pvb); err != nil {
			return src, false, client.IgnoreNotFound(err)
		}
		m.Phase, m.Node, m.AcceptedBy, m.Cancel = string(pvb.Status.Phase), pvb.Spec.Node, pvb.Spec.Node, pvb.Spec.Cancel
		src = source{namespace: pvb.Spec.Pod.Namespace, location: pvb.Spec.BackupStorageLocation, repository: pvb.Spec.UploaderType}
		if t := pvb.Status.AcceptedTimestamp; t != nil {
			m.AcceptedAt = t.Time
		}
	case itemopsv1alpha1.MirrorKindPodVolumeRestore:
		pvr := &velerov1api.PodVolumeRestore{}
		obj = pvr
		if err := g.Reader.Get(ctx, key, pvr); err != nil {
			return src, false, client.IgnoreNotFound(err)
		}
		m.Phase, m.Node, m.AcceptedBy, m.Cancel = string(pvr.Status.Phase), pvr.Status.Node, pvr.Status.Node, pvr.Spec.Cancel
		// The repository is the backed-up namespace's.
		src = source{namespace: cmpOr(pvr.Spec.SourceNamespace, pvr.Spec.Pod.Namespace), location: pvr.Spec.BackupStorageLocation,
			repository: pvr.Spec.UploaderType}
		if t := pvr.Status.AcceptedTimestamp; t != nil {
			m.AcceptedAt = t.Time
		}
	default:
		return src, false, nil
	}
	if string(obj.GetUID()) != mirror.UID {
		return src, false, nil
	}
	m.Kind, m.Name = string(mirror.Kind), mirror.Name
	src.repository = cmpOr(src.repository, dataMoverRepository)
	return src, true, nil
}

// unexposed reads, for an Accepted movement without a pod that nothing may
// expose any more (node-agent restarted since it accepted it, or its volume
// exposed without the pod), when node-agent gives up: its prepare timeout
// and, after a restart, the load of its node.
func (g *Gatherer) unexposed(ctx context.Context, m *Movement) error {
	restarted, _ := startedSince(m.NodeAgentPods, m.AcceptedBy, m.AcceptedAt)
	if restarted == nil && m.Volume == nil {
		// Nothing exposed and node-agent as it was: it is still exposing
		// it (waiting for its snapshot, say), the common case, which costs
		// no read around the cache.
		return nil
	}
	facts, err := g.nodeAgent(ctx, m.Namespace)
	if err != nil {
		return err
	}
	m.PrepareTimeout = facts.prepareTimeout
	if restarted != nil {
		return g.load(ctx, m, m.AcceptedBy)
	}
	return nil
}

// location reads the BackupStorageLocation the movement moves data through.
func (g *Gatherer) location(ctx context.Context, m *Movement, name string) error {
	if name == "" {
		return nil
	}
	bsl := &velerov1api.BackupStorageLocation{}
	switch err := g.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, bsl); {
	case err == nil:
		m.Location = bsl
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading BackupStorageLocation %s: %w", name, err)
	}
	return nil
}

// exposed reads what an Accepted movement exposes: the snapshot, the
// volume and the pod, all named after it in Velero's namespace (the
// DataUpload's snapshot is in the application's namespace until copied).
// The pod is read first only to know whether the snapshot's wait is past;
// the snapshot, the volume and its Events are then read in the order the
// movement goes through them: a poll that reads while the movement passes
// from one to the next sees it at the earlier one or at the later one,
// never between the two with nothing holding it.
func (g *Gatherer) exposed(ctx context.Context, m *Movement, sourceNS, sourceSnapshot string) error {
	key := client.ObjectKey{Namespace: m.Namespace, Name: m.Name}
	pod := &corev1.Pod{}
	switch err := g.Reader.Get(ctx, key, pod); {
	case err == nil:
		m.Pod = pod
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the data mover's pod: %w", err)
	}
	// A pod exists once the snapshot is exposed: its readiness is past.
	if m.Kind == "DataUpload" && m.Pod == nil {
		if err := g.snapshot(ctx, m, key, sourceNS, sourceSnapshot); err != nil {
			return err
		}
	}
	pvc := &corev1.PersistentVolumeClaim{}
	switch err := g.Reader.Get(ctx, key, pvc); {
	case err == nil:
		m.Volume = pvc
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the exposed volume: %w", err)
	}
	if m.Volume != nil && m.Volume.Status.Phase == corev1.ClaimPending {
		events := &corev1.EventList{}
		if err := g.direct().List(ctx, events, client.InNamespace(m.Namespace), client.MatchingFieldsSelector{Selector: fields.Set{
			"involvedObject.kind": "PersistentVolumeClaim", "involvedObject.name": m.Name, "involvedObject.uid": string(m.Volume.UID),
		}.AsSelector()}); err != nil {
			return fmt.Errorf("reading the events of the exposed volume: %w", err)
		}
		m.VolumeEvents = events.Items
	}
	return nil
}

// snapshot reads the VolumeSnapshot a DataUpload waits for. Velero waits
// for the snapshot in the application's namespace to be ready, then copies
// it into its own under the movement's name. Both are read around the
// cache, with the get on VolumeSnapshots that Velero's CSI plugins need
// anyway (a cache would list and watch them).
func (g *Gatherer) snapshot(ctx context.Context, m *Movement, key client.ObjectKey, sourceNS, sourceSnapshot string) error {
	vs := &snapshotv1.VolumeSnapshot{}
	switch err := g.direct().Get(ctx, key, vs); {
	case err == nil:
		m.Snapshot = vs
		return nil
	case !unreadable(err):
		return fmt.Errorf("reading the exposed VolumeSnapshot: %w", err)
	}
	if sourceSnapshot == "" || sourceNS == "" {
		return nil
	}
	switch err := g.direct().Get(ctx, client.ObjectKey{Namespace: sourceNS, Name: sourceSnapshot}, vs); {
	case err == nil:
		m.Snapshot = vs
	case !unreadable(err):
		return fmt.Errorf("reading VolumeSnapshot %s/%s: %w", sourceNS, sourceSnapshot, err)
	}
	return nil
}

// unreadable reports an error that means the object cannot be read and
// tells nothing of a cause: not there, its kind not served (no CSI snapshot
// CRDs), or not granted (Velero's CSI plugins' rules left out).
func unreadable(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || meta.IsNoMatchError(err) ||
		strings.Contains(err.Error(), "no matches for kind")
}

// load reads how many data paths node-agent may run on node and which
// run there now, besides the movement.
func (g *Gatherer) load(ctx context.Context, m *Movement, node string) error {
	if node == "" {
		return nil
	}
	facts, err := g.nodeAgent(ctx, m.Namespace)
	if err != nil {
		return err
	}
	m.Concurrency = g.concurrencyOn(ctx, facts, node)
	running := client.MatchingFields{IndexRunningOn: node}
	uploads := &velerov2alpha1.DataUploadList{}
	if err := g.Reader.List(ctx, uploads, client.InNamespace(m.Namespace), running); err != nil {
		return fmt.Errorf("listing DataUploads: %w", err)
	}
	for i := range uploads.Items {
		// The index is the cache's: it may hold one that has just moved on.
		if u := &uploads.Items[i]; u.Status.Phase == velerov2alpha1.DataUploadPhaseInProgress && u.Status.Node == node && u.Name != m.Name {
			m.Running = append(m.Running, "DataUpload/"+u.Name)
		}
	}
	downloads := &velerov2alpha1.DataDownloadList{}
	if err := g.Reader.List(ctx, downloads, client.InNamespace(m.Namespace), running); err != nil {
		return fmt.Errorf("listing DataDownloads: %w", err)
	}
	for i := range downloads.Items {
		if d := &downloads.Items[i]; d.Status.Phase == velerov2alpha1.DataDownloadPhaseInProgress && d.Status.Node == node && d.Name != m.Name {
			m.Running = append(m.Running, "DataDownload/"+d.Name)
		}
	}
	backups := &velerov1api.PodVolumeBackupList{}
	if err := g.Reader.List(ctx, backups, client.InNamespace(m.Namespace), running); err != nil {
		return fmt.Errorf("listing PodVolumeBackups: %w", err)
	}
	for i := range backups.Items {
		if b := &backups.Items[i]; b.Status.Phase == velerov1api.PodVolumeBackupPhaseInProgress && b.Spec.Node == node && b.Name != m.Name {
			m.Running = append(m.Running, "PodVolumeBackup/"+b.Name)
		}
	}
	restores := &velerov1api.PodVolumeRestoreList{}
	if err := g.Reader.List(ctx, restores, client.InNamespace(m.Namespace), running); err != nil {
		return fmt.Errorf("listing PodVolumeRestores: %w", err)
	}
	for i := range restores.Items {
		if r := &restores.Items[i]; r.Status.Phase == velerov1api.PodVolumeRestorePhaseInProgress && r.Status.Node == node && r.Name != m.Name {
			m.Running = append(m.Running, "PodVolumeRestore/"+r.Name)
		}
	}
	return nil
}

// dataMoverRepository is the repository type Velero's data mover moves
// data through, and a file-system backup's when it names none.
const dataMoverRepository = "kopia"

// repository reads the BackupRepository of the movement's namespace,
// location and repository type, as Velero's repository ensurer finds it:
// by its labels.
func (g *Gatherer) repository(ctx context.Context, m *Movement, volumeNS, location, repoType string) error {
	list := &velerov1api.BackupRepositoryList{}
	if err := g.Reader.List(ctx, list, client.InNamespace(m.Namespace), client.MatchingLabels{
		velerov1api.VolumeNamespaceLabel: label.GetValidName(volumeNS),
		velerov1api.StorageLocationLabel: label.GetValidName(location),
		velerov1api.RepositoryTypeLabel:  repoType,
	}); err != nil {
		return fmt.Errorf("listing BackupRepositories: %w", err)
	}
	if len(list.Items) == 1 {
		m.Repository = &list.Items[0]
	}
	return nil
}
