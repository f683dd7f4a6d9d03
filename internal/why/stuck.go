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
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// Where Velero itself is stuck: causes read from what Velero and node-agent
// no longer do for a movement, each with when Velero itself ends the wait.
// The rules are those of Velero v1.18's node-agent
// (pkg/controller/data_upload_controller.go, data_download_controller.go).

// Data movement phases that end a movement, and the one of a cancel under way.
const (
	phaseCanceling = "Canceling"
	phaseCompleted = "Completed"
	phaseFailed    = "Failed"
	phaseCanceled  = "Canceled"
)

func ended(phase string) bool {
	return phase == phaseCompleted || phase == phaseFailed || phase == phaseCanceled
}

// DefaultPrepareTimeout is node-agent's --data-mover-prepare-timeout when
// its DaemonSet does not set it: how long an Accepted movement may wait to
// be prepared before node-agent fails it.
const DefaultPrepareTimeout = 30 * time.Minute

// PodGrace is how long an exposed volume may be without the data mover's
// pod before the pod counts as gone: node-agent makes both in one go.
const PodGrace = 30 * time.Second

// How node-agent treats spec.cancel (Velero v1.18): an Accepted movement is
// cancelled at a reconcile more than cancelDelayOthers after node-agent first
// saw the request, and node-agent reconciles Accepted movements once a
// minute; one InProgress is asked to stop at once, and forced after
// cancelDelayInProgress.
const (
	cancelDelayOthers     = 5 * time.Minute
	cancelDelayInProgress = time.Hour
	acceptedResync        = time.Minute
)

// exposureLost is the cause of an Accepted movement that nothing exposes
// any more: node-agent restarted after it accepted it and before its pod
// existed (node-agent does not expose an Accepted movement again), or its
// pod was deleted after its volume was exposed (node-agent does not make it
// again). Either waits for node-agent's prepare timeout.
func exposureLost(m Movement) *Cause {
	if m.Pod != nil || m.AcceptedAt.IsZero() {
		return nil
	}
	if pod, started := startedSince(m.NodeAgentPods, m.AcceptedBy, m.AcceptedAt); pod != nil {
		evidence := fmt.Sprintf("%s %s was accepted at %s by node-agent on %s, whose pod %s started again at %s, before the data mover's pod was made; "+
			"node-agent does not expose an Accepted %s again",
			m.Kind, m.Name, stamp(m.AcceptedAt), m.AcceptedBy, pod.Name, stamp(started), m.Kind)
		if m.Concurrency > 0 {
			evidence += fmt.Sprintf(", and it is not busy: %d of its %d data path(s) run on %s", len(m.Running), m.Concurrency, m.AcceptedBy)
		}
		return &Cause{Reason: itemopsv1alpha1.WaitingNodeAgentRestarted, Evidence: evidence, Action: endsWhen(m) + ". " + cancelAdvice(m)}
	}
	if m.Volume == nil || m.Now.Sub(m.Volume.CreationTimestamp.Time) < PodGrace {
		return nil
	}
	return &Cause{
		Reason: itemopsv1alpha1.WaitingPodGone,
		Evidence: fmt.Sprintf("%s %s is Accepted and its volume %s/%s was exposed at %s, but the data mover's pod %s/%s does not exist: "+
			"node-agent does not make it again", m.Kind, m.Name, m.Volume.Namespace, m.Volume.Name, stamp(m.Volume.CreationTimestamp.Time), m.Namespace, m.Name),
		Action: endsWhen(m) + ". " + cancelAdvice(m),
	}
}

// startedSince is the node-agent pod on node that started after t, and
// when: a new pod, or its container started again.
func startedSince(pods []corev1.Pod, node string, t time.Time) (*corev1.Pod, time.Time) {
	for i := range pods {
		p := &pods[i]
		if !podRunning(p) || (node != "" && p.Spec.NodeName != node) {
			continue
		}
		started := p.CreationTimestamp.Time
		for _, s := range p.Status.ContainerStatuses {
			if r := s.State.Running; r != nil && r.StartedAt.After(started) {
				started = r.StartedAt.Time
			}
		}
		if started.After(t) {
			return p, started
		}
	}
	return nil, time.Time{}
}

// endsWhen says when Velero itself ends an Accepted movement that nothing
// prepares: node-agent's prepare timeout, or the operation's timeout.
func endsWhen(m Movement) string {
	timeout := m.PrepareTimeout
	if timeout <= 0 {
		timeout = DefaultPrepareTimeout
	}
	at := m.AcceptedAt.Add(timeout)
	when := fmt.Sprintf("node-agent fails it at its prepare timeout (%s, --data-mover-prepare-timeout) at %s", timeout, stamp(at))
	if !m.Deadline.IsZero() && m.Deadline.Before(at) {
		when = fmt.Sprintf("the operation's timeout ends it at %s, before node-agent's prepare timeout (%s)", stamp(m.Deadline), timeout)
	}
	return "Velero ends the wait itself: " + when
}

// cancelAdvice is what cancelling does to an Accepted movement.
func cancelAdvice(m Movement) string {
	return fmt.Sprintf("To end it sooner, cancel it (kubectl itemops cancel, or spec.cancel on the ItemOperation): node-agent cancels an Accepted %s "+
		"once it has seen the request for %s, at its check every %s", m.Kind, cancelDelayOthers, acceptedResync)
}

// locationCause is the cause of a movement whose BackupStorageLocation
// Velero found Unavailable.
func locationCause(m Movement) *Cause {
	bsl := m.Location
	if bsl == nil || bsl.Status.Phase != velerov1api.BackupStorageLocationPhaseUnavailable {
		return nil
	}
	evidence := fmt.Sprintf("BackupStorageLocation %s/%s that %s %s moves data through is Unavailable", bsl.Namespace, bsl.Name, m.Kind, m.Name)
	if t := bsl.Status.LastValidationTime; t != nil {
		evidence += " (Velero's check at " + stamp(t.Time) + ")"
	}
	if bsl.Status.Message != "" {
		evidence += ": " + bsl.Status.Message
	}
	return &Cause{
		Reason:   itemopsv1alpha1.WaitingLocationUnavailable,
		Evidence: evidence,
		Action: fmt.Sprintf("Make the bucket reachable again (its endpoint, credentials, network); velero backup-location get %s shows Velero's last check, "+
			"made every validationFrequency (1m by default)", bsl.Name),
	}
}

// PendingCancel is what is known of an operation whose cancel was requested
// and that has not ended: who asked and when, and what the reading of its
// data movement found, when it was read.
type PendingCancel struct {
	Runner Runner
	// At is when itemops asked for the cancel (zero when itemops did not:
	// a spec.cancel someone else set).
	At time.Time
	// VeleroRecords: Velero records the operation's end, not the plugin's
	// progress.
	VeleroRecords bool
	// Reported is what the plugin said of its end, when it did and Velero
	// has not recorded it yet.
	Reported string
	// Movement is the data movement as read; nil when it was not read (an
	// operation of another plugin, or a reading that failed).
	Movement *Movement
	// Held is what else holds the movement, possibly nil.
	Held *Cause
}

// CancelPending is the cause of an operation whose cancel is pending, the
// one message of that state whichever path computes it: who asked and
// when, then what was read of it (its object's spec.cancel and phase, what
// node-agent does with the request in that phase, what else holds it), or,
// not read, that it has not ended.
func CancelPending(p PendingCancel) Cause {
	var said []string
	if !p.At.IsZero() {
		if p.Runner.Mirror {
			said = append(said, fmt.Sprintf("itemops requested the cancel of %s at %s by its spec.cancel", p.Runner.object(), stamp(p.At)))
		} else {
			said = append(said, fmt.Sprintf("itemops asked the plugin %s to cancel at %s", p.Runner.Name, stamp(p.At)))
		}
	}
	rule := "the plugin " + p.Runner.Name + " ends it"
	if p.Runner.Mirror {
		rule = "node-agent ends " + p.Runner.object() + " once it sees the request"
	}
	switch m := p.Movement; {
	case m != nil:
		phase := cmpOr(m.Phase, phaseNew)
		if m.Cancel {
			said = append(said, fmt.Sprintf("spec.cancel is set on %s %s, which is %s", m.Kind, m.Name, phase))
		} else {
			said = append(said, fmt.Sprintf("%s %s is %s and its spec.cancel is not set yet", m.Kind, m.Name, phase))
		}
		if p.Held != nil {
			said = append(said, "meanwhile "+strings.TrimSuffix(p.Held.Evidence, "."))
		}
		rule = cancelRule(*m, p.At)
	case p.Reported != "":
		said = append(said, p.Reported)
	default:
		said = append(said, "it has not ended")
	}
	ends := "The operation ends as the plugin's progress reports it"
	if p.VeleroRecords {
		ends = "The operation ends as Velero records it"
	}
	return Cause{
		Reason:   itemopsv1alpha1.WaitingCancelPending,
		Evidence: strings.Join(said, "; "),
		Action:   "The cancel is a request: " + rule + ". " + ends,
	}
}

// cancelRule is what node-agent does with a movement's cancel in its
// phase, requested at (zero when unknown).
func cancelRule(m Movement, at time.Time) string {
	switch m.Phase {
	case phaseAccepted:
		rule := fmt.Sprintf("node-agent cancels an Accepted %s once it has seen the request for %s, at its check every %s (a restart of node-agent starts that count again)",
			m.Kind, cancelDelayOthers, acceptedResync)
		if !at.IsZero() {
			rule += fmt.Sprintf(": about %s", stamp(at.Add(cancelDelayOthers+acceptedResync)))
		}
		return rule
	case phasePrepared:
		return fmt.Sprintf("node-agent on %s cancels a Prepared %s at its next look at it (at the latest %s after the request)", cmpOr(m.Node, "its node"), m.Kind, acceptedResync)
	case phaseInProgress, phaseCanceling:
		return fmt.Sprintf("node-agent stops the transfer (Canceling) and records Canceled once the data path has stopped; it forces Canceled %s after the request", cancelDelayInProgress)
	}
	rule := "node-agent cancels a New " + m.Kind + " at its next look at it"
	if !anyNodeAgentRunning(m.NodeAgentPods) {
		rule += ", and no node-agent pod runs (" + runningSummary(m.NodeAgentPods) + ")"
	}
	return rule
}

// Server is what Velero's Deployment says of velero server.
type Server struct {
	Namespace, Name string
	// Found: the Deployment exists. Observed: its controller has looked at
	// it (status.observedGeneration), so that its counts mean something.
	Found, Observed bool
	Replicas, Ready int32
}

// Running reports whether velero server may be running: false only when
// its Deployment was seen with no ready pod. A Deployment not found, or
// whose status nobody keeps (Velero run outside the cluster), says nothing.
func (s *Server) Running() bool {
	return s == nil || !s.Found || !s.Observed || s.Ready > 0
}

// Summary is what the Deployment says, for a list of what was checked.
func (s *Server) Summary() string {
	if !s.Found {
		return fmt.Sprintf("velero server (no Deployment %s/%s)", s.Namespace, s.Name)
	}
	return fmt.Sprintf("velero server (Deployment %s/%s: %d of %d ready)", s.Namespace, s.Name, s.Ready, s.Replicas)
}

// serverDown is the cause of an operation that waits on velero server,
// whose Deployment has no ready pod; evidence says what waits.
func serverDown(s *Server, evidence string) *Cause {
	state := fmt.Sprintf("Deployment %s/%s has no ready pod (%d of %d ready)", s.Namespace, s.Name, s.Ready, s.Replicas)
	start := fmt.Sprintf("kubectl -n %s describe pods -l deploy=%s shows why its pod is not ready", s.Namespace, s.Name)
	if s.Replicas == 0 {
		state = fmt.Sprintf("Deployment %s/%s is scaled to 0", s.Namespace, s.Name)
		start = fmt.Sprintf("kubectl -n %s scale deployment %s --replicas=1 starts it", s.Namespace, s.Name)
	}
	if evidence != "" {
		evidence += "; "
	}
	return &Cause{
		Reason:   itemopsv1alpha1.WaitingVeleroNotRunning,
		Evidence: evidence + "velero server does not run: " + state,
		Action:   "Until it runs nothing records the operations' ends, initializes repositories or finalizes Backups and Restores: " + start,
	}
}

// NotRunning is the cause of an operation that does not move while velero
// server does not run, or nil when it may run.
func NotRunning(s *Server, still time.Time) *Cause {
	if s.Running() {
		return nil
	}
	return serverDown(s, "progress has not moved since "+stamp(still))
}

// NotMoving is the cause of an operation whose progress has not moved
// since a time and that nothing checked explains: it says what was
// checked, and what its runner says.
func NotMoving(runner Runner, description string, since time.Time, checked []string) Cause {
	c := Cause{
		Reason:   itemopsv1alpha1.WaitingNotMoving,
		Evidence: "no progress since " + stamp(since),
	}
	if len(checked) > 0 {
		c.Evidence += "; checked: " + strings.Join(checked, ", ")
	} else {
		c.Evidence += "; checked: " + runner.Progress()
	}
	if description != "" {
		c.Evidence += "; " + runner.says() + ": " + description
	}
	c.Action = fmt.Sprintf("Nothing itemops reads holds it; %s runs it: look at what it does (its log, the objects it works on). "+
		"itemops marks it Stalled if it stays so for the stall period", runner.who())
	return c
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
