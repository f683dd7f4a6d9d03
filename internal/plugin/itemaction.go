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

	"google.golang.org/grpc"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	proto "github.com/vmware-tanzu/velero/pkg/plugin/generated"
	protobiav2 "github.com/vmware-tanzu/velero/pkg/plugin/generated/backupitemaction/v2"
	protoriav2 "github.com/vmware-tanzu/velero/pkg/plugin/generated/restoreitemaction/v2"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

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

	action, err := m.itemAction(conn, op)
	if err != nil {
		return velero.OperationProgress{}, &Error{Kind: ErrOperationFailed, Plugin: op.Plugin, Call: call, Err: err}
	}
	progress, err := action.progress(ctx)
	if err != nil {
		return velero.OperationProgress{}, classify(call, op.Plugin, op.ID, err)
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
	action, err := m.itemAction(conn, op)
	if err != nil {
		return &Error{Kind: ErrOperationFailed, Plugin: op.Plugin, Call: call, Err: err}
	}
	if err := action.cancel(ctx); err != nil {
		return classify(call, op.Plugin, op.ID, err)
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

// itemAction is the Progress and Cancel of one operation of a
// BackupItemAction v2 or a RestoreItemAction v2, on conn, its parent
// encoded as Velero sends it.
type itemAction struct {
	progress func(context.Context) (*proto.OperationProgress, error)
	cancel   func(context.Context) error
}

func (m *Manager) itemAction(conn *grpc.ClientConn, op Operation) (itemAction, error) {
	if op.Kind == itemopsv1alpha1.PluginKindBackupItemAction {
		backup, err := parentJSON(&m.parents, op.Backup)
		if err != nil {
			return itemAction{}, err
		}
		c := protobiav2.NewBackupItemActionClient(conn)
		return itemAction{
			progress: func(ctx context.Context) (*proto.OperationProgress, error) {
				res, err := c.Progress(ctx, &protobiav2.BackupItemActionProgressRequest{Plugin: op.Plugin, OperationID: op.ID, Backup: backup})
				return res.GetProgress(), err
			},
			cancel: func(ctx context.Context) error {
				_, err := c.Cancel(ctx, &protobiav2.BackupItemActionCancelRequest{Plugin: op.Plugin, OperationID: op.ID, Backup: backup})
				return err
			},
		}, nil
	}
	restore, err := parentJSON(&m.parents, op.Restore)
	if err != nil {
		return itemAction{}, err
	}
	c := protoriav2.NewRestoreItemActionClient(conn)
	return itemAction{
		progress: func(ctx context.Context) (*proto.OperationProgress, error) {
			res, err := c.Progress(ctx, &protoriav2.RestoreItemActionProgressRequest{Plugin: op.Plugin, OperationID: op.ID, Restore: restore})
			return res.GetProgress(), err
		},
		cancel: func(ctx context.Context) error {
			_, err := c.Cancel(ctx, &protoriav2.RestoreItemActionCancelRequest{Plugin: op.Plugin, OperationID: op.ID, Restore: restore})
			return err
		},
	}, nil
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
