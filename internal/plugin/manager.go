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
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	proto "github.com/vmware-tanzu/velero/pkg/plugin/generated"
	protobiav2 "github.com/vmware-tanzu/velero/pkg/plugin/generated/backupitemaction/v2"
	protoriav2 "github.com/vmware-tanzu/velero/pkg/plugin/generated/restoreitemaction/v2"
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

// v2Kinds maps an operation's plugin kind to the Velero kinds that can report
// progress (v2) and the older one that cannot (v1).
func v2Kinds(kind itemopsv1alpha1.PluginKind) (v2, v1 common.PluginKind, ok bool) {
	switch kind {
	case itemopsv1alpha1.PluginKindBackupItemAction:
		return common.PluginKindBackupItemActionV2, common.PluginKindBackupItemAction, true
	case itemopsv1alpha1.PluginKindRestoreItemAction:
		return common.PluginKindRestoreItemActionV2, common.PluginKindRestoreItemAction, true
	}
	return "", "", false
}

// errV1 marks a call that the v1 adapter answers without the plugin.
var errV1 = errors.New("v1 plugin")

// connect finds the binary serving the operation's plugin and connects to its
// process. It returns errV1 for a plugin registered only as v1.
func (m *Manager) connect(ctx context.Context, call string, op Operation) (*grpc.ClientConn, error) {
	fail := func(kind, err error) error { return &Error{Kind: kind, Plugin: op.Plugin, Call: call, Err: err} }
	v2, v1, ok := v2Kinds(op.Kind)
	if !ok {
		return nil, fail(ErrNotSupported, fmt.Errorf("no client for %s plugins", op.Kind))
	}
	reg := m.lookup(ctx, ID{Kind: v2, Name: op.Plugin}, ID{Kind: v1, Name: op.Plugin})
	path, err := reg.Command(ID{Kind: v2, Name: op.Plugin})
	if err != nil {
		if reg.Has(ID{Kind: v1, Name: op.Plugin}) {
			return nil, errV1
		}
		return nil, fail(ErrPluginNotFound, err)
	}
	p, err := m.process(path)
	if err != nil {
		return nil, fail(ErrTransport, err)
	}
	conn, err := p.conn(ctx)
	if err != nil {
		return nil, fail(startFailure(err), err)
	}
	return conn, nil
}

// Progress implements Client.
func (m *Manager) Progress(ctx context.Context, op Operation) (velero.OperationProgress, error) {
	const call = "Progress"
	if op.Kind == itemopsv1alpha1.PluginKindVolumeSnapshotter {
		return m.snapshotProgress(ctx, op)
	}
	ctx, cancel := context.WithTimeout(ctx, m.opts.CallTimeout)
	defer cancel()
	conn, err := m.connect(ctx, call, op)
	if errors.Is(err, errV1) {
		return velero.OperationProgress{}, &Error{Kind: ErrNotSupported, Plugin: op.Plugin, Call: call,
			Err: fmt.Errorf("%s is a v1 %s, which has no asynchronous operations", op.Plugin, op.Kind)}
	}
	if err != nil {
		return velero.OperationProgress{}, err
	}

	var progress *proto.OperationProgress
	switch op.Kind {
	case itemopsv1alpha1.PluginKindBackupItemAction:
		backup, err := parentJSON(&m.parents, op.Backup)
		if err != nil {
			return velero.OperationProgress{}, &Error{Kind: ErrOperationFailed, Plugin: op.Plugin, Call: call, Err: err}
		}
		res, err := protobiav2.NewBackupItemActionClient(conn).Progress(ctx, &protobiav2.BackupItemActionProgressRequest{
			Plugin: op.Plugin, OperationID: op.ID, Backup: backup,
		})
		if err != nil {
			return velero.OperationProgress{}, classify(call, op.Plugin, op.ID, err)
		}
		progress = res.GetProgress()
	default:
		restore, err := parentJSON(&m.parents, op.Restore)
		if err != nil {
			return velero.OperationProgress{}, &Error{Kind: ErrOperationFailed, Plugin: op.Plugin, Call: call, Err: err}
		}
		res, err := protoriav2.NewRestoreItemActionClient(conn).Progress(ctx, &protoriav2.RestoreItemActionProgressRequest{
			Plugin: op.Plugin, OperationID: op.ID, Restore: restore,
		})
		if err != nil {
			return velero.OperationProgress{}, classify(call, op.Plugin, op.ID, err)
		}
		progress = res.GetProgress()
	}
	if progress == nil {
		return velero.OperationProgress{}, &Error{Kind: ErrTransport, Plugin: op.Plugin, Call: call,
			Err: errors.New("the plugin answered without a progress")}
	}
	out := fromProto(progress)
	if out.Err != "" {
		return out, &Error{Kind: ErrOperationFailed, Plugin: op.Plugin, Call: call, Err: errors.New(out.Err)}
	}
	return out, nil
}

// Cancel implements Client.
func (m *Manager) Cancel(ctx context.Context, op Operation) error {
	const call = "Cancel"
	if op.Kind == itemopsv1alpha1.PluginKindVolumeSnapshotter {
		return m.snapshotCancel(ctx, op)
	}
	ctx, cancel := context.WithTimeout(ctx, m.opts.CallTimeout)
	defer cancel()
	conn, err := m.connect(ctx, call, op)
	if errors.Is(err, errV1) {
		return nil // a v1 plugin has nothing running to cancel
	}
	if err != nil {
		return err
	}
	switch op.Kind {
	case itemopsv1alpha1.PluginKindBackupItemAction:
		backup, err := parentJSON(&m.parents, op.Backup)
		if err != nil {
			return &Error{Kind: ErrOperationFailed, Plugin: op.Plugin, Call: call, Err: err}
		}
		_, err = protobiav2.NewBackupItemActionClient(conn).Cancel(ctx, &protobiav2.BackupItemActionCancelRequest{
			Plugin: op.Plugin, OperationID: op.ID, Backup: backup,
		})
		if err != nil {
			return classify(call, op.Plugin, op.ID, err)
		}
	default:
		restore, err := parentJSON(&m.parents, op.Restore)
		if err != nil {
			return &Error{Kind: ErrOperationFailed, Plugin: op.Plugin, Call: call, Err: err}
		}
		_, err = protoriav2.NewRestoreItemActionClient(conn).Cancel(ctx, &protoriav2.RestoreItemActionCancelRequest{
			Plugin: op.Plugin, OperationID: op.ID, Restore: restore,
		})
		if err != nil {
			return classify(call, op.Plugin, op.ID, err)
		}
	}
	return nil
}

// AreAdditionalItemsReady asks a RestoreItemAction v2 plugin whether the
// additional items it returned from Execute are ready. A v1 plugin has none
// to wait for, so it answers true.
func (m *Manager) AreAdditionalItemsReady(ctx context.Context, pluginName string, restore *velerov1api.Restore,
	items []velero.ResourceIdentifier) (bool, error) {
	const call = "AreAdditionalItemsReady"
	ctx, cancel := context.WithTimeout(ctx, m.opts.CallTimeout)
	defer cancel()
	conn, err := m.connect(ctx, call, Operation{Kind: itemopsv1alpha1.PluginKindRestoreItemAction, Plugin: pluginName})
	if errors.Is(err, errV1) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	restoreJSON, err := parentJSON(&m.parents, restore)
	if err != nil {
		return false, &Error{Kind: ErrOperationFailed, Plugin: pluginName, Call: call, Err: err}
	}
	req := &protoriav2.RestoreItemActionItemsReadyRequest{Plugin: pluginName, Restore: restoreJSON}
	for _, item := range items {
		req.AdditionalItems = append(req.AdditionalItems, &proto.ResourceIdentifier{
			Group: item.Group, Resource: item.Resource, Namespace: item.Namespace, Name: item.Name,
		})
	}
	res, err := protoriav2.NewRestoreItemActionClient(conn).AreAdditionalItemsReady(ctx, req)
	if err != nil {
		return false, classify(call, pluginName, "", err)
	}
	return res.GetReady(), nil
}

// parentJSON encodes the Backup or Restore the way Velero sends it to
// plugins; a nil parent is sent as an empty one. Every call of every
// operation sends its parent, whose encoding changes only with its
// resourceVersion: it is encoded once per version (cache).
func parentJSON[T any, P interface {
	*T
	metav1.Object
}](cache *encodedParents, parent P) ([]byte, error) {
	if parent == nil {
		parent = new(T)
	}
	uid, version := parent.GetUID(), parent.GetResourceVersion()
	if b, ok := cache.get(uid, version); ok {
		return b, nil
	}
	b, err := json.Marshal(parent)
	if err != nil {
		return nil, fmt.Errorf("encoding the parent for the plugin: %w", err)
	}
	cache.put(uid, version, b)
	return b, nil
}

// maxEncodedParents bounds the parents whose encoding is kept; past it the
// cache starts again empty. Parents in flight at once number far fewer.
const maxEncodedParents = 4096

// encodedParents keeps the last encoding of each parent, by UID. The bytes
// are shared by every call that sends them and never written to.
type encodedParents struct {
	mu sync.Mutex
	m  map[types.UID]encodedParent
}

type encodedParent struct {
	version string
	json    []byte
}

// get returns the encoding of this version of a parent, if kept. A parent
// not read from the API server (no UID or version) is never kept.
func (c *encodedParents) get(uid types.UID, version string) ([]byte, bool) {
	if uid == "" || version == "" {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[uid]
	return e.json, ok && e.version == version
}

func (c *encodedParents) put(uid types.UID, version string, b []byte) {
	if uid == "" || version == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxEncodedParents {
		c.m = map[types.UID]encodedParent{}
	}
	c.m[uid] = encodedParent{version: version, json: b}
}

// fromProto converts the wire form, leaving unset timestamps zero rather
// than the Unix epoch. So are timestamps outside years 1 to 9999, which a
// plugin can send but no Kubernetes object can hold: written into a status,
// the API server would refuse every write of the operation.
func fromProto(p *proto.OperationProgress) velero.OperationProgress {
	out := velero.OperationProgress{
		Completed:      p.GetCompleted(),
		Err:            p.GetErr(),
		NCompleted:     p.GetNCompleted(),
		NTotal:         p.GetNTotal(),
		OperationUnits: p.GetOperationUnits(),
		Description:    p.GetDescription(),
	}
	if p.GetStarted().IsValid() {
		out.Started = p.GetStarted().AsTime()
	}
	if p.GetUpdated().IsValid() {
		out.Updated = p.GetUpdated().AsTime()
	}
	return out
}
