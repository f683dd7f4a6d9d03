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
	"slices"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	veleroframework "github.com/vmware-tanzu/velero/pkg/plugin/framework"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	proto "github.com/vmware-tanzu/velero/pkg/plugin/generated"
)

// KindsMetadataKey is the gRPC metadata key with which a caller of
// ListPlugins names the plugin kinds it knows beyond Velero's. Velero does
// not send it, so Velero is listed only the kinds it accepts.
const KindsMetadataKey = "itemops-plugin-kinds"

// WithKinds returns a context whose ListPlugins call asks for the given
// kinds as well as Velero's.
func WithKinds(ctx context.Context, kinds ...common.PluginKind) context.Context {
	for _, kind := range kinds {
		ctx = metadata.AppendToOutgoingContext(ctx, KindsMetadataKey, string(kind))
	}
	return ctx
}

// listerPlugin serves Velero's PluginLister service. Velero's own lister
// cannot list a kind Velero does not know, and Velero refuses a binary whose
// list has one, so the kinds only itemops knows are listed only to a caller
// that asks for them.
type listerPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	velero   []veleroframework.PluginIdentifier
	extended []veleroframework.PluginIdentifier
}

var _ plugin.GRPCPlugin = (*listerPlugin)(nil)

func (p *listerPlugin) GRPCServer(_ *plugin.GRPCBroker, server *grpc.Server) error {
	proto.RegisterPluginListerServer(server, &listerServer{p: p})
	return nil
}

func (p *listerPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return proto.NewPluginListerClient(conn), nil
}

type listerServer struct {
	proto.UnimplementedPluginListerServer
	p *listerPlugin
}

func (s *listerServer) ListPlugins(ctx context.Context, _ *proto.Empty) (*proto.ListPluginsResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	asked := md.Get(KindsMetadataKey)
	res := &proto.ListPluginsResponse{}
	add := func(id veleroframework.PluginIdentifier) {
		res.Plugins = append(res.Plugins, &proto.PluginIdentifier{Command: id.Command, Kind: string(id.Kind), Name: id.Name})
	}
	for _, id := range s.p.velero {
		add(id)
	}
	for _, id := range s.p.extended {
		if slices.Contains(asked, string(id.Kind)) {
			add(id)
		}
	}
	return res, nil
}
