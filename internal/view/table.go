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

package view

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// SortNewestFirst orders summaries by their parent's creation, newest
// first; parents created in the same second by name, descending, which
// keeps the backups of a schedule (<schedule>-<timestamp>) newest first too.
func SortNewestFirst(sums []Summary) {
	slices.SortStableFunc(sums, func(a, b Summary) int {
		return cmp.Or(b.Created.Compare(a.Created), cmp.Compare(b.Parent.Name, a.Parent.Name), cmp.Compare(a.Parent.Kind, b.Parent.Kind))
	})
}

// summaryColumns are the columns of `kubectl itemops get`; priority 1
// columns show with -o wide, as kubectl's do.
var summaryColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Backup or Restore"},
	{Name: "Phase", Type: "string", Description: "The parent's phase"},
	{Name: "Completed", Type: "integer", Description: "Operations completed"},
	{Name: "Failed", Type: "integer", Description: "Operations failed or canceled"},
	{Name: "Total", Type: "integer", Description: "Operations in all (as many as Velero attempted, when more are known to it)"},
	{Name: "Moved", Type: "string", Description: "Work done of the total, bytes first, then each other unit"},
	{Name: "Progress", Type: "string", Description: "Overall progress"},
	{Name: "ETA", Type: "string", Description: "Time until the last unfinished operation's estimated completion"},
	{Name: "Stalled", Type: "integer", Description: "Unfinished operations without progress for the stall period"},
	{Name: "Waiting For", Type: "string", Description: "What unfinished operations wait for, by cause (kubectl itemops why tells more); a Queued Backup's place in Velero's queue"},
	{Name: "Rate", Type: "string", Description: "Bytes a second the unfinished operations move together, over about the last minute"},
	{Name: "Elapsed", Type: "string", Description: "Time since the first operation started, to now or to the last one's end"},
	{Name: "Age", Type: "string", Description: "Time since the parent was created"},
	{Name: "Running", Type: "integer", Priority: 1, Description: "Operations not finished"},
	{Name: "Plugins", Type: "string", Priority: 1, Description: "Plugins that started the operations"},
}

// SummaryTable is the table of summaries as kubectl prints tables. With
// kinds, names are written kind/name, as when kubectl lists several kinds.
func SummaryTable(sums []Summary, now time.Time, kinds bool) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: summaryColumns}
	for _, s := range sums {
		name := s.Parent.Name
		if kinds {
			name = s.Parent.String()
		}
		var moved []string
		for _, a := range s.Amounts {
			moved = append(moved, a.String())
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
			name, orNone(s.Phase), int64(s.Completed), int64(s.Failed), int64(s.Total),
			orNone(strings.Join(moved, ", ")), fmt.Sprintf("%d%%", int(s.Fraction*100)),
			orNone(ETAString(s.ETA, now)), int64(s.Stalled), orNone(s.WaitingString()), orNone(s.RateString()),
			orNone(elapsedString(s, now)), duration.HumanDuration(now.Sub(s.Created)),
			int64(s.Running), orNone(strings.Join(s.Plugins, ",")),
		}})
	}
	return t
}

func elapsedString(s Summary, now time.Time) string {
	if s.Started.IsZero() {
		return ""
	}
	return duration.HumanDuration(s.Elapsed(now))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// SummaryKind is the kind of the objects `kubectl itemops get -o json|yaml`
// prints. They are made by the client from ItemOperations and their parents;
// the API server serves no such kind.
const SummaryKind = "OperationsSummary"

// SummaryList is the summaries as a v1 List of OperationsSummary objects,
// for kubectl's JSON, YAML, JSONPath and template printers.
func SummaryList(sums []Summary) (*unstructured.UnstructuredList, error) {
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, s := range sums {
		obj, err := summaryObject(s)
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, *obj)
	}
	return list, nil
}

// summaryJSON is the shape of an OperationsSummary.
type summaryJSON struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   summaryMeta       `json:"metadata"`
	Parent     summaryParent     `json:"parent"`
	Operations summaryOperations `json:"operations"`
	Amounts    []summaryAmount   `json:"amounts,omitempty"`
	// Percent is the overall progress, 0 to 100.
	Percent             int          `json:"percent"`
	EstimatedCompletion *metav1.Time `json:"estimatedCompletion,omitempty"`
	Plugins             []string     `json:"plugins,omitempty"`
	// NotDurable are the PersistentVolumes whose native snapshot did not
	// become durable.
	NotDurable []string `json:"notDurableSnapshots,omitempty"`
	// QueuePosition is a Queued Backup's place in Velero's queue.
	QueuePosition int `json:"queuePosition,omitempty"`
	// BytesPerSecond is what the unfinished operations move together.
	BytesPerSecond int64 `json:"bytesPerSecond,omitempty"`
	// ElapsedSeconds is the time since the first operation started, to
	// now or to the last one's end.
	ElapsedSeconds int64 `json:"elapsedSeconds,omitempty"`
}

// summaryMeta is an OperationsSummary's metadata: its parent's name,
// namespace and creation.
type summaryMeta struct {
	Name              string      `json:"name"`
	Namespace         string      `json:"namespace"`
	CreationTimestamp metav1.Time `json:"creationTimestamp"`
}

type summaryParent struct {
	Kind  itemopsv1alpha1.ParentKind `json:"kind"`
	Name  string                     `json:"name"`
	UID   string                     `json:"uid"`
	Phase string                     `json:"phase,omitempty"`
}

type summaryOperations struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Running   int `json:"running"`
	Stalled   int `json:"stalled"`
	// Waiting counts the unfinished operations by what they wait for.
	Waiting map[string]int `json:"waiting,omitempty"`
}

type summaryAmount struct {
	Units string `json:"units"`
	Done  int64  `json:"done"`
	Total int64  `json:"total"`
}

func summaryObject(s Summary) (*unstructured.Unstructured, error) {
	j := summaryJSON{
		APIVersion: itemopsv1alpha1.GroupVersion.String(), Kind: SummaryKind,
		Metadata: summaryMeta{Name: s.Parent.Name, Namespace: s.Parent.Namespace, CreationTimestamp: metav1.Time{Time: s.Created}},
		Parent:   summaryParent{Kind: s.Parent.Kind, Name: s.Parent.Name, UID: string(s.UID), Phase: s.Phase},
		Operations: summaryOperations{Total: s.Total, Completed: s.Completed, Failed: s.Failed,
			Running: s.Running, Stalled: s.Stalled, Waiting: s.Waiting},
		QueuePosition:  s.QueuePosition,
		BytesPerSecond: int64(s.Rate + 0.5),
		Percent:        int(s.Fraction * 100),
		Plugins:        s.Plugins,
		NotDurable:     s.NotDurable,
	}
	for _, a := range s.Amounts {
		j.Amounts = append(j.Amounts, summaryAmount(a))
	}
	if !s.ETA.IsZero() {
		j.EstimatedCompletion = &metav1.Time{Time: s.ETA}
	}
	if !s.Ended.IsZero() {
		j.ElapsedSeconds = int64(s.Elapsed(s.Ended).Seconds())
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&j)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}
