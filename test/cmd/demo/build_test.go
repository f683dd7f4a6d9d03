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
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// A Ctrl-C that reaches a build before the demo sees it (typed as the
// build starts, before it has a process group of its own) stops it; any
// other end of a build without its output is a failure.
func TestABuildEndedByCtrlCIsStopped(t *testing.T) {
	for _, c := range []struct {
		name    string
		script  string
		stopped bool
	}{
		{"interrupted", "kill -INT $$; sleep 5", true},
		{"failed", "echo broken >&2; exit 3", false},
		{"killed otherwise", "kill -TERM $$; sleep 5", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := runBuild(context.Background(), t.TempDir(), []string{"sh", "-c", c.script}, filepath.Join(t.TempDir(), "build.log"))
			if err == nil {
				t.Fatal("the build did not fail")
			}
			if got := errors.Is(err, context.Canceled); got != c.stopped {
				t.Errorf("stopped = %v (%v), want %v", got, err, c.stopped)
			}
		})
	}
}
