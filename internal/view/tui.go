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
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/progress"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// frame is how often the live view is redrawn between watch events, so
// that extrapolated figures and ETAs move. It reads nothing from the API.
const frame = 250 * time.Millisecond

// Bounds of how far past a status write the view extrapolates: twice the
// gap seen between an operation's last two writes, within these.
const (
	minHorizon = time.Minute
	maxHorizon = 10 * time.Minute
)

type (
	snapshotMsg Snapshot
	frameMsg    time.Time
	// watchErrMsg ends the view when the watch fails.
	watchErrMsg struct{ err error }
)

// measure is when an operation's last two status figures were measured.
type measure struct {
	at  time.Time
	gap time.Duration
}

// live is the bubbletea model of the live view.
type live struct {
	now  func() time.Time
	snap Snapshot
	// have is set once a snapshot came, seen once one found the parent.
	have, seen    bool
	width, height int
	measures      map[string]measure

	// ended is set with code once the parent has ended; interrupted when
	// the person stopped the view; err when the watch failed.
	ended       bool
	code        int
	interrupted bool
	err         error

	bars map[itemopsv1alpha1.OperationPhase]progress.Model
}

func newLive(now func() time.Time) *live {
	bar := func(color string) progress.Model {
		return progress.New(progress.WithSolidFill(color), progress.WithoutPercentage(), progress.WithFillCharacters('█', '░'))
	}
	return &live{now: now, width: 80, height: 24, measures: map[string]measure{},
		bars: map[itemopsv1alpha1.OperationPhase]progress.Model{
			itemopsv1alpha1.OperationPhaseNew:        bar("#8a8a8a"),
			itemopsv1alpha1.OperationPhaseInProgress: bar("#5f87ff"),
			itemopsv1alpha1.OperationPhaseCanceling:  bar("#d7af5f"),
			itemopsv1alpha1.OperationPhaseCompleted:  bar("#5fd787"),
			itemopsv1alpha1.OperationPhaseFailed:     bar("#ff5f5f"),
			itemopsv1alpha1.OperationPhaseCanceled:   bar("#ffaf00"),
		}}
}

func (m *live) Init() tea.Cmd { return nextFrame() }

func nextFrame() tea.Cmd {
	return tea.Tick(frame, func(t time.Time) tea.Msg { return frameMsg(t) })
}

func (m *live) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case tea.KeyMsg:
		switch msg.String() {
		case "ctrl+c", "q", "esc":
			m.interrupted = true
			return m, tea.Quit
		}
	case tea.InterruptMsg:
		m.interrupted = true
		return m, tea.Quit
	case watchErrMsg:
		m.err = msg.err
		return m, tea.Quit
	case snapshotMsg:
		m.observe(Snapshot(msg))
		if code, ended := Ended(m.snap); ended {
			m.ended, m.code = true, code
			return m, tea.Quit
		}
	case frameMsg:
		return m, nextFrame()
	}
	return m, nil
}

// observe takes a new snapshot and notes how often each operation's
// figures are written, which bounds the extrapolation.
func (m *live) observe(s Snapshot) {
	m.snap, m.have, m.seen = s, true, m.seen || s.Found
	for i := range s.Operations {
		op := &s.Operations[i]
		at, ok := measuredAt(op)
		if !ok {
			continue
		}
		prev, seen := m.measures[op.Name]
		switch {
		case !seen:
			m.measures[op.Name] = measure{at: at}
		case at.After(prev.at):
			m.measures[op.Name] = measure{at: at, gap: at.Sub(prev.at)}
		}
	}
}

func (m *live) horizon(name string) time.Duration {
	return min(max(2*m.measures[name].gap, minHorizon), maxHorizon)
}

var (
	bold  = lipgloss.NewStyle().Bold(true)
	faint = lipgloss.NewStyle().Faint(true)
	red   = lipgloss.NewStyle().Foreground(lipgloss.Color("#ff5f5f"))
)

func (m *live) View() string {
	if !m.have {
		return "waiting for the API server…\n"
	}
	if !m.snap.Found {
		// The end line, printed after the view, says it.
		return ""
	}
	now := m.now()
	s := m.snap
	// A line filling the last column leaves some terminals' cursor pending
	// a wrap, and the next frame's erase misses a character: keep it free.
	width := max(m.width, 40) - 1
	var lines []string
	add := func(line string) { lines = append(lines, ansi.Truncate(line, width, "…")) }

	sum := Summarize(s)
	rows := Operations(s)
	extrapolated := false
	for i := range rows {
		rows[i] = Extrapolate(rows[i], &s.Operations[i], now, m.horizon(rows[i].Name))
		extrapolated = extrapolated || rows[i].Extrapolated
	}
	phase := s.Phase
	if phase == "" {
		phase = "New"
	}
	head := fmt.Sprintf("%s %s/%s  %s  %d/%d completed", bold.Render(string(s.Parent.Kind)), s.Parent.Namespace, s.Parent.Name,
		bold.Render(phase), sum.Completed, sum.Total)
	if sum.Failed > 0 {
		head += red.Render(fmt.Sprintf(", %d failed", sum.Failed))
	}
	if sum.Stalled > 0 {
		head += fmt.Sprintf(", %d stalled", sum.Stalled)
	}
	if w := sum.WaitingString(); w != "" {
		head += ", waiting for " + w
	}
	add(head)
	overall := overallFraction(sum, rows, s)
	var amounts []string
	for _, a := range overallAmounts(rows) {
		amounts = append(amounts, a.String())
	}
	tail := fmt.Sprintf(" %3d%%  %s", int(overall*100), strings.Join(amounts, ", "))
	if extrapolated {
		tail = fmt.Sprintf(" %3d%%  ~%s", int(overall*100), strings.Join(amounts, ", "))
	}
	if eta := ETAString(sum.ETA, now); eta != "" {
		tail += "  ETA " + eta
	}
	add(m.bar(itemopsv1alpha1.OperationPhaseInProgress, overall, max(width-ansi.StringWidth(tail)-1, 10)) + tail)
	add("")

	// Columns as wide as their widest cell keep the bars of all operations
	// the same length.
	var w struct{ item, plugin, amount, rate, eta, note int }
	cells := make([]struct{ amount, rate, eta, note string }, len(rows))
	for i, o := range rows {
		c := &cells[i]
		c.amount, c.rate = o.Amount(), o.RateString()
		if eta := ETAString(o.ETA, now); eta != "" && !o.Finished() {
			c.eta = "ETA " + eta
		}
		switch {
		case o.WaitingFor != "":
			c.note = "waiting: " + o.WaitingFor
		case o.Stalled:
			c.note = "stalled"
		case o.CancelRequested && !o.Finished():
			c.note = "canceling"
		}
		w.item, w.plugin = max(w.item, len(o.Item)), max(w.plugin, len(o.Plugin))
		w.amount, w.rate = max(w.amount, len(c.amount)), max(w.rate, len(c.rate))
		w.eta, w.note = max(w.eta, len(c.eta)), max(w.note, len(c.note))
	}
	w.item, w.plugin = min(w.item, max(width/4, 12)), min(w.plugin, max(width/4, 12))
	showPlugin := width >= 100
	cellOf := map[string]int{}
	for i, o := range rows {
		cellOf[o.Name] = i
	}
	for _, o := range visible(rows, max(m.height-len(lines)-2, 1)) {
		if o.Name == "" {
			add(faint.Render(o.Item))
			continue
		}
		c := cells[cellOf[o.Name]]
		left := "  " + pad(o.Item, w.item)
		if showPlugin {
			left += "  " + pad(o.Plugin, w.plugin)
		}
		left += "  " + pad(string(o.Phase), 10) + " "
		right := " " + pad(c.amount, w.amount)
		for _, cell := range []struct {
			text  string
			width int
		}{{c.rate, w.rate}, {c.eta, w.eta}, {c.note, w.note}} {
			if cell.width > 0 {
				right += "  " + pad(cell.text, cell.width)
			}
		}
		barWidth := width - ansi.StringWidth(left) - ansi.StringWidth(right)
		if barWidth < 10 {
			// Too narrow for a bar beside everything: drop the rate and ETA.
			right = " " + o.Amount()
			barWidth = max(width-ansi.StringWidth(left)-ansi.StringWidth(right), 5)
		}
		add(left + m.bar(o.Phase, o.Fraction(), barWidth) + right)
		if o.Error != "" {
			add("    " + red.Render("error: "+o.Error))
		}
	}
	footer := "q or Ctrl-C stops watching"
	if extrapolated {
		footer = "~ estimated from each operation's rate since its last status update · " + footer
	}
	add(faint.Render(footer))
	return strings.Join(lines, "\n") + "\n"
}

func (m *live) bar(phase itemopsv1alpha1.OperationPhase, fraction float64, width int) string {
	b, ok := m.bars[phase]
	if !ok {
		b = m.bars[itemopsv1alpha1.OperationPhaseNew]
	}
	b.Width = width
	return b.ViewAs(fraction)
}

// overallFraction is the summary's fraction, with running operations at
// their extrapolated figures when every operation counts bytes.
func overallFraction(sum Summary, rows []Operation, s Snapshot) float64 {
	if len(rows) == 0 || sum.Total == 0 {
		return sum.Fraction
	}
	var done, total int64
	for _, o := range rows {
		if !isBytes(o.Units) || o.Total <= 0 {
			return sum.Fraction
		}
		total += o.Total
		if o.Finished() {
			done += o.Total
		} else {
			done += min(o.Done, o.Total)
		}
	}
	return float64(done) / float64(total) * float64(len(rows)) / float64(sum.Total)
}

// overallAmounts are the amounts by unit with running operations at their
// extrapolated figures.
func overallAmounts(rows []Operation) []Amount {
	var ops []itemopsv1alpha1.ItemOperation
	for _, o := range rows {
		ops = append(ops, itemopsv1alpha1.ItemOperation{Status: itemopsv1alpha1.ItemOperationStatus{
			Phase: o.Phase, NCompleted: o.Done, NTotal: o.Total, OperationUnits: o.Units}})
	}
	return Summarize(Snapshot{Operations: ops}).Amounts
}

// visible are the rows that fit in height lines: all of them when they
// fit, else without completed ones first, then the first that fit and a
// line saying how many more there are (a row without a name).
func visible(rows []Operation, height int) []Operation {
	lines := func(rs []Operation) int {
		n := 0
		for _, o := range rs {
			n++
			if o.Error != "" {
				n++
			}
		}
		return n
	}
	if lines(rows) <= height {
		return rows
	}
	var shown []Operation
	completed := 0
	for _, o := range rows {
		if o.Phase == itemopsv1alpha1.OperationPhaseCompleted {
			completed++
			continue
		}
		shown = append(shown, o)
	}
	hidden := completed
	for len(shown) > 0 && lines(shown)+1 > height {
		shown = shown[:len(shown)-1]
		hidden++
	}
	if hidden > 0 {
		more := fmt.Sprintf("  … %d more operations", hidden)
		if completed > 0 {
			more += fmt.Sprintf(" (%d completed)", completed)
		}
		shown = append(shown, Operation{Item: more})
	}
	return shown
}

func pad(s string, width int) string {
	if ansi.StringWidth(s) > width {
		return ansi.Truncate(s, width, "…")
	}
	return s + strings.Repeat(" ", width-ansi.StringWidth(s))
}

func isBytes(units string) bool { return unitsOf(units) == "bytes" }
