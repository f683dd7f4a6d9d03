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

// Package csisim plays the parts of a cluster that Velero's CSI data mover
// relies on and that a test machine lacks, writing only what the real
// components write, through the API server:
//
//   - the CSI snapshot controller: a VolumeSnapshot gets a bound, ready
//     VolumeSnapshotContent with a snapshot handle;
//   - node-agent: a ready node-agent DaemonSet as Velero checks it, and the
//     data path of every DataUpload (New → Accepted → Prepared → InProgress
//     with bytes moving at a set rate → Completed) and DataDownload (the same,
//     then the restored PVC bound to a new PersistentVolume), honouring
//     spec.cancel. It can be told to fail an upload or to "restart", which
//     cancels every transfer in flight as node-agent does when it cannot
//     resume it.
//
// What they write follows Velero v1.18's readers: pkg/backup/actions/csi
// and pkg/restore/actions/csi (Progress, Cancel), pkg/nodeagent (the
// DaemonSet), pkg/controller/data_upload_controller.go (the phases, and
// AttemptDataUploadResume on a restart) and the restore finalizer (bound
// volumes).
//
// They are stand-ins for the envtest suites (test/datamover, test/compat,
// test/velerochaos, make demo); test/cluster runs the real snapshot
// controller, a real CSI driver (test/csidriver) and Velero's node-agent.
package csisim

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
)

// Annotations on a source PVC that change how its upload goes.
const (
	// AnnotationFail makes the upload fail halfway with this message.
	AnnotationFail = "csisim.itemops.io/fail"
	// AnnotationRate is the upload's rate in bytes per second (a quantity
	// such as 512Mi), instead of the Cluster's.
	AnnotationRate = "csisim.itemops.io/rate"
)

// Node is the node every transfer runs on.
const Node = "worker-1"

// Cluster runs the stand-ins until Stop.
type Cluster struct {
	// Client acts with the stand-ins' own identity (an administrator's).
	Client client.Client
	// Namespace is Velero's, where DataUploads and DataDownloads live.
	Namespace string
	// Driver is the CSI driver whose snapshots are taken.
	Driver string
	// Rate is how many bytes a transfer moves per second.
	Rate int64
	// Roles are the parts played; none means every part, the node-agent
	// DaemonSet's status included (a control plane without nodes). In a
	// real cluster each part runs in a pod of its own and the DaemonSet is
	// Velero's, its status the DaemonSet controller's.
	Roles []Role
	// NodeName is the node transfers run on (Node when empty).
	NodeName string

	stop context.CancelFunc
	done chan struct{}
}

// Role is one part of the cluster that a Cluster plays.
type Role string

// The roles.
const (
	// RoleSnapshotController binds VolumeSnapshots to ready contents.
	RoleSnapshotController Role = "snapshot-controller"
	// RoleNodeAgent runs the data path of DataUploads and DataDownloads.
	RoleNodeAgent Role = "node-agent"
)

func (c *Cluster) plays(r Role) bool {
	if len(c.Roles) == 0 {
		return true
	}
	for _, have := range c.Roles {
		if have == r {
			return true
		}
	}
	return false
}

func (c *Cluster) node() string {
	if c.NodeName != "" {
		return c.NodeName
	}
	return Node
}

// Start creates the node-agent DaemonSet (when it plays every role) and
// runs the loops.
func (c *Cluster) Start(ctx context.Context) error {
	if len(c.Roles) == 0 {
		if err := c.nodeAgent(ctx); err != nil {
			return err
		}
	}
	ctx, c.stop = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Errors are conflicts with the other writers or an API server
			// restarting: the next round tries again, as a controller does.
			if c.plays(RoleSnapshotController) {
				_ = c.snapshots(ctx)
			}
			if c.plays(RoleNodeAgent) {
				_ = c.uploads(ctx)
				_ = c.downloads(ctx)
			}
		}
	}()
	return nil
}

// Stop ends the loops.
func (c *Cluster) Stop() {
	if c.stop != nil {
		c.stop()
		<-c.done
	}
}

// RestartNodeAgent plays a node-agent restart: it cannot resume a transfer
// that was in flight, so it asks to cancel each one with the reason, as
// node-agent's AttemptDataUploadResume does; the data path then ends them
// Canceled. It returns how many it cancelled.
func (c *Cluster) RestartNodeAgent(ctx context.Context) (int, error) {
	n := 0
	uploads := &velerov2alpha1.DataUploadList{}
	if err := c.Client.List(ctx, uploads, client.InNamespace(c.Namespace)); err != nil {
		return n, err
	}
	for i := range uploads.Items {
		du := &uploads.Items[i]
		if du.Status.Phase != velerov2alpha1.DataUploadPhaseInProgress || du.Spec.Cancel {
			continue
		}
		patch := client.MergeFrom(du.DeepCopy())
		du.Spec.Cancel = true
		du.Status.Message = "Resume InProgress dataupload failed with error error to get exposed snapshot for du " + du.Name +
			": pod restarted, mark it as cancel"
		if err := c.Client.Patch(ctx, du, patch); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// nodeAgent creates the node-agent DaemonSet with one ready pod, which is
// what Velero checks before it moves data (pkg/nodeagent), and that pod.
func (c *Cluster) nodeAgent(ctx context.Context) error {
	labels := map[string]string{"name": "node-agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "node-agent", Namespace: c.Namespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "node-agent", Image: "velero/velero:v1.18.3"}}},
			},
		},
	}
	if err := c.Client.Create(ctx, ds); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the node-agent DaemonSet: %w", err)
	}
	patch := client.MergeFrom(ds.DeepCopy())
	ds.Status = appsv1.DaemonSetStatus{CurrentNumberScheduled: 1, DesiredNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1, UpdatedNumberScheduled: 1}
	if err := c.Client.Status().Patch(ctx, ds, patch); err != nil {
		return fmt.Errorf("reporting the node-agent DaemonSet ready: %w", err)
	}
	// Its one pod, running on the node, labelled as velero install labels
	// it: what tells which nodes node-agent runs on.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "node-agent-" + c.node(), Namespace: c.Namespace,
			Labels: map[string]string{"name": "node-agent", "role": "node-agent"}},
		Spec: corev1.PodSpec{NodeName: c.node(), Containers: ds.Spec.Template.Spec.Containers},
	}
	if err := c.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating node-agent's pod: %w", err)
	}
	podPatch := client.MergeFrom(pod.DeepCopy())
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	return c.Client.Status().Patch(ctx, pod, podPatch)
}

// snapshots binds every new VolumeSnapshot to a ready content, as the CSI
// snapshot controller and sidecar do.
func (c *Cluster) snapshots(ctx context.Context) error {
	list := &snapshotv1.VolumeSnapshotList{}
	if err := c.Client.List(ctx, list); err != nil {
		return err
	}
	for i := range list.Items {
		vs := &list.Items[i]
		if vs.Status != nil && vs.Status.BoundVolumeSnapshotContentName != nil || vs.Spec.Source.PersistentVolumeClaimName == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: vs.Namespace, Name: *vs.Spec.Source.PersistentVolumeClaimName}, pvc); err != nil {
			return err
		}
		pv := &corev1.PersistentVolume{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
			return err
		}
		size := pvc.Spec.Resources.Requests.Storage().Value()
		now := time.Now()
		content := &snapshotv1.VolumeSnapshotContent{
			ObjectMeta: metav1.ObjectMeta{Name: "snapcontent-" + string(vs.UID)},
			Spec: snapshotv1.VolumeSnapshotContentSpec{
				VolumeSnapshotRef:       corev1.ObjectReference{Kind: "VolumeSnapshot", APIVersion: "snapshot.storage.k8s.io/v1", Namespace: vs.Namespace, Name: vs.Name, UID: vs.UID},
				DeletionPolicy:          snapshotv1.VolumeSnapshotContentDelete,
				Driver:                  c.Driver,
				VolumeSnapshotClassName: vs.Spec.VolumeSnapshotClassName,
				Source:                  snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To(pv.Spec.CSI.VolumeHandle)},
			},
		}
		if err := c.Client.Create(ctx, content); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		contentPatch := client.MergeFrom(content.DeepCopy())
		content.Status = &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: ptr.To("snap-" + string(vs.UID)),
			CreationTime: ptr.To(now.UnixNano()), RestoreSize: ptr.To(size), ReadyToUse: ptr.To(true)}
		if err := c.Client.Status().Patch(ctx, content, contentPatch); err != nil {
			return err
		}
		vsPatch := client.MergeFrom(vs.DeepCopy())
		vs.Status = &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To(content.Name),
			CreationTime: &metav1.Time{Time: now}, RestoreSize: resource.NewQuantity(size, resource.BinarySI), ReadyToUse: ptr.To(true)}
		if err := c.Client.Status().Patch(ctx, vs, vsPatch); err != nil {
			return err
		}
	}
	return nil
}

// rateOf is the rate of a transfer whose source PVC may set its own.
func (c *Cluster) rateOf(pvc *corev1.PersistentVolumeClaim) int64 {
	if pvc != nil {
		if q, err := resource.ParseQuantity(pvc.Annotations[AnnotationRate]); err == nil && q.Value() > 0 {
			return q.Value()
		}
	}
	return c.Rate
}

// uploads moves every DataUpload one step along node-agent's data path.
func (c *Cluster) uploads(ctx context.Context) error {
	list := &velerov2alpha1.DataUploadList{}
	if err := c.Client.List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
		return err
	}
	for i := range list.Items {
		du := &list.Items[i]
		before := du.DeepCopy()
		now := metav1.Now()
		pvc := &corev1.PersistentVolumeClaim{}
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: du.Spec.SourceNamespace, Name: du.Spec.SourcePVC}, pvc); err != nil {
			pvc = nil
		}
		s := &du.Status
		switch {
		case s.Phase == velerov2alpha1.DataUploadPhaseCompleted || s.Phase == velerov2alpha1.DataUploadPhaseFailed ||
			s.Phase == velerov2alpha1.DataUploadPhaseCanceled:
			continue
		case du.Spec.Cancel:
			s.Phase, s.CompletionTimestamp = velerov2alpha1.DataUploadPhaseCanceled, &now
			if s.Message == "" {
				s.Message = "data path canceled"
			}
		case s.Phase == "" || s.Phase == velerov2alpha1.DataUploadPhaseNew:
			s.Phase, s.AcceptedByNode, s.AcceptedTimestamp = velerov2alpha1.DataUploadPhaseAccepted, c.node(), &now
		case s.Phase == velerov2alpha1.DataUploadPhaseAccepted:
			s.Phase, s.Node = velerov2alpha1.DataUploadPhasePrepared, c.node()
		case s.Phase == velerov2alpha1.DataUploadPhasePrepared:
			s.Phase, s.StartTimestamp, s.NodeOS = velerov2alpha1.DataUploadPhaseInProgress, &now, velerov2alpha1.NodeOSLinux
			if pvc != nil {
				s.Progress.TotalBytes = pvc.Spec.Resources.Requests.Storage().Value()
			}
		case s.Phase == velerov2alpha1.DataUploadPhaseInProgress:
			elapsed := now.Sub(s.StartTimestamp.Time).Seconds()
			s.Progress.BytesDone = min(s.Progress.TotalBytes, int64(elapsed*float64(c.rateOf(pvc))))
			if msg := annotation(pvc, AnnotationFail); msg != "" && s.Progress.BytesDone >= s.Progress.TotalBytes/2 {
				s.Phase, s.Message, s.CompletionTimestamp = velerov2alpha1.DataUploadPhaseFailed, msg, &now
				break
			}
			if s.Progress.BytesDone == s.Progress.TotalBytes {
				s.Phase, s.CompletionTimestamp = velerov2alpha1.DataUploadPhaseCompleted, &now
				s.SnapshotID, s.Path = "kopia-"+string(du.UID), "/host_pods/"+du.Spec.SourcePVC
				s.IncrementalBytes = s.Progress.TotalBytes
				s.DataMoverResult = &map[string]string{}
			}
		}
		if err := c.Client.Patch(ctx, du, client.MergeFrom(before)); err != nil {
			return err
		}
	}
	return nil
}

// downloads moves every DataDownload along node-agent's restore path; at the
// end the restored PVC is bound to a new volume holding the data.
func (c *Cluster) downloads(ctx context.Context) error {
	list := &velerov2alpha1.DataDownloadList{}
	if err := c.Client.List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
		return err
	}
	for i := range list.Items {
		dd := &list.Items[i]
		before := dd.DeepCopy()
		now := metav1.Now()
		s := &dd.Status
		switch {
		case s.Phase == velerov2alpha1.DataDownloadPhaseCompleted || s.Phase == velerov2alpha1.DataDownloadPhaseFailed ||
			s.Phase == velerov2alpha1.DataDownloadPhaseCanceled:
			continue
		case dd.Spec.Cancel:
			s.Phase, s.CompletionTimestamp = velerov2alpha1.DataDownloadPhaseCanceled, &now
		case s.Phase == "" || s.Phase == velerov2alpha1.DataDownloadPhaseNew:
			s.Phase, s.AcceptedByNode, s.AcceptedTimestamp = velerov2alpha1.DataDownloadPhaseAccepted, c.node(), &now
		case s.Phase == velerov2alpha1.DataDownloadPhaseAccepted:
			s.Phase, s.Node = velerov2alpha1.DataDownloadPhasePrepared, c.node()
		case s.Phase == velerov2alpha1.DataDownloadPhasePrepared:
			s.Phase, s.StartTimestamp = velerov2alpha1.DataDownloadPhaseInProgress, &now
			s.Progress.TotalBytes = dd.Spec.SnapshotSize
		case s.Phase == velerov2alpha1.DataDownloadPhaseInProgress:
			elapsed := now.Sub(s.StartTimestamp.Time).Seconds()
			s.Progress.BytesDone = min(s.Progress.TotalBytes, int64(elapsed*float64(c.Rate)))
			if s.Progress.BytesDone == s.Progress.TotalBytes {
				if err := c.bindRestored(ctx, dd); err != nil {
					return err
				}
				s.Phase, s.CompletionTimestamp = velerov2alpha1.DataDownloadPhaseCompleted, &now
			}
		}
		if err := c.Client.Patch(ctx, dd, client.MergeFrom(before)); err != nil {
			return err
		}
	}
	return nil
}

// bindRestored binds the restore's target PVC to a new bound volume, as
// node-agent's exposer does once the data is in.
func (c *Cluster) bindRestored(ctx context.Context, dd *velerov2alpha1.DataDownload) error {
	pvc := &corev1.PersistentVolumeClaim{}
	key := client.ObjectKey{Namespace: dd.Spec.TargetVolume.Namespace, Name: dd.Spec.TargetVolume.PVC}
	if err := c.Client.Get(ctx, key, pvc); err != nil {
		return err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + string(pvc.UID)},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *pvc.Spec.Resources.Requests.Storage()},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              ptr.Deref(pvc.Spec.StorageClassName, ""),
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: c.Driver, VolumeHandle: "vol-" + string(pvc.UID)}},
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
		},
	}
	if err := c.Client.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	pvPatch := client.MergeFrom(pv.DeepCopy())
	pv.Status.Phase = corev1.VolumeBound
	if err := c.Client.Status().Patch(ctx, pv, pvPatch); err != nil {
		return err
	}
	if pvc.Spec.VolumeName == "" {
		specPatch := client.MergeFrom(pvc.DeepCopy())
		pvc.Spec.VolumeName = pv.Name
		if err := c.Client.Patch(ctx, pvc, specPatch); err != nil {
			return err
		}
	}
	statusPatch := client.MergeFrom(pvc.DeepCopy())
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.Capacity = pv.Spec.Capacity
	pvc.Status.AccessModes = pvc.Spec.AccessModes
	return c.Client.Status().Patch(ctx, pvc, statusPatch)
}

func annotation(pvc *corev1.PersistentVolumeClaim, key string) string {
	if pvc == nil {
		return ""
	}
	return pvc.Annotations[key]
}

// CRDs are the VolumeSnapshot, VolumeSnapshotContent and VolumeSnapshotClass
// CRDs of the external-snapshotter module Velero is built with, for envtest.
func CRDs(root string) ([]string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kubernetes-csi/external-snapshotter/client/v8")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("locating the external-snapshotter module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd")
	var files []string
	for _, kind := range []string{"volumesnapshotclasses", "volumesnapshotcontents", "volumesnapshots"} {
		files = append(files, filepath.Join(dir, "snapshot.storage.k8s.io_"+kind+".yaml"))
	}
	return files, nil
}

// StorageClass is the name of the StorageClass of the Cluster's volumes.
const StorageClass = "csi-sim"

// StorageClasses creates the StorageClass of the Cluster's driver and the
// VolumeSnapshotClass Velero picks for it.
func (c *Cluster) StorageClasses(ctx context.Context) error {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: StorageClass}, Provisioner: c.Driver}
	if err := c.Client.Create(ctx, sc); err != nil {
		return err
	}
	return c.Client.Create(ctx, &snapshotv1.VolumeSnapshotClass{
		ObjectMeta:     metav1.ObjectMeta{Name: StorageClass + "-snapshots", Labels: map[string]string{"velero.io/csi-volumesnapshot-class": "true"}},
		Driver:         c.Driver,
		DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
	})
}

// BoundPVC creates a PVC of size bound to its own CSI volume, as a
// provisioner leaves it.
func (c *Cluster) BoundPVC(ctx context.Context, namespace, name, size string, annotations map[string]string) error {
	capacity, err := resource.ParseQuantity(size)
	if err != nil {
		return err
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: annotations},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: capacity}},
			StorageClassName: ptr.To(StorageClass),
			VolumeName:       namespace + "-" + name,
		},
	}
	if err := c.Client.Create(ctx, pvc); err != nil {
		return err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvc.Spec.VolumeName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: capacity},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              StorageClass,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: c.Driver, VolumeHandle: "vol-" + pvc.Spec.VolumeName}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: namespace, Name: name, UID: pvc.UID},
		},
	}
	if err := c.Client.Create(ctx, pv); err != nil {
		return err
	}
	pvPatch := client.MergeFrom(pv.DeepCopy())
	pv.Status.Phase = corev1.VolumeBound
	if err := c.Client.Status().Patch(ctx, pv, pvPatch); err != nil {
		return err
	}
	pvcPatch := client.MergeFrom(pvc.DeepCopy())
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: pv.Spec.Capacity, AccessModes: pvc.Spec.AccessModes}
	return c.Client.Status().Patch(ctx, pvc, pvcPatch)
}
