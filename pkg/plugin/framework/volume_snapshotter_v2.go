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

package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	proto "github.com/vmware-tanzu/velero/pkg/plugin/generated"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	protovsv2 "github.com/itemops/itemops/pkg/plugin/generated/volumesnapshotter/v2"
	vsv2 "github.com/itemops/itemops/pkg/plugin/velero/volumesnapshotter/v2"
)

// VolumeSnapshotterV2Plugin is the go-plugin plugin of the
// VolumeSnapshotterV2 kind: it serves the registered VolumeSnapshotter v2
// implementations over gRPC.
type VolumeSnapshotterV2Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	*common.PluginBase
	mu sync.Mutex // ServerMux is not safe for concurrent use
}

var _ plugin.GRPCPlugin = (*VolumeSnapshotterV2Plugin)(nil)

// NewVolumeSnapshotterV2Plugin returns a plugin with nothing registered.
func NewVolumeSnapshotterV2Plugin(options ...common.PluginOption) *VolumeSnapshotterV2Plugin {
	return &VolumeSnapshotterV2Plugin{PluginBase: common.NewPluginBase(options...)}
}

// Register registers a VolumeSnapshotter v2 under name.
func (p *VolumeSnapshotterV2Plugin) Register(name string, initializer common.HandlerInitializer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ServerMux.Register(name, initializer)
}

// Names returns the registered names, sorted.
func (p *VolumeSnapshotterV2Plugin) Names() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ServerMux.Names()
}

// GRPCServer implements plugin.GRPCPlugin.
func (p *VolumeSnapshotterV2Plugin) GRPCServer(_ *plugin.GRPCBroker, server *grpc.Server) error {
	protovsv2.RegisterVolumeSnapshotterServer(server, &VolumeSnapshotterV2GRPCServer{plugin: p})
	return nil
}

// GRPCClient implements plugin.GRPCPlugin with the generated client.
func (p *VolumeSnapshotterV2Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return protovsv2.NewVolumeSnapshotterClient(conn), nil
}

func (p *VolumeSnapshotterV2Plugin) impl(name string) (vsv2.VolumeSnapshotter, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	handler, err := p.ServerMux.GetHandler(name)
	if err != nil {
		return nil, err
	}
	impl, ok := handler.(vsv2.VolumeSnapshotter)
	if !ok {
		return nil, fmt.Errorf("%s: %T is not a VolumeSnapshotter v2", name, handler)
	}
	return impl, nil
}

// VolumeSnapshotterV2GRPCServer answers the VolumeSnapshotter v2 service
// with the registered implementations; errors and panics reach the caller
// the way Velero's servers send them.
type VolumeSnapshotterV2GRPCServer struct {
	protovsv2.UnimplementedVolumeSnapshotterServer
	plugin *VolumeSnapshotterV2Plugin
}

// serve runs fn on the plugin named name, turning its error or panic into
// the gRPC error Velero's clients decode.
func serve[T any](s *VolumeSnapshotterV2GRPCServer, name string, fn func(vsv2.VolumeSnapshotter) (T, error)) (out T, err error) {
	defer func() {
		if recovered := common.HandlePanic(recover()); recovered != nil {
			err = recovered
		}
	}()
	impl, err := s.plugin.impl(name)
	if err != nil {
		return out, common.NewGRPCError(err)
	}
	out, err = fn(impl)
	if err != nil {
		return out, common.NewGRPCError(err)
	}
	return out, nil
}

// Init implements the service.
func (s *VolumeSnapshotterV2GRPCServer) Init(_ context.Context, req *proto.VolumeSnapshotterInitRequest) (*proto.Empty, error) {
	return serve(s, req.GetPlugin(), func(impl vsv2.VolumeSnapshotter) (*proto.Empty, error) {
		return &proto.Empty{}, impl.Init(req.GetConfig())
	})
}

// CreateVolumeFromSnapshot implements the service.
func (s *VolumeSnapshotterV2GRPCServer) CreateVolumeFromSnapshot(_ context.Context, req *proto.CreateVolumeRequest) (*proto.CreateVolumeResponse, error) {
	return serve(s, req.GetPlugin(), func(impl vsv2.VolumeSnapshotter) (*proto.CreateVolumeResponse, error) {
		var iops *int64
		if req.GetIops() != 0 {
			iops = &req.Iops
		}
		id, err := impl.CreateVolumeFromSnapshot(req.GetSnapshotID(), req.GetVolumeType(), req.GetVolumeAZ(), iops)
		return &proto.CreateVolumeResponse{VolumeID: id}, err
	})
}

// GetVolumeInfo implements the service.
func (s *VolumeSnapshotterV2GRPCServer) GetVolumeInfo(_ context.Context, req *proto.GetVolumeInfoRequest) (*proto.GetVolumeInfoResponse, error) {
	return serve(s, req.GetPlugin(), func(impl vsv2.VolumeSnapshotter) (*proto.GetVolumeInfoResponse, error) {
		volumeType, iops, err := impl.GetVolumeInfo(req.GetVolumeID(), req.GetVolumeAZ())
		res := &proto.GetVolumeInfoResponse{VolumeType: volumeType}
		if iops != nil {
			res.Iops = *iops
		}
		return res, err
	})
}

// CreateSnapshot implements the service.
func (s *VolumeSnapshotterV2GRPCServer) CreateSnapshot(_ context.Context, req *proto.CreateSnapshotRequest) (*proto.CreateSnapshotResponse, error) {
	return serve(s, req.GetPlugin(), func(impl vsv2.VolumeSnapshotter) (*proto.CreateSnapshotResponse, error) {
		id, err := impl.CreateSnapshot(req.GetVolumeID(), req.GetVolumeAZ(), req.GetTags())
		return &proto.CreateSnapshotResponse{SnapshotID: id}, err
	})
}

// DeleteSnapshot implements the service.
func (s *VolumeSnapshotterV2GRPCServer) DeleteSnapshot(_ context.Context, req *proto.DeleteSnapshotRequest) (*proto.Empty, error) {
	return serve(s, req.GetPlugin(), func(impl vsv2.VolumeSnapshotter) (*proto.Empty, error) {
		return &proto.Empty{}, impl.DeleteSnapshot(req.GetSnapshotID())
	})
}

// GetVolumeID implements the service.
func (s *VolumeSnapshotterV2GRPCServer) GetVolumeID(_ context.Context, req *proto.GetVolumeIDRequest) (*proto.GetVolumeIDResponse, error) {
	return serve(s, req.GetPlugin(), func(impl vsv2.VolumeSnapshotter) (*proto.GetVolumeIDResponse, error) {
		var pv unstructured.Unstructured
		if err := json.Unmarshal(req.GetPersistentVolume(), &pv); err != nil {
			return nil, fmt.Errorf("decoding the persistent volume: %w", err)
		}
		id, err := impl.GetVolumeID(&pv)
		return &proto.GetVolumeIDResponse{VolumeID: id}, err
	})
}

// SetVolumeID implements the service.
func (s *VolumeSnapshotterV2GRPCServer) SetVolumeID(_ context.Context, req *proto.SetVolumeIDRequest) (*proto.SetVolumeIDResponse, error) {
	return serve(s, req.GetPlugin(), func(impl vsv2.VolumeSnapshotter) (*proto.SetVolumeIDResponse, error) {
		var pv unstructured.Unstructured
		if err := json.Unmarshal(req.GetPersistentVolume(), &pv); err != nil {
			return nil, fmt.Errorf("decoding the persistent volume: %w", err)
		}
		updated, err := impl.SetVolumeID(&pv, req.GetVolumeID())
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(updated.UnstructuredContent())
		if err != nil {
			return nil, fmt.Errorf("encoding the persistent volume: %w", err)
		}
		return &proto.SetVolumeIDResponse{PersistentVolume: b}, nil
	})
}

// Progress implements the service.
func (s *VolumeSnapshotterV2GRPCServer) Progress(_ context.Context, req *protovsv2.VolumeSnapshotterProgressRequest) (*protovsv2.VolumeSnapshotterProgressResponse, error) {
	return serve(s, req.GetPlugin(), func(impl vsv2.VolumeSnapshotter) (*protovsv2.VolumeSnapshotterProgressResponse, error) {
		progress, err := impl.Progress(req.GetSnapshotID())
		if err != nil {
			return nil, err
		}
		return &protovsv2.VolumeSnapshotterProgressResponse{Progress: progressToProto(progress)}, nil
	})
}

// Cancel implements the service.
func (s *VolumeSnapshotterV2GRPCServer) Cancel(_ context.Context, req *protovsv2.VolumeSnapshotterCancelRequest) (*emptypb.Empty, error) {
	return serve(s, req.GetPlugin(), func(impl vsv2.VolumeSnapshotter) (*emptypb.Empty, error) {
		return &emptypb.Empty{}, impl.Cancel(req.GetOperationID())
	})
}

// progressToProto is the wire form Velero's v2 servers send: unset
// timestamps stay unset.
func progressToProto(p velero.OperationProgress) *proto.OperationProgress {
	out := &proto.OperationProgress{
		Completed:      p.Completed,
		Err:            p.Err,
		NCompleted:     p.NCompleted,
		NTotal:         p.NTotal,
		OperationUnits: p.OperationUnits,
		Description:    p.Description,
	}
	if !p.Started.IsZero() {
		out.Started = timestamppb.New(p.Started)
	}
	if !p.Updated.IsZero() {
		out.Updated = timestamppb.New(p.Updated)
	}
	return out
}
