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

package envtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
)

// RestartAPIServer stops the kube-apiserver (SIGTERM, as a node or a
// rollout would), keeps it down for down, and starts it again with the same
// arguments, so on the same port and with the same certificates: clients
// keep their credentials, and must only reconnect and re-list. etcd keeps
// running, so nothing stored is lost. It returns once the new one is ready.
func (e *Environment) RestartAPIServer(ctx context.Context, down time.Duration) error {
	pid, err := e.apiServerPID()
	if err != nil {
		return err
	}
	args, err := cmdline(pid)
	if err != nil {
		return err
	}
	// SIGTERM first; kube-apiserver drains for as long as watches stay
	// open, so what is left after a few seconds is killed, as a node that
	// goes away would.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping kube-apiserver: %w", err)
	}
	if waitGone(ctx, pid, 5*time.Second) != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if e.restarted != nil {
		_ = e.restarted.Wait()
		e.restarted = nil
	} else if err := waitGone(ctx, pid, time.Minute); err != nil {
		return err
	}
	select {
	case <-time.After(down):
	case <-ctx.Done():
		return ctx.Err()
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	e.restarted = cmd
	return e.waitReady(ctx)
}

// apiServerPID is the process id of the running kube-apiserver.
func (e *Environment) apiServerPID() (int, error) {
	if e.restarted != nil {
		return e.restarted.Process.Pid, nil
	}
	// envtest started it as a child of this process.
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	me := os.Getpid()
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces, so cut at the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || !bytes.Contains(stat[:i], []byte("(kube-apiserver")) {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[0] != "Z" && fields[1] == strconv.Itoa(me) {
			return pid, nil
		}
	}
	return 0, errors.New("no kube-apiserver runs as a child of this process")
}

func cmdline(pid int) ([]string, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, err
	}
	args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
	if len(args) == 0 || args[0] == "" {
		return nil, fmt.Errorf("process %d has no command line", pid)
	}
	return args, nil
}

// waitGone waits until a process has exited (a zombie counts: envtest reaps
// its own, and this package reaps the one it started).
func waitGone(ctx context.Context, pid int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			return nil
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && strings.HasPrefix(strings.TrimSpace(string(stat[i+1:])), "Z") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver (pid %d) did not stop: %w", pid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitReady waits until the API server answers /readyz.
func (e *Environment) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver is not ready again: %w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopRestarted stops the kube-apiserver RestartAPIServer started, which
// envtest does not know of.
func (e *Environment) stopRestarted() {
	if e.restarted == nil {
		return
	}
	_ = e.restarted.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = e.restarted.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = e.restarted.Process.Kill()
		<-done
	}
	e.restarted = nil
}
