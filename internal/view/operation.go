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
	"fmt"
	"time"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/progress"
)

// Operation is one operation as a row or a bar shows it.
type Operation struct {
	// Name is the ItemOperation's name; ID the plugin's operation ID.
	Name, ID string
	// Item is the object the operation is about, namespace/name.
	Item   string
	Plugin string
	Phase  itemopsv1alpha1.OperationPhase
	// Done and Total are in Units; Done is extrapolated when Extrapolated is set.
	Done, Total  int64
	Units        string
	Extrapolated bool
	// Rate is the measured rate in units per second; 0 when unknown.
	Rate float64
	// ETA is when the operation should finish; zero when unknown.
	ETA             time.Time
	Error           string
	Stalled         bool
	CancelRequested bool
	// WaitingFor is why it does not move (status.waitingFor); empty while it moves.
	WaitingFor string
}

// Finished reports whether the operation's phase is terminal.
func (o Operation) Finished() bool { return o.Phase.IsTerminal() }

// Fraction is how much is done, from 0 to 1, by its counts; a completed
// operation is 1, a failed one shows how far it got.
func (o Operation) Fraction() float64 {
	switch {
	case o.Phase == itemopsv1alpha1.OperationPhaseCompleted:
		return 1
	case o.Total <= 0:
		return 0
	}
	return min(float64(max(o.Done, 0))/float64(o.Total), 1)
}

// Amount is "4.2Gi/10Gi", prefixed with "~" when extrapolated.
func (o Operation) Amount() string {
	s := Amount{Units: o.Units, Done: o.Done, Total: o.Total}.String()
	if o.Extrapolated && s != "" {
		s = "~" + s
	}
	return s
}

// RateString is "350Mi/s" or "12 files/s"; empty when unknown.
func (o Operation) RateString() string {
	if o.Rate <= 0 || o.Finished() {
		return ""
	}
	per := int64(o.Rate + 0.5)
	if progress.IsBytes(o.Units) {
		return Amount{Units: "bytes", Done: per}.String() + "/s"
	}
	if o.Units == "" {
		return fmt.Sprintf("%d/s", per)
	}
	return fmt.Sprintf("%d %s/s", per, o.Units)
}

// Operations are the rows of a snapshot's operations at now, in the
// snapshot's order, without extrapolation.
func Operations(s Snapshot) []Operation {
	rows := make([]Operation, 0, len(s.Operations))
	for i := range s.Operations {
		rows = append(rows, row(&s.Operations[i]))
	}
	return rows
}

func row(op *itemopsv1alpha1.ItemOperation) Operation {
	st := op.Status
	phase := st.Phase
	if phase == "" {
		phase = itemopsv1alpha1.OperationPhaseNew
	}
	// What plugins and the bucket wrote is made safe for a terminal.
	o := Operation{Name: op.Name, ID: Printable(op.Spec.OperationID), Item: Printable(ItemOf(op)), Plugin: Printable(op.MoverName()),
		Phase: phase, Done: st.NCompleted, Total: st.NTotal, Units: Printable(st.OperationUnits), Error: Printable(st.Error),
		CancelRequested: op.Spec.Cancel || st.Phase == itemopsv1alpha1.OperationPhaseCanceling}
	if !phase.IsTerminal() {
		o.Stalled = stalled(op)
		o.WaitingFor = Printable(st.WaitingFor)
		if st.EstimatedCompletion != nil {
			o.ETA = st.EstimatedCompletion.Time
		}
		switch at, ok := measuredAt(op); {
		case st.Throughput != "":
			// itemops' own rate over the last minute.
			o.Rate = float64(st.UnitsPerSecond)
		case ok && st.NCompleted > 0:
			o.Rate = float64(st.NCompleted) / at.Sub(st.Started.Time).Seconds()
		}
	}
	return o
}

// measuredAt is when the status' counts were read: the plugin's own time of
// the reading when it gives one after the start, else the poll's time; as
// itemops measures the rate for its estimate.
func measuredAt(op *itemopsv1alpha1.ItemOperation) (time.Time, bool) {
	st := op.Status
	if st.Started == nil {
		return time.Time{}, false
	}
	at := time.Time{}
	switch {
	case st.Updated != nil && st.Updated.After(st.Started.Time):
		at = st.Updated.Time
	case st.LastPolled != nil:
		at = st.LastPolled.Time
	}
	if !at.After(st.Started.Time) {
		return time.Time{}, false
	}
	return at, true
}

// Extrapolate advances a running operation's figure from when its status
// was measured to now, at the operation's own average rate, for at most
// horizon. It never reaches the total (only the status may say an operation
// is done) and never goes below the status' figure. An operation that is
// not running, stalled, without a start or total, or measured in the future
// is left as it is.
func Extrapolate(o Operation, op *itemopsv1alpha1.ItemOperation, now time.Time, horizon time.Duration) Operation {
	if o.Phase != itemopsv1alpha1.OperationPhaseInProgress || o.Stalled || o.Rate <= 0 || o.Total <= 1 || o.Done >= o.Total-1 {
		return o
	}
	at, ok := measuredAt(op)
	if !ok || !now.After(at) {
		return o
	}
	elapsed := min(now.Sub(at), horizon)
	done := o.Done + int64(o.Rate*elapsed.Seconds())
	done = min(done, o.Total-1)
	if done > o.Done {
		o.Done, o.Extrapolated = done, true
	}
	return o
}
