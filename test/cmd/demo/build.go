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

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/itemops/itemops/internal/view"
	"github.com/itemops/itemops/test/proc"
)

// A build is one program the demo needs, made by a command that prints
// where it put it (or nothing).
type build struct {
	what string
	cmd  []string
	// env is the variable set to the command's output, if any.
	env string

	path    string
	took    time.Duration
	done    bool
	err     error
	logPath string
}

// buildAll runs the builds side by side, each logging to a file in work,
// and shows which are still running with the time elapsed: redrawn every
// second on a terminal, a line every 30 s elsewhere. The builds of the
// machine's cache (kube-apiserver and etcd, Velero and its plugin,
// versitygw) are those `make test` uses; they take minutes only the first
// time on a machine.
func buildAll(ctx context.Context, out io.Writer, root, work string, builds []*build) error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for _, b := range builds {
		b.logPath = filepath.Join(work, "build-"+strings.ReplaceAll(strings.Fields(b.what)[0], "/", "-")+".log")
		wg.Add(1)
		go func() {
			defer wg.Done()
			path, err := runBuild(ctx, root, b.cmd, b.logPath)
			mu.Lock()
			defer mu.Unlock()
			b.path, b.err, b.took, b.done = path, err, time.Since(start), true
		}()
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()

	live := view.IsTerminal(out)
	every := 30 * time.Second
	if live {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	drawn := 0
	draw := func(final bool) {
		mu.Lock()
		defer mu.Unlock()
		var lines []string
		for _, b := range builds {
			switch {
			case !b.done:
				lines = append(lines, fmt.Sprintf("    %-32s building  %s", b.what, time.Since(start).Round(time.Second)))
			case errors.Is(b.err, context.Canceled):
				// Ctrl-C: its log goes with the demo's files.
				lines = append(lines, fmt.Sprintf("    %-32s stopped after %s", b.what, b.took.Round(time.Second)))
			case b.err != nil:
				lines = append(lines, fmt.Sprintf("    %-32s FAILED after %s (log: %s)", b.what, b.took.Round(time.Second), b.logPath))
			case b.took < 3*time.Second:
				lines = append(lines, fmt.Sprintf("    %-32s ready (built before)", b.what))
			default:
				lines = append(lines, fmt.Sprintf("    %-32s built in %s", b.what, b.took.Round(time.Second)))
			}
		}
		if live && drawn > 0 {
			fmt.Fprintf(out, "\033[%dA", drawn)
		}
		if !live && !final {
			// A line of what is left, for a log.
			var left []string
			for _, b := range builds {
				if !b.done {
					left = append(left, b.what)
				}
			}
			fmt.Fprintf(out, "    %s elapsed; still building: %s\n", time.Since(start).Round(time.Second), strings.Join(left, ", "))
			return
		}
		for _, l := range lines {
			fmt.Fprintf(out, "\033[2K%s\n", l)
		}
		drawn = len(lines)
	}
	if live {
		draw(false)
	}
	for {
		select {
		case <-finished:
			draw(true)
			for _, b := range builds {
				if b.err != nil {
					return fmt.Errorf("building %s: %w", b.what, b.err)
				}
				if b.env != "" {
					if err := os.Setenv(b.env, b.path); err != nil {
						return err
					}
				}
			}
			return nil
		case <-tick.C:
			draw(false)
		}
	}
}

// runBuild runs a build command in a process group of its own (so that a
// Ctrl-C that ends the demo ends every compiler it started), its standard
// error to logPath, and returns what it printed.
func runBuild(ctx context.Context, root string, argv []string, logPath string) (string, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = root
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		// A Ctrl-C typed as the build starts, before it has a process
		// group of its own, reaches it before the demo has seen it: the
		// build was stopped, not failed.
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGINT {
				return "", context.Canceled
			}
		}
		log, _ := os.ReadFile(logPath)
		return "", fmt.Errorf("%w; the end of its log:\n%s", err, proc.Tail(strings.TrimRight(string(log), "\n"), 15))
	}
	return strings.TrimSpace(stdout.String()), nil
}
