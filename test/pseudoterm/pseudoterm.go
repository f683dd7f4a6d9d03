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

// Package pseudoterm runs a command as a person runs it in a terminal: in a
// session of its own whose controlling terminal is a pseudo-terminal, so
// that Ctrl-C typed there reaches every process of the foreground process
// group (make, go run and the program alike), as it does in a shell.
package pseudoterm

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/itemops/itemops/test/proc"
)

// Session is a command running in a pseudo-terminal.
type Session struct {
	cmd    *exec.Cmd
	master *os.File
	output *proc.Buffer
	exited chan error
	// drained is closed once every process has closed the terminal and
	// everything they wrote to it has been read.
	drained chan struct{}
}

// Start runs argv in dir, in a pseudo-terminal of cols × rows.
func Start(dir string, cols, rows int, argv ...string) (*Session, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, err
	}
	if err := pty.Setsize(master, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		return nil, err
	}
	s := &Session{master: master, output: &proc.Buffer{}, exited: make(chan error, 1), drained: make(chan struct{})}
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Dir = dir
	s.cmd.Stdin, s.cmd.Stdout, s.cmd.Stderr = tty, tty, tty
	s.cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := s.cmd.Start(); err != nil {
		_ = master.Close()
		_ = tty.Close()
		return nil, err
	}
	// Only the command holds the terminal now: once it and its children have
	// closed it, reading the master ends (EIO) after the last byte they wrote.
	_ = tty.Close()
	go func() {
		defer close(s.drained)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				_, _ = s.output.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { s.exited <- s.cmd.Wait() }()
	return s, nil
}

// Output is everything the command wrote to the terminal so far.
func (s *Session) Output() string { return s.output.String() }

// CtrlC types Ctrl-C.
func (s *Session) CtrlC() error {
	_, err := s.master.Write([]byte{0x03})
	return err
}

// Wait waits up to timeout for the command to end and for everything it
// wrote to the terminal to be read, and returns its exit code (-1 when a
// signal ended it). A process the command left behind that still holds the
// terminal is an error.
func (s *Session) Wait(timeout time.Duration) (int, error) {
	deadline := time.After(timeout)
	var err error
	select {
	case err = <-s.exited:
		s.exited <- err
	case <-deadline:
		return 0, errors.New("the command did not end in time")
	}
	select {
	case <-s.drained:
	case <-deadline:
		return 0, errors.New("the command ended, but a process it started still holds the terminal")
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}

// Close kills the command's session if it still runs and closes the terminal.
func (s *Session) Close() {
	select {
	case err := <-s.exited:
		s.exited <- err
	default:
		// The command leads the process group of its session.
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
	_ = s.master.Close()
}
