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

package rollup

// Phase is a Backup or Restore phase. Velero v1.18 spells the phases that
// matter here the same for both kinds.
type Phase string

// The phases itemops moves a parent between. It owns a parent only while the
// parent is in one of the two WaitingForPluginOperations phases; Velero's own
// finalizer controllers take it on from Finalizing*.
const (
	WaitingForPluginOperations                Phase = "WaitingForPluginOperations"
	WaitingForPluginOperationsPartiallyFailed Phase = "WaitingForPluginOperationsPartiallyFailed"
	Finalizing                                Phase = "Finalizing"
	FinalizingPartiallyFailed                 Phase = "FinalizingPartiallyFailed"
	// PartiallyFailed is terminal. itemops moves a parent there only when
	// its operations cannot be known or recorded (no location, a malformed
	// operations file, a read-only location), as Velero does.
	PartiallyFailed Phase = "PartiallyFailed"
)

// Counts are the operations of one parent by outcome. Canceled operations
// count as failed, as Velero records them.
type Counts struct {
	// Total is every operation of the parent.
	Total int
	// Completed ended successfully.
	Completed int
	// Failed ended in failure or were canceled.
	Failed int
}

// Unfinished is the number of operations not yet terminal.
func (c Counts) Unfinished() int {
	return max(0, c.Total-c.Completed-c.Failed)
}

// Owned reports whether itemops may move a parent in this phase.
func Owned(phase Phase) bool {
	return phase == WaitingForPluginOperations || phase == WaitingForPluginOperationsPartiallyFailed
}

// Next returns the phase a parent in phase moves to given the counts of its
// operations. A phase itemops does not own comes back unchanged, so no other
// phase ever regresses or advances here. The first failed operation makes the
// parent PartiallyFailed at once (as Velero does); when no operation is
// unfinished the parent moves on to Finalizing or FinalizingPartiallyFailed.
func Next(phase Phase, c Counts) Phase {
	if !Owned(phase) {
		return phase
	}
	partial := phase == WaitingForPluginOperationsPartiallyFailed || c.Failed > 0
	switch {
	case c.Unfinished() == 0 && partial:
		return FinalizingPartiallyFailed
	case c.Unfinished() == 0:
		return Finalizing
	case partial:
		return WaitingForPluginOperationsPartiallyFailed
	default:
		return WaitingForPluginOperations
	}
}
