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

// Package demo runs `make demo DEMO=synthetic` as a person does, in a
// terminal, and types Ctrl-C: while it builds, in the live view and once
// the Backup has ended. Each time make must exit 0 with the demo's one line
// saying it stopped, and nothing the demo started may be left: no process,
// no file.
// (test/interop runs the real flow.)
package demo

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/pseudoterm"
)

// workDir finds the demo's directory in the kubeconfig path it prints.
var workDir = regexp.MustCompile(`kubeconfig: (\S+)/kubeconfig`)

// mentioning lists the processes whose command line holds s.
func mentioning(s string) []string {
	var found []string
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range cmdlines {
		data, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(data), s) {
			found = append(found, strings.ReplaceAll(string(data), "\x00", " "))
		}
	}
	return found
}

func TestCtrlCEndsTheDemo(t *testing.T) {
	root, err := envtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		// ready says when to type Ctrl-C.
		ready func(output string) bool
		// building: the Ctrl-C comes while builds run.
		building bool
	}{
		{"while it builds", func(output string) bool {
			return strings.Contains(output, " building  ")
		}, true},
		{"in the live view", func(output string) bool {
			// The view hides the cursor while it draws.
			i := strings.Index(output, "kubeconfig: ")
			return i >= 0 && strings.Contains(output[i:], "\x1b[?25l")
		}, false},
		{"once the backup ended", func(output string) bool {
			return strings.Contains(output, "Everything keeps running; press Ctrl-C")
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			// The demo's files go to a directory of its own in TMPDIR.
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			s, err := pseudoterm.Start(root, 160, 50, "make", "demo", "DEMO=synthetic")
			g.Expect(err).NotTo(HaveOccurred())
			defer s.Close()
			// The first time on a machine, go run compiles the demo and the
			// demo builds kube-apiserver and etcd.
			g.Eventually(func() bool { return c.ready(s.Output()) }, 20*time.Minute, 200*time.Millisecond).Should(BeTrue(),
				func() string { return s.Output() })
			works, err := filepath.Glob(filepath.Join(tmp, "itemops-demo-*"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(works).To(HaveLen(1), s.Output())
			work := works[0]
			if m := workDir.FindStringSubmatch(s.Output()); m != nil {
				g.Expect(m[1]).To(Equal(work))
			}

			g.Expect(s.CtrlC()).To(Succeed())
			code, err := s.Wait(2 * time.Minute)
			g.Expect(err).NotTo(HaveOccurred(), s.Output())
			output := s.Output()
			g.Expect(code).To(Equal(0), output)
			g.Expect(output).To(ContainSubstring("demo: stopped; everything it started has ended and its files are removed"))
			g.Expect(strings.Count(output, "demo: stopped")).To(Equal(1))
			g.Expect(output).NotTo(ContainSubstring("make: ***"))
			// A build ended by the Ctrl-C was stopped, not failed (its log
			// goes with the demo's files).
			g.Expect(output).NotTo(ContainSubstring("FAILED"))
			if c.building {
				g.Expect(output).To(ContainSubstring("stopped after"))
			}
			g.Expect(work).NotTo(BeAnExistingFile(), "the demo's files are removed")
			g.Eventually(func() []string { return mentioning(work) }, 10*time.Second).Should(BeEmpty(), "nothing the demo started still runs")
		})
	}
}
