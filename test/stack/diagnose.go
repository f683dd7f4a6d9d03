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

package stack

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/test/plugins/sim"
)

// Diagnose describes what is wrong in a namespace, for a failure message:
// every pod that is not Ready with its containers' states, the last lines
// of each of its containers' logs (the previous run's too when one
// restarted), and the namespace's Warning events.
func (s *Stack) Diagnose(ctx context.Context, namespace string) string {
	cs, err := kubernetes.NewForConfig(s.Cluster.RESTConfig)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("listing the pods of %s: %v", namespace, err)
	}
	for _, p := range pods.Items {
		if podReady(&p) {
			continue
		}
		fmt.Fprintf(&b, "pod %s/%s is %s (not Ready)\n", p.Namespace, p.Name, p.Status.Phase)
		statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
		for _, st := range statuses {
			fmt.Fprintf(&b, "  container %s: %s, restarts %d\n", st.Name, containerState(st.State), st.RestartCount)
			if st.State.Waiting != nil && st.LastTerminationState.Terminated == nil && st.RestartCount == 0 {
				continue
			}
			for _, previous := range []bool{false, true} {
				if previous && st.RestartCount == 0 {
					continue
				}
				logs, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: st.Name, Previous: previous, TailLines: ptr.To[int64](30)}).DoRaw(ctx)
				if err != nil {
					continue
				}
				which := "log"
				if previous {
					which = "log of the previous run"
				}
				fmt.Fprintf(&b, "  --- %s of %s/%s:\n%s\n", which, p.Name, st.Name, indent(string(logs)))
			}
		}
	}
	events, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err == nil {
		// The latest of each object's reasons, the newest last: an object
		// that failed the same way many times is shown once.
		sort.Slice(events.Items, func(i, j int) bool { return eventTime(&events.Items[i]).Before(eventTime(&events.Items[j])) })
		latest := map[string]int{}
		for i, e := range events.Items {
			latest[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name+"/"+e.Reason] = i
		}
		for i, e := range events.Items {
			if latest[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name+"/"+e.Reason] != i {
				continue
			}
			fmt.Fprintf(&b, "event %s %s/%s: %s (%d times): %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, max(e.Count, 1), e.Message)
		}
	}
	return b.String()
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func containerState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated (%s, exit code %d: %s)", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	case s.Waiting != nil:
		return fmt.Sprintf("waiting (%s: %s)", s.Waiting.Reason, s.Waiting.Message)
	}
	return "unknown"
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// Logs returns the last lines of the logs of every container of the pods
// a label selector picks.
func (s *Stack) Logs(ctx context.Context, namespace, selector string, lines int64) string {
	cs, err := kubernetes.NewForConfig(s.Cluster.RESTConfig)
	if err != nil {
		return err.Error()
	}
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			logs, err := cs.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: ptr.To(lines)}).DoRaw(ctx)
			if err != nil {
				fmt.Fprintf(&b, "--- %s/%s: %v\n", p.Name, c.Name, err)
				continue
			}
			fmt.Fprintf(&b, "--- %s/%s:\n%s\n", p.Name, c.Name, indent(string(logs)))
		}
	}
	return b.String()
}

// Container states from which a pod does not start without a change of
// its spec or image.
var brokenReasons = map[string]bool{
	"CrashLoopBackOff": true, "ErrImageNeverPull": true, "ErrImagePull": true, "ImagePullBackOff": true,
	"InvalidImageName": true, "CreateContainerError": true, "CreateContainerConfigError": true, "RunContainerError": true,
}

// brokenPods lists a namespace's pods that cannot start, with why, by
// "pod UID/container": a container waiting for a reason it does not
// recover from, or one that has failed to run twice.
func (s *Stack) brokenPods(ctx context.Context, namespace string) (map[string]string, error) {
	pods := &corev1.PodList{}
	if err := s.Client.List(ctx, pods, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	broken := map[string]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
		for _, st := range statuses {
			if w := st.State.Waiting; w != nil && brokenReasons[w.Reason] || st.RestartCount >= 2 {
				broken[string(p.UID)+"/"+st.Name] = fmt.Sprintf("pod %s/%s, container %s: %s, restarts %d",
					p.Namespace, p.Name, st.Name, containerState(st.State), st.RestartCount)
			}
		}
	}
	return broken, nil
}

// watchPods polls a namespace's pods until ctx ends and returns the first
// that cannot start (brokenPods) but those of before, with why. A pod that
// could not start before the command began (a spec's deliberately broken
// data mover, for one) is not the command's doing.
func (s *Stack) watchPods(ctx context.Context, namespace string, before map[string]string) string {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-tick.C:
		}
		broken, err := s.brokenPods(ctx, namespace)
		if err != nil {
			continue
		}
		for _, key := range slices.Sorted(maps.Keys(broken)) {
			if _, old := before[key]; !old {
				return broken[key]
			}
		}
	}
}

func eventTime(e *corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	return e.EventTime.Time
}

// The pods of Velero's server and of node-agent, as `velero install`
// labels them.
const (
	VeleroPods    = "deploy=velero"
	NodeAgentPods = "name=node-agent"
)

// SaveLogs writes the whole log of every container of every pod of the
// namespaces, and the previous run's of a container that restarted, to
// dir/<namespace>/<pod>_<container>[_previous].log.
func (s *Stack) SaveLogs(ctx context.Context, dir string, namespaces ...string) error {
	cs, err := kubernetes.NewForConfig(s.Cluster.RESTConfig)
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range namespaces {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.MkdirAll(filepath.Join(dir, ns), 0o755); err != nil {
			return err
		}
		for _, p := range pods.Items {
			statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
			for _, st := range statuses {
				for _, previous := range []bool{false, true} {
					if previous && st.RestartCount == 0 {
						continue
					}
					logs, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: st.Name, Previous: previous}).DoRaw(ctx)
					if err != nil {
						continue
					}
					name := p.Name + "_" + st.Name
					if previous {
						name += "_previous"
					}
					if err := os.WriteFile(filepath.Join(dir, ns, name+".log"), logs, 0o644); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// SampleCalls describes the sample plugins' operations whose state changed
// since a time, with the calls each took (sim.Account).
func (s *Stack) SampleCalls(since time.Time) string {
	return sim.Account(s.SampleStateDir(), since)
}
