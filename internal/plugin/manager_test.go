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

package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	protobiav2 "github.com/vmware-tanzu/velero/pkg/plugin/generated/backupitemaction/v2"
	protoriav2 "github.com/vmware-tanzu/velero/pkg/plugin/generated/restoreitemaction/v2"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	clocktesting "k8s.io/utils/clock/testing"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	vsv2 "github.com/itemops/itemops/pkg/plugin/velero/volumesnapshotter/v2"
	"github.com/itemops/itemops/test/plugins/sim"
)

const (
	datamover  = "itemops.io/sample-datamover"
	restorer   = "itemops.io/sample-restorer"
	v1Backup   = "itemops.io/sample-v1-backupper"
	v1Restorer = "itemops.io/sample-v1-restorer"
)

// logSink collects what reaches the manager's logger.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lines = append(s.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// pluginDir returns a new plugin directory holding the named sample binaries.
func pluginDir(t testing.TB, binaries ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range binaries {
		if err := os.Symlink(filepath.Join(binDir, b), filepath.Join(dir, b)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startTimeout is how long a spec's plugin process may take to start: a
// loaded machine takes seconds, more than the short call timeouts the specs
// check. The specs of a start that hangs or is slow set their own.
const startTimeout = time.Minute

// newManager discovers the plugins of dir and kills them at the end of the test.
func newManager(t testing.TB, dir string, timeout time.Duration) (*Manager, *logSink) {
	t.Helper()
	return discovered(t, Options{Dir: dir, CallTimeout: timeout, StartTimeout: startTimeout})
}

// discovered is newManager with the options of a spec's own, logging to the
// returned sink.
func discovered(t testing.TB, opts Options) (*Manager, *logSink) {
	t.Helper()
	logs := &logSink{}
	opts.Log = logs.logger()
	m := NewManager(opts)
	m.Discover(context.Background())
	t.Cleanup(m.Close)
	return m, logs
}

// item is a labelled ConfigMap carrying the annotations that drive a simulated transfer.
func item(annotations map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name": "data", "namespace": "shop",
			"labels":      map[string]string{sim.LabelSelect: "true"},
			"annotations": annotations,
		},
	})
	return b
}

var backup = &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "velero", UID: "b-1"}}
var restore = &velerov1api.Restore{ObjectMeta: metav1.ObjectMeta{Name: "nightly-restore", Namespace: "velero", UID: "r-1"}}

// startUpload runs the sample BackupItemAction's Execute over the wire, as
// Velero's backup controller does, and returns the operation ID.
func startUpload(t testing.TB, m *Manager, annotations map[string]string) string {
	t.Helper()
	conn, err := m.connect(context.Background(), "Execute", Operation{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Plugin: datamover})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(backup)
	res, err := protobiav2.NewBackupItemActionClient(conn).Execute(context.Background(),
		&protobiav2.ExecuteRequest{Plugin: datamover, Item: item(annotations), Backup: b})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetOperationID() == "" {
		t.Fatal("Execute returned no operation ID")
	}
	return res.GetOperationID()
}

// startDownload runs the sample RestoreItemAction's Execute over the wire.
func startDownload(t testing.TB, m *Manager, annotations map[string]string) string {
	t.Helper()
	conn, err := m.connect(context.Background(), "Execute", Operation{Kind: itemopsv1alpha1.PluginKindRestoreItemAction, Plugin: restorer})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := json.Marshal(restore)
	res, err := protoriav2.NewRestoreItemActionClient(conn).Execute(context.Background(),
		&protoriav2.RestoreItemActionExecuteRequest{Plugin: restorer, Item: item(annotations), ItemFromBackup: item(annotations), Restore: r})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetOperationID()
}

func upload(id string) Operation {
	return Operation{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Plugin: datamover, ID: id, Backup: backup}
}

func download(id string) Operation {
	return Operation{Kind: itemopsv1alpha1.PluginKindRestoreItemAction, Plugin: restorer, ID: id, Restore: restore}
}

func state(t testing.TB, id string) *sim.State {
	t.Helper()
	store, err := sim.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// managerGoroutines returns the stacks, by goroutine ID, of the goroutines
// other than the caller's that run or were started by the manager's code
// or what it runs plugin processes with (go-plugin, gRPC, os/exec). The
// test runner's own goroutines, which come and go (Ginkgo's output
// interceptor), are not among them.
func managerGoroutines() map[string]string {
	buf := make([]byte, 8<<20)
	stacks := strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
	out := map[string]string{}
	// The first stack is the caller's.
	for _, stack := range stacks[1:] {
		if !strings.Contains(stack, "itemops/itemops/internal/plugin.") && !strings.Contains(stack, "hashicorp/go-plugin") &&
			!strings.Contains(stack, "google.golang.org/grpc") && !strings.Contains(stack, "os/exec.") {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(stack, "goroutine "), " ")
		out[id] = stack
	}
	return out
}

var _ = Describe("The plugin manager", func() {
	It("discovery lists exactly the registered plugins", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample", "samplev1"), 10*time.Second)
		g.Expect(m.Registry().IDs()).To(Equal([]ID{
			{common.PluginKindBackupItemAction, v1Backup},
			{common.PluginKindBackupItemActionV2, datamover},
			{common.PluginKindRestoreItemAction, v1Restorer},
			{common.PluginKindRestoreItemActionV2, restorer},
			{common.PluginKindVolumeSnapshotter, snapshotter},
			{vsv2.PluginKind, snapshotter},
		}))
		g.Expect(m.Registry().Problems()).To(BeEmpty())
		g.Expect(m.pids()).To(BeEmpty(), "discovery leaves no process running")
	})

	// An administrator must see which plugins itemops follows through v2
	// and which only through the v1 adapter: the log and the metric say.
	It("discovery names each plugin with its kind and interface, in the log and to OnDiscovered", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		dir := pluginDir(t, "sample", "samplev1")
		var told []Discovered
		m, logs := discovered(t, Options{Dir: dir, CallTimeout: 10 * time.Second, StartTimeout: startTimeout,
			OnDiscovered: func(p []Discovered) { told = p }})
		sample, v1 := filepath.Join(dir, "sample"), filepath.Join(dir, "samplev1")
		want := []Discovered{
			{Kind: "BackupItemAction", Name: datamover, Interface: InterfaceV2, Binary: sample},
			{Kind: "BackupItemAction", Name: v1Backup, Interface: InterfaceV1, Binary: v1},
			{Kind: "RestoreItemAction", Name: restorer, Interface: InterfaceV2, Binary: sample},
			{Kind: "RestoreItemAction", Name: v1Restorer, Interface: InterfaceV1, Binary: v1},
			{Kind: "VolumeSnapshotter", Name: snapshotter, Interface: InterfaceV2, Binary: sample},
		}
		g.Expect(m.Registry().Plugins()).To(Equal(want))
		g.Expect(told).To(Equal(want))
		for _, p := range want {
			g.Expect(logs.String()).To(MatchRegexp(`"msg"="discovered plugin" "kind"="%s" "name"="%s" "interface"="%s" "binary"="%s"`,
				p.Kind, regexp.QuoteMeta(p.Name), p.Interface, regexp.QuoteMeta(p.Binary)))
		}
		g.Expect(logs.String()).To(ContainSubstring(`"binaries"=2 "plugins"=5 "problems"=0`))
	})

	It("discovery skips and reports what is not a plugin", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		dir := pluginDir(t, "samplev1")
		write := func(name, content string, mode os.FileMode) {
			g.Expect(os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)).To(Succeed())
			g.Expect(os.WriteFile(filepath.Join(dir, name), []byte(content), mode)).To(Succeed())
		}
		write("not-a-plugin.sh", "#!/bin/sh\necho 'I am a shell script'\n", 0o755)
		write("hangs-at-start.sh", "#!/bin/sh\nexec sleep 600\n", 0o755)
		write("README.md", "not executable, so not looked at\n", 0o644)
		// Anyone on the node could replace it: never started, not even by discovery.
		ran := filepath.Join(t.TempDir(), "ran")
		write("anyone-can-replace.sh", "#!/bin/sh\ntouch "+ran+"\n", 0o755)
		g.Expect(os.Chmod(filepath.Join(dir, "anyone-can-replace.sh"), 0o777)).To(Succeed())
		// Two binaries registering the same names, one in a subdirectory.
		g.Expect(os.Symlink(filepath.Join(binDir, "sample"), filepath.Join(dir, "sample"))).To(Succeed())
		g.Expect(os.MkdirAll(filepath.Join(dir, "vendor-b"), 0o755)).To(Succeed())
		g.Expect(os.Symlink(filepath.Join(binDir, "sample"), filepath.Join(dir, "vendor-b", "sample-copy"))).To(Succeed())

		// A start that hangs is given up after StartTimeout, not waited for.
		const hung = 10 * time.Second
		start := time.Now()
		m, logs := discovered(t, Options{Dir: dir, CallTimeout: 3 * time.Second, StartTimeout: hung})
		g.Expect(time.Since(start)).To(BeNumerically("<", 3*hung))

		g.Expect(m.Registry().IDs()).To(Equal([]ID{
			{common.PluginKindBackupItemAction, v1Backup},
			{common.PluginKindRestoreItemAction, v1Restorer},
		}), "the conflicting names are not used, the good binary still is")
		var problems []string
		for _, p := range m.Registry().Problems() {
			problems = append(problems, filepath.Base(p.Path)+": "+p.Err.Error())
		}
		g.Expect(problems).To(ConsistOf(
			"anyone-can-replace.sh: refused: writable by every user (mode 0777)",
			HavePrefix("hangs-at-start.sh: not a Velero plugin, or it failed the handshake"),
			HavePrefix("not-a-plugin.sh: not a Velero plugin, or it failed the handshake"),
			And(HavePrefix("sample-copy: BackupItemActionV2/itemops.io/sample-datamover is also registered by"), ContainSubstring("neither is used")),
			And(HavePrefix("sample-copy: RestoreItemActionV2/itemops.io/sample-restorer is also registered by"), ContainSubstring("neither is used")),
			And(HavePrefix("sample-copy: VolumeSnapshotter/itemops.io/sample-snapshotter is also registered by"), ContainSubstring("neither is used")),
			And(HavePrefix("sample-copy: VolumeSnapshotterV2/itemops.io/sample-snapshotter is also registered by"), ContainSubstring("neither is used")),
		))
		g.Expect(logs.String()).To(ContainSubstring("skipping in plugin directory"))

		_, err := m.Progress(context.Background(), upload("x"))
		g.Expect(errors.Is(err, ErrPluginNotFound)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("is registered by more than one binary"))
		g.Expect(ran).NotTo(BeAnExistingFile(), "the world-writable file was run")

		// A name no binary registers: the answer lists what was skipped, one
		// of which may be the plugin meant.
		missing := upload("x")
		missing.Plugin = "example.io/not-installed"
		_, err = m.Progress(context.Background(), missing)
		g.Expect(errors.Is(err, ErrPluginNotFound)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(And(ContainSubstring("skipped there: "),
			ContainSubstring("anyone-can-replace.sh: refused: writable by every user (mode 0777)"),
			ContainSubstring("not-a-plugin.sh: not a Velero plugin")))
	})

	It("a binary that did not answer discovery is asked again when an operation needs it", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		dir, work := t.TempDir(), t.TempDir()
		// Dies the first time it is started (as a plugin killed while
		// discovery asks it), serves the sample plugins after that.
		g.Expect(os.WriteFile(filepath.Join(dir, "flaky-at-start.sh"), []byte("#!/bin/sh\n"+
			"[ -e "+work+"/started ] || { touch "+work+"/started; exit 1; }\n"+
			"exec "+filepath.Join(binDir, "sample")+" \"$@\"\n"), 0o755)).To(Succeed())
		// Never a plugin: counts how often it is started.
		g.Expect(os.WriteFile(filepath.Join(dir, "broken.sh"), []byte("#!/bin/sh\necho x >> "+work+"/broken\n"), 0o755)).To(Succeed())
		runs := func() int {
			b, _ := os.ReadFile(filepath.Join(work, "broken"))
			return strings.Count(string(b), "x")
		}
		clk := clocktesting.NewFakeClock(time.Now())
		logs := &logSink{}
		m := NewManager(Options{Dir: dir, CallTimeout: 10 * time.Second, Log: logs.logger(), Clock: clk})
		DeferCleanup(m.Close)
		m.Discover(context.Background())
		g.Expect(m.Registry().IDs()).To(BeEmpty())
		g.Expect(m.Registry().Problems()).To(HaveLen(2))
		g.Expect(runs()).To(Equal(1))

		// The first call that needs a plugin asks both again; one answers.
		id := startUpload(t, m, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "10Mi"})
		_, err := m.Progress(context.Background(), upload(id))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(m.Registry().Has(ID{common.PluginKindBackupItemActionV2, datamover})).To(BeTrue())
		g.Expect(m.Registry().Problems()).To(ConsistOf(HaveField("Path", filepath.Join(dir, "broken.sh"))))
		g.Expect(logs.String()).To(ContainSubstring("plugin binary answered when asked again"))
		g.Expect(runs()).To(Equal(2))

		// A plugin nobody serves asks the one left again, ever less often.
		missing := upload("x")
		missing.Plugin = "example.io/not-installed"
		ask := func() int {
			_, err := m.Progress(context.Background(), missing)
			g.Expect(errors.Is(err, ErrPluginNotFound)).To(BeTrue(), "got %v", err)
			return runs()
		}
		g.Expect(ask()).To(Equal(2), "asked again at once")
		clk.Step(relistFirst)
		g.Expect(ask()).To(Equal(3))
		clk.Step(relistFirst)
		g.Expect(ask()).To(Equal(3), "none answered: the wait doubles")
		clk.Step(relistFirst)
		g.Expect(ask()).To(Equal(4))
		g.Expect(logs.String()).To(ContainSubstring("still skipping in plugin directory"))
	})

	It("a process slower to start than a call may take is waited for as long as StartTimeout", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		dir := t.TempDir()
		// Starts as a plugin on a loaded machine may: seconds late, later
		// than a call may take.
		g.Expect(os.WriteFile(filepath.Join(dir, "slow-to-start.sh"), []byte("#!/bin/sh\nsleep 5\n"+
			"exec "+filepath.Join(binDir, "sample")+" \"$@\"\n"), 0o755)).To(Succeed())
		discover := func(start time.Duration) *Registry {
			m := NewManager(Options{Dir: dir, CallTimeout: 3 * time.Second, StartTimeout: start, Log: logr.Discard()})
			DeferCleanup(m.Close)
			return m.Discover(context.Background())
		}
		g.Expect(discover(0).Problems()).To(ConsistOf(HaveField("Err", MatchError(ContainSubstring("timeout while waiting for plugin to start")))),
			"without StartTimeout a start may take CallTimeout")
		reg := discover(time.Minute)
		g.Expect(reg.Problems()).To(BeEmpty())
		g.Expect(reg.Has(ID{common.PluginKindBackupItemActionV2, datamover})).To(BeTrue())
	})

	It("missing plugin directory is a problem not a failure", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, filepath.Join(t.TempDir(), "nowhere"), time.Second)
		g.Expect(m.Registry().IDs()).To(BeEmpty())
		g.Expect(m.Registry().Problems()).To(HaveLen(1))
		g.Expect(m.Registry().Problems()[0].Err.Error()).To(ContainSubstring("no such file or directory"))
	})

	It("progress advances and completes", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, logs := newManager(t, pluginDir(t, "sample"), 10*time.Second)
		id := startUpload(t, m, map[string]string{sim.AnnotationSize: "4Mi", sim.AnnotationSpeed: "2Mi"})
		ctx := context.Background()

		first, err := m.Progress(ctx, upload(id))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(first.Completed).To(BeFalse())
		g.Expect(first.NTotal).To(Equal(int64(4 << 20)))
		g.Expect(first.OperationUnits).To(Equal("Bytes"))
		g.Expect(first.Started).NotTo(BeZero())

		var last velero.OperationProgress
		g.Eventually(func() (int64, error) {
			p, err := m.Progress(ctx, upload(id))
			last = p
			return p.NCompleted, err
		}, 5*time.Second, 100*time.Millisecond).Should(BeNumerically(">", first.NCompleted))
		g.Eventually(func() (bool, error) {
			p, err := m.Progress(ctx, upload(id))
			last = p
			return p.Completed, err
		}, 10*time.Second, 200*time.Millisecond).Should(BeTrue())
		g.Expect(last.NCompleted).To(Equal(last.NTotal))
		g.Expect(last.Err).To(BeEmpty())

		g.Expect(m.Launches()).To(Equal(int64(2)), "one launch for discovery, one for every call after it")
		g.Expect(logs.String()).To(ContainSubstring("started simulated upload"), "the plugin's own log lines reach the manager's logger")
	})

	It("restore item action progress and additional items", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample", "samplev1"), 10*time.Second)
		ctx := context.Background()
		id := startDownload(t, m, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "10Mi"})
		g.Eventually(func() (bool, error) {
			p, err := m.Progress(ctx, download(id))
			return p.Completed, err
		}, 5*time.Second, 100*time.Millisecond).Should(BeTrue())

		ready, err := m.AreAdditionalItemsReady(ctx, restorer, restore, []velero.ResourceIdentifier{{Name: "x"}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ready).To(BeTrue())
		ready, err = m.AreAdditionalItemsReady(ctx, v1Restorer, restore, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ready).To(BeTrue(), "a v1 plugin has no additional items to wait for")
	})

	It("cancel stops the operation", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample"), 10*time.Second)
		ctx := context.Background()
		id := startUpload(t, m, map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})

		p, err := m.Progress(ctx, upload(id))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Completed).To(BeFalse())

		g.Expect(m.Cancel(ctx, upload(id))).To(Succeed())
		g.Expect(state(t, id).Canceled).NotTo(BeNil())
		g.Expect(state(t, id).Cancels).To(Equal(1))

		p, err = m.Progress(ctx, upload(id))
		g.Expect(errors.Is(err, ErrOperationFailed)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("operation canceled"))
		g.Expect(p.Completed).To(BeTrue())
		g.Expect(p.NCompleted).To(BeNumerically("<", p.NTotal))

		// Restores too.
		rid := startDownload(t, m, map[string]string{sim.AnnotationSize: "10Gi", sim.AnnotationSpeed: "1Mi"})
		g.Expect(m.Cancel(ctx, download(rid))).To(Succeed())
		g.Expect(state(t, rid).Canceled).NotTo(BeNil())
	})

	Describe("typed errors", Ordered, func() {
		// One plugin process for every case, and an upload of it that fails.
		var (
			m       *Manager
			failing string
		)
		BeforeAll(func() {
			t := GinkgoTB()
			m, _ = newManager(t, pluginDir(t, "sample", "samplev1"), 10*time.Second)
			failing = startUpload(t, m, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "100Mi", sim.AnnotationFailAt: "50"})
		})

		cases := []struct {
			name      string
			op        func() Operation
			kind      error
			message   string
			retryable bool
		}{
			{"unknown plugin name", func() Operation {
				return Operation{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Plugin: "example.io/nobody", ID: "x"}
			},
				ErrPluginNotFound, "no binary in", false},
			{"restore action name asked as a backup action", func() Operation {
				return Operation{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Plugin: restorer, ID: "x"}
			},
				ErrPluginNotFound, "BackupItemActionV2/itemops.io/sample-restorer", false},
			{"v1 backup item action", func() Operation {
				return Operation{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Plugin: v1Backup, ID: "x"}
			},
				ErrNotSupported, "v1 BackupItemAction", false},
			{"v1 restore item action", func() Operation {
				return Operation{Kind: itemopsv1alpha1.PluginKindRestoreItemAction, Plugin: v1Restorer, ID: "x"}
			},
				ErrNotSupported, "v1 RestoreItemAction", false},
			{"operation ID the plugin does not know", func() Operation { return upload("sample-upload-0-000000000000") },
				ErrInvalidOperationID, "operation ID sample-upload-0-000000000000 is invalid", false},
			{"operation the plugin reports failed", func() Operation { return upload(failing) },
				ErrOperationFailed, "simulated failure at 50%", false},
		}
		for _, tc := range cases {
			It(tc.name, func() {
				g := NewWithT(GinkgoT())
				op := tc.op()
				_, err := m.Progress(context.Background(), op)
				if tc.kind == ErrOperationFailed {
					g.Eventually(func() error { _, err = m.Progress(context.Background(), op); return err }, 5*time.Second).Should(HaveOccurred())
				}
				g.Expect(err).To(HaveOccurred())
				g.Expect(errors.Is(err, tc.kind)).To(BeTrue(), "want %v, got %v", tc.kind, err)
				g.Expect(err.Error()).To(ContainSubstring(tc.message))
				g.Expect(IsRetryable(err)).To(Equal(tc.retryable))
				var perr *Error
				g.Expect(errors.As(err, &perr)).To(BeTrue())
				g.Expect(perr.Plugin).To(Equal(op.Plugin))
			})
		}

		It("cancel of a v1 plugin is a no-op", func() {
			g := NewWithT(GinkgoT())
			g.Expect(m.Cancel(context.Background(), Operation{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Plugin: v1Backup, ID: "x"})).To(Succeed())
		})
	})

	It("hung progress returns a deadline error in time", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample"), time.Second)
		hung := startUpload(t, m, map[string]string{sim.AnnotationHangProgress: "true"})
		healthy := startUpload(t, m, nil)

		start := time.Now()
		_, err := m.Progress(context.Background(), upload(hung))
		elapsed := time.Since(start)
		g.Expect(errors.Is(err, ErrTransport)).To(BeTrue(), "got %v", err)
		g.Expect(IsRetryable(err)).To(BeTrue())
		g.Expect(err.Error()).To(ContainSubstring("DeadlineExceeded"))
		g.Expect(elapsed).To(BeNumerically(">=", 900*time.Millisecond))
		g.Expect(elapsed).To(BeNumerically("<", 3*time.Second))

		// The hung call does not block the process for anyone else.
		_, err = m.Progress(context.Background(), upload(healthy))
		g.Expect(err).NotTo(HaveOccurred())

		// A caller's own shorter deadline wins.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start = time.Now()
		_, err = m.Progress(ctx, upload(hung))
		g.Expect(IsRetryable(err)).To(BeTrue())
		g.Expect(time.Since(start)).To(BeNumerically("<", 900*time.Millisecond))
	})

	It("killed plugin process is restarted and operations survive", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample"), 10*time.Second)
		ctx := context.Background()
		id := startUpload(t, m, map[string]string{sim.AnnotationSize: "100Mi", sim.AnnotationSpeed: "1Mi"})
		before, err := m.Progress(ctx, upload(id))
		g.Expect(err).NotTo(HaveOccurred())

		pids := m.pids()
		g.Expect(pids).To(HaveLen(1))
		var pid int
		for _, p := range pids {
			pid = p
		}
		g.Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
		g.Eventually(m.pids, 5*time.Second).Should(BeEmpty(), "the manager notices the exit")

		after, err := m.Progress(ctx, upload(id))
		g.Expect(err).NotTo(HaveOccurred(), "the next call restarts the process")
		g.Expect(after.NCompleted).To(BeNumerically(">=", before.NCompleted), "the same operation ID still reports progress")
		g.Expect(after.Started).To(BeTemporally("==", before.Started))
		g.Expect(m.pids()).To(HaveLen(1))
		g.Expect(m.pids()).NotTo(ContainElement(pid))
		g.Expect(m.Restarts()).To(Equal(int64(1)))
	})

	It("plugin crash during a call is a clear error then a restart", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample"), 10*time.Second)
		ctx := context.Background()
		id := startUpload(t, m, map[string]string{sim.AnnotationCrashOnce: "true", sim.AnnotationSize: "100Mi", sim.AnnotationSpeed: "1Mi"})

		start := time.Now()
		_, err := m.Progress(ctx, upload(id))
		g.Expect(errors.Is(err, ErrTransport)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("Unavailable"))
		g.Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second), "an in-flight caller does not wait for the deadline")

		g.Eventually(func() error { _, err := m.Progress(ctx, upload(id)); return err }, 10*time.Second, 50*time.Millisecond).
			Should(Succeed())
		g.Expect(state(t, id).Crashed).To(BeTrue())
	})

	It("crash loop backs off", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		dir := pluginDir(t, "sample")
		m, _ := newManager(t, dir, 5*time.Second)
		ctx := context.Background()
		id := startUpload(t, m, nil)
		// The binary disappears; every start now fails.
		g.Expect(os.Remove(filepath.Join(dir, "sample"))).To(Succeed())
		for _, pid := range m.pids() {
			g.Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
		}
		g.Eventually(m.pids, 5*time.Second).Should(BeEmpty())

		_, err := m.Progress(ctx, upload(id))
		g.Expect(IsRetryable(err)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("starting"))
		launches := m.Launches()
		_, err = m.Progress(ctx, upload(id))
		g.Expect(IsRetryable(err)).To(BeTrue())
		g.Expect(err.Error()).To(ContainSubstring("next start in"))
		g.Expect(m.Launches()).To(Equal(launches), "no start while backing off")
	})

	It("many concurrent callers share one process", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample"), 30*time.Second)
		ids := make([]string, 10)
		for i := range ids {
			ids[i] = startUpload(t, m, map[string]string{sim.AnnotationSize: "1Gi", sim.AnnotationSpeed: "1Mi"})
		}
		launches := m.Launches()

		const goroutines, calls = 100, 20
		errs := make(chan error, goroutines*calls)
		var wg sync.WaitGroup
		for i := 0; i < goroutines; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < calls; j++ {
					if _, err := m.Progress(context.Background(), upload(ids[(i+j)%len(ids)])); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		var failures []error
		for err := range errs {
			failures = append(failures, err)
		}
		g.Expect(failures).To(BeEmpty())
		g.Expect(m.Launches()).To(Equal(launches), "every call went through the one process")
		g.Expect(m.pids()).To(HaveLen(1))
	})

	It("a new process gets its first calls at once without racing in Velero's plugin server", func() {
		// Velero's plugin server creates a plugin's handler on the first
		// call naming it and keeps it in a map it does not lock: concurrent
		// first calls each create one and write the map at once, which the
		// Go runtime answers by killing the process. Creating a handler
		// takes a while here, as for a plugin that builds its clients first.
		t := GinkgoTB()
		g := NewWithT(t)
		handlerLog := filepath.Join(t.TempDir(), "handlers")
		t.Setenv(sim.EnvHandlerLog, handlerLog)
		t.Setenv(sim.EnvHandlerDelay, "200ms")
		m, logs := newManager(t, pluginDir(t, "sample"), 30*time.Second)

		const callers = 20
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = m.Progress(context.Background(), upload(fmt.Sprintf("never-started-%d", i)))
			}()
		}
		wg.Wait()
		for _, err := range errs {
			g.Expect(err).To(HaveOccurred(), "no such operation")
			g.Expect(errors.Is(err, ErrTransport)).To(BeFalse(), "the plugin answered: %v", err)
		}
		g.Expect(m.Restarts()).To(BeZero(), logs.String())
		pids := m.pids()
		g.Expect(pids).To(HaveLen(1))
		created, err := os.ReadFile(handlerLog)
		g.Expect(err).NotTo(HaveOccurred())
		var pid int
		for _, p := range pids {
			pid = p
		}
		g.Expect(strings.Split(strings.TrimSpace(string(created)), "\n")).To(ConsistOf(
			fmt.Sprintf("%d %s", pid, datamover), fmt.Sprintf("%d %s", pid, restorer)),
			"each action's handler created once, the one the calls did not name too")
	})

	It("close kills every plugin process", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		m, _ := newManager(t, pluginDir(t, "sample", "samplev1"), 10*time.Second)
		ctx := context.Background()
		startUpload(t, m, nil)
		_, _ = m.AreAdditionalItemsReady(ctx, restorer, restore, nil)
		pids := m.pids()
		g.Expect(pids).To(HaveLen(1))

		m.Close()
		for _, pid := range pids {
			g.Eventually(func() error { return syscall.Kill(pid, 0) }, 10*time.Second, 50*time.Millisecond).
				Should(MatchError(syscall.ESRCH), "plugin process %d outlived the manager", pid)
		}
		_, err := m.Progress(ctx, upload("x"))
		g.Expect(err).To(MatchError(ContainSubstring("plugin manager is shut down")))
	})

	It("third party plugin is discovered", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		if awsPluginErr != nil {
			t.Fatalf("building velero-plugin-for-aws: %v", awsPluginErr)
		}
		dir := t.TempDir()
		g.Expect(os.Symlink(awsPluginPath, filepath.Join(dir, "velero-plugin-for-aws"))).To(Succeed())
		m, _ := newManager(t, dir, 30*time.Second)
		g.Expect(m.Registry().Problems()).To(BeEmpty())
		g.Expect(m.Registry().IDs()).To(ContainElements(
			ID{common.PluginKindObjectStore, "velero.io/aws"},
			ID{common.PluginKindVolumeSnapshotter, "velero.io/aws"},
		))
	})

	It("the Velero binary is run as run-plugins", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		dir := t.TempDir()
		// Stands in for /velero copied from Velero's image: it serves plugins only
		// when started as "velero run-plugins".
		script := "#!/bin/sh\n[ \"$1\" = run-plugins ] || exit 64\nexec " + filepath.Join(binDir, "sample") + "\n"
		g.Expect(os.WriteFile(filepath.Join(dir, "velero"), []byte(script), 0o755)).To(Succeed())
		m, _ := newManager(t, dir, 10*time.Second)
		g.Expect(m.Registry().Problems()).To(BeEmpty())
		g.Expect(m.Registry().IDs()).To(ContainElement(ID{common.PluginKindBackupItemActionV2, datamover}))
		id := startUpload(t, m, nil)
		_, err := m.Progress(context.Background(), upload(id))
		g.Expect(err).NotTo(HaveOccurred())
	})

	// TestNoGoroutineOutlivesTheManager: plugin processes killed and started
	// again, calls that fail and calls that succeed, then Close: no goroutine
	// the manager started is left behind, nor any process. Goroutines are
	// told by what they run, not counted: the test runner's own come and go.
	It("no goroutine outlives the manager", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		before := managerGoroutines()
		m := NewManager(Options{Dir: pluginDir(t, "sample"), CallTimeout: 5 * time.Second, StartTimeout: startTimeout, Log: (&logSink{}).logger()})
		m.Discover(context.Background())
		id := startUpload(t, m, map[string]string{sim.AnnotationSize: "100Mi", sim.AnnotationSpeed: "1Mi"})
		var pids []int
		for range 3 {
			_, err := m.Progress(context.Background(), upload(id))
			g.Expect(err).NotTo(HaveOccurred())
			for _, pid := range m.pids() {
				pids = append(pids, pid)
				g.Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
			}
			// The next call finds the process dead, fails or restarts it.
			g.Eventually(func() error { _, err := m.Progress(context.Background(), upload(id)); return err }, 15*time.Second, 100*time.Millisecond).
				Should(Succeed())
		}
		m.Close()
		g.Expect(m.Restarts()).To(BeNumerically(">=", 3))
		for _, pid := range pids {
			g.Eventually(func() error { return syscall.Kill(pid, 0) }, 10*time.Second, 50*time.Millisecond).Should(MatchError(syscall.ESRCH))
		}
		g.Eventually(func() []string {
			var left []string
			for id, stack := range managerGoroutines() {
				if _, ok := before[id]; !ok {
					left = append(left, stack)
				}
			}
			return left
		}, 10*time.Second, 50*time.Millisecond).Should(BeEmpty(), "goroutines outlived the manager")
	})

	// TestOnlyDiscoveredBinariesAreEverStarted: whatever an operation names as
	// its plugin (a path, a path out of the plugin directory, a binary's file
	// name), nothing is started but a binary discovery found serving that name.
	It("only discovered binaries are ever started", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		dir := pluginDir(t, "sample")
		ran := filepath.Join(t.TempDir(), "ran")
		evil := filepath.Join(t.TempDir(), "evil")
		g.Expect(os.WriteFile(evil, []byte("#!/bin/sh\ntouch "+ran+"\n"), 0o755)).To(Succeed())
		m, _ := newManager(t, dir, 5*time.Second)
		launches := m.Launches()
		for _, name := range []string{evil, "../../../../" + evil, "sample", filepath.Join(dir, "sample"), "/bin/sh", "itemops.io/../../bin/sh"} {
			op := upload("x")
			op.Plugin = name
			_, err := m.Progress(context.Background(), op)
			g.Expect(errors.Is(err, ErrPluginNotFound)).To(BeTrue(), "plugin %q: %v", name, err)
			g.Expect(m.Cancel(context.Background(), op)).To(MatchError(ErrPluginNotFound), "plugin %q", name)
		}
		g.Expect(m.Launches()).To(Equal(launches), "a process was started")
		g.Expect(ran).NotTo(BeAnExistingFile())
	})

	// Whoever can write the plugin directory could swap a binary for one of
	// theirs, which would run with itemops' identity. Each binary is run
	// only as discovery found it: a restart after a crash, and the version
	// probe, refuse a changed file without running it.
	Describe("binaries are pinned at discovery", func() {
		swap := func(t testing.TB, path string) string {
			ran := filepath.Join(t.TempDir(), "ran")
			evil := path + ".new"
			if err := os.WriteFile(evil, []byte("#!/bin/sh\ntouch "+ran+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(evil, path); err != nil { // as an installer swaps it
				t.Fatal(err)
			}
			return ran
		}

		It("a binary swapped while its process runs is not started again after the process dies", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			dir := pluginDir(t, "sample")
			m, logs := newManager(t, dir, 10*time.Second)
			ctx := context.Background()
			id := startUpload(t, m, map[string]string{sim.AnnotationSize: "100Mi", sim.AnnotationSpeed: "1Mi"})
			_, err := m.Progress(ctx, upload(id))
			g.Expect(err).NotTo(HaveOccurred())
			pinned := m.pins.digest(filepath.Join(dir, "sample"))
			g.Expect(pinned).To(HaveLen(64))

			ran := swap(t, filepath.Join(dir, "sample"))
			for _, pid := range m.pids() {
				g.Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
			}
			g.Eventually(m.pids, 5*time.Second).Should(BeEmpty())
			launches := m.Launches()

			_, err = m.Progress(ctx, upload(id))
			g.Expect(err).To(MatchError(ErrBinaryChanged))
			g.Expect(IsRetryable(err)).To(BeFalse())
			var changed *BinaryChangedError
			g.Expect(errors.As(err, &changed)).To(BeTrue())
			g.Expect(changed.Path).To(Equal(filepath.Join(dir, "sample")))
			g.Expect(changed.Pinned).To(Equal(pinned))
			g.Expect(err.Error()).To(ContainSubstring("is not the binary itemops discovered"))
			g.Expect(m.Cancel(ctx, upload(id))).To(MatchError(ErrBinaryChanged))
			g.Expect(m.Launches()).To(Equal(launches), "no process was started")
			g.Expect(ran).NotTo(BeAnExistingFile(), "the swapped file ran")
			g.Expect(logs.String()).To(ContainSubstring("is not the binary itemops discovered"))
			g.Expect(m.pins.digest(filepath.Join(dir, "sample"))).To(Equal(pinned), "the pin stays")
		})

		// A VolumeSnapshotter v2 is initialised before its Progress: the
		// refusal must reach its caller as the changed binary it is, not as
		// an unreachable process that counts against the operation.
		It("a VolumeSnapshotter whose binary was swapped is refused as changed, not as unreachable", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			dir := pluginDir(t, "sample")
			m, _ := newManager(t, dir, 10*time.Second)
			ctx := context.Background()
			id := takeSnapshot(t, m, "pv-swapped", map[string]string{sim.AnnotationSize: "100Mi", sim.AnnotationSpeed: "1Mi"})
			_, err := m.Progress(ctx, snapshot(id))
			g.Expect(err).NotTo(HaveOccurred())

			ran := swap(t, filepath.Join(dir, "sample"))
			for _, pid := range m.pids() {
				g.Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
			}
			g.Eventually(m.pids, 5*time.Second).Should(BeEmpty())

			for range 2 { // the start that finds the change, and a call while it is remembered
				_, err = m.Progress(ctx, snapshot(id))
				g.Expect(err).To(MatchError(ErrBinaryChanged))
				g.Expect(IsRetryable(err)).To(BeFalse())
			}
			g.Expect(m.Cancel(ctx, snapshot(id))).To(MatchError(ErrBinaryChanged))
			g.Expect(ran).NotTo(BeAnExistingFile(), "the swapped file ran")
		})

		It("the version probe runs only the discovered binary", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			dir := pluginDir(t, "sample")
			m, _ := newManager(t, dir, 10*time.Second)
			path := filepath.Join(dir, "sample")

			cmd, release, err := m.Command(context.Background(), path, "--help")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cmd.Args[0]).To(Equal(path), "the program sees its own path")
			release()

			ran := swap(t, path)
			_, _, err = m.Command(context.Background(), path, "version")
			g.Expect(err).To(MatchError(ErrBinaryChanged))
			g.Expect(ran).NotTo(BeAnExistingFile())
		})

		It("a binary made writable by every user after discovery is refused", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			dir := t.TempDir()
			data, err := os.ReadFile(filepath.Join(binDir, "sample"))
			g.Expect(err).NotTo(HaveOccurred())
			path := filepath.Join(dir, "sample")
			g.Expect(os.WriteFile(path, data, 0o755)).To(Succeed())
			m, _ := newManager(t, dir, 10*time.Second)
			g.Expect(m.pins.digest(path)).NotTo(BeEmpty())
			g.Expect(os.Chmod(path, 0o757)).To(Succeed())
			launches := m.Launches()
			_, err = m.Progress(context.Background(), upload("x"))
			g.Expect(err).To(MatchError(ContainSubstring("writable by every user")))
			_, _, err = m.Command(context.Background(), path, "version")
			g.Expect(err).To(MatchError(ContainSubstring("writable by every user")))
			g.Expect(m.Launches()).To(Equal(launches))
		})

		// Under OpenShift's restricted-v2 an init container copies a plugin
		// as the user the platform assigned, with group 0; an image made
		// for it lets group 0 do what the user may (g=u, so 0775). Only a
		// file every user may write is refused: the copy is run.
		It("a copy made by a platform-assigned user with group 0, group-writable, is run", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			dir := t.TempDir()
			data, err := os.ReadFile(filepath.Join(binDir, "sample"))
			g.Expect(err).NotTo(HaveOccurred())
			sub := filepath.Join(dir, "vendor")
			g.Expect(os.Mkdir(sub, 0o775)).To(Succeed())
			path := filepath.Join(sub, "sample")
			g.Expect(os.WriteFile(path, data, 0o775)).To(Succeed())
			g.Expect(os.Chmod(path, 0o775)).To(Succeed()) // whatever the umask
			if os.Geteuid() == 0 {
				g.Expect(os.Chown(path, 1000650000, 0)).To(Succeed())
				g.Expect(os.Chown(sub, 1000650000, 0)).To(Succeed())
			}
			m, _ := newManager(t, dir, 10*time.Second)
			g.Expect(m.Registry().Problems()).To(BeEmpty())
			g.Expect(m.pins.digest(path)).NotTo(BeEmpty(), "discovery started the copy")
			launches := m.Launches()
			_, err = m.Progress(context.Background(), upload("x"))
			g.Expect(err).To(MatchError(ContainSubstring("operation ID x is invalid")), "the plugin itself answered")
			g.Expect(m.Launches()).To(BeNumerically(">", launches))
			cmd, release, err := m.Command(context.Background(), path, "version")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cmd.Args[0]).To(Equal(path))
			release()
		})
	})

	// TestPluginProcessesGetVelerosNamespaceAndArguments: a plugin process is
	// started as Velero starts it, with Velero's namespace as VELERO_NAMESPACE
	// and --namespace and then the velero server's arguments, whatever
	// VELERO_NAMESPACE itemops itself has.
	It("plugin processes get Velero's namespace and arguments", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		argsLog := filepath.Join(t.TempDir(), "launches")
		t.Setenv(sim.EnvArgsLog, argsLog)
		t.Setenv("VELERO_NAMESPACE", "not-this-one")
		m := NewManager(Options{Dir: pluginDir(t, "sample"), CallTimeout: 10 * time.Second, StartTimeout: startTimeout, Log: logr.Discard(),
			Namespace: "backup-system", Args: []string{"--features=EnableCSI", "--client-qps=7"}})
		m.Discover(context.Background())
		t.Cleanup(m.Close)
		startUpload(t, m, map[string]string{sim.AnnotationSize: "1Mi", sim.AnnotationSpeed: "1Mi"})

		raw, err := os.ReadFile(argsLog)
		g.Expect(err).NotTo(HaveOccurred())
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		g.Expect(lines).To(HaveLen(2), "discovery's process and the one that serves calls")
		for _, line := range lines {
			var launch sim.Launch
			g.Expect(json.Unmarshal([]byte(line), &launch)).To(Succeed())
			g.Expect(launch.Namespace).To(Equal("backup-system"))
			g.Expect(launch.Args).To(Equal([]string{"--namespace=backup-system", "--features=EnableCSI", "--client-qps=7"}))
		}
	})

	Describe("plugin arguments are Velero's command line", func() {
		for _, tc := range []struct {
			name, path, namespace string
			extra, want           []string
		}{
			{"a third-party binary", "/plugins/velero-plugin-for-aws", "velero", []string{"--log-level=debug"},
				[]string{"--namespace=velero", "--log-level=debug"}},
			{"velero serves its built-in plugins as run-plugins", "/plugins/velero", "backups", nil,
				[]string{"run-plugins", "--namespace=backups"}},
			{"no namespace, no flag", "/plugins/sample", "", []string{"--features=EnableCSI"}, []string{"--features=EnableCSI"}},
		} {
			It(tc.name, func() {
				t := GinkgoTB()
				NewWithT(t).Expect(pluginArgs(tc.path, tc.namespace, tc.extra)).To(Equal(tc.want))
			})
		}
	})
})
