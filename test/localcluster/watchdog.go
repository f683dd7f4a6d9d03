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

package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// startWatchdog starts ./test/localcluster/watchdog in a session of its
// own (a Ctrl-C to the terminal does not reach it), to put the machine back
// if this process dies without stopping the cluster.
func (c *Cluster) startWatchdog(ctx context.Context) error {
	bins, err := BuildStatic(ctx, c.path("bin"), "./test/localcluster/watchdog")
	if err != nil {
		return err
	}
	bin := bins[0]
	cmd := exec.Command(bin, "-owner", fmt.Sprint(os.Getpid()), "-dir", c.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the watchdog: %w", err)
	}
	return cmd.Process.Release()
}

// Watch waits for owner to exit, then tears down the cluster in dir if
// owner left it running: its state file still names owner, and no other
// run holds the lock.
func Watch(owner int, dir string, log io.Writer) error {
	since, err := startTime(owner)
	if err != nil {
		return nil // already gone before it could be watched
	}
	for {
		t, err := startTime(owner)
		if err != nil || t != since {
			break
		}
		time.Sleep(time.Second)
	}
	s, err := loadState(filepath.Join(dir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // stopped as it should be
	}
	if err != nil {
		return err
	}
	if s.Owner != owner {
		return nil // another run's
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil // a new run started, and put it back itself
	}
	if err := Cleanup(dir, log); err != nil {
		return err
	}
	return os.Remove(lock.Name())
}

// startTime is a process's start time in clock ticks since boot: with the
// PID, it names the process, whose PID may be reused once it exits.
func startTime(pid int) (string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	fields := strings.Fields(s[i+1:])
	// After the command: state is field 3, starttime field 22.
	if len(fields) < 20 || fields[0] == "Z" {
		return "", fmt.Errorf("process %d has exited", pid)
	}
	return fields[19], nil
}
