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
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"golang.org/x/term"
	"k8s.io/client-go/rest"
)

// Options of a watch.
type Options struct {
	// Config reaches the API server.
	Config *rest.Config
	Parent Parent
	// Out gets the view. It is drawn live when Out is a terminal and Plain
	// is not set, else written as plain lines.
	Out   io.Writer
	Plain bool
	// In is read for keys (q, Ctrl-C) in the live view; os.Stdin when nil.
	In io.Reader
	// Now is the clock of the view; time.Now when nil.
	Now func() time.Time
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Watch shows the parent's operations until the parent ends, ctx ends or
// the watch fails, and returns the exit code that says how it ended:
// ExitCompleted, ExitPartiallyFailed, ExitFailed, ExitGone, or
// ExitInterrupted when ctx ended or the person stopped the live view.
func Run(ctx context.Context, opts Options) (int, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	snapshots := make(chan Snapshot)
	watchErr := make(chan error, 1)
	go func() { watchErr <- Watch(ctx, opts.Config, opts.Parent, snapshots) }()
	if opts.Plain || !IsTerminal(opts.Out) {
		return runPlain(ctx, opts, snapshots, watchErr)
	}
	return runLive(ctx, opts, snapshots, watchErr)
}

func runPlain(ctx context.Context, opts Options, snapshots <-chan Snapshot, watchErr <-chan error) (int, error) {
	plain := NewPlain(opts.Out, opts.Now)
	for {
		select {
		case <-ctx.Done():
			return ExitInterrupted, nil
		case err := <-watchErr:
			if err == nil {
				return ExitInterrupted, nil
			}
			return ExitInterrupted, err
		case s := <-snapshots:
			if err := plain.Show(s); err != nil {
				return ExitInterrupted, err
			}
			if code, ended := Ended(s); ended {
				return code, nil
			}
		}
	}
}

func runLive(ctx context.Context, opts Options, snapshots <-chan Snapshot, watchErr <-chan error) (int, error) {
	m := newLive(opts.Now)
	in := opts.In
	if in == nil {
		in = os.Stdin
	}
	program := tea.NewProgram(m, tea.WithContext(ctx), tea.WithOutput(opts.Out), tea.WithInput(in))
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-watchErr:
				if err == nil {
					err = errors.New("the watch ended")
				}
				program.Send(watchErrMsg{err: err})
				return
			case s := <-snapshots:
				program.Send(snapshotMsg(s))
			}
		}
	}()
	_, err := program.Run()
	switch {
	case errors.Is(err, tea.ErrProgramKilled), errors.Is(err, tea.ErrInterrupted):
		return ExitInterrupted, nil
	case err != nil:
		return ExitInterrupted, err
	case m.err != nil:
		return ExitInterrupted, m.err
	case m.interrupted:
		return ExitInterrupted, nil
	case m.ended:
		_, err := fmt.Fprintln(opts.Out, EndLine(m.snap, m.code, m.seen))
		return m.code, err
	}
	return ExitInterrupted, nil
}
