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

// Package foreground lets a long-running command of `make` (make demo,
// make cluster) own Ctrl-C: see Take.
package foreground

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// Take makes the calling process a process group of its own in the
// foreground of the terminal it runs in, as a shell does for a job: Ctrl-C
// then interrupts it and what it started, but not make and go run, which
// wait for it and end as it ends (0 after a Ctrl-C, not make's "Interrupt"
// or "Error 1"). restore gives the terminal back. Without a terminal, or
// outside its foreground, it does nothing.
func Take() (restore func()) {
	nothing := func() {}
	fd := int(os.Stdin.Fd())
	foreground, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || foreground != syscall.Getpgrp() {
		return nothing
	}
	// A process group that is not in the foreground may change the
	// terminal's foreground only while it ignores SIGTTOU.
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	if err := syscall.Setpgid(0, 0); err != nil {
		return nothing
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, syscall.Getpgrp()); err != nil {
		_ = syscall.Setpgid(0, foreground)
		return nothing
	}
	return func() {
		signal.Ignore(syscall.SIGTTOU)
		defer signal.Reset(syscall.SIGTTOU)
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, foreground)
	}
}
