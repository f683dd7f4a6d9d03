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
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hcplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/vmware-tanzu/velero/pkg/plugin/framework"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	protobiav2 "github.com/vmware-tanzu/velero/pkg/plugin/generated/backupitemaction/v2"
	protoriav2 "github.com/vmware-tanzu/velero/pkg/plugin/generated/restoreitemaction/v2"
)

// errClosed is returned once the Manager has been closed.
var errClosed = errors.New("plugin manager is shut down")

const (
	// stableAfter is how long a process must have run for its exit to count
	// as a one-off rather than part of a crash loop.
	stableAfter = time.Minute
	// maxBackoff bounds the wait between two starts of a crashing binary.
	maxBackoff = time.Minute
)

// restartBackoff is the wait before the next start after failures starts or
// early exits in a row: the first restart is immediate, then 1s, 2s, 4s… up
// to maxBackoff.
func restartBackoff(failures int) time.Duration {
	if failures <= 1 {
		return 0
	}
	d := time.Second
	for i := 2; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// grpcWindow is the flow-control window of a plugin connection and of
// each call on it.
const grpcWindow = 1 << 20

// connPlugin hands out the gRPC connection of a plugin process. Every kind a
// Velero plugin binary serves shares that one connection, so one dispense is
// enough, and calls go straight to Velero's generated stubs with a context.
type connPlugin struct {
	hcplugin.NetRPCUnsupportedPlugin
}

// GRPCServer implements hcplugin.GRPCPlugin; itemops only ever is the client.
func (connPlugin) GRPCServer(*hcplugin.GRPCBroker, *grpc.Server) error {
	return errors.New("itemops does not serve plugins")
}

// GRPCClient implements hcplugin.GRPCPlugin.
func (connPlugin) GRPCClient(_ context.Context, _ *hcplugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return conn, nil
}

// running is one live plugin process.
type running struct {
	client  *hcplugin.Client
	conn    *grpc.ClientConn
	pid     int
	started time.Time
}

func (r *running) alive() bool { return r != nil && !r.client.Exited() }

// RestartPending is the error of a call made while a plugin binary waits
// out its restart backoff: the plugin was not called, so the call says
// nothing about the operation it was for.
type RestartPending struct {
	// Binary is the plugin binary's path.
	Binary string
	// Exits counts the exits or failed starts in a row.
	Exits int
	// At is the earliest time of the next start.
	At  time.Time
	now time.Time
}

// Error implements error.
func (e *RestartPending) Error() string {
	return fmt.Sprintf("plugin binary %s exited or failed to start %d times in a row; next start in %s",
		e.Binary, e.Exits, e.At.Sub(e.now).Round(time.Millisecond))
}

// RestartAt reports whether err is a call refused because its plugin's
// process waits out its restart backoff, and when the next start is.
func RestartAt(err error) (time.Time, bool) {
	var pending *RestartPending
	if errors.As(err, &pending) {
		return pending.At, true
	}
	return time.Time{}, false
}

// launch is one start of a process that callers may wait for.
type launch struct {
	done chan struct{}
	r    *running
	err  error
}

// process is the one long-lived process of a plugin binary, shared by every caller.
type process struct {
	path string
	m    *Manager

	current atomic.Pointer[running]

	mu        sync.Mutex
	launching *launch
	failures  int
	notBefore time.Time
	// refused: the last start found the binary changed since discovery;
	// callers get that until the next start, not a mere backoff.
	refused error
	closed  bool
}

// conn returns the connection of a live process, starting one when there is
// none. It never waits past ctx.
func (p *process) conn(ctx context.Context) (*grpc.ClientConn, error) {
	if r := p.current.Load(); r.alive() {
		return r.conn, nil
	}
	l, err := p.launchOrJoin()
	if err != nil {
		return nil, err
	}
	select {
	case <-l.done:
		if l.err != nil {
			return nil, l.err
		}
		return l.r.conn, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for plugin binary %s to start: %w", p.path, ctx.Err())
	}
}

func (p *process) launchOrJoin() (*launch, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	if p.launching != nil {
		return p.launching, nil
	}
	now := p.m.clock.Now()
	if r := p.current.Load(); r != nil {
		if r.alive() {
			l := &launch{done: make(chan struct{}), r: r}
			close(l.done)
			return l, nil
		}
		// The process exited (crashed, was killed, or was OOM-killed):
		// release what is left of it and start over.
		r.client.Kill()
		p.current.Store(nil)
		if now.Sub(r.started) >= stableAfter {
			p.failures = 1
		} else {
			p.failures++
		}
		p.notBefore = now.Add(restartBackoff(p.failures))
		p.m.restarts.Add(1)
		if p.m.opts.OnRestart != nil {
			p.m.opts.OnRestart(filepath.Base(p.path))
		}
		p.m.log.Info("plugin process exited; restarting it", "binary", p.path,
			"ranFor", now.Sub(r.started).Round(time.Millisecond).String(), "exitsInARow", p.failures)
	}
	if now.Before(p.notBefore) && p.refused != nil {
		return nil, p.refused
	}
	if now.Before(p.notBefore) {
		return nil, &RestartPending{Binary: p.path, Exits: p.failures, At: p.notBefore, now: now}
	}
	l := &launch{done: make(chan struct{})}
	p.launching = l
	go p.run(l)
	return l, nil
}

func (p *process) run(l *launch) {
	r, err := p.m.start(p.path)
	if err == nil {
		p.m.createHandlers(p.path, r.conn)
	}
	p.mu.Lock()
	p.launching = nil
	if err == nil && p.closed {
		r.client.Kill()
		r, err = nil, errClosed
	}
	p.refused = nil
	if errors.Is(err, ErrBinaryChanged) {
		p.refused = err
	}
	if err != nil {
		p.failures++
		p.notBefore = p.m.clock.Now().Add(restartBackoff(p.failures))
		p.m.log.Error(err, "starting plugin process", "binary", p.path, "failuresInARow", p.failures)
	} else {
		p.current.Store(r)
	}
	l.r, l.err = r, err
	p.mu.Unlock()
	close(l.done)
}

// createHandlers makes a new process create the handler of every
// BackupItemAction v2 and RestoreItemAction v2 it serves, one at a time,
// before any other call reaches it. Velero's plugin server creates a
// plugin's handler on the first call naming it and keeps it in a map it
// does not lock (common.ServerMux.GetHandler): the first calls of itemops'
// workers, made at once to a new process, would write that map at once,
// and the Go runtime kills the process ("concurrent map writes"). Velero
// asks every action's AppliesTo, one at a time, before its other calls;
// so does this, to no effect but creating the handler. What goes wrong
// here (an initializer's error, a process that died) the operations' own
// calls report.
func (m *Manager) createHandlers(path string, conn *grpc.ClientConn) {
	// Callers wait for the start with their own call timeout: leave them half.
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.CallTimeout/2)
	defer cancel()
	for _, id := range m.registry.Load().servedBy(path) {
		var err error
		switch id.Kind {
		case common.PluginKindBackupItemActionV2:
			_, err = protobiav2.NewBackupItemActionClient(conn).AppliesTo(ctx,
				&protobiav2.BackupItemActionAppliesToRequest{Plugin: id.Name})
		case common.PluginKindRestoreItemActionV2:
			_, err = protoriav2.NewRestoreItemActionClient(conn).AppliesTo(ctx,
				&protoriav2.RestoreItemActionAppliesToRequest{Plugin: id.Name})
		default:
			continue // no call or a locked server (itemops' VolumeSnapshotter v2)
		}
		if ctx.Err() != nil {
			m.log.Error(ctx.Err(), "plugin process did not create its handlers in time; the first calls create the rest",
				"binary", path, "plugin", id.String())
			return
		}
		if err != nil {
			m.log.V(1).Info("plugin's AppliesTo failed while creating its handler", "binary", path,
				"plugin", id.String(), "error", err.Error())
		}
	}
}

// close kills the process, if any, and refuses new starts.
func (p *process) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if r := p.current.Swap(nil); r != nil {
		r.client.Kill()
	}
}

// namespaceEnv is the variable Velero's plugins (and its client factory) read
// Velero's namespace from.
const namespaceEnv = "VELERO_NAMESPACE"

// pluginArgs returns the command line of a plugin process, as Velero builds
// it (pkg/plugin/clientmgmt/process/client_builder.go): the velero binary
// serves its built-in plugins (the CSI actions among them) only as "velero
// run-plugins"; then come the server's own arguments, here Velero's
// namespace and the configured ones.
func pluginArgs(path, namespace string, extra []string) []string {
	var args []string
	if filepath.Base(path) == "velero" {
		args = append(args, "run-plugins")
	}
	if namespace != "" {
		args = append(args, "--namespace="+namespace)
	}
	return append(args, extra...)
}

// pluginEnv is itemops' environment with VELERO_NAMESPACE set to namespace,
// whatever itemops' own value.
func pluginEnv(namespace string) []string {
	env := os.Environ()
	if namespace == "" {
		return env
	}
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, namespaceEnv+"=") })
	return append(env, namespaceEnv+"="+namespace)
}

// startTimeout is how long a process may take to start (see Options).
func (m *Manager) startTimeout() time.Duration {
	if m.opts.StartTimeout > 0 {
		return m.opts.StartTimeout
	}
	return m.opts.CallTimeout
}

// start launches one process of the binary at path and connects to it.
func (m *Manager) start(path string) (*running, error) {
	binary, err := m.pins.open(path)
	if errors.Is(err, ErrBinaryChanged) {
		return nil, err // it names the file
	}
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	defer binary.Close()                                                          // the process has its own reference once started
	cmd := exec.Command(path, pluginArgs(path, m.opts.Namespace, m.opts.Args)...) //nolint:gosec // path comes from discovery in the plugin directory only
	runOpenFile(cmd, binary)
	cmd.Env = pluginEnv(m.opts.Namespace)
	dieWithParent(cmd)
	client := hcplugin.NewClient(&hcplugin.ClientConfig{
		HandshakeConfig:  framework.Handshake(),
		AllowedProtocols: []hcplugin.Protocol{hcplugin.ProtocolGRPC},
		Plugins:          map[string]hcplugin.Plugin{string(common.PluginKindPluginLister): connPlugin{}},
		Cmd:              cmd,
		// cmd.Env already holds the environment; go-plugin would append
		// itemops' own after it, and a second VELERO_NAMESPACE would win.
		SkipHostEnv:  true,
		Logger:       m.hclog,
		StartTimeout: m.startTimeout(),
		// Fixed flow-control windows: gRPC's dynamic ones ping the plugin
		// to measure the link as answers arrive, work for both processes
		// on every few calls. Calls and answers are small (a parent's JSON
		// at most); a megabyte is far more than all in flight at once.
		GRPCDialOptions: []grpc.DialOption{
			grpc.WithStaticStreamWindowSize(grpcWindow), grpc.WithStaticConnWindowSize(grpcWindow),
		},
	})
	m.launches.Add(1)
	protocol, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	raw, err := protocol.Dispense(string(common.PluginKindPluginLister))
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("connecting to %s: %w", path, err)
	}
	conn, ok := raw.(*grpc.ClientConn)
	if !ok {
		client.Kill()
		return nil, fmt.Errorf("connecting to %s: got %T, not a gRPC connection", path, raw)
	}
	return &running{client: client, conn: conn, pid: cmd.Process.Pid, started: m.clock.Now()}, nil
}
