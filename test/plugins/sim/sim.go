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

// Package sim simulates the long-running uploads and downloads of the sample
// plugins. An operation's state lives in a file in a state directory, so it
// survives a restart of the plugin process, as Velero requires of operation
// IDs. How an operation behaves is read from annotations on the item the
// plugin acts on.
package sim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	biav2 "github.com/vmware-tanzu/velero/pkg/plugin/velero/backupitemaction/v2"
)

// The annotations that drive an operation, set on the item being backed up
// or restored, and the label that makes the sample actions apply to it.
const (
	// LabelSelect marks the items the sample actions act on (any value).
	LabelSelect = "itemops.io/sample-operation"
	// LabelSnapshot marks the PersistentVolumes the sample snapshotter
	// takes snapshots of (any value); the same annotations drive them.
	LabelSnapshot = "itemops.io/sample-snapshot"
	// AnnotationSize is the bytes to move, a quantity such as 10Gi. Default 1Gi.
	AnnotationSize = "itemops.io/sample-size"
	// AnnotationSpeed is bytes per second, a quantity such as 100Mi. Default 100Mi.
	AnnotationSpeed = "itemops.io/sample-speed"
	// AnnotationShape is how the rate varies: "real" for a rate that
	// wanders, pauses and ends in a burst (ShapeReal); constant otherwise.
	AnnotationShape = "itemops.io/sample-shape"
	// AnnotationFailAt makes the operation fail when it reaches this percentage.
	AnnotationFailAt = "itemops.io/sample-fail-at"
	// AnnotationStallAt makes the transfer stop moving, without failing, at
	// this percentage: a stuck upload.
	AnnotationStallAt = "itemops.io/sample-stall-at"
	// AnnotationHangProgress makes Progress block: "true" for ever, or a
	// duration such as 5s for that long on every call.
	AnnotationHangProgress = "itemops.io/sample-hang-progress"
	// AnnotationCrashOnce ("true") makes the plugin process exit during the
	// first Progress call of the operation.
	AnnotationCrashOnce = "itemops.io/sample-crash-once"
	// AnnotationCrashOnceUnder makes the plugin process exit during the
	// first Progress call made after the transfer ended by a process that
	// the named program started (the base name of its parent's first
	// argument, such as velero): a crash that only that caller sees, after
	// any other may have seen the end.
	AnnotationCrashOnceUnder = "itemops.io/sample-crash-once-under"
	// AnnotationIgnoreCancel ("true") makes Cancel return without stopping anything.
	AnnotationIgnoreCancel = "itemops.io/sample-ignore-cancel"
	// AnnotationCrashOnCancel ("true") makes the plugin process exit during
	// the first Cancel call, before it stops anything.
	AnnotationCrashOnCancel = "itemops.io/sample-crash-on-cancel"
	// AnnotationErrorCalls makes the first N Progress calls of the operation
	// return an error (as a plugin that cannot read its own state for a
	// moment does), not an answer.
	AnnotationErrorCalls = "itemops.io/sample-error-calls"
	// AnnotationAnswer makes every Progress call answer exactly this (JSON
	// of an Answer), however wrong: the bad answers a caller must survive.
	AnnotationAnswer = "itemops.io/sample-answer"

	// EnvStateDir names the state directory; default <tmp>/itemops-sample-plugin.
	EnvStateDir = "ITEMOPS_SAMPLE_STATE_DIR"
	// EnvFast ("true") is the benchmark's mode: an operation's state is read
	// once and kept in memory, and Progress writes nothing back, so that the
	// plugin costs next to nothing and what is measured is the caller.
	// Progress counts and crash-once are then not kept.
	EnvFast = "ITEMOPS_SAMPLE_FAST"
	// EnvPollLog names a file that gets one line per Progress call:
	// "<operation ID> <unix nanoseconds> <completed: 0|1>".
	EnvPollLog = "ITEMOPS_SAMPLE_POLL_LOG"
	// EnvLaunchLog names a file that gets one line per start of the plugin
	// process: "<pid> <unix nanoseconds>".
	EnvLaunchLog = "ITEMOPS_SAMPLE_LAUNCH_LOG"
	// EnvArgsLog names a file that gets one JSON Launch per start of the
	// plugin process: what it was started with.
	EnvArgsLog = "ITEMOPS_SAMPLE_ARGS_LOG"
	// EnvHandlerLog names a file that gets one line "<pid> <plugin name>"
	// each time the plugin process creates a plugin's handler, which Velero's
	// plugin server does on the first call naming it.
	EnvHandlerLog = "ITEMOPS_SAMPLE_HANDLER_LOG"
	// EnvHandlerDelay (a Go duration) is how long creating a handler takes,
	// as for a plugin that builds its clients first; none when unset.
	EnvHandlerDelay = "ITEMOPS_SAMPLE_HANDLER_DELAY"

	// FaultFile, in the state directory, makes every Progress call of every
	// operation misbehave while it exists: "error" answers with an error,
	// "hang" blocks until the file is gone. A plugin outage, switched on
	// and off from outside.
	FaultFile = "fault"
)

// faultCheck is how often a hanging Progress looks whether the fault is over.
const faultCheck = 50 * time.Millisecond

// State is one simulated operation, as stored in its file.
type State struct {
	ID        string `json:"id"`
	Direction string `json:"direction"`
	Item      string `json:"item"`
	Size      int64  `json:"size"`
	Speed     int64  `json:"speed"`
	// Shape is how the rate varies around Speed: ShapeConstant or ShapeReal.
	Shape       string        `json:"shape,omitempty"`
	FailAt      int           `json:"failAt"`
	StallAt     int           `json:"stallAt"`
	HangForever bool          `json:"hangForever,omitempty"`
	HangFor     time.Duration `json:"hangFor,omitempty"`
	CrashOnce   bool          `json:"crashOnce,omitempty"`
	// CrashOnceUnder: the first Progress call after the end made by a
	// process that this program started exits it (Crashed then).
	CrashOnceUnder string `json:"crashOnceUnder,omitempty"`
	Crashed        bool   `json:"crashed,omitempty"`
	IgnoreCancel   bool   `json:"ignoreCancel,omitempty"`
	// CrashOnCancel and CancelCrashed: the first Cancel exits the process.
	CrashOnCancel bool       `json:"crashOnCancel,omitempty"`
	CancelCrashed bool       `json:"cancelCrashed,omitempty"`
	Answer        *Answer    `json:"answer,omitempty"`
	ErrorCalls    int        `json:"errorCalls,omitempty"`
	Started       time.Time  `json:"started"`
	Canceled      *time.Time `json:"canceled,omitempty"`
	// Cancels counts the Cancel calls received.
	Cancels int `json:"cancels,omitempty"`
	// ProgressCalls counts the Progress calls answered.
	ProgressCalls int `json:"progressCalls,omitempty"`
	// Calls are the last MaxCalls Progress and Cancel calls received, the
	// oldest first: which process answered what, for a failure's
	// diagnosis.
	Calls []Call `json:"calls,omitempty"`
}

// MaxCalls is how many calls a State keeps.
const MaxCalls = 20

// Call is one Progress or Cancel call an operation received, as the
// plugin process that took it saw it.
type Call struct {
	At time.Time `json:"at"`
	// PID is the plugin process's, and Caller the program that started
	// it (velero for Velero's plugin processes).
	PID    int    `json:"pid"`
	Caller string `json:"caller"`
	Method string `json:"method"`
	// Result is the answer: "InProgress 5/10", "Completed", "Failed: …",
	// "error: …", "canceled", "cancel ignored", or "exited" for a
	// process that exited on purpose during the call.
	Result string `json:"result"`
}

// String is the call on one line.
func (c Call) String() string {
	return fmt.Sprintf("%s %s by pid %d (started by %s): %s", c.At.Format("15:04:05.000"), c.Method, c.PID, c.Caller, c.Result)
}

// record keeps a call, dropping the oldest beyond MaxCalls.
func (st *State) record(at time.Time, method, result string) {
	st.Calls = append(st.Calls, Call{At: at, PID: os.Getpid(), Caller: parentProgram(), Method: method, Result: result})
	if extra := len(st.Calls) - MaxCalls; extra > 0 {
		st.Calls = slices.Delete(st.Calls, 0, extra)
	}
}

// answer is a Progress answer as a Call's result.
func answer(p velero.OperationProgress) string {
	switch {
	case p.Completed && p.Err != "":
		return "Failed: " + p.Err
	case p.Completed:
		return "Completed"
	}
	return fmt.Sprintf("InProgress %d/%d", p.NCompleted, p.NTotal)
}

// Answer is a Progress answer given as is. Times are Unix seconds, so that
// ones no calendar accepts (after year 9999) can be sent too.
type Answer struct {
	Completed   bool   `json:"completed,omitempty"`
	Err         string `json:"err,omitempty"`
	NCompleted  int64  `json:"nCompleted,omitempty"`
	NTotal      int64  `json:"nTotal,omitempty"`
	Units       string `json:"units,omitempty"`
	Description string `json:"description,omitempty"`
	Started     int64  `json:"started,omitempty"`
	Updated     int64  `json:"updated,omitempty"`
}

func (a *Answer) progress() velero.OperationProgress {
	p := velero.OperationProgress{Completed: a.Completed, Err: a.Err, NCompleted: a.NCompleted, NTotal: a.NTotal,
		OperationUnits: a.Units, Description: a.Description}
	if a.Started != 0 {
		p.Started = time.Unix(a.Started, 0)
	}
	if a.Updated != 0 {
		p.Updated = time.Unix(a.Updated, 0)
	}
	return p
}

// Duration is how long the transfer takes in all.
func (s *State) Duration() time.Duration {
	return s.timeToMove(s.Size)
}

// CompletesAt is when the transfer finishes (or fails, with FailAt), by the
// plugin's own clock: the plugin-side completion time.
func (s *State) CompletesAt() time.Time {
	if s.FailAt >= 0 {
		return s.Started.Add(s.timeToMove(int64(s.FailAt) * s.Size / 100))
	}
	return s.Started.Add(s.Duration())
}

// Store keeps operation states in a directory. Several processes may
// share it (Velero's plugin processes and itemops', in two pods on one
// volume): every read-modify-write of an operation's state holds that
// operation's lock file, so no process works from a state another is
// changing, and none overwrites what another wrote.
type Store struct {
	dir string
	now func() time.Time
	// log, when set, gets what the process does on purpose (exits), as a
	// plugin's own log lines reach its caller's log.
	log logrus.FieldLogger

	fast   bool
	cache  sync.Map // id -> *State, in fast mode
	pollMu sync.Mutex
	polls  *os.File
}

// NewStore returns the store of the directory named by EnvStateDir.
func NewStore() (*Store, error) {
	dir := os.Getenv(EnvStateDir)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "itemops-sample-plugin")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	s := &Store{dir: dir, now: time.Now, fast: os.Getenv(EnvFast) == "true"}
	if path := os.Getenv(EnvPollLog); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening the poll log: %w", err)
		}
		s.polls = f
	}
	return s, nil
}

// NewHandlerStore is NewStore for the handler of the plugin name, logging
// to the handler's logger: it takes EnvHandlerDelay and records the
// handler's creation when EnvHandlerLog asks for it.
func NewHandlerStore(name string, log logrus.FieldLogger) (*Store, error) {
	if d, err := time.ParseDuration(os.Getenv(EnvHandlerDelay)); err == nil {
		time.Sleep(d)
	}
	if path := os.Getenv(EnvHandlerLog); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening the handler log: %w", err)
		}
		fmt.Fprintf(f, "%d %s\n", os.Getpid(), name)
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("writing the handler log: %w", err)
		}
	}
	s, err := NewStore()
	if err != nil {
		return nil, err
	}
	s.log = log
	return s, nil
}

// Launch is what a plugin process was started with.
type Launch struct {
	// Args are its arguments, without the program's name.
	Args []string `json:"args"`
	// Namespace is its VELERO_NAMESPACE.
	Namespace string `json:"namespace"`
}

// LogLaunch records a start of the plugin process when EnvLaunchLog or
// EnvArgsLog asks for it.
func LogLaunch() {
	if path := os.Getenv(EnvLaunchLog); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "%d %d\n", os.Getpid(), time.Now().UnixNano())
			_ = f.Close()
		}
	}
	if path := os.Getenv(EnvArgsLog); path != "" {
		line, _ := json.Marshal(Launch{Args: os.Args[1:], Namespace: os.Getenv("VELERO_NAMESPACE")})
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "%s\n", line)
			_ = f.Close()
		}
	}
}

// logPoll records a Progress answer when EnvPollLog asks for it.
func (s *Store) logPoll(id string, p velero.OperationProgress, at time.Time) {
	if s.polls == nil {
		return
	}
	completed := 0
	if p.Completed {
		completed = 1
	}
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	fmt.Fprintf(s.polls, "%s %d %d\n", id, at.UnixNano(), completed)
}

// fastProgress answers from memory.
func (s *Store) fastProgress(id string) (velero.OperationProgress, error) {
	cached, ok := s.cache.Load(id)
	if !ok {
		st, err := s.Load(id)
		if err != nil {
			return velero.OperationProgress{}, err
		}
		cached, _ = s.cache.LoadOrStore(id, st)
	}
	now := s.now()
	p := cached.(*State).progressAt(now)
	s.logPoll(id, p, now)
	return p, nil
}

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }

// Start begins an operation for the item with these annotations.
func (s *Store) Start(direction, item string, annotations map[string]string) (string, error) {
	return s.StartAt(direction, item, annotations, s.now())
}

// StartAt is Start with the transfer's start time given, which the
// benchmark uses to start many operations together.
func (s *Store) StartAt(direction, item string, annotations map[string]string, at time.Time) (string, error) {
	st := &State{Direction: direction, Item: item, Size: 1 << 30, Speed: 100 << 20, FailAt: -1, StallAt: -1, Started: at}
	var err error
	if v, ok := annotations[AnnotationSize]; ok {
		if st.Size, err = quantity(AnnotationSize, v); err != nil {
			return "", err
		}
	}
	if v, ok := annotations[AnnotationSpeed]; ok {
		if st.Speed, err = quantity(AnnotationSpeed, v); err != nil {
			return "", err
		}
		if st.Speed <= 0 {
			return "", fmt.Errorf("%s must be positive, got %q", AnnotationSpeed, v)
		}
	}
	if v, ok := annotations[AnnotationFailAt]; ok {
		if st.FailAt, err = strconv.Atoi(v); err != nil || st.FailAt < 0 || st.FailAt > 100 {
			return "", fmt.Errorf("%s must be a percentage from 0 to 100, got %q", AnnotationFailAt, v)
		}
	}
	if v, ok := annotations[AnnotationStallAt]; ok {
		if st.StallAt, err = strconv.Atoi(v); err != nil || st.StallAt < 0 || st.StallAt > 100 {
			return "", fmt.Errorf("%s must be a percentage from 0 to 100, got %q", AnnotationStallAt, v)
		}
	}
	if v, ok := annotations[AnnotationHangProgress]; ok {
		if v == "true" {
			st.HangForever = true
		} else if st.HangFor, err = time.ParseDuration(v); err != nil {
			return "", fmt.Errorf("%s must be true or a duration, got %q", AnnotationHangProgress, v)
		}
	}
	st.CrashOnce = annotations[AnnotationCrashOnce] == "true"
	st.CrashOnceUnder = annotations[AnnotationCrashOnceUnder]
	if v, ok := annotations[AnnotationErrorCalls]; ok {
		if st.ErrorCalls, err = strconv.Atoi(v); err != nil || st.ErrorCalls < 0 {
			return "", fmt.Errorf("%s must be a number of calls, got %q", AnnotationErrorCalls, v)
		}
	}
	if v, ok := annotations[AnnotationAnswer]; ok {
		st.Answer = &Answer{}
		if err := json.Unmarshal([]byte(v), st.Answer); err != nil {
			return "", fmt.Errorf("%s must be the JSON of an answer: %w", AnnotationAnswer, err)
		}
	}
	st.IgnoreCancel = annotations[AnnotationIgnoreCancel] == "true"
	st.CrashOnCancel = annotations[AnnotationCrashOnCancel] == "true"
	switch v := annotations[AnnotationShape]; v {
	case ShapeConstant, ShapeReal:
		st.Shape = v
	default:
		return "", fmt.Errorf("%s must be %q or empty, got %q", AnnotationShape, ShapeReal, v)
	}

	suffix := make([]byte, 6)
	if _, err := rand.Read(suffix); err != nil {
		return "", err
	}
	st.ID = fmt.Sprintf("sample-%s-%d-%s", direction, st.Started.UnixNano(), hex.EncodeToString(suffix))
	return st.ID, s.save(st)
}

func quantity(name, v string) (int64, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, fmt.Errorf("%s must be a quantity such as 10Gi, got %q: %w", name, v, err)
	}
	return q.Value(), nil
}

// Load returns the state of an operation, or Velero's invalid-operation-ID
// error when there is none.
func (s *Store) Load(id string) (*State, error) {
	if id == "" || strings.ContainsAny(id, "/\\") || strings.Contains(id, "..") {
		return nil, biav2.InvalidOperationIDError(id)
	}
	b, err := os.ReadFile(s.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, biav2.InvalidOperationIDError(id)
	}
	if err != nil {
		return nil, err
	}
	st := &State{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("reading state of operation %s: %w", id, err)
	}
	return st, nil
}

// Progress reports how far the operation got, hanging or crashing first
// when its annotations say so.
func (s *Store) Progress(id string) (velero.OperationProgress, error) {
	if s.fast {
		return s.fastProgress(id)
	}
	if err := s.fault(); err != nil {
		return velero.OperationProgress{}, err
	}
	st, err := s.Load(id)
	if err != nil {
		return velero.OperationProgress{}, err
	}
	if st.HangForever {
		select {}
	}
	if st.HangFor > 0 {
		time.Sleep(st.HangFor)
	}
	unlock, err := s.lock(id)
	if err != nil {
		return velero.OperationProgress{}, err
	}
	defer unlock()
	if st, err = s.Load(id); err != nil {
		return velero.OperationProgress{}, err
	}
	// One instant decides both the crash and the answer: the transfer has
	// ended for both or for neither.
	now := s.now()
	p := st.progressAt(now)
	if !st.Crashed && (st.CrashOnce || st.CrashOnceUnder != "" && st.CrashOnceUnder == parentProgram() && p.Completed) {
		st.Crashed = true
		st.record(now, "Progress", "exited")
		if err := s.save(st); err != nil {
			return velero.OperationProgress{}, err
		}
		s.exit(fmt.Sprintf("crashing on purpose during Progress of %s", id))
	}
	st.ProgressCalls++
	if st.ProgressCalls <= st.ErrorCalls {
		err := fmt.Errorf("simulated error inside the plugin (call %d of the first %d)", st.ProgressCalls, st.ErrorCalls)
		st.record(now, "Progress", "error: "+err.Error())
		if err := s.save(st); err != nil {
			return velero.OperationProgress{}, err
		}
		return velero.OperationProgress{}, err
	}
	if st.Answer != nil {
		p = st.Answer.progress()
	}
	st.record(now, "Progress", answer(p))
	if err := s.save(st); err != nil {
		return velero.OperationProgress{}, err
	}
	if st.Answer == nil {
		s.logPoll(id, p, now)
	}
	return p, nil
}

// exit ends the process during a call, saying why on its log and on
// standard error.
func (s *Store) exit(why string) {
	if s.log != nil {
		s.log.Warn("sample plugin: " + why)
	}
	fmt.Fprintf(os.Stderr, "sample plugin: %s\n", why)
	os.Exit(3)
}

// lock takes the operation's lock, an exclusive flock(2) of its lock file,
// and returns what releases it. Every process of every pod that mounts the
// directory sees the same lock, and the kernel releases it when a process
// exits, crashed or not.
func (s *Store) lock(id string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, id+".lock"), os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the lock of operation %s: %w", id, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking operation %s: %w", id, err)
	}
	return func() { _ = f.Close() }, nil
}

// parentProgram is the base name of the first argument of the process
// that started this one: velero for a plugin process Velero started. It is
// read once: a process's parent does not change while it serves calls.
var parentProgram = sync.OnceValue(func() string {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", os.Getppid()))
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(cmdline), "\x00")
	return filepath.Base(first)
})

// fault answers as the fault file says, if there is one.
func (s *Store) fault() error {
	for {
		kind, err := os.ReadFile(filepath.Join(s.dir, FaultFile))
		if err != nil {
			return nil
		}
		switch strings.TrimSpace(string(kind)) {
		case "error":
			return errors.New("simulated outage of the data mover")
		case "hang":
			time.Sleep(faultCheck)
		default:
			return nil
		}
	}
}

// progressAt is the progress of the operation at a time.
func (st *State) progressAt(now time.Time) velero.OperationProgress {
	p := velero.OperationProgress{
		NTotal:         st.Size,
		OperationUnits: "Bytes",
		Started:        st.Started,
		Updated:        now,
		Description:    st.Direction + "ing",
	}
	at := now
	if st.Canceled != nil && !st.IgnoreCancel {
		at = *st.Canceled
	}
	done := st.movedAfter(at.Sub(st.Started))
	if st.StallAt >= 0 {
		done = min(done, int64(st.StallAt)*st.Size/100)
	}
	p.NCompleted = done
	switch {
	case st.FailAt >= 0 && done*100 >= int64(st.FailAt)*st.Size:
		p.NCompleted = int64(st.FailAt) * st.Size / 100
		p.Completed, p.Err, p.Description = true, fmt.Sprintf("simulated failure at %d%%", st.FailAt), "failed"
		p.Updated = st.CompletesAt()
	case st.Canceled != nil && !st.IgnoreCancel:
		p.Completed, p.Err, p.Description = true, "operation canceled", "canceled"
		p.Updated = *st.Canceled
	case done >= st.Size:
		p.Completed, p.Description = true, "completed"
		p.Updated = st.CompletesAt()
	}
	return p
}

// Cancel stops the operation unless its annotations say to ignore it.
func (s *Store) Cancel(id string) error {
	if _, err := s.Load(id); err != nil {
		return err
	}
	unlock, err := s.lock(id)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := s.Load(id)
	if err != nil {
		return err
	}
	now := s.now()
	if st.CrashOnCancel && !st.CancelCrashed {
		st.CancelCrashed = true
		st.record(now, "Cancel", "exited")
		if err := s.save(st); err != nil {
			return err
		}
		s.exit(fmt.Sprintf("crashing on purpose during Cancel of %s", id))
	}
	st.Cancels++
	result := "cancel ignored"
	if !st.IgnoreCancel {
		result = "canceled"
		if st.Canceled == nil {
			st.Canceled = &now
		}
	}
	st.record(now, "Cancel", result)
	s.cache.Delete(id)
	return s.save(st)
}

func (s *Store) path(id string) string { return filepath.Join(s.dir, id+".json") }

// Put writes a state as it is, ID included: the benchmark names its
// operations before they start.
func (s *Store) Put(st *State) error {
	if st.ID == "" || strings.ContainsAny(st.ID, "/\\") || strings.Contains(st.ID, "..") {
		return fmt.Errorf("invalid operation ID %q", st.ID)
	}
	return s.save(st)
}

// NewState is a state with the defaults Start gives, before annotations.
func NewState(id, direction, item string, size, speed int64, at time.Time) *State {
	return &State{ID: id, Direction: direction, Item: item, Size: size, Speed: speed, FailAt: -1, StallAt: -1, Started: at}
}

// save writes the state atomically, so a crash never leaves half a file.
func (s *Store) save(st *State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return s.write(s.path(st.ID), b)
}

// write replaces the file at path with data atomically. Velero's plugin
// processes and itemops' share the directory and may run as different
// users (a platform assigns itemops one): each reads and replaces what the
// other wrote, so every user may read and write the file.
func (s *Store) write(path string, data []byte) error {
	tmp, err := os.CreateTemp(s.dir, ".state-*")
	if err != nil {
		return err
	}
	fail := func(err error) error {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(0o666); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// RememberVolume keeps the annotations of a volume until a snapshot of it
// starts: a VolumeSnapshotter sees the PersistentVolume in GetVolumeID, but
// only its volume ID in CreateSnapshot.
func (s *Store) RememberVolume(volumeID string, annotations map[string]string) error {
	if volumeID == "" || strings.ContainsAny(volumeID, "/\\") || strings.Contains(volumeID, "..") {
		return fmt.Errorf("invalid volume ID %q", volumeID)
	}
	b, err := json.Marshal(annotations)
	if err != nil {
		return err
	}
	return s.write(filepath.Join(s.dir, "volume-"+volumeID+".json"), b)
}

// VolumeAnnotations returns what RememberVolume kept for the volume, or
// nothing when it kept nothing.
func (s *Store) VolumeAnnotations(volumeID string) (map[string]string, error) {
	if volumeID == "" || strings.ContainsAny(volumeID, "/\\") || strings.Contains(volumeID, "..") {
		return nil, fmt.Errorf("invalid volume ID %q", volumeID)
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "volume-"+volumeID+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("reading annotations of volume %s: %w", volumeID, err)
	}
	return out, nil
}

// Delete forgets an operation; deleting one that is gone is not an error.
func (s *Store) Delete(id string) error {
	if id == "" || strings.ContainsAny(id, "/\\") || strings.Contains(id, "..") {
		return biav2.InvalidOperationIDError(id)
	}
	unlock, err := s.lock(id)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// The lock file goes too: a process still waiting on it finds no state.
	return os.Remove(filepath.Join(s.dir, id+".lock"))
}

// Account describes the operations of a state directory whose state
// changed since a time, for a failure's diagnosis: each one's item, when
// its transfer ends, whether a process exited on purpose, and the calls it
// took (which process answered what): the plugin processes' own account.
func Account(dir string, since time.Time) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), "volume-") {
			continue
		}
		if info, err := e.Info(); err != nil || info.ModTime().Before(since) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		st := &State{}
		if err := json.Unmarshal(data, st); err != nil {
			fmt.Fprintf(&b, "%s: %v\n", e.Name(), err)
			continue
		}
		fmt.Fprintf(&b, "%s, %s of %s: started %s, ends %s, %d Progress answered, %d Cancel, exited on purpose: %v\n",
			st.ID, st.Direction, st.Item, st.Started.Format("15:04:05.000"), st.CompletesAt().Format("15:04:05.000"),
			st.ProgressCalls, st.Cancels, st.Crashed || st.CancelCrashed)
		for _, c := range st.Calls {
			fmt.Fprintf(&b, "    %s\n", c)
		}
	}
	return b.String()
}
