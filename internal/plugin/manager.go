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
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	hclog "github.com/hashicorp/go-hclog"
	"k8s.io/utils/clock"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// Operation identifies one asynchronous operation to the plugin that started it.
type Operation struct {
	// Kind of the plugin that started the operation.
	Kind itemopsv1alpha1.PluginKind
	// Plugin is the plugin's registered name.
	Plugin string
	// ID is the operation ID the plugin returned.
	ID string
	// Backup is passed to BackupItemAction plugins, as Velero does.
	Backup *velerov1api.Backup
	// Restore is passed to RestoreItemAction plugins, as Velero does.
	Restore *velerov1api.Restore
	// SnapshotConfig initialises VolumeSnapshotter plugins before they are
	// called: the VolumeSnapshotLocation's config, as Velero passes it.
	SnapshotConfig map[string]string
}

// Client reads the progress of operations and cancels them. Every call has a
// deadline; failures are *Error values whose kind errors.Is can test.
type Client interface {
	// Progress returns what the plugin reports. When the plugin reports that
	// the operation failed, the progress comes back with an ErrOperationFailed error.
	Progress(ctx context.Context, op Operation) (velero.OperationProgress, error)
	// Cancel asks the plugin to stop the operation. A plugin that cannot
	// cancel (a v1 plugin, or one that ignores the request) returns nil.
	Cancel(ctx context.Context, op Operation) error
}

var _ Client = (*Manager)(nil)

// Options configure a Manager.
type Options struct {
	// Dir holds the plugin binaries.
	Dir string
	// CallTimeout is the deadline of every call, including the wait for the
	// plugin process to start.
	CallTimeout time.Duration
	// StartTimeout is how long a plugin process may take to start and
	// answer the handshake; CallTimeout when zero. A call waits for a start
	// no longer than its own deadline, while the start goes on for the
	// calls after it.
	StartTimeout time.Duration
	// Log receives the manager's messages and the plugins' own log lines.
	Log logr.Logger
	// Clock decides restart backoff; the real clock when nil.
	Clock clock.Clock
	// OnRestart, when set, is told the binary of every process found dead
	// and started again.
	OnRestart func(binary string)
	// OnDiscovered, when set, is given the plugins of every registry
	// discovery makes: at start, and when a binary that did not answer
	// then answers later.
	OnDiscovered func(plugins []Discovered)
	// Namespace is Velero's namespace. Every plugin process gets it as
	// VELERO_NAMESPACE and --namespace, as Velero starts its plugins: plugins
	// find their own objects (DataUploads, for one) through it.
	Namespace string
	// Args are added to every plugin process's command line after
	// --namespace: the velero server's own arguments (--features,
	// --log-level, --client-qps…), which Velero passes to every plugin.
	Args []string
}

// Manager discovers plugins, keeps one process per plugin binary and calls
// the plugins. It is safe for concurrent use.
type Manager struct {
	opts  Options
	log   logr.Logger
	hclog hclog.Logger
	clock clock.Clock

	registry atomic.Pointer[Registry]
	// relistMu serialises asking unanswered binaries again; relisted is when
	// that was last done, relistWait how long until the next time.
	relistMu   sync.Mutex
	relisted   time.Time
	relistWait time.Duration

	mu        sync.Mutex
	processes map[string]*process
	closed    bool

	storeLocksMu     sync.Mutex
	storeLocks       map[string]chan struct{}
	snapshotterSlots map[slotKey]*snapshotterSlot

	launches atomic.Int64
	restarts atomic.Int64
	// pins: every binary runs only as discovery found it.
	pins pins

	parents encodedParents
}

// NewManager returns a Manager with an empty registry; call Discover before use.
func NewManager(opts Options) *Manager {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	m := &Manager{
		opts:      opts,
		log:       opts.Log,
		hclog:     newHCLogger(opts.Log),
		clock:     opts.Clock,
		processes: map[string]*process{},
	}
	m.registry.Store(&Registry{dir: opts.Dir, commands: map[ID]string{}, conflicts: map[ID][]string{}})
	return m
}

// Registry returns the result of the last discovery.
func (m *Manager) Registry() *Registry { return m.registry.Load() }

// Launches counts the plugin processes started so far, discovery included.
func (m *Manager) Launches() int64 { return m.launches.Load() }

// Restarts counts the plugin processes found dead and started again.
func (m *Manager) Restarts() int64 { return m.restarts.Load() }

// Start implements manager.Runnable: it holds the plugin processes until ctx
// ends, then kills every one of them.
func (m *Manager) Start(ctx context.Context) error {
	<-ctx.Done()
	m.Close()
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: a standby
// replica needs no plugin processes, but must still kill them on shutdown.
func (m *Manager) NeedLeaderElection() bool { return false }

// Close kills every plugin process; later calls fail.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	processes := m.processes
	m.processes = map[string]*process{}
	m.mu.Unlock()
	for _, p := range processes {
		p.close()
	}
}

// pids returns the process IDs of the live plugin processes, by binary.
func (m *Manager) pids() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for path, p := range m.processes {
		if r := p.current.Load(); r.alive() {
			out[path] = r.pid
		}
	}
	return out
}

// process returns the long-lived process of the binary at path.
func (m *Manager) process(path string) (*process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	p, ok := m.processes[path]
	if !ok {
		p = &process{path: path, m: m}
		m.processes[path] = p
	}
	return p, nil
}
