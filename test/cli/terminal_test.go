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

package cli

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/hinshun/vt10x"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/proc"
)

// terminal is kubectl-itemops running in a pseudo-terminal, its output
// drawn on a virtual terminal screen.
type terminal struct {
	t      testing.TB
	cmd    *exec.Cmd
	master *os.File
	tty    *os.File
	screen vt10x.Terminal
	raw    *proc.Buffer
	// before are the terminal's settings before the program started.
	before *unix.Termios
	exited chan error
}

func startInTerminal(t testing.TB, cols, rows int, args ...string) *terminal {
	t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := pty.Setsize(master, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, master: master, tty: tty, before: before, raw: &proc.Buffer{},
		screen: vt10x.New(vt10x.WithSize(cols, rows)), exited: make(chan error, 1)}
	term.cmd = exec.Command(binary, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	term.cmd.Stdin, term.cmd.Stdout, term.cmd.Stderr = tty, tty, tty
	term.cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	term.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL}
	if err := term.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				_, _ = term.raw.Write(buf[:n])
				_, _ = term.screen.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { term.exited <- term.cmd.Wait() }()
	t.Cleanup(func() {
		_ = term.cmd.Process.Kill()
		_ = master.Close()
		_ = tty.Close()
	})
	return term
}

// text is what the screen shows now.
func (term *terminal) text() string {
	// String takes the screen's lock itself.
	return term.screen.String()
}

func (term *terminal) resize(cols, rows int) {
	term.screen.Resize(cols, rows)
	if err := pty.Setsize(term.master, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		term.t.Fatal(err)
	}
}

// drain is how long this process may take to read what an ended program
// wrote last: seconds when idle; on a 2-core machine under make test's
// load, 5 seconds were once not enough.
const drain = 30 * time.Second

// exitCode waits for the program to end.
func (term *terminal) exitCode(g Gomega) int {
	var err error
	g.Eventually(term.exited, 30*time.Second).Should(Receive(&err), func() string { return term.text() })
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	g.Expect(err).NotTo(HaveOccurred())
	return 0
}

// expectClean checks that the program left the terminal as it found it:
// line editing and echo back, the cursor shown.
func (term *terminal) expectClean(g Gomega) {
	after, err := unix.IoctlGetTermios(int(term.tty.Fd()), unix.TCGETS)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.Lflag&(unix.ICANON|unix.ECHO)).To(Equal(term.before.Lflag&(unix.ICANON|unix.ECHO)), "line editing and echo")
	g.Expect(after.Iflag).To(Equal(term.before.Iflag))
	g.Expect(after.Oflag).To(Equal(term.before.Oflag))
	// Drain what the program wrote last before looking at the cursor (the
	// program has ended: its output is all written, and only this process's
	// reader, on a loaded machine, may be late).
	g.Eventually(func() bool {
		term.screen.Lock()
		defer term.screen.Unlock()
		return term.screen.CursorVisible()
	}, drain).Should(BeTrue(), "cursor shown")
	raw := term.raw.String()
	g.Expect(strings.LastIndex(raw, "\x1b[?25h")).To(BeNumerically(">", strings.LastIndex(raw, "\x1b[?25l")))
}

var _ = Describe("kubectl itemops terminal", func() {
	// It runs `kubectl itemops watch` in a
	// pseudo-terminal: bars drawn, advanced between status updates and marked
	// as estimated, snapped to each new status, redrawn for a new width, and
	// the terminal left clean when the Backup ends.
	It("watch draws bars in a terminal", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ns := namespace(t, "watch-terminal")
		b := backupIn(t, ns, "nightly", velerov1api.BackupPhaseWaitingForPluginOperations, 2)
		orders := operation(t, b, "orders-db", "velero.io/csi-pvc-backupper", "du-orders")
		// 100Mi in the minute since the start: about 1.7Mi/s.
		setStatus(t, orders, progressAt(time.Now(), gi("100Mi"), gi("1Gi"), 9*time.Minute))
		search := operation(t, b, "search-index", "itemops.io/sample-datamover", "up-search")
		setStatus(t, search, ended(itemopsv1alpha1.OperationPhaseFailed, gi("1Gi"), gi("4Gi"), "upload failed at 25%"))

		term := startInTerminal(t, 120, 20, "watch", "backup", "nightly", "-n", ns)
		g.Eventually(term.text, 20*time.Second).Should(And(
			ContainSubstring("Backup "+ns+"/nightly  WaitingForPluginOperations  0/2 completed, 1 failed"),
			MatchRegexp(`shop/orders-db\s+velero.io/csi-pvc-backupper\s+InProgress\s+█+░+`),
			MatchRegexp(`shop/search-index\s+itemops.io/sample-datamover\s+Failed\s+█+░+\s+1Gi/4Gi`),
			ContainSubstring("error: upload failed at 25%"),
		))
		// Between two status writes the bar moves on at the operation's rate.
		g.Eventually(term.text, 10*time.Second).Should(And(
			MatchRegexp(`InProgress\s+█*░+\s+~(10[1-9]|1[1-9][0-9])(\.[0-9])?Mi/1Gi`),
			ContainSubstring("~ estimated from each operation's rate"),
		))
		// A new status wins over the estimate (which was near 110Mi).
		setStatus(t, orders, progressAt(time.Now(), gi("512Mi"), gi("1Gi"), time.Minute))
		g.Eventually(term.text, 10*time.Second).Should(MatchRegexp(`InProgress\s+█+░+\s+~?(5[1-9][0-9]|[6-9][0-9][0-9])(\.[0-9])?Mi/1Gi`))

		// Narrower than 100 columns, the plugin column goes.
		term.resize(90, 20)
		g.Eventually(term.text, 10*time.Second).Should(And(
			MatchRegexp(`shop/orders-db\s+InProgress\s+█+░+`),
			Not(ContainSubstring("velero.io/csi-pvc-backupper")),
		))

		setStatus(t, orders, ended(itemopsv1alpha1.OperationPhaseCompleted, gi("1Gi"), gi("1Gi"), ""))
		setBackupPhase(t, b, velerov1api.BackupPhaseFinalizingPartiallyFailed)
		setBackupPhase(t, b, velerov1api.BackupPhasePartiallyFailed)
		g.Expect(term.exitCode(g)).To(Equal(1))
		g.Eventually(term.text, drain).Should(ContainSubstring("backup/nightly ended PartiallyFailed (exit code 1)"))
		term.expectClean(g)
	})

	// It stops a live view with Ctrl-C.
	It("Ctrl-C leaves the terminal clean", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ns := namespace(t, "watch-interrupt")
		b := backupIn(t, ns, "nightly", velerov1api.BackupPhaseWaitingForPluginOperations, 1)
		setStatus(t, operation(t, b, "orders-db", "velero.io/csi-pvc-backupper", "du-orders"),
			progressAt(time.Now(), gi("100Mi"), gi("1Gi"), 9*time.Minute))

		term := startInTerminal(t, 120, 20, "watch", "backup", "nightly", "-n", ns)
		g.Eventually(term.text, 20*time.Second).Should(MatchRegexp(`shop/orders-db\s+velero.io/csi-pvc-backupper\s+InProgress\s+█+░+`))
		_, err := io.WriteString(term.master, "\x03")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(term.exitCode(g)).To(Equal(130))
		term.expectClean(g)
	})
})
