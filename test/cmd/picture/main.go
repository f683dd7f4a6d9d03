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

// Command picture draws `kubectl itemops watch` on a real Backup: it runs
// `make demo`'s real flow (the real velero server, the CSI data mover and
// the sample plugins) in a pseudo-terminal, and, once its Backup exists,
// `kubectl itemops watch` of that Backup in a second one, whose screen a
// terminal emulator keeps; a frame is taken every second until the watch
// ends with the Backup. It writes an animated SVG of the whole run and a
// still one of the moment the most operations were moving, then stops the
// demo with Ctrl-C as a person would (make picture; docs/images).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/hinshun/vt10x"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/pseudoterm"
)

func main() {
	out := flag.String("out", "docs/images", "directory the pictures are written into")
	cols := flag.Int("cols", 110, "columns of the watch's terminal")
	rows := flag.Int("rows", 30, "rows of the watch's terminal")
	flag.Parse()
	if err := run(*out, *cols, *rows); err != nil {
		fmt.Fprintln(os.Stderr, "picture:", err)
		os.Exit(1)
	}
}

// watchLine is how the demo says how to watch its Backup.
var watchLine = regexp.MustCompile(`KUBECONFIG=(\S+) PATH=(\S+):\$PATH kubectl itemops watch backup (\S+)`)

func run(out string, cols, rows int) error {
	root, err := envtest.RepoRoot()
	if err != nil {
		return err
	}
	fmt.Println("picture: running the demo (go run ./test/cmd/demo) in a pseudo-terminal; the first time on a machine it builds Velero and the control plane")
	demo, err := pseudoterm.Start(root, 160, 50, "go", "run", "./test/cmd/demo", "-flow=real")
	if err != nil {
		return err
	}
	defer demo.Close()
	var m []string
	for deadline := time.Now().Add(time.Hour); m == nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("the demo did not start its Backup within an hour")
		}
		if _, err := demo.Wait(time.Millisecond); err == nil {
			return fmt.Errorf("the demo ended before its Backup:\n%s", tail(demo.Output()))
		}
		m = watchLine.FindStringSubmatch(demo.Output())
	}
	kubeconfig, bin, backup := m[1], m[2], m[3]
	fmt.Printf("picture: watching Backup %s\n", backup)

	watch, err := pseudoterm.Start(root, cols, rows, filepath.Join(bin, "kubectl-itemops"), "watch", "backup", backup, "--kubeconfig", kubeconfig)
	if err != nil {
		return err
	}
	defer watch.Close()
	term := vt10x.New(vt10x.WithSize(cols, rows))
	fed := 0
	feed := func() {
		o := watch.Output()
		_, _ = term.Write([]byte(o[fed:]))
		fed = len(o)
	}
	var frames []Frame
	for ended := false; !ended; {
		time.Sleep(time.Second)
		_, err := watch.Wait(time.Millisecond)
		ended = err == nil
		feed()
		s := Snapshot(term)
		if n := len(frames); n > 0 && frames[n-1].Screen.Text() == s.Text() && !ended {
			frames[n-1].For += time.Second
			continue
		}
		frames = append(frames, Frame{Screen: s, For: time.Second})
		if len(frames) > 900 {
			return errors.New("the watch did not end within 15 minutes")
		}
	}
	frames[len(frames)-1].For = 6 * time.Second // the outcome stays a while
	if err := demo.CtrlC(); err != nil {
		return err
	}
	if _, err := demo.Wait(2 * time.Minute); err != nil {
		return fmt.Errorf("the demo after Ctrl-C: %w", err)
	}

	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for name, fs := range map[string][]Frame{"kubectl-itemops-watch.svg": frames, "kubectl-itemops-watch-still.svg": {busiest(frames)}} {
		f, err := os.Create(filepath.Join(out, name))
		if err != nil {
			return err
		}
		if err := errors.Join(WriteSVG(f, fs), f.Close()); err != nil {
			return err
		}
		fmt.Printf("picture: wrote %s (%d frames)\n", filepath.Join(out, name), len(fs))
	}
	return nil
}

// busiest is a frame in which the most operations were moving: of the
// frames with the most InProgress rows, the one in the middle.
func busiest(frames []Frame) Frame {
	var best []Frame
	most := -1
	for _, f := range frames {
		switch n := strings.Count(f.Screen.Text(), "InProgress"); {
		case n > most:
			best, most = []Frame{f}, n
		case n == most:
			best = append(best, f)
		}
	}
	return best[len(best)/2]
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}
