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
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	proto "github.com/vmware-tanzu/velero/pkg/plugin/generated"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	protovsv2 "github.com/itemops/itemops/pkg/plugin/generated/volumesnapshotter/v2"
	vsv2 "github.com/itemops/itemops/pkg/plugin/velero/volumesnapshotter/v2"
)

// VolumeSnapshotter is a VolumeSnapshotter v2 plugin as itemops calls it:
// Velero's VolumeSnapshotter plus Progress and Cancel, every call bound to a
// context and to the plugin call timeout. A plugin process holds one
// instance per name, configured by the last Init, for all its callers.
type VolumeSnapshotter interface {
	Init(ctx context.Context, config map[string]string) error
	CreateVolumeFromSnapshot(ctx context.Context, snapshotID, volumeType, volumeAZ string, iops *int64) (string, error)
	GetVolumeInfo(ctx context.Context, volumeID, volumeAZ string) (string, *int64, error)
	CreateSnapshot(ctx context.Context, volumeID, volumeAZ string, tags map[string]string) (string, error)
	DeleteSnapshot(ctx context.Context, snapshotID string) error
	GetVolumeID(ctx context.Context, pv runtime.Unstructured) (string, error)
	SetVolumeID(ctx context.Context, pv runtime.Unstructured, volumeID string) (runtime.Unstructured, error)
	// Progress reports how far the snapshot's data has been copied to
	// durable storage. The v1 adapter reports every snapshot completed.
	Progress(ctx context.Context, snapshotID string) (velero.OperationProgress, error)
	// Cancel stops the copy. The v1 adapter does nothing.
	Cancel(ctx context.Context, snapshotID string) error
}

// VolumeSnapshotter returns a client of the VolumeSnapshotter plugin name:
// the VolumeSnapshotter v2 when a binary serves one, else the v1
// VolumeSnapshotter of that name through the v1 adapter. The process is
// started, and restarted after a crash, by the calls themselves.
func (m *Manager) VolumeSnapshotter(name string) (VolumeSnapshotter, error) {
	vs, _, err := m.volumeSnapshotter(context.Background(), name, "VolumeSnapshotter")
	return vs, err
}

// volumeSnapshotter resolves name and also returns the binary serving it.
func (m *Manager) volumeSnapshotter(ctx context.Context, name, call string) (*volumeSnapshotter, string, error) {
	reg := m.lookup(ctx, ID{Kind: vsv2.PluginKind, Name: name}, ID{Kind: common.PluginKindVolumeSnapshotter, Name: name})
	v1 := false
	path, err := reg.Command(ID{Kind: vsv2.PluginKind, Name: name})
	if err != nil {
		var v1err error
		path, v1err = reg.Command(ID{Kind: common.PluginKindVolumeSnapshotter, Name: name})
		if v1err != nil {
			return nil, "", &Error{Kind: ErrPluginNotFound, Plugin: name, Call: call, Err: err}
		}
		v1 = true
	}
	p, err := m.process(path)
	if err != nil {
		return nil, "", &Error{Kind: ErrTransport, Plugin: name, Call: call, Err: err}
	}
	return &volumeSnapshotter{process: p, name: name, v1: v1, timeout: m.opts.CallTimeout}, path, nil
}

// volumeSnapshotter calls a v2 plugin, or a v1 plugin as the v1 adapter.
type volumeSnapshotter struct {
	process *process
	name    string
	v1      bool
	timeout time.Duration
}

var _ VolumeSnapshotter = (*volumeSnapshotter)(nil)

// v1Methods are the calls the v1 and v2 services share; both generated
// clients have them with the same messages.
type v1Methods interface {
	Init(ctx context.Context, in *proto.VolumeSnapshotterInitRequest, opts ...grpc.CallOption) (*proto.Empty, error)
	CreateVolumeFromSnapshot(ctx context.Context, in *proto.CreateVolumeRequest, opts ...grpc.CallOption) (*proto.CreateVolumeResponse, error)
	GetVolumeInfo(ctx context.Context, in *proto.GetVolumeInfoRequest, opts ...grpc.CallOption) (*proto.GetVolumeInfoResponse, error)
	CreateSnapshot(ctx context.Context, in *proto.CreateSnapshotRequest, opts ...grpc.CallOption) (*proto.CreateSnapshotResponse, error)
	DeleteSnapshot(ctx context.Context, in *proto.DeleteSnapshotRequest, opts ...grpc.CallOption) (*proto.Empty, error)
	GetVolumeID(ctx context.Context, in *proto.GetVolumeIDRequest, opts ...grpc.CallOption) (*proto.GetVolumeIDResponse, error)
	SetVolumeID(ctx context.Context, in *proto.SetVolumeIDRequest, opts ...grpc.CallOption) (*proto.SetVolumeIDResponse, error)
}

var (
	_ v1Methods = proto.NewVolumeSnapshotterClient(nil)
	_ v1Methods = protovsv2.NewVolumeSnapshotterClient(nil)
)

// conn prepares one call: its deadline and the connection of a live process.
func (s *volumeSnapshotter) conn(ctx context.Context, call string) (context.Context, context.CancelFunc, *grpc.ClientConn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	conn, err := s.process.conn(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, &Error{Kind: startFailure(err), Plugin: s.name, Call: call, Err: err}
	}
	return ctx, cancel, conn, nil
}

// shared prepares a call of the methods both versions have.
func (s *volumeSnapshotter) shared(ctx context.Context, call string) (context.Context, context.CancelFunc, v1Methods, error) {
	ctx, cancel, conn, err := s.conn(ctx, call)
	if err != nil {
		return nil, nil, nil, err
	}
	if s.v1 {
		return ctx, cancel, proto.NewVolumeSnapshotterClient(conn), nil
	}
	return ctx, cancel, protovsv2.NewVolumeSnapshotterClient(conn), nil
}

func (s *volumeSnapshotter) Init(ctx context.Context, config map[string]string) error {
	ctx, cancel, c, err := s.shared(ctx, "Init")
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := c.Init(ctx, &proto.VolumeSnapshotterInitRequest{Plugin: s.name, Config: config}); err != nil {
		return classify("Init", s.name, "", err)
	}
	return nil
}

func (s *volumeSnapshotter) CreateVolumeFromSnapshot(ctx context.Context, snapshotID, volumeType, volumeAZ string, iops *int64) (string, error) {
	ctx, cancel, c, err := s.shared(ctx, "CreateVolumeFromSnapshot")
	if err != nil {
		return "", err
	}
	defer cancel()
	req := &proto.CreateVolumeRequest{Plugin: s.name, SnapshotID: snapshotID, VolumeType: volumeType, VolumeAZ: volumeAZ}
	if iops != nil {
		req.Iops = *iops
	}
	res, err := c.CreateVolumeFromSnapshot(ctx, req)
	if err != nil {
		return "", classify("CreateVolumeFromSnapshot", s.name, snapshotID, err)
	}
	return res.GetVolumeID(), nil
}

func (s *volumeSnapshotter) GetVolumeInfo(ctx context.Context, volumeID, volumeAZ string) (string, *int64, error) {
	ctx, cancel, c, err := s.shared(ctx, "GetVolumeInfo")
	if err != nil {
		return "", nil, err
	}
	defer cancel()
	res, err := c.GetVolumeInfo(ctx, &proto.GetVolumeInfoRequest{Plugin: s.name, VolumeID: volumeID, VolumeAZ: volumeAZ})
	if err != nil {
		return "", nil, classify("GetVolumeInfo", s.name, "", err)
	}
	var iops *int64
	if res.GetIops() != 0 {
		v := res.GetIops()
		iops = &v
	}
	return res.GetVolumeType(), iops, nil
}

func (s *volumeSnapshotter) CreateSnapshot(ctx context.Context, volumeID, volumeAZ string, tags map[string]string) (string, error) {
	ctx, cancel, c, err := s.shared(ctx, "CreateSnapshot")
	if err != nil {
		return "", err
	}
	defer cancel()
	res, err := c.CreateSnapshot(ctx, &proto.CreateSnapshotRequest{Plugin: s.name, VolumeID: volumeID, VolumeAZ: volumeAZ, Tags: tags})
	if err != nil {
		return "", classify("CreateSnapshot", s.name, "", err)
	}
	return res.GetSnapshotID(), nil
}

func (s *volumeSnapshotter) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	ctx, cancel, c, err := s.shared(ctx, "DeleteSnapshot")
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := c.DeleteSnapshot(ctx, &proto.DeleteSnapshotRequest{Plugin: s.name, SnapshotID: snapshotID}); err != nil {
		return classify("DeleteSnapshot", s.name, snapshotID, err)
	}
	return nil
}

func (s *volumeSnapshotter) GetVolumeID(ctx context.Context, pv runtime.Unstructured) (string, error) {
	b, err := json.Marshal(pv.UnstructuredContent())
	if err != nil {
		return "", fmt.Errorf("encoding the persistent volume: %w", err)
	}
	ctx, cancel, c, err := s.shared(ctx, "GetVolumeID")
	if err != nil {
		return "", err
	}
	defer cancel()
	res, err := c.GetVolumeID(ctx, &proto.GetVolumeIDRequest{Plugin: s.name, PersistentVolume: b})
	if err != nil {
		return "", classify("GetVolumeID", s.name, "", err)
	}
	return res.GetVolumeID(), nil
}

func (s *volumeSnapshotter) SetVolumeID(ctx context.Context, pv runtime.Unstructured, volumeID string) (runtime.Unstructured, error) {
	b, err := json.Marshal(pv.UnstructuredContent())
	if err != nil {
		return nil, fmt.Errorf("encoding the persistent volume: %w", err)
	}
	ctx, cancel, c, err := s.shared(ctx, "SetVolumeID")
	if err != nil {
		return nil, err
	}
	defer cancel()
	res, err := c.SetVolumeID(ctx, &proto.SetVolumeIDRequest{Plugin: s.name, PersistentVolume: b, VolumeID: volumeID})
	if err != nil {
		return nil, classify("SetVolumeID", s.name, "", err)
	}
	var updated unstructured.Unstructured
	if err := json.Unmarshal(res.GetPersistentVolume(), &updated.Object); err != nil {
		return nil, &Error{Kind: ErrOperationFailed, Plugin: s.name, Call: "SetVolumeID",
			Err: fmt.Errorf("decoding the persistent volume the plugin returned: %w", err)}
	}
	return &updated, nil
}

// Progress implements VolumeSnapshotter. The v1 adapter answers without the
// plugin: a v1 snapshot is durable, as far as anyone can tell, when
// CreateSnapshot returns.
func (s *volumeSnapshotter) Progress(ctx context.Context, snapshotID string) (velero.OperationProgress, error) {
	const call = "Progress"
	if s.v1 {
		return velero.OperationProgress{Completed: true}, nil
	}
	ctx, cancel, conn, err := s.conn(ctx, call)
	if err != nil {
		return velero.OperationProgress{}, err
	}
	defer cancel()
	res, err := protovsv2.NewVolumeSnapshotterClient(conn).Progress(ctx,
		&protovsv2.VolumeSnapshotterProgressRequest{Plugin: s.name, SnapshotID: snapshotID})
	if err != nil {
		return velero.OperationProgress{}, classify(call, s.name, snapshotID, err)
	}
	if res.GetProgress() == nil {
		return velero.OperationProgress{}, &Error{Kind: ErrTransport, Plugin: s.name, Call: call,
			Err: errors.New("the plugin answered without a progress")}
	}
	out := fromProto(res.GetProgress())
	if out.Err != "" {
		return out, &Error{Kind: ErrOperationFailed, Plugin: s.name, Call: call, Err: errors.New(out.Err)}
	}
	return out, nil
}

// Cancel implements VolumeSnapshotter; the v1 adapter has nothing to cancel.
func (s *volumeSnapshotter) Cancel(ctx context.Context, snapshotID string) error {
	const call = "Cancel"
	if s.v1 {
		return nil
	}
	ctx, cancel, conn, err := s.conn(ctx, call)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := protovsv2.NewVolumeSnapshotterClient(conn).Cancel(ctx,
		&protovsv2.VolumeSnapshotterCancelRequest{Plugin: s.name, OperationID: snapshotID}); err != nil {
		return classify(call, s.name, snapshotID, err)
	}
	return nil
}

// snapshotterSlot is what one process's instance of a VolumeSnapshotter
// name was last initialised with. Calls with that configuration share the
// instance; a call with another one waits for them, then re-initialises it.
type snapshotterSlot struct {
	mu     sync.RWMutex
	config [sha256.Size]byte
	conn   *grpc.ClientConn // the process the Init reached; another one needs Init again
}

// slotKey is a plugin name in one binary.
type slotKey struct{ path, name string }

// snapshotterSlot returns the slot of the name in the binary at path.
func (m *Manager) snapshotterSlot(path, name string) *snapshotterSlot {
	m.storeLocksMu.Lock()
	defer m.storeLocksMu.Unlock()
	if m.snapshotterSlots == nil {
		m.snapshotterSlots = map[slotKey]*snapshotterSlot{}
	}
	key := slotKey{path: path, name: name}
	slot, ok := m.snapshotterSlots[key]
	if !ok {
		slot = &snapshotterSlot{}
		m.snapshotterSlots[key] = slot
	}
	return slot
}

// configKey is a fingerprint of a configuration that no order of map
// iteration changes.
func configKey(config map[string]string) [sha256.Size]byte {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(config)) {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(config[k]), config[k])
	}
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}

// withSnapshotter runs fn on the v2 VolumeSnapshotter name initialised
// with config, initialising it only when its process has not seen config.
func (m *Manager) withSnapshotter(ctx context.Context, call, name string, config map[string]string,
	fn func(VolumeSnapshotter) error) error {
	vs, path, err := m.volumeSnapshotter(ctx, name, call)
	if err != nil {
		return err
	}
	if vs.v1 {
		return fn(vs) // the adapter's Progress and Cancel need no configured plugin
	}
	connCtx, cancel := context.WithTimeout(ctx, m.opts.CallTimeout)
	defer cancel()
	conn, err := vs.process.conn(connCtx)
	if err != nil {
		return &Error{Kind: startFailure(err), Plugin: name, Call: call, Err: err}
	}
	slot := m.snapshotterSlot(path, name)
	key := configKey(config)

	slot.mu.RLock()
	if slot.conn == conn && slot.config == key {
		defer slot.mu.RUnlock()
		return fn(vs)
	}
	slot.mu.RUnlock()

	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.conn != conn || slot.config != key {
		if err := vs.Init(ctx, config); err != nil {
			slot.conn = nil
			return err
		}
		slot.conn, slot.config = conn, key
	}
	return fn(vs)
}

// snapshotProgress is Progress for VolumeSnapshotter operations.
func (m *Manager) snapshotProgress(ctx context.Context, op Operation) (velero.OperationProgress, error) {
	var out velero.OperationProgress
	err := m.withSnapshotter(ctx, "Progress", op.Plugin, op.SnapshotConfig, func(vs VolumeSnapshotter) error {
		var err error
		out, err = vs.Progress(ctx, op.ID)
		return err
	})
	return out, err
}

// snapshotCancel is Cancel for VolumeSnapshotter operations.
func (m *Manager) snapshotCancel(ctx context.Context, op Operation) error {
	return m.withSnapshotter(ctx, "Cancel", op.Plugin, op.SnapshotConfig, func(vs VolumeSnapshotter) error {
		return vs.Cancel(ctx, op.ID)
	})
}
