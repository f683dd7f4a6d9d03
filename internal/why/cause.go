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
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// Cause is why an operation waits: a reason (one of the Waiting reasons of
// itemopsv1alpha1), what the cluster says, and what an administrator can do.
type Cause struct {
	Reason   string
	Evidence string
	Action   string
}

// Message is the Waiting condition's message: the evidence, then what to do.
func (c Cause) Message() string {
	if c.Action == "" {
		return c.Evidence
	}
	// Evidence may end with a message that ends its own sentence (the
	// scheduler's does).
	return strings.TrimSuffix(c.Evidence, ".") + ". " + c.Action
}

// Data movement phases, shared by DataUploads and DataDownloads.
const (
	phaseNew        = "New"
	phaseAccepted   = "Accepted"
	phasePrepared   = "Prepared"
	phaseInProgress = "InProgress"
)

// Movement is what the cluster says about one data movement of Velero's
// data mover: the DataUpload or DataDownload and what it depends on. A nil
// object was not found (or not read: it did not matter in that phase).
type Movement struct {
	// Kind is DataUpload or DataDownload; Namespace is Velero's.
	Kind, Namespace, Name string
	Phase                 string
	// Runner is who runs the operation the movement belongs to.
	Runner Runner
	// Node is where the data path runs (status.node), AcceptedBy the
	// node-agent that exposes it (status.acceptedByNode).
	Node, AcceptedBy string

	// Snapshot is the VolumeSnapshot a DataUpload reads: the one in the
	// source namespace while it is exposed, or the copy in Velero's
	// namespace.
	Snapshot *snapshotv1.VolumeSnapshot
	// Volume is the exposed PersistentVolumeClaim (in Velero's namespace,
	// named after the movement), and VolumeEvents the Warning Events of it.
	Volume       *corev1.PersistentVolumeClaim
	VolumeEvents []corev1.Event
	// Pod is the data mover's backup or restore pod, named after the movement.
	Pod *corev1.Pod

	// NodeAgentPods are the pods of node-agent (label role=node-agent).
	NodeAgentPods []corev1.Pod
	// Concurrency is node-agent's loadConcurrency on Node (1 when its
	// ConfigMap says nothing, 0 when unknown: a per-node rule and a node
	// that could not be read), and Running the data movements, by
	// kind/name, InProgress on Node besides this one.
	Concurrency int
	Running     []string

	// Repository is the BackupRepository the data moves through, once the
	// transfer starts.
	Repository *velerov1api.BackupRepository

	// AcceptedAt is when node-agent accepted the movement
	// (status.acceptedTimestamp); Cancel is its spec.cancel.
	AcceptedAt time.Time
	Cancel     bool
	// Location is the BackupStorageLocation the data moves to or from,
	// read once the transfer starts; nil when not found.
	Location *velerov1api.BackupStorageLocation
	// Server is what Velero's Deployment says; nil when not read.
	Server *Server
	// PrepareTimeout is node-agent's --data-mover-prepare-timeout, read
	// where a movement waits for it; zero when not read.
	PrepareTimeout time.Duration

	// Now is the time of the reading; Deadline when the operation's
	// timeout ends it (zero when unknown); CancelAt when itemops asked the
	// plugin to cancel it (zero when it did not).
	Now, Deadline, CancelAt time.Time
	// VeleroRecords: Velero records the operation's end (observe mode),
	// not the plugin's progress.
	VeleroRecords bool
}

// Checked is what the reading of a movement looked at, for the message of
// an operation that does not move and that nothing of it explains.
func (m Movement) Checked() []string {
	checked := []string{fmt.Sprintf("%s %s (%s)", m.Kind, m.Name, cmpOr(m.Phase, phaseNew))}
	switch m.Phase {
	case phaseAccepted, phasePrepared:
		if m.Pod != nil {
			checked = append(checked, fmt.Sprintf("its pod (%s)", m.Pod.Status.Phase))
		}
	}
	if m.NodeAgentPods != nil {
		checked = append(checked, "node-agent ("+runningSummary(m.NodeAgentPods)+")")
	}
	if m.Concurrency > 0 {
		checked = append(checked, fmt.Sprintf("node-agent's load (%d of %d data paths busy on %s)", len(m.Running), m.Concurrency, m.Node))
	}
	if m.Location != nil {
		checked = append(checked, fmt.Sprintf("the location %s (%s)", m.Location.Name, cmpOr(string(m.Location.Status.Phase), "no phase yet")))
	}
	if m.Repository != nil {
		checked = append(checked, fmt.Sprintf("the repository %s (%s)", m.Repository.Name, cmpOr(string(m.Repository.Status.Phase), "New")))
	}
	if m.Server != nil {
		checked = append(checked, m.Server.Summary())
	}
	return checked
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// Diagnose is the cause a data movement waits on, or nil when nothing
// holds it (it runs, or ended, or waits on nothing itemops can name). A
// movement whose cancel was requested (its spec.cancel set, or itemops
// asked for it and the read does not show it yet) waits on that cancel:
// what Velero does with the request in its phase, and what else holds it.
func Diagnose(m Movement) *Cause {
	c := diagnose(m)
	if (m.Cancel || !m.CancelAt.IsZero()) && !ended(m.Phase) {
		pending := CancelPending(PendingCancel{Runner: m.Runner, At: m.CancelAt, VeleroRecords: m.VeleroRecords, Movement: &m, Held: c})
		return &pending
	}
	return c
}

func diagnose(m Movement) *Cause {
	switch m.Phase {
	case "", phaseNew:
		if !anyNodeAgentRunning(m.NodeAgentPods) {
			return noNodeAgent(m, "")
		}
	case phaseAccepted:
		// What Velero itself no longer moves on comes first: a snapshot
		// that is not ready does not matter once nothing exposes it.
		if c := exposureLost(m); c != nil {
			return c
		}
		if c := snapshotCause(m); c != nil {
			return c
		}
		if c := volumeCause(m); c != nil {
			return c
		}
		if c := podCause(m); c != nil {
			return c
		}
		if m.Pod != nil && m.Pod.Spec.NodeName != "" && !nodeAgentRunningOn(m.NodeAgentPods, m.Pod.Spec.NodeName) {
			return noNodeAgent(m, m.Pod.Spec.NodeName)
		}
	case phasePrepared:
		if m.Node != "" && !nodeAgentRunningOn(m.NodeAgentPods, m.Node) {
			return noNodeAgent(m, m.Node)
		}
		if m.Concurrency > 0 && len(m.Running) >= m.Concurrency {
			ahead := append([]string(nil), m.Running...)
			sort.Strings(ahead)
			return &Cause{
				Reason: itemopsv1alpha1.WaitingNodeAgentBusy,
				Evidence: fmt.Sprintf("%s %s is Prepared on node %s, which already runs node-agent's loadConcurrency of %d data path(s): %d ahead (%s)",
					m.Kind, m.Name, m.Node, m.Concurrency, len(ahead), strings.Join(ahead, ", ")),
				Action: "It starts when one of them ends. To run more at once, raise loadConcurrency in node-agent's ConfigMap " +
					"(--node-agent-configmap) and restart node-agent, which reads it at start",
			}
		}
	case phaseInProgress:
		if c := locationCause(m); c != nil {
			return c
		}
		if c := repositoryCause(m); c != nil {
			return c
		}
	}
	return nil
}

func snapshotCause(m Movement) *Cause {
	vs := m.Snapshot
	if vs == nil {
		return nil
	}
	where := vs.Namespace + "/" + vs.Name
	if vs.Status != nil && vs.Status.ReadyToUse != nil && *vs.Status.ReadyToUse {
		// Ready: an error it had on the way (a failed check the driver
		// later passed) holds nothing.
		return nil
	}
	if vs.Status != nil && vs.Status.Error != nil && vs.Status.Error.Message != nil && *vs.Status.Error.Message != "" {
		return &Cause{
			Reason:   itemopsv1alpha1.WaitingSnapshotFailed,
			Evidence: fmt.Sprintf("VolumeSnapshot %s of %s %s failed: %s", where, m.Kind, m.Name, *vs.Status.Error.Message),
			Action: fmt.Sprintf("Fix what the CSI driver reports (kubectl -n %s describe volumesnapshot %s; the csi-snapshotter sidecar's log). "+
				"Velero fails the %s when node-agent's prepare timeout (30m by default) passes", vs.Namespace, vs.Name, m.Kind),
		}
	}
	return &Cause{
		Reason:   itemopsv1alpha1.WaitingSnapshotNotReady,
		Evidence: fmt.Sprintf("VolumeSnapshot %s of %s %s is not ready to use", where, m.Kind, m.Name),
		Action: fmt.Sprintf("The CSI driver is still cutting or copying the snapshot; if it stays so, look at kubectl -n %s describe volumesnapshot %s "+
			"and the snapshot controller's and csi-snapshotter's logs", vs.Namespace, vs.Name),
	}
}

func volumeCause(m Movement) *Cause {
	pvc := m.Volume
	if pvc == nil || pvc.Status.Phase != corev1.ClaimPending {
		return nil
	}
	last := lastWarning(m.VolumeEvents)
	if last == nil {
		// Pending without a complaint: provisioning runs, or the class
		// binds at the pod's scheduling, which the pod's cause shows.
		return nil
	}
	class := "(no StorageClass)"
	if pvc.Spec.StorageClassName != nil {
		class = "StorageClass " + *pvc.Spec.StorageClassName
	}
	return &Cause{
		Reason: itemopsv1alpha1.WaitingVolumeNotProvisioned,
		Evidence: fmt.Sprintf("PersistentVolumeClaim %s/%s that %s %s exposes (%s) is Pending: %s: %s",
			pvc.Namespace, pvc.Name, m.Kind, m.Name, class, last.Reason, last.Message),
		Action: "Make the StorageClass exist and its provisioner work; the class of the data mover's volume is node-agent's " +
			"backupPVC (or restorePVC) setting in its ConfigMap, else the source volume's class",
	}
}

func lastWarning(events []corev1.Event) *corev1.Event {
	var last *corev1.Event
	for i := range events {
		e := &events[i]
		if e.Type != corev1.EventTypeWarning {
			continue
		}
		if last == nil || eventTime(e).After(eventTime(last)) {
			last = e
		}
	}
	return last
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

func podCause(m Movement) *Cause {
	pod := m.Pod
	if pod == nil || (pod.Status.Phase != corev1.PodPending && pod.Status.Phase != corev1.PodRunning) {
		return nil
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
			!waitsOnVolume(c.Message) {
			return &Cause{
				Reason:   itemopsv1alpha1.WaitingPodUnschedulable,
				Evidence: fmt.Sprintf("the data mover's pod %s/%s cannot be scheduled: %s", pod.Namespace, pod.Name, c.Message),
				Action: "Make a node able to take it: remove the taint it does not tolerate, free the resources it asks for, " +
					"or set node-agent's loadAffinity and podResources (its ConfigMap) to nodes and sizes that fit",
			}
		}
	}
	for _, s := range pod.Status.ContainerStatuses {
		w := s.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
			return &Cause{
				Reason: itemopsv1alpha1.WaitingPodNotRunning,
				Evidence: fmt.Sprintf("the data mover's pod %s/%s cannot pull its image %s: %s: %s",
					pod.Namespace, pod.Name, s.Image, w.Reason, w.Message),
				Action: "The pod runs Velero's own image, as Velero's Deployment names it: make that image pullable from the node " +
					"(its registry, the pull secret of Velero's ServiceAccount)",
			}
		case "CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
			evidence := fmt.Sprintf("the data mover's pod %s/%s does not run: %s", pod.Namespace, pod.Name, w.Reason)
			if w.Message != "" {
				evidence += ": " + w.Message
			}
			if t := s.LastTerminationState.Terminated; t != nil {
				evidence += fmt.Sprintf(" (last exit %d, %s: %s)", t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
			}
			return &Cause{
				Reason:   itemopsv1alpha1.WaitingPodNotRunning,
				Evidence: evidence,
				Action:   fmt.Sprintf("Read its log (kubectl -n %s logs %s --previous) and node-agent's", pod.Namespace, pod.Name),
			}
		}
	}
	return nil
}

// volumeWaits are what the scheduler says of a pod whose volume is not
// there yet (its volumebinding plugin, before any node is weighed): the
// data mover's volume is made beside its pod, so every data movement's pod
// says one of them for a moment, and the scheduler may go on saying it
// until its next retry after the volume bound. Not the pod's cause: the
// volume's own state decides (volumeCause).
var volumeWaits = []*regexp.Regexp{
	regexp.MustCompile(`pod has unbound immediate PersistentVolumeClaims`),
	regexp.MustCompile(`persistentvolumeclaim "[^"]*" not found`),
}

// waitsOnVolume tells whether the scheduler's message says only that the
// pod waits for its volume.
func waitsOnVolume(message string) bool {
	for _, re := range volumeWaits {
		if re.MatchString(message) {
			return true
		}
	}
	return false
}

func noNodeAgent(m Movement, node string) *Cause {
	listing := fmt.Sprintf("kubectl -n %s get daemonset node-agent; kubectl -n %s get pods -l role=node-agent -o wide", m.Namespace, m.Namespace)
	if node == "" {
		return &Cause{
			Reason:   itemopsv1alpha1.WaitingNoNodeAgent,
			Evidence: fmt.Sprintf("%s %s waits to be accepted, and no node-agent pod runs (%s)", m.Kind, m.Name, runningSummary(m.NodeAgentPods)),
			Action:   "Start node-agent (velero install --use-node-agent makes its DaemonSet), or fix its nodeSelector and tolerations: " + listing,
		}
	}
	return &Cause{
		Reason:   itemopsv1alpha1.WaitingNoNodeAgent,
		Evidence: fmt.Sprintf("%s %s needs node-agent on node %s, where none runs (%s)", m.Kind, m.Name, node, runningSummary(m.NodeAgentPods)),
		Action:   "Let node-agent's DaemonSet run a pod on that node (its nodeSelector, tolerations, the node's taints): " + listing,
	}
}

func runningSummary(pods []corev1.Pod) string {
	var on []string
	for i := range pods {
		if podRunning(&pods[i]) {
			on = append(on, pods[i].Spec.NodeName)
		}
	}
	if len(on) == 0 {
		return fmt.Sprintf("%d node-agent pod(s), none running", len(pods))
	}
	sort.Strings(on)
	return "node-agent runs on " + strings.Join(on, ", ")
}

// podRunning is how Velero judges a node-agent pod (kube.IsPodRunning):
// Running and not being deleted.
func podRunning(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Spec.NodeName != ""
}

func anyNodeAgentRunning(pods []corev1.Pod) bool {
	for i := range pods {
		if podRunning(&pods[i]) {
			return true
		}
	}
	return false
}

func nodeAgentRunningOn(pods []corev1.Pod, node string) bool {
	for i := range pods {
		if podRunning(&pods[i]) && pods[i].Spec.NodeName == node {
			return true
		}
	}
	return false
}

func repositoryCause(m Movement) *Cause {
	repo := m.Repository
	if repo != nil && repo.Status.Phase == velerov1api.BackupRepositoryPhaseReady {
		return nil
	}
	if repo == nil {
		// The data path creates it as it starts (Velero's repository
		// ensurer) and waits for it: a moment, not a cause.
		return nil
	}
	phase := repo.Status.Phase
	if phase == "" {
		phase = velerov1api.BackupRepositoryPhaseNew
	}
	c := &Cause{
		Reason:   itemopsv1alpha1.WaitingRepositoryNotReady,
		Evidence: fmt.Sprintf("BackupRepository %s/%s that %s %s moves data through is %s", repo.Namespace, repo.Name, m.Kind, m.Name, phase),
	}
	if phase == velerov1api.BackupRepositoryPhaseNew {
		if m.Server != nil && !m.Server.Running() {
			return serverDown(m.Server, c.Evidence+", and nothing initializes it")
		}
		c.Action = "Velero's server has not initialized it yet: check that velero server runs and what its log says of the repository (velero repo get)"
		return c
	}
	if repo.Status.Message != "" {
		c.Evidence += ": " + repo.Status.Message
	}
	c.Action = "Fix the BackupStorageLocation or the repository's credentials it names; velero repo get shows it, and Velero checks it again at its maintenance frequency"
	return c
}

// Stalled is the cause of an operation whose progress has stood still since
// a time: NoProgress, with its runner's own account when it gives one. The
// time, not how long: the message of a condition that stays does not change
// at every poll.
func Stalled(runner Runner, description string, since time.Time) Cause {
	c := Cause{
		Reason:   itemopsv1alpha1.WaitingNoProgress,
		Evidence: fmt.Sprintf("progress has not moved since %s", since.UTC().Format(time.RFC3339)),
		Action:   fmt.Sprintf("%s runs it; look at what it does (its log, the objects it works on)", upperFirst(runner.who())),
	}
	if description != "" {
		c.Evidence += "; " + runner.says() + ": " + description
	}
	return c
}

// Runner is who runs an operation's data movement, as causes name it.
type Runner struct {
	// Name is the plugin's registered name, or a mirror's object
	// (PodVolumeBackup/NAME).
	Name string
	// Mirror: node-agent runs it for a Velero object itemops mirrors.
	Mirror bool
}

// RunnerOf is who runs op's data movement.
func RunnerOf(op *itemopsv1alpha1.ItemOperation) Runner {
	return Runner{Name: op.MoverName(), Mirror: op.IsMirror()}
}

// object is the Velero object a mirror follows, for people (PodVolumeBackup NAME).
func (r Runner) object() string {
	return strings.Replace(r.Name, "/", " ", 1)
}

func (r Runner) who() string {
	if r.Mirror {
		return "node-agent, for " + r.Name + ","
	}
	return "the plugin " + r.Name
}

func (r Runner) says() string {
	if r.Mirror {
		return "Velero says"
	}
	return "the plugin says"
}

// Progress is where the operation's progress is read, for people.
func (r Runner) Progress() string {
	if r.Mirror {
		return "the progress of " + r.Name
	}
	return "the plugin's progress"
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
