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
	"strings"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerotypes "github.com/vmware-tanzu/velero/pkg/types"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

func nodeAgentPod(node string, phase corev1.PodPhase) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "node-agent-" + node, Labels: map[string]string{"role": "node-agent"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

func movement(phase string) Movement {
	return Movement{Kind: "DataUpload", Namespace: "velero", Name: "b1-x7k2p", Phase: phase,
		Runner:        Runner{Name: itemopsv1alpha1.DataUploadPlugin},
		NodeAgentPods: []corev1.Pod{nodeAgentPod("node-1", corev1.PodRunning)}}
}

func TestDiagnose(t *testing.T) {
	unschedulable := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "b1-x7k2p"},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/1 nodes are available: 1 node(s) had untolerated taint {itemops.io/hold: }.",
		}}},
	}
	unschedulableFor := func(message string) *corev1.Pod {
		p := unschedulable.DeepCopy()
		p.Status.Conditions[0].Message = message
		return p
	}
	pending := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "b1-x7k2p"},
		Spec:       corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("missing")},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	t0 := metav1.NewTime(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	warning := func(message string, at metav1.Time) corev1.Event {
		return corev1.Event{Type: corev1.EventTypeWarning, Reason: "ProvisioningFailed", Message: message, LastTimestamp: at}
	}
	snapshot := func(ready bool, failure string) *snapshotv1.VolumeSnapshot {
		vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "velero-vol-abc"},
			Status: &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(ready)}}
		if failure != "" {
			vs.Status.Error = &snapshotv1.VolumeSnapshotError{Message: ptr.To(failure)}
		}
		return vs
	}
	bound := func(created time.Time) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "b1-x7k2p", CreationTimestamp: metav1.NewTime(created)},
			Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	}
	location := func(phase velerov1api.BackupStorageLocationPhase, message string) *velerov1api.BackupStorageLocation {
		return &velerov1api.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "default"},
			Status: velerov1api.BackupStorageLocationStatus{Phase: phase, Message: message, LastValidationTime: &t0}}
	}
	repo := func(phase velerov1api.BackupRepositoryPhase, message string) *velerov1api.BackupRepository {
		return &velerov1api.BackupRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "app-default-kopia-x"},
			Status: velerov1api.BackupRepositoryStatus{Phase: phase, Message: message}}
	}
	tests := []struct {
		name   string
		edit   func(*Movement)
		reason string
		says   []string
	}{
		{name: "new, node-agent runs", edit: func(*Movement) {}},
		{name: "new, no node-agent at all", reason: itemopsv1alpha1.WaitingNoNodeAgent,
			edit: func(m *Movement) { m.NodeAgentPods = nil }, says: []string{"waits to be accepted", "0 node-agent pod(s), none running"}},
		{name: "new, node-agent pending", reason: itemopsv1alpha1.WaitingNoNodeAgent,
			edit: func(m *Movement) { m.NodeAgentPods = []corev1.Pod{nodeAgentPod("node-1", corev1.PodPending)} }, says: []string{"none running"}},
		{name: "accepted, snapshot not ready", reason: itemopsv1alpha1.WaitingSnapshotNotReady,
			edit: func(m *Movement) { m.Phase, m.Snapshot = phaseAccepted, snapshot(false, "") }, says: []string{"app/velero-vol-abc", "not ready"}},
		{name: "accepted, snapshot failed", reason: itemopsv1alpha1.WaitingSnapshotFailed,
			edit: func(m *Movement) { m.Phase, m.Snapshot = phaseAccepted, snapshot(false, "out of snapshot reserve") },
			says: []string{"failed: out of snapshot reserve"}},
		{name: "accepted, snapshot ready, nothing else yet",
			edit: func(m *Movement) { m.Phase, m.Snapshot = phaseAccepted, snapshot(true, "") }},
		{name: "accepted, snapshot ready after a check that failed: the old error holds nothing",
			edit: func(m *Movement) { m.Phase, m.Snapshot = phaseAccepted, snapshot(true, "out of snapshot reserve") }},
		{name: "accepted, volume pending without complaint",
			edit: func(m *Movement) { m.Phase, m.Volume = phaseAccepted, pending }},
		{name: "accepted, volume not provisioned: the latest warning", reason: itemopsv1alpha1.WaitingVolumeNotProvisioned,
			edit: func(m *Movement) {
				m.Phase, m.Volume = phaseAccepted, pending
				m.VolumeEvents = []corev1.Event{
					warning(`storageclass.storage.k8s.io "missing" not found`, metav1.NewTime(t0.Add(time.Minute))),
					warning("older", t0),
					{Type: corev1.EventTypeNormal, Reason: "ExternalProvisioning", Message: "waiting", LastTimestamp: metav1.NewTime(t0.Add(time.Hour))},
				}
			}, says: []string{"StorageClass missing", `"missing" not found`}},
		{name: "accepted, pod unschedulable", reason: itemopsv1alpha1.WaitingPodUnschedulable,
			edit: func(m *Movement) { m.Phase, m.Pod = phaseAccepted, unschedulable }, says: []string{"untolerated taint"}},
		{name: "accepted, pod waiting for its volume to bind: the volume's state decides, and it is provisioned",
			edit: func(m *Movement) {
				m.Phase, m.Pod = phaseAccepted, unschedulableFor("0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. "+
					"preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
			}},
		{name: "accepted, pod made before its volume (a restore): the volume's state decides",
			edit: func(m *Movement) {
				m.Phase, m.Pod = phaseAccepted, unschedulableFor(`0/1 nodes are available: persistentvolumeclaim "b1-x7k2p" not found. `+
					"preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
			}},
		{name: "accepted, pod waiting for a volume its provisioner refuses", reason: itemopsv1alpha1.WaitingVolumeNotProvisioned,
			edit: func(m *Movement) {
				m.Phase, m.Volume = phaseAccepted, pending
				m.VolumeEvents = []corev1.Event{warning(`storageclass.storage.k8s.io "missing" not found`, t0)}
				m.Pod = unschedulableFor("0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.")
			}, says: []string{`"missing" not found`}},
		{name: "accepted, pod cannot pull its image", reason: itemopsv1alpha1.WaitingPodNotRunning,
			edit: func(m *Movement) {
				m.Phase = phaseAccepted
				m.Pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "b1-x7k2p"}, Spec: corev1.PodSpec{NodeName: "node-1"},
					Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
						Image: "velero/velero:v1.18.3",
						State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}},
					}}}}
			}, says: []string{"cannot pull its image velero/velero:v1.18.3", "ImagePullBackOff"}},
		{name: "accepted, pod crash-looping", reason: itemopsv1alpha1.WaitingPodNotRunning,
			edit: func(m *Movement) {
				m.Phase = phaseAccepted
				m.Pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "b1-x7k2p"}, Spec: corev1.PodSpec{NodeName: "node-1"},
					Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
						State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
						LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
							ExitCode: 1, Reason: "Error", Message: "cannot open the volume\n"}},
					}}}}
			}, says: []string{"CrashLoopBackOff", "last exit 1, Error: cannot open the volume", "logs b1-x7k2p --previous"}},
		{name: "accepted, pod on a node without node-agent", reason: itemopsv1alpha1.WaitingNoNodeAgent,
			edit: func(m *Movement) {
				m.Phase = phaseAccepted
				m.Pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b1-x7k2p"}, Spec: corev1.PodSpec{NodeName: "node-2"},
					Status: corev1.PodStatus{Phase: corev1.PodRunning}}
			}, says: []string{"on node node-2", "node-agent runs on node-1"}},
		{name: "prepared, node-agent gone from the node", reason: itemopsv1alpha1.WaitingNoNodeAgent,
			edit: func(m *Movement) { m.Phase, m.Node = phasePrepared, "node-2" }, says: []string{"node node-2"}},
		{name: "prepared, under the limit",
			edit: func(m *Movement) {
				m.Phase, m.Node, m.Concurrency, m.Running = phasePrepared, "node-1", 2, []string{"DataUpload/a"}
			}},
		{name: "prepared, at the limit", reason: itemopsv1alpha1.WaitingNodeAgentBusy,
			edit: func(m *Movement) {
				m.Phase, m.Node, m.Concurrency, m.Running = phasePrepared, "node-1", 1, []string{"DataUpload/z", "DataDownload/a"}
			}, says: []string{"loadConcurrency of 1", "2 ahead (DataDownload/a, DataUpload/z)"}},
		{name: "in progress, repository ready",
			edit: func(m *Movement) {
				m.Phase, m.Repository = phaseInProgress, repo(velerov1api.BackupRepositoryPhaseReady, "")
			}},
		{name: "in progress, repository new", reason: itemopsv1alpha1.WaitingRepositoryNotReady,
			edit: func(m *Movement) { m.Phase, m.Repository = phaseInProgress, repo("", "") },
			says: []string{"app-default-kopia-x", "is New", "not initialized"}},
		{name: "in progress, repository not ready", reason: itemopsv1alpha1.WaitingRepositoryNotReady,
			edit: func(m *Movement) {
				m.Phase, m.Repository = phaseInProgress, repo(velerov1api.BackupRepositoryPhaseNotReady, "error to connect to storage")
			}, says: []string{"NotReady: error to connect to storage"}},
		{name: "in progress, repository not created yet",
			edit: func(m *Movement) {
				m.Phase = phaseInProgress
			}},
		{name: "completed", edit: func(m *Movement) { m.Phase, m.NodeAgentPods = "Completed", nil }},

		// Where Velero itself is stuck.
		{name: "accepted, exposed volume, its pod deleted", reason: itemopsv1alpha1.WaitingPodGone,
			edit: func(m *Movement) {
				m.Phase, m.AcceptedAt, m.Now = phaseAccepted, t0.Time, t0.Add(2*time.Minute)
				m.Volume = bound(t0.Add(time.Second))
			}, says: []string{"volume velero/b1-x7k2p was exposed at 2026-11-28T10:00:01Z", "pod velero/b1-x7k2p does not exist",
				"prepare timeout (30m0s, --data-mover-prepare-timeout) at 2026-11-28T10:30:00Z", "cancels an Accepted DataUpload once it has seen the request for 5m0s"}},
		{name: "accepted, volume just exposed, its pod not made yet",
			edit: func(m *Movement) {
				m.Phase, m.AcceptedAt, m.Now = phaseAccepted, t0.Time, t0.Add(10*time.Second)
				m.Volume = bound(t0.Add(5 * time.Second))
			}},
		{name: "accepted, its pod deleted, the operation's timeout first", reason: itemopsv1alpha1.WaitingPodGone,
			edit: func(m *Movement) {
				m.Phase, m.AcceptedAt, m.Now, m.PrepareTimeout = phaseAccepted, t0.Time, t0.Add(2*time.Minute), 2*time.Hour
				m.Deadline = t0.Add(time.Hour)
				m.Volume = bound(t0.Add(time.Second))
			}, says: []string{"the operation's timeout ends it at 2026-11-28T11:00:00Z, before node-agent's prepare timeout (2h0m0s)"}},
		{name: "accepted, node-agent restarted before exposing it, not busy", reason: itemopsv1alpha1.WaitingNodeAgentRestarted,
			edit: func(m *Movement) {
				m.Phase, m.AcceptedAt, m.AcceptedBy, m.Now = phaseAccepted, t0.Time, "node-1", t0.Add(3*time.Minute)
				m.NodeAgentPods[0].CreationTimestamp = metav1.NewTime(t0.Add(time.Minute))
				m.Concurrency, m.Running = 1, nil
				// Its snapshot is not ready: nothing would expose it anyway.
				m.Snapshot = snapshot(false, "")
			}, says: []string{"accepted at 2026-11-28T10:00:00Z by node-agent on node-1", "started again at 2026-11-28T10:01:00Z",
				"not busy: 0 of its 1 data path(s)", "prepare timeout"}},
		{name: "accepted, node-agent's container restarted before exposing it", reason: itemopsv1alpha1.WaitingNodeAgentRestarted,
			edit: func(m *Movement) {
				m.Phase, m.AcceptedAt, m.AcceptedBy, m.Now = phaseAccepted, t0.Time, "node-1", t0.Add(3*time.Minute)
				m.NodeAgentPods[0].CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
				m.NodeAgentPods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{
					Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(time.Minute))}}}}
			}, says: []string{"started again at 2026-11-28T10:01:00Z"}},
		{name: "accepted, node-agent started before it accepted: its snapshot holds it", reason: itemopsv1alpha1.WaitingSnapshotNotReady,
			edit: func(m *Movement) {
				m.Phase, m.AcceptedAt, m.AcceptedBy, m.Now = phaseAccepted, t0.Time, "node-1", t0.Add(3*time.Minute)
				m.NodeAgentPods[0].CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
				m.Snapshot = snapshot(false, "")
			}},
		{name: "accepted, node-agent restarted, the pod made: it goes on",
			edit: func(m *Movement) {
				m.Phase, m.AcceptedAt, m.AcceptedBy, m.Now = phaseAccepted, t0.Time, "node-1", t0.Add(3*time.Minute)
				m.NodeAgentPods[0].CreationTimestamp = metav1.NewTime(t0.Add(time.Minute))
				m.Pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "b1-x7k2p"}, Spec: corev1.PodSpec{NodeName: "node-1"},
					Status: corev1.PodStatus{Phase: corev1.PodRunning}}
			}},
		{name: "in progress, location unavailable", reason: itemopsv1alpha1.WaitingLocationUnavailable,
			edit: func(m *Movement) {
				m.Phase, m.Repository = phaseInProgress, repo(velerov1api.BackupRepositoryPhaseReady, "")
				m.Location = location(velerov1api.BackupStorageLocationPhaseUnavailable, "BackupStorageLocation \"default\" is unavailable: dial tcp: connection refused")
			}, says: []string{"BackupStorageLocation velero/default that DataUpload b1-x7k2p moves data through is Unavailable",
				"Velero's check at 2026-11-28T10:00:00Z", "connection refused", "velero backup-location get default"}},
		{name: "in progress, location available",
			edit: func(m *Movement) {
				m.Phase, m.Repository = phaseInProgress, repo(velerov1api.BackupRepositoryPhaseReady, "")
				m.Location = location(velerov1api.BackupStorageLocationPhaseAvailable, "")
			}},
		{name: "in progress, repository new and velero server scaled to 0", reason: itemopsv1alpha1.WaitingVeleroNotRunning,
			edit: func(m *Movement) {
				m.Phase, m.Repository = phaseInProgress, repo("", "")
				m.Server = &Server{Namespace: "velero", Name: "velero", Found: true, Observed: true}
			}, says: []string{"app-default-kopia-x", "nothing initializes it", "Deployment velero/velero is scaled to 0", "--replicas=1"}},
		{name: "in progress, repository new, velero server's pod not ready", reason: itemopsv1alpha1.WaitingVeleroNotRunning,
			edit: func(m *Movement) {
				m.Phase, m.Repository = phaseInProgress, repo("", "")
				m.Server = &Server{Namespace: "velero", Name: "velero", Found: true, Observed: true, Replicas: 1}
			}, says: []string{"no ready pod (0 of 1 ready)", "describe pods -l deploy=velero"}},
		{name: "in progress, repository new, a Deployment nobody keeps the status of", reason: itemopsv1alpha1.WaitingRepositoryNotReady,
			edit: func(m *Movement) {
				m.Phase, m.Repository = phaseInProgress, repo("", "")
				m.Server = &Server{Namespace: "velero", Name: "velero", Found: true, Replicas: 1}
			}},
		{name: "accepted, cancel requested, its pod gone", reason: itemopsv1alpha1.WaitingCancelPending,
			edit: func(m *Movement) {
				m.Phase, m.AcceptedAt, m.Now, m.Cancel, m.CancelAt = phaseAccepted, t0.Time, t0.Add(4*time.Minute), true, t0.Add(3*time.Minute)
				m.Volume, m.VeleroRecords = bound(t0.Add(time.Second)), true
			}, says: []string{"itemops asked the plugin velero.io/csi-pvc-backupper to cancel at 2026-11-28T10:03:00Z", "spec.cancel is set on DataUpload b1-x7k2p, which is Accepted",
				"meanwhile DataUpload b1-x7k2p is Accepted and its volume", "about 2026-11-28T10:09:00Z", "ends as Velero records it"}},
		{name: "in progress, cancel requested", reason: itemopsv1alpha1.WaitingCancelPending,
			edit: func(m *Movement) { m.Phase, m.Cancel = phaseInProgress, true },
			says: []string{"stops the transfer (Canceling)", "ends as the plugin's progress reports it"}},
		{name: "in progress, cancel asked by itemops and not read yet, the location unavailable", reason: itemopsv1alpha1.WaitingCancelPending,
			edit: func(m *Movement) {
				m.Phase, m.CancelAt, m.Repository = phaseInProgress, t0.Add(3*time.Minute), repo(velerov1api.BackupRepositoryPhaseReady, "")
				m.Location = location(velerov1api.BackupStorageLocationPhaseUnavailable, "")
			}, says: []string{"itemops asked the plugin velero.io/csi-pvc-backupper to cancel at 2026-11-28T10:03:00Z",
				"DataUpload b1-x7k2p is InProgress and its spec.cancel is not set yet", "meanwhile BackupStorageLocation velero/default"}},
		{name: "canceled: ended", edit: func(m *Movement) { m.Phase, m.Cancel = "Canceled", true }},
		{name: "canceled, cancel asked by itemops: ended", edit: func(m *Movement) { m.Phase, m.CancelAt = "Canceled", t0.Time }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := movement(phaseNew)
			tt.edit(&m)
			c := Diagnose(m)
			if tt.reason == "" {
				if c != nil {
					t.Fatalf("cause %s (%s), want none", c.Reason, c.Message())
				}
				return
			}
			if c == nil || c.Reason != tt.reason {
				t.Fatalf("cause %+v, want %s", c, tt.reason)
			}
			if c.Action == "" {
				t.Errorf("cause %s says nothing to do", c.Reason)
			}
			for _, s := range tt.says {
				if !strings.Contains(c.Message(), s) {
					t.Errorf("message %q does not say %q", c.Message(), s)
				}
			}
		})
	}
}

func TestStalled(t *testing.T) {
	since := time.Date(2026, 11, 28, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	c := Stalled(Runner{Name: "example.io/slow"}, "copying blocks", since)
	if c.Reason != itemopsv1alpha1.WaitingNoProgress {
		t.Fatalf("reason %s", c.Reason)
	}
	for _, s := range []string{"since 2026-11-28T09:00:00Z", "the plugin says: copying blocks", "example.io/slow"} {
		if !strings.Contains(c.Message(), s) {
			t.Errorf("message %q does not say %q", c.Message(), s)
		}
	}
	if strings.Contains(Stalled(Runner{Name: "p"}, "", since).Message(), "plugin says") {
		t.Error("a plugin that says nothing is quoted")
	}
}

func TestNotMovingSaysWhatWasChecked(t *testing.T) {
	since := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	m := movement(phaseInProgress)
	m.Location = &velerov1api.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Status: velerov1api.BackupStorageLocationStatus{Phase: velerov1api.BackupStorageLocationPhaseAvailable}}
	m.Repository = &velerov1api.BackupRepository{ObjectMeta: metav1.ObjectMeta{Name: "app-default-kopia-x"},
		Status: velerov1api.BackupRepositoryStatus{Phase: velerov1api.BackupRepositoryPhaseReady}}
	m.Server = &Server{Namespace: "velero", Name: "velero", Found: true, Observed: true, Replicas: 1, Ready: 1}
	c := NotMoving(Runner{Name: "velero.io/csi-pvc-backupper"}, "InProgress", since, m.Checked())
	if c.Reason != itemopsv1alpha1.WaitingNotMoving {
		t.Fatalf("reason %s", c.Reason)
	}
	for _, s := range []string{"no progress since 2026-12-06T09:00:00Z", "DataUpload b1-x7k2p (InProgress)", "node-agent (node-agent runs on node-1)",
		"the location default (Available)", "the repository app-default-kopia-x (Ready)", "velero server (Deployment velero/velero: 1 of 1 ready)",
		"the plugin says: InProgress"} {
		if !strings.Contains(c.Message(), s) {
			t.Errorf("message %q does not say %q", c.Message(), s)
		}
	}
	if got := NotMoving(Runner{Name: "p"}, "", since, nil).Message(); !strings.Contains(got, "checked: the plugin's progress") {
		t.Errorf("a plugin's operation: %q", got)
	}
	mirror := Runner{Name: "PodVolumeBackup/b1-x7k2p", Mirror: true}
	got := NotMoving(mirror, "PodVolumeBackup InProgress", since, nil).Message()
	for _, s := range []string{"checked: the progress of PodVolumeBackup/b1-x7k2p", "Velero says: PodVolumeBackup InProgress", "node-agent, for PodVolumeBackup/b1-x7k2p, runs it"} {
		if !strings.Contains(got, s) {
			t.Errorf("a mirror: message %q does not say %q", got, s)
		}
	}
	if strings.Contains(got, "plugin") {
		t.Errorf("a mirror's cause names a plugin: %q", got)
	}
}

func TestServerRunning(t *testing.T) {
	for _, tt := range []struct {
		s    *Server
		want bool
	}{
		{nil, true},
		{&Server{}, true},
		{&Server{Found: true, Replicas: 1}, true},
		{&Server{Found: true, Observed: true, Replicas: 1}, false},
		{&Server{Found: true, Observed: true}, false},
		{&Server{Found: true, Observed: true, Replicas: 1, Ready: 1}, true},
	} {
		if got := tt.s.Running(); got != tt.want {
			t.Errorf("%+v: Running() = %t, want %t", tt.s, got, tt.want)
		}
		if NotRunning(tt.s, time.Time{}) != nil == tt.want {
			t.Errorf("%+v: NotRunning disagrees with Running", tt.s)
		}
	}
}

func TestConcurrency(t *testing.T) {
	rule := func(key string, n int) velerotypes.RuledConfigs {
		return velerotypes.RuledConfigs{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{key: "yes"}}, Number: n}
	}
	tests := []struct {
		name string
		lc   velerotypes.LoadConcurrency
		node labels.Set
		want int
	}{
		{name: "nothing set", want: 1},
		{name: "global", lc: velerotypes.LoadConcurrency{GlobalConfig: 3}, want: 3},
		{name: "invalid global", lc: velerotypes.LoadConcurrency{GlobalConfig: -2}, want: 1},
		{name: "least matching rule", lc: velerotypes.LoadConcurrency{GlobalConfig: 3,
			PerNodeConfig: []velerotypes.RuledConfigs{rule("a", 5), rule("b", 2), rule("c", 1)}},
			node: labels.Set{"a": "yes", "b": "yes"}, want: 2},
		{name: "no rule matches", lc: velerotypes.LoadConcurrency{GlobalConfig: 3,
			PerNodeConfig: []velerotypes.RuledConfigs{rule("c", 1)}}, node: labels.Set{"a": "yes"}, want: 3},
		{name: "a rule of no number is skipped", lc: velerotypes.LoadConcurrency{GlobalConfig: 3,
			PerNodeConfig: []velerotypes.RuledConfigs{rule("a", 0)}}, node: labels.Set{"a": "yes"}, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Concurrency(&tt.lc, tt.node); got != tt.want {
				t.Errorf("Concurrency = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestMessageEndsOneSentenceOnce(t *testing.T) {
	for evidence, want := range map[string]string{
		"0/1 nodes are available: 1 node(s) had untolerated taint(s).": "0/1 nodes are available: 1 node(s) had untolerated taint(s). Remove the taint",
		"pod p cannot be scheduled":                                    "pod p cannot be scheduled. Remove the taint",
	} {
		if got := (Cause{Evidence: evidence, Action: "Remove the taint"}).Message(); got != want {
			t.Errorf("Message() = %q, want %q", got, want)
		}
	}
}

// TestCancelPendingOneMessage puts side by side what the two paths say of
// one pending cancel: the controller's, which has not read the movement,
// and Diagnose's, before and after the read shows spec.cancel.
func TestCancelPendingOneMessage(t *testing.T) {
	at := time.Date(2026, 12, 7, 22, 44, 39, 0, time.UTC)
	tests := []struct {
		name          string
		runner        Runner
		kind, object  string
		veleroRecords bool
		lead, ends    string
	}{
		{name: "mirror of a PodVolumeBackup", runner: Runner{Name: "PodVolumeBackup/fs-stall-777c8", Mirror: true},
			kind: "PodVolumeBackup", object: "fs-stall-777c8", veleroRecords: true,
			lead: "itemops requested the cancel of PodVolumeBackup fs-stall-777c8 at 2026-12-07T22:44:39Z by its spec.cancel",
			ends: ". The operation ends as Velero records it"},
		{name: "Velero's data mover plugin", runner: Runner{Name: itemopsv1alpha1.DataUploadPlugin},
			kind: "DataUpload", object: "b1-x7k2p",
			lead: "itemops asked the plugin velero.io/csi-pvc-backupper to cancel at 2026-12-07T22:44:39Z",
			ends: ". The operation ends as the plugin's progress reports it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			read := func(phase string, cancel bool) Cause {
				m := Movement{Kind: tt.kind, Namespace: "velero", Name: tt.object, Phase: phase, Runner: tt.runner,
					Cancel: cancel, CancelAt: at, VeleroRecords: tt.veleroRecords}
				c := Diagnose(m)
				if c == nil {
					t.Fatalf("no cause for a %s movement whose cancel itemops asked for", phase)
				}
				return *c
			}
			paths := map[string]Cause{
				"not read":                CancelPending(PendingCancel{Runner: tt.runner, At: at, VeleroRecords: tt.veleroRecords}),
				"read before spec.cancel": read(phaseInProgress, false),
				"read with spec.cancel":   read(phaseCanceling, true),
			}
			for path, c := range paths {
				if c.Reason != itemopsv1alpha1.WaitingCancelPending {
					t.Errorf("%s: reason %s, want %s", path, c.Reason, itemopsv1alpha1.WaitingCancelPending)
				}
				if lead, _, _ := strings.Cut(c.Evidence, "; "); lead != tt.lead {
					t.Errorf("%s: evidence %q begins %q, want %q", path, c.Evidence, lead, tt.lead)
				}
				if !strings.HasPrefix(c.Action, "The cancel is a request: ") || !strings.HasSuffix(c.Action, tt.ends) {
					t.Errorf("%s: action %q", path, c.Action)
				}
			}
			if got := paths["not read"].Evidence; got != tt.lead+"; it has not ended" {
				t.Errorf("not read: evidence %q", got)
			}
			if got, want := paths["read with spec.cancel"].Evidence, "spec.cancel is set on "+tt.kind+" "+tt.object+", which is Canceling"; !strings.HasSuffix(got, want) {
				t.Errorf("read: evidence %q does not end %q", got, want)
			}
		})
	}
}
