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
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// Plain writes one line for each change of a parent and of each of its
// operations, for logs and pipes: no bars, no escape codes, no
// extrapolation, every figure as the status says it.
type Plain struct {
	w   io.Writer
	now func() time.Time

	parent string
	ops    map[string]string
}

// NewPlain writes lines to w, each stamped with the time now gives.
func NewPlain(w io.Writer, now func() time.Time) *Plain {
	return &Plain{w: w, now: now, ops: map[string]string{}}
}

// Show writes the lines of what changed since the last snapshot.
func (p *Plain) Show(s Snapshot) error {
	now := p.now()
	stamp := now.Format(time.TimeOnly)
	var b strings.Builder
	if !s.Found {
		fmt.Fprintf(&b, "%s %s\n", stamp, EndLine(s, ExitGone, p.parent != ""))
		_, err := io.WriteString(p.w, b.String())
		return err
	}
	sum := Summarize(s)
	code, ended := Ended(s)
	// A line for the parent when its phase or counts change, not for every
	// byte its operations move (their own lines say that); the end line says
	// the last phase.
	key := fmt.Sprintf("%s|%d|%d|%d|%d|%s", sum.Phase, sum.Total, sum.Completed, sum.Failed, sum.Stalled, sum.WaitingString())
	if key != p.parent && !ended {
		p.parent = key
		fmt.Fprintf(&b, "%s %s %s\n", stamp, s.Parent, parentLine(sum, now))
	}
	for _, o := range Operations(s) {
		key := opKey(o)
		if p.ops[o.Name] == key {
			continue
		}
		p.ops[o.Name] = key
		fmt.Fprintf(&b, "%s %s %s\n", stamp, s.Parent, opLine(o, now))
	}
	if ended {
		fmt.Fprintf(&b, "%s %s\n", stamp, EndLine(s, code, true))
	}
	_, err := io.WriteString(p.w, b.String())
	return err
}

// EndLine says how the parent ended and the exit code that says it to
// scripts; seen tells a parent deleted while watched from one never found.
func EndLine(s Snapshot, code int, seen bool) string {
	switch {
	case !s.Found && seen:
		return fmt.Sprintf("%s was deleted (exit code %d)", s.Parent, code)
	case !s.Found:
		return fmt.Sprintf("%s not found in namespace %s (exit code %d)", s.Parent, s.Parent.Namespace, code)
	case code == ExitGone:
		return fmt.Sprintf("%s is being deleted (exit code %d)", s.Parent, code)
	}
	return fmt.Sprintf("%s ended %s (exit code %d)", s.Parent, s.Phase, code)
}

// parentLine is the parent's phase and totals; it changes only when they do.
func parentLine(sum Summary, now time.Time) string {
	phase := sum.Phase
	if phase == "" {
		phase = "New"
	}
	parts := []string{fmt.Sprintf("%s: %d/%d operations completed, %d failed", phase, sum.Completed, sum.Total, sum.Failed)}
	if sum.Stalled > 0 {
		parts = append(parts, fmt.Sprintf("%d stalled", sum.Stalled))
	}
	if w := sum.WaitingString(); w != "" {
		parts = append(parts, "waiting for "+w)
	}
	for _, a := range sum.Amounts {
		parts = append(parts, a.String())
	}
	if sum.Total > 0 {
		parts = append(parts, fmt.Sprintf("%d%%", int(sum.Fraction*100)))
	}
	return strings.Join(parts, ", ")
}

// opKey is what makes a new line for an operation worth printing.
func opKey(o Operation) string {
	return fmt.Sprintf("%s|%d|%d|%s|%s|%t|%t|%s", o.Phase, o.Done, o.Total, o.Units, o.Error, o.Stalled, o.CancelRequested, o.WaitingFor)
}

// opLine is an operation's item, plugin, phase, amount, rate and ETA.
func opLine(o Operation, now time.Time) string {
	parts := []string{o.Item, o.Plugin, string(o.Phase)}
	if a := percentAmount(o); a != "" {
		parts = append(parts, a)
	}
	if r := o.RateString(); r != "" {
		parts = append(parts, r)
	}
	if eta := ETAString(o.ETA, now); eta != "" && !o.Finished() {
		parts = append(parts, "ETA "+eta)
	}
	if o.Stalled {
		parts = append(parts, "stalled")
	}
	if o.WaitingFor != "" {
		parts = append(parts, "waiting for "+o.WaitingFor)
	}
	if o.CancelRequested && !o.Finished() {
		parts = append(parts, "cancel requested")
	}
	if o.Error != "" {
		parts = append(parts, "error: "+o.Error)
	}
	return strings.Join(parts, "  ")
}

// percentAmount is "4.2Gi/10Gi (42%)".
func percentAmount(o Operation) string {
	a := o.Amount()
	if a == "" || o.Total <= 0 {
		return a
	}
	return fmt.Sprintf("%s (%d%%)", a, int(o.Fraction()*100))
}

// ETAString is how long until eta, as kubectl writes ages; "due" once it
// has passed and empty when there is none.
func ETAString(eta, now time.Time) string {
	switch {
	case eta.IsZero():
		return ""
	case !eta.After(now):
		return "due"
	}
	return duration.HumanDuration(eta.Sub(now))
}
