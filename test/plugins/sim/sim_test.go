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

package sim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestProgressAt(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	canceledAt := start.Add(2 * time.Second)
	cases := []struct {
		name          string
		st            State
		at            time.Duration
		wantDone      int64
		wantCompleted bool
		wantErr       string
	}{
		{"halfway", State{Size: 100, Speed: 10, FailAt: -1, StallAt: -1}, 5 * time.Second, 50, false, ""},
		{"stuck", State{Size: 100, Speed: 10, FailAt: -1, StallAt: 30}, 9 * time.Second, 30, false, ""},
		{"done", State{Size: 100, Speed: 10, FailAt: -1, StallAt: -1}, 11 * time.Second, 100, true, ""},
		{"before the failure", State{Size: 100, Speed: 10, FailAt: 50, StallAt: -1}, 4 * time.Second, 40, false, ""},
		{"at the failure", State{Size: 100, Speed: 10, FailAt: 50, StallAt: -1}, 9 * time.Second, 50, true, "simulated failure at 50%"},
		{"canceled", State{Size: 100, Speed: 10, FailAt: -1, StallAt: -1, Canceled: &canceledAt}, 9 * time.Second, 20, true, "operation canceled"},
		{"cancel ignored", State{Size: 100, Speed: 10, FailAt: -1, StallAt: -1, Canceled: &canceledAt, IgnoreCancel: true}, 9 * time.Second, 90, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.st.Started = start
			p := tc.st.progressAt(start.Add(tc.at))
			if p.NCompleted != tc.wantDone || p.Completed != tc.wantCompleted || p.Err != tc.wantErr {
				t.Fatalf("got done=%d completed=%v err=%q, want %d %v %q", p.NCompleted, p.Completed, p.Err,
					tc.wantDone, tc.wantCompleted, tc.wantErr)
			}
		})
	}
}

func TestStartRejectsBadAnnotations(t *testing.T) {
	t.Setenv(EnvStateDir, t.TempDir())
	s, err := NewStore()
	if err != nil {
		t.Fatal(err)
	}
	for _, annotations := range []map[string]string{
		{AnnotationSize: "lots"},
		{AnnotationSpeed: "0"},
		{AnnotationFailAt: "150"},
		{AnnotationHangProgress: "sometimes"},
	} {
		if _, err := s.Start("upload", "ns/x", annotations); err == nil {
			t.Errorf("Start accepted %v", annotations)
		}
	}
	if _, err := s.Load("../../etc/passwd"); err == nil {
		t.Error("Load accepted a path as an operation ID")
	}
}

// TestProgressDecidesOnOneInstant: the transfer ends between two readings
// of the clock, and the answer agrees with the crash decision: a caller
// that must see the plugin exit after the end never gets Completed instead.
func TestProgressDecidesOnOneInstant(t *testing.T) {
	t.Setenv(EnvStateDir, t.TempDir())
	s, err := NewStore()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := NewState("one-instant", "upload", "ns/x", 100, 10, start)
	st.CrashOnceUnder = parentProgram()
	if err := s.Put(st); err != nil {
		t.Fatal(err)
	}
	// The first reading is just before the end, every later one after it.
	readings := 0
	s.now = func() time.Time {
		readings++
		if readings == 1 {
			return start.Add(10*time.Second - time.Millisecond)
		}
		return start.Add(11 * time.Second)
	}
	p, err := s.Progress(st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Completed {
		t.Fatalf("answered Completed to a caller that must see the process exit at the end (%s)", parentProgram())
	}
}

// The helper process of the cross-process tests: it calls Progress of
// SIM_HELPER_OPERATION SIM_HELPER_CALLS times, after SIM_HELPER_GO exists,
// and prints each answer.
func TestHelperProcess(t *testing.T) {
	id := os.Getenv("SIM_HELPER_OPERATION")
	if id == "" {
		t.Skip("a helper process of the cross-process tests")
	}
	s, err := NewStore()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(os.Getenv("SIM_HELPER_GO")); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	calls, _ := strconv.Atoi(os.Getenv("SIM_HELPER_CALLS"))
	for range calls {
		p, err := s.Progress(id)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println(answer(p))
	}
}

// helpers starts n processes of this test binary that each call Progress
// of the operation calls times, all at once, and returns their exit codes.
func helpers(t *testing.T, dir, id string, n, calls int) []int {
	t.Helper()
	start := filepath.Join(dir, "go")
	cmds := make([]*exec.Cmd, n)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
		cmds[i].Env = append(os.Environ(), EnvStateDir+"="+dir, "SIM_HELPER_OPERATION="+id,
			"SIM_HELPER_GO="+start, fmt.Sprintf("SIM_HELPER_CALLS=%d", calls))
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(start, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	codes := make([]int, n)
	for i, cmd := range cmds {
		var exit *exec.ExitError
		if err := cmd.Wait(); errors.As(err, &exit) {
			codes[i] = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
	}
	return codes
}

// TestProgressOfManyProcessesLosesNothing: processes calling Progress of
// one operation together each count their calls; none is lost to another
// process's write.
func TestProgressOfManyProcessesLosesNothing(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvStateDir, dir)
	s, err := NewStore()
	if err != nil {
		t.Fatal(err)
	}
	st := NewState("shared", "upload", "ns/x", 1<<40, 1, time.Now())
	if err := s.Put(st); err != nil {
		t.Fatal(err)
	}
	const processes, calls = 4, 50
	if codes := helpers(t, dir, st.ID, processes, calls); slices.Max(codes) != 0 {
		t.Fatalf("exit codes %v", codes)
	}
	got, err := s.Load(st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ProgressCalls != processes*calls {
		t.Fatalf("%d Progress calls counted, %d made", got.ProgressCalls, processes*calls)
	}
	if len(got.Calls) != MaxCalls {
		t.Fatalf("%d calls kept, want the last %d", len(got.Calls), MaxCalls)
	}
}

// TestCrashOnceUnderExitsOneProcessOnce: callers started by the named
// program call Progress together after the end; exactly one plugin
// process exits, and the others answer Completed.
func TestCrashOnceUnderExitsOneProcessOnce(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvStateDir, dir)
	s, err := NewStore()
	if err != nil {
		t.Fatal(err)
	}
	st := NewState("crash-once", "upload", "ns/x", 100, 100, time.Now().Add(-time.Minute))
	// The helpers' parent is this test binary.
	st.CrashOnceUnder = filepath.Base(os.Args[0])
	if err := s.Put(st); err != nil {
		t.Fatal(err)
	}
	const processes = 6
	codes := helpers(t, dir, st.ID, processes, 1)
	exited := 0
	for _, c := range codes {
		switch c {
		case 0:
		case 3:
			exited++
		default:
			t.Fatalf("exit codes %v", codes)
		}
	}
	if exited != 1 {
		t.Fatalf("%d plugin processes exited on purpose (exit codes %v), want exactly 1", exited, codes)
	}
	got, err := s.Load(st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Crashed || got.ProgressCalls != processes-1 {
		t.Fatalf("crashed %v after %d answered calls, want true after %d", got.Crashed, got.ProgressCalls, processes-1)
	}
	var results []string
	for _, c := range got.Calls {
		results = append(results, c.Result)
	}
	slices.Sort(results)
	want := []string{"Completed", "Completed", "Completed", "Completed", "Completed", "exited"}
	if !slices.Equal(results, want) {
		t.Fatalf("calls recorded %v, want %v", results, want)
	}
}
