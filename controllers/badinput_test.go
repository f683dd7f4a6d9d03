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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/plugin"
	"github.com/itemops/itemops/internal/store"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
)

// answer is a Progress answer the sample plugin gives as is, however wrong.
func answer(a sim.Answer) map[string]string {
	data, err := json.Marshal(a)
	if err != nil {
		panic(err)
	}
	return map[string]string{sim.AnnotationAnswer: string(data)}
}

// seen is what a user sees of an ItemOperation: its phase, a condition, an
// Event, its error.
type seen struct {
	phase itemopsv1alpha1.OperationPhase
	// condition: "Type=Status/Reason", and a part of its message.
	condition, conditionMessage string
	// event: "Reason", and a part of its message.
	event, eventMessage string
	// error: a part of status.error.
	error string
	// status: anything else to check.
	status func(g Gomega, s itemopsv1alpha1.ItemOperationStatus)
}

// evilRan is the file the program evilProgram writes exists once it has run.
var evilRan string

// evilProgram writes an executable that leaves evilRan behind if anything
// ever runs it, and returns its path.
func evilProgram(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	evilRan = filepath.Join(dir, "ran")
	path := filepath.Join(dir, "evil")
	if err := os.WriteFile(path, []byte("#!/bin/sh\ntouch "+evilRan+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// readThroughVelero reads file as b's operations file, through the real
// store and Velero's own decoder, from a bucket in memory.
func readThroughVelero(t testing.TB, b *velerov1api.Backup, file []byte) ([]*itemoperation.BackupOperation, error) {
	t.Helper()
	reader := defaultLocation(t)
	bucket := &memoryObjectStore{objects: map[string][]byte{"backups/" + b.Name + "/" + b.Name + "-itemoperations.json.gz": file}}
	s := &store.Store{Client: reader, Secrets: reader, Plugins: memoryPlugins{bucket}, Namespace: envtest.VeleroNamespace, CredentialsDir: t.TempDir()}
	parent := b.DeepCopy()
	parent.Spec.StorageLocation = "default"
	return s.BackupOperations(context.Background(), parent)
}

func recordsFile(t testing.TB, records ...*itemoperation.BackupOperation) []byte {
	t.Helper()
	data, err := gzipRecords(records)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func gzipped(t testing.TB, data []byte) []byte {
	t.Helper()
	out, err := gzipBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// eventsLike matches Events by their text, "…" standing for any text.
func eventsLike(texts []string) []any {
	out := make([]any, 0, len(texts))
	for _, text := range texts {
		parts := strings.Split(text, "…")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		out = append(out, MatchRegexp("^"+strings.Join(parts, ".*")))
	}
	return out
}

// conditionOf is "Type=Status/Reason: message" of the condition named in
// want ("Type=Status/Reason"), or "" when it is not so.
func conditionOf(s itemopsv1alpha1.ItemOperationStatus, want string) string {
	kind, _, _ := strings.Cut(want, "=")
	c := meta.FindStatusCondition(s.Conditions, kind)
	if c == nil {
		return ""
	}
	got := fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason)
	if got != want {
		return ""
	}
	return got + ": " + c.Message
}

// eventsOf returns "Reason: message" of the Events about an object.
func eventsOf(g Gomega, namespace, kind, name string) []string {
	list := &corev1.EventList{}
	g.Expect(env.Client.List(context.Background(), list, client.InNamespace(namespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

// writesDuring counts the writes to obj the API server makes over window,
// by watching it: the measure of a hot loop.
func writesDuring(t testing.TB, obj client.Object, window time.Duration) int {
	t.Helper()
	w, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var list client.ObjectList
	switch obj.(type) {
	case *itemopsv1alpha1.ItemOperation:
		list = &itemopsv1alpha1.ItemOperationList{}
	case *velerov1api.Backup:
		list = &velerov1api.BackupList{}
	default:
		t.Fatalf("no watch for %T", obj)
	}
	current := obj.DeepCopyObject().(client.Object)
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), current); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	watcher, err := w.Watch(ctx, list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{"metadata.name": obj.GetName()}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: current.GetResourceVersion()}})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Stop()
	writes := 0
	for {
		select {
		case ev, ok := <-watcher.ResultChan():
			if !ok {
				return writes
			}
			if ev.Type == watch.Modified || ev.Type == watch.Deleted {
				writes++
			}
		case <-ctx.Done():
			return writes
		}
	}
}

// deleteAndWait deletes an ItemOperation and waits until it is gone (its
// finalizer released after any cancel).
func deleteAndWait(t testing.TB, op *itemopsv1alpha1.ItemOperation) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(client.IgnoreNotFound(env.Client.Delete(context.Background(), op))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKeyFromObject(op), &itemopsv1alpha1.ItemOperation{}))
	}, 15*time.Second, 50*time.Millisecond).Should(BeTrue(), "ItemOperation %s is not released", op.Name)
}

// deleteBackupAndOperations removes a Backup and its ItemOperations.
func deleteBackupAndOperations(t testing.TB, b *velerov1api.Backup) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(client.IgnoreNotFound(env.Client.Delete(context.Background(), b))).To(Succeed())
	for _, op := range operationsOf(g, string(b.UID)) {
		deleteAndWait(t, &op)
	}
	files.fail(string(b.UID), nil)
}

var _ = Describe("Bad operation input", Label("envtest"), func() {
	// Each bad thing an operation can meet (a plugin
	// that is missing, refused or not a plugin; a plugin answering nonsense or
	// not at all; a parent that is gone) ends in exactly what the user is shown,
	// and nothing loops: the operation is written and polled no more than its
	// schedule asks.
	Describe("bad operation input", func() {
		now := time.Now()
		year := func(y int) int64 { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).Unix() }
		rows := []struct {
			name   string
			plugin string
			// upload: the sample plugin's operation; "" uses id as is.
			upload map[string]string
			id     string
			// parent changes the operation's parent reference.
			parent func(op *itemopsv1alpha1.ItemOperation)
			// parentPhase, when set, is the Backup's phase instead of
			// WaitingForPluginOperations; it must stay so.
			parentPhase velerov1api.BackupPhase
			want        seen
		}{{
			name: "unknown plugin", plugin: "example.io/not-installed", id: "op-1",
			want: seen{phase: itemopsv1alpha1.OperationPhaseNew,
				condition: "Progressing=False/PluginNotFound", conditionMessage: "registers BackupItemActionV2/example.io/not-installed",
				event: itemopsv1alpha1.ReasonPluginNotFound},
		}, {
			name: "binary in the plugin directory that is not a Velero plugin", plugin: "example.io/not-installed", id: "op-1",
			want: seen{phase: itemopsv1alpha1.OperationPhaseNew,
				condition: "Progressing=False/PluginNotFound", conditionMessage: "not-a-plugin.sh: not a Velero plugin, or it failed the handshake",
				event: itemopsv1alpha1.ReasonPluginNotFound, eventMessage: "not-a-plugin.sh"},
		}, {
			name: "world-writable plugin binary", plugin: "example.io/not-installed", id: "op-1",
			want: seen{phase: itemopsv1alpha1.OperationPhaseNew,
				condition: "Progressing=False/PluginNotFound", conditionMessage: "anyone-can-replace.sh: refused: writable by every user (mode 0777)",
				event: itemopsv1alpha1.ReasonPluginNotFound, eventMessage: "refused: writable by every user"},
		}, {
			name: "operation ID the plugin does not know", id: "sample-upload-never-started",
			want: seen{phase: itemopsv1alpha1.OperationPhaseFailed, error: "sample-upload-never-started",
				event: "Failed"},
		}, {
			name: "empty answer", upload: answer(sim.Answer{}),
			want: seen{phase: itemopsv1alpha1.OperationPhaseNew, condition: "Progressing=True/Polling",
				status: func(g Gomega, s itemopsv1alpha1.ItemOperationStatus) {
					g.Expect(s.Progress).To(BeEmpty())
					g.Expect(s.EstimatedCompletion).To(BeNil())
				}},
		}, {
			name: "more done than in total", upload: answer(sim.Answer{NCompleted: 300, NTotal: 100, Started: now.Unix()}),
			want: seen{phase: itemopsv1alpha1.OperationPhaseInProgress, condition: "Progressing=True/Polling",
				status: func(g Gomega, s itemopsv1alpha1.ItemOperationStatus) {
					g.Expect(s.Progress).To(Equal("300/100 (100%)"))
					g.Expect(s.EstimatedCompletion).To(BeNil(), "no estimate from a rate that has already overshot")
				}},
		}, {
			name: "negative counts", upload: answer(sim.Answer{NCompleted: -5, NTotal: -10, Started: now.Unix()}),
			want: seen{phase: itemopsv1alpha1.OperationPhaseInProgress, condition: "Progressing=True/Polling",
				status: func(g Gomega, s itemopsv1alpha1.ItemOperationStatus) {
					g.Expect(s.NCompleted).To(BeZero())
					g.Expect(s.NTotal).To(BeZero())
				}},
		}, {
			name: "completed with an error", upload: answer(sim.Answer{Completed: true, Err: "disk full", NCompleted: 10, NTotal: 10}),
			want: seen{phase: itemopsv1alpha1.OperationPhaseFailed, error: "disk full", event: "Failed", eventMessage: "disk full",
				condition: "Progressing=False/Finished"},
		}, {
			name: "far-future timestamps", upload: answer(sim.Answer{NCompleted: 1, NTotal: 10, Started: year(9000), Updated: year(9001)}),
			want: seen{phase: itemopsv1alpha1.OperationPhaseInProgress, condition: "Progressing=True/Polling",
				status: func(g Gomega, s itemopsv1alpha1.ItemOperationStatus) {
					g.Expect(s.Started).NotTo(BeNil())
					g.Expect(s.Started.Year()).To(Equal(9000))
					g.Expect(s.EstimatedCompletion).To(BeNil())
				}},
		}, {
			name: "timestamps no Kubernetes object can hold", upload: answer(sim.Answer{NCompleted: 1, NTotal: 10, Started: year(20000), Updated: -year(20000)}),
			want: seen{phase: itemopsv1alpha1.OperationPhaseInProgress, condition: "Progressing=True/Polling",
				status: func(g Gomega, s itemopsv1alpha1.ItemOperationStatus) {
					g.Expect(s.Started).To(BeNil())
					g.Expect(s.Updated).To(BeNil())
					g.Expect(s.Progress).To(Equal("1/10 (10%)"))
				}},
		}, {
			name: "plugin whose call fails for a moment", upload: map[string]string{sim.AnnotationErrorCalls: "2",
				sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "2Mi"},
			want: seen{phase: itemopsv1alpha1.OperationPhaseCompleted,
				status: func(g Gomega, s itemopsv1alpha1.ItemOperationStatus) {
					g.Expect(s.Error).To(BeEmpty())
					g.Expect(s.PollFailures).To(BeZero())
				}},
		}, {
			name: "plugin whose call keeps failing", upload: map[string]string{sim.AnnotationErrorCalls: "1000"},
			want: seen{phase: itemopsv1alpha1.OperationPhaseFailed, event: "Failed",
				error: fmt.Sprintf("progress could not be read %d times in a row; last error: Progress of plugin itemops.io/sample-datamover: %s: simulated error inside the plugin",
					testMaxFailures, plugin.ErrPluginError)},
		}, {
			name: "plugin that never answers", upload: map[string]string{sim.AnnotationHangProgress: "true"},
			want: seen{phase: itemopsv1alpha1.OperationPhaseFailed, error: fmt.Sprintf("progress could not be read %d times in a row", testMaxFailures),
				event: "Failed"},
		}, {
			name: "parent that does not exist", upload: map[string]string{sim.AnnotationSize: "1Gi", sim.AnnotationSpeed: "1Mi"},
			parent: func(op *itemopsv1alpha1.ItemOperation) {
				op.Spec.Parent.Name, op.Spec.Parent.UID = "never-created", "0b4e7a52-0000-4000-8000-000000000000"
				op.Labels[itemopsv1alpha1.LabelParentUID] = op.Spec.Parent.UID
			},
			want: seen{phase: itemopsv1alpha1.OperationPhaseCanceled, condition: "Canceled=True/ParentDeleted", conditionMessage: "no longer exists",
				event: itemopsv1alpha1.ReasonParentDeleted},
		}, {
			name: "parent whose UID does not match", upload: map[string]string{sim.AnnotationSize: "1Gi", sim.AnnotationSpeed: "1Mi"},
			parent: func(op *itemopsv1alpha1.ItemOperation) {
				op.Spec.Parent.UID = "0b4e7a52-0000-4000-8000-000000000001"
				op.Labels[itemopsv1alpha1.LabelParentUID] = op.Spec.Parent.UID
			},
			want: seen{phase: itemopsv1alpha1.OperationPhaseCanceled, condition: "Canceled=True/ParentDeleted",
				conditionMessage: "(uid 0b4e7a52-0000-4000-8000-000000000001) no longer exists", event: itemopsv1alpha1.ReasonParentDeleted},
		}, {
			name: "parent in a phase itemops does not own", upload: map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi"},
			parentPhase: velerov1api.BackupPhaseInProgress,
			want:        seen{phase: itemopsv1alpha1.OperationPhaseCompleted},
		}, {
			name: "parent already Completed", upload: map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi"},
			parentPhase: velerov1api.BackupPhaseCompleted,
			want:        seen{phase: itemopsv1alpha1.OperationPhaseCompleted},
		}}
		for _, row := range rows {
			It(row.name, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				backup := newBackup(t)
				if row.parentPhase != "" {
					patch := client.MergeFrom(backup.DeepCopy())
					backup.Status.Phase = row.parentPhase
					g.Expect(env.Client.Patch(context.Background(), backup, patch)).To(Succeed())
				}
				id := row.id
				if id == "" {
					id = startUpload(t, row.upload)
				}
				plugin := row.plugin
				if plugin == "" {
					plugin = "itemops.io/sample-datamover"
				}
				var mutate []func(*itemopsv1alpha1.ItemOperation)
				if row.parent != nil {
					mutate = append(mutate, row.parent)
				}
				op := newOperation(t, backup, plugin, id, mutate...)
				t.Cleanup(func() { deleteAndWait(t, op) })

				g.Eventually(func(g Gomega) {
					s := get(g, op).Status
					g.Expect(s.Phase).To(Equal(row.want.phase))
					if row.want.condition != "" {
						g.Expect(conditionOf(s, row.want.condition)).To(ContainSubstring(row.want.conditionMessage))
					}
					if row.want.error != "" {
						g.Expect(s.Error).To(ContainSubstring(row.want.error))
					}
					if row.want.status != nil {
						row.want.status(g, s)
					}
				}, testMaxFailures*testCallTimeout+20*time.Second, 50*time.Millisecond).Should(Succeed())
				if row.want.event != "" {
					g.Eventually(func(g Gomega) []string { return eventsOf(g, op.Namespace, "ItemOperation", op.Name) }, 5*time.Second).
						Should(ContainElement(And(HavePrefix(row.want.event+": "), ContainSubstring(row.want.eventMessage))))
				}

				// No hot loop: over a second the operation is written at most
				// twice, and polled at most as often as its interval allows.
				// The window is the time between the two readings of the
				// plugin's count, longer than the second watched on a busy
				// machine. Polls are at least 80% of the interval apart,
				// except the second, which the first draws anywhere from 10%
				// of the interval on: one more fits when the window holds
				// the operation's first poll.
				var before int
				start := time.Now()
				if row.upload != nil {
					before = pluginState(t, id).ProgressCalls
				}
				writes := writesDuring(t, op, time.Second)
				g.Expect(writes).To(BeNumerically("<=", 2), "status writes in a second")
				if row.upload != nil {
					polls := pluginState(t, id).ProgressCalls - before
					window := time.Since(start)
					g.Expect(polls).To(BeNumerically("<=", int(window/(testSync*80/100))+2), "Progress calls in %s", window)
				}
				if row.parentPhase != "" {
					got := &velerov1api.Backup{}
					g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(backup), got)).To(Succeed())
					g.Expect(got.Status.Phase).To(Equal(row.parentPhase), "the Backup was moved")
					g.Expect(got.Status.BackupItemOperationsCompleted).To(BeZero(), "the Backup's counters were written")
				}
			})
		}
	})

	// What a Backup's operations file can hold that is
	// wrong (as Velero's own decoder reads it) and what the user is shown for
	// each: the Backup's phase and an Event saying why. None leaves the Backup
	// waiting without one.
	Describe("bad operations file", func() {
		rows := []struct {
			name string
			// attempted: the operations Velero counted.
			attempted int
			// file: the bytes of the operations file, given the Backup.
			file  func(t testing.TB, b *velerov1api.Backup) []byte
			phase velerov1api.BackupPhase
			// events: the Backup's Events, "Reason: message", where "…"
			// stands for any text.
			events []string
			// operations: checks the ItemOperations made from the file.
			operations func(g Gomega, ops []itemopsv1alpha1.ItemOperation)
		}{{
			name: "not gzip", attempted: 1,
			file: func(testing.TB, *velerov1api.Backup) []byte {
				return []byte("these are not the operations you are looking for")
			},
			phase: velerov1api.BackupPhasePartiallyFailed,
			events: []string{reasonUnreadable + ": reading the item operations of backup …: " + store.ErrMalformed.Error() + ": gzip: invalid header",
				reasonGaveUp + ": WaitingForPluginOperations -> PartiallyFailed: its plugin operations cannot be tracked: …gzip: invalid header"},
		}, {
			name: "not JSON", attempted: 1,
			// A list in shape, not JSON inside: the decoder says what is wrong.
			file:  func(t testing.TB, _ *velerov1api.Backup) []byte { return gzipped(t, []byte("[{ not json }]")) },
			phase: velerov1api.BackupPhasePartiallyFailed,
			events: []string{reasonUnreadable + ": …" + store.ErrMalformed.Error() + ": error decoding object data: invalid character",
				reasonGaveUp + ": WaitingForPluginOperations -> PartiallyFailed"},
		}, {
			name: "truncated", attempted: 2,
			file: func(t testing.TB, b *velerov1api.Backup) []byte {
				data := recordsFile(t, backupRecord(b, startUpload(t, nil), itemoperation.OperationPhaseNew, time.Now()),
					backupRecord(b, startUpload(t, nil), itemoperation.OperationPhaseNew, time.Now()))
				return data[:len(data)/2]
			},
			phase:  velerov1api.BackupPhasePartiallyFailed,
			events: []string{reasonUnreadable + ": …" + store.ErrMalformed.Error() + ": …unexpected EOF"},
		}, {
			// 64 KiB that inflate to 64 MiB: never inflated into memory.
			name: "a gzip bomb", attempted: 1,
			file: func(t testing.TB, _ *velerov1api.Backup) []byte {
				return gzipped(t, append(append([]byte(`[`), bytes.Repeat([]byte(" "), 64<<20)...), `]`...))
			},
			phase: velerov1api.BackupPhasePartiallyFailed,
			events: []string{reasonTooLarge + ": reading the item operations of backup …: " + store.ErrTooLarge.Error() +
				": backups/…-itemoperations.json.gz inflates to more than 33554432 bytes (--max-operations-file-inflated-bytes)",
				reasonGaveUp + ": WaitingForPluginOperations -> PartiallyFailed: its plugin operations cannot be tracked: …--max-operations-file-inflated-bytes"},
		}, {
			// A string of 16 MiB in a record: Velero's decoder would hold it whole.
			name: "a string too long", attempted: 1,
			file: func(t testing.TB, _ *velerov1api.Backup) []byte {
				return gzipped(t, append(append([]byte(`[{"spec":{"operationID":"`), bytes.Repeat([]byte("a"), 16<<20)...), `"}}]`...))
			},
			phase:  velerov1api.BackupPhasePartiallyFailed,
			events: []string{reasonTooLarge + ": …holds a string longer than 1048576 bytes"},
		}, {
			// An object, not a list: Velero's decoder would hold all of it
			// before it failed on the type.
			name: "not a list", attempted: 1,
			file: func(t testing.TB, _ *velerov1api.Backup) []byte {
				return gzipped(t, append(append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), 16<<20)...), `"}`...))
			},
			phase:  velerov1api.BackupPhasePartiallyFailed,
			events: []string{reasonUnreadable + ": …" + store.ErrMalformed.Error() + ": …is not a gzip JSON list: not a JSON list"},
		}, {
			// Each record is an object in memory and an ItemOperation, however small.
			name: "more records than allowed", attempted: 1,
			file: func(t testing.TB, _ *velerov1api.Backup) []byte {
				return gzipped(t, []byte("["+strings.Repeat("{},", store.DefaultRecordLimit)+"{}]"))
			},
			phase:      velerov1api.BackupPhasePartiallyFailed,
			events:     []string{reasonTooLarge + ": …holds more than 20000 records (--max-operations-file-records)"},
			operations: func(g Gomega, ops []itemopsv1alpha1.ItemOperation) { g.Expect(ops).To(BeEmpty()) },
		}, {
			// Millions of empty post-operation items in one record: 32 KiB
			// stored, under the inflated limit, about 1.9 GiB once decoded.
			name: "a record with millions of post-operation items", attempted: 1,
			file: func(t testing.TB, b *velerov1api.Backup) []byte {
				return gzipped(t, []byte(`[{"spec":{"backupName":"`+b.Name+`","backupUID":"`+string(b.UID)+`","operationID":"planted","postOperationItems":[`+
					strings.Repeat("{},", 11184760)+`{}]},"status":{"phase":"InProgress"}}]`))
			},
			phase: velerov1api.BackupPhasePartiallyFailed,
			events: []string{reasonTooLarge + ": …holds more than 100000 elements in the lists of its records (--max-operations-file-items)",
				reasonGaveUp + ": WaitingForPluginOperations -> PartiallyFailed: its plugin operations cannot be tracked: …--max-operations-file-items"},
			operations: func(g Gomega, ops []itemopsv1alpha1.ItemOperation) { g.Expect(ops).To(BeEmpty()) },
		}, {
			name: "larger than allowed as stored", attempted: 1,
			file: func(testing.TB, *velerov1api.Backup) []byte {
				return bytes.Repeat([]byte{0x1f}, store.DefaultCompressedLimit+1)
			},
			phase:  velerov1api.BackupPhasePartiallyFailed,
			events: []string{reasonTooLarge + ": …is larger than 8388608 bytes (--max-operations-file-bytes)"},
		}, {
			name: "a record of another Backup", attempted: 1,
			file: func(t testing.TB, b *velerov1api.Backup) []byte {
				foreign := backupRecord(b, startUpload(t, nil), itemoperation.OperationPhaseNew, time.Now())
				foreign.Spec.BackupUID = "7d1c1d8e-0000-4000-8000-000000000000"
				return recordsFile(t, foreign)
			},
			phase: velerov1api.BackupPhaseWaitingForPluginOperations,
			events: []string{reasonForeignRecord + ": record 0 of the operations file belongs to Backup UID 7d1c1d8e-0000-4000-8000-000000000000",
				reasonMissing + ": "},
			operations: func(g Gomega, ops []itemopsv1alpha1.ItemOperation) { g.Expect(ops).To(BeEmpty()) },
		}, {
			name: "the same operation ID twice", attempted: 2,
			file: func(t testing.TB, b *velerov1api.Backup) []byte {
				rec := backupRecord(b, startUpload(t, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi"}), itemoperation.OperationPhaseNew, time.Now())
				return recordsFile(t, rec, rec)
			},
			phase:  velerov1api.BackupPhaseFinalizing,
			events: []string{reasonDuplicateRecord + ": record 1 of the operations file repeats record 0"},
			operations: func(g Gomega, ops []itemopsv1alpha1.ItemOperation) {
				g.Expect(ops).To(HaveLen(1))
				g.Expect(ops[0].Annotations).To(HaveKeyWithValue(itemopsv1alpha1.AnnotationRecords, "2"))
			},
		}, {
			name: "a name that must be shortened", attempted: 1,
			file: func(t testing.TB, b *velerov1api.Backup) []byte {
				rec := backupRecord(b, startUpload(t, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi"}), itemoperation.OperationPhaseNew, time.Now())
				rec.Spec.BackupItemAction = "example.io/" + strings.Repeat("a-very-long-plugin-name-", 8)
				rec.Spec.OperationID = strings.Repeat("an-operation-id-longer-than-any-kubernetes-name-", 6)
				return recordsFile(t, rec)
			},
			phase:  velerov1api.BackupPhaseWaitingForPluginOperations,
			events: []string{reasonIngested + ": created 1 ItemOperations"},
			operations: func(g Gomega, ops []itemopsv1alpha1.ItemOperation) {
				g.Expect(ops).To(HaveLen(1))
				g.Expect(len(ops[0].Name)).To(BeNumerically("<=", validation.DNS1123LabelMaxLength))
				g.Expect(ops[0].Spec.OperationID).To(HavePrefix(strings.Repeat("an-operation-id-longer-than-any-kubernetes-name-", 6)), "kept whole in the spec")
				g.Expect(ops[0].Spec.Plugin.Name).To(HaveSuffix(strings.Repeat("a-very-long-plugin-name-", 8)))
			},
		}, {
			name: "a plugin name that is a path to a program", attempted: 1,
			file: func(t testing.TB, b *velerov1api.Backup) []byte {
				rec := backupRecord(b, "operation-1", itemoperation.OperationPhaseNew, time.Now())
				rec.Spec.BackupItemAction = evilProgram(t)
				return recordsFile(t, rec)
			},
			phase:  velerov1api.BackupPhaseFinalizingPartiallyFailed,
			events: []string{reasonInvalidRecord + ": operation \"operation-1\" of plugin \"/…\" cannot be tracked and counts as failed"},
			operations: func(g Gomega, ops []itemopsv1alpha1.ItemOperation) {
				g.Expect(ops).To(BeEmpty())
				g.Expect(evilRan).NotTo(BeAnExistingFile(), "a program named by the operations file was run")
			},
		}}
		for _, row := range rows {
			It(row.name, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				b := backupWaitingFor(t, row.attempted, velerov1api.BackupPhaseWaitingForPluginOperations)
				read, err := readThroughVelero(t, b, row.file(t, b))
				if err != nil {
					files.fail(string(b.UID), err)
				} else {
					files.setBackup(string(b.UID), read)
				}
				patchBackupLabel(t, b)
				t.Cleanup(func() { deleteBackupAndOperations(t, b) })

				g.Eventually(func(g Gomega) []string { return parentEvents(g, b) }, 10*time.Second, 100*time.Millisecond).
					Should(ContainElements(eventsLike(row.events)...))
				g.Eventually(backupStatus(b), 10*time.Second, 100*time.Millisecond).Should(HaveField("Phase", row.phase))
				if row.operations != nil {
					row.operations(g, operationsOf(g, string(b.UID)))
				}
				// No hot loop: a Backup that cannot go on is not rewritten.
				if row.phase != velerov1api.BackupPhaseFinalizing {
					g.Expect(writesDuring(t, b, time.Second)).To(BeNumerically("<=", 1), "Backup writes in a second")
				}
			})
		}
	})

	// An operations file that cannot be read because of its
	// location (a credential Secret missing, the location unavailable) keeps
	// the Backup waiting, with an Event saying why, and nothing is lost: once
	// the location is fixed the operations are read.
	It("bad location", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		// The error the real store gives for a location whose Secret is missing.
		scheme := runtime.NewScheme()
		g.Expect(velerov1api.AddToScheme(scheme)).To(Succeed())
		g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
		location := &velerov1api.BackupStorageLocation{
			ObjectMeta: metav1.ObjectMeta{Namespace: envtest.VeleroNamespace, Name: "default"},
			Spec: velerov1api.BackupStorageLocationSpec{Provider: "aws",
				StorageType: velerov1api.StorageType{ObjectStorage: &velerov1api.ObjectStorageLocation{Bucket: "backups"}},
				Credential:  &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cloud-credentials"}, Key: "cloud"}},
		}
		reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(location).Build()
		real := &store.Store{Client: reader, Secrets: reader, Plugins: memoryPlugins{&memoryObjectStore{objects: map[string][]byte{}}},
			Namespace: envtest.VeleroNamespace, CredentialsDir: t.TempDir()}
		b := backupWaitingFor(t, 1, velerov1api.BackupPhaseWaitingForPluginOperations)
		_, missingSecret := real.BackupOperations(context.Background(), &velerov1api.Backup{ObjectMeta: b.ObjectMeta,
			Spec: velerov1api.BackupSpec{StorageLocation: "default"}})
		g.Expect(missingSecret).To(MatchError(ContainSubstring("cloud-credentials")))

		files.fail(string(b.UID), missingSecret)
		patchBackupLabel(t, b)
		t.Cleanup(func() { deleteBackupAndOperations(t, b) })
		g.Eventually(func(g Gomega) []string { return parentEvents(g, b) }, 5*time.Second).Should(
			ContainElement(And(HavePrefix(reasonUnreadable+": "), ContainSubstring("cloud-credentials"))))
		g.Expect(backupStatus(b)(g).Phase).To(Equal(velerov1api.BackupPhaseWaitingForPluginOperations))
		g.Expect(writesDuring(t, b, time.Second)).To(BeNumerically("<=", 1), "Backup writes in a second")

		// The Secret is created: the operation is read and the Backup moves on.
		files.fail(string(b.UID), nil)
		files.setBackup(string(b.UID), []*itemoperation.BackupOperation{
			backupRecord(b, startUpload(t, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "4Mi"}), itemoperation.OperationPhaseNew, time.Now()),
		})
		g.Eventually(backupStatus(b), 15*time.Second, 100*time.Millisecond).Should(HaveField("Phase", velerov1api.BackupPhaseFinalizing))
	})
})
