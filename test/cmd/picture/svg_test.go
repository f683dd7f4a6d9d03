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
	"strings"
	"testing"
	"time"

	"github.com/hinshun/vt10x"
)

// screenOf is what a terminal of cols × rows shows after a program wrote out.
func screenOf(t *testing.T, cols, rows int, out string) Screen {
	t.Helper()
	term := vt10x.New(vt10x.WithSize(cols, rows))
	if _, err := term.Write([]byte(out)); err != nil {
		t.Fatal(err)
	}
	return Snapshot(term)
}

func TestStill(t *testing.T) {
	s := screenOf(t, 60, 10, "\x1b[1mBackup\x1b[0m shop-1 <WaitingForPluginOperations> & more\r\n"+
		"\x1b[38;5;196mFailed\x1b[0m \x1b[42m  \x1b[0m ██████░░░░ 60%\r\n")
	if got := s.Text(); !strings.HasPrefix(got, "Backup shop-1 <WaitingForPluginOperations> & more\nFailed    ██████░░░░ 60%\n") {
		t.Fatalf("the screen reads %q", got)
	}
	var b strings.Builder
	if err := WriteSVG(&b, []Frame{{Screen: s}}); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{
		`<svg xmlns="http://www.w3.org/2000/svg"`,
		`font-weight="bold">Backup</tspan>`,
		`&lt;WaitingForPluginOperations&gt; &amp; more`,
		`fill="#ff0000">Failed</tspan>`, // xterm colour 196
		`fill="#98c379"/>`,              // the green background, ANSI 2
		`██████░░░░ 60%`,
		`height="64"`, // two rows used: 2 × 18 + 2 × 14
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG lacks %q:\n%s", want, svg)
		}
	}
	if strings.Contains(svg, "@keyframes") {
		t.Error("a still picture is animated")
	}
}

func TestAnimation(t *testing.T) {
	frames := []Frame{
		{Screen: screenOf(t, 40, 5, "upload 10%"), For: time.Second},
		{Screen: screenOf(t, 40, 5, "upload 100%\r\nCompleted"), For: 3 * time.Second},
	}
	var b strings.Builder
	if err := WriteSVG(&b, frames); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{
		`<g class="f0">`, `<g class="f1">`, "upload 10%", "upload 100%", "Completed",
		".f0{opacity:0;animation:k0 4.00s steps(1,end) infinite}",
		".f1{opacity:1;animation:k1 4.00s steps(1,end) infinite}",
		"@keyframes k0{0%{opacity:1}25.000%{opacity:0}100%{opacity:0}}",
		"@keyframes k1{0%{opacity:0}25.000%{opacity:1}100.000%{opacity:0}100%{opacity:0}}",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG lacks %q:\n%s", want, svg)
		}
	}
}

func TestEmpty(t *testing.T) {
	var b strings.Builder
	if err := WriteSVG(&b, nil); err == nil {
		t.Error("no frame drew a picture")
	}
	if err := WriteSVG(&b, []Frame{{Screen: screenOf(t, 10, 3, "")}}); err == nil {
		t.Error("an empty screen drew a picture")
	}
}
