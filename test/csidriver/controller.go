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

package csidriver

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// defaultCapacity is a volume's size when the request names none.
const defaultCapacity = 1 << 30

// GetPluginInfo implements csi.IdentityServer.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.Name, VendorVersion: Version}, nil
}

// GetPluginCapabilities implements csi.IdentityServer.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

// Probe implements csi.IdentityServer: ready once its root is.
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if _, err := os.Stat(d.Root); err != nil {
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// ControllerGetCapabilities implements csi.ControllerServer.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, c := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}},
		})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkCapabilities refuses what a directory cannot be: a block device.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for _, c := range caps {
		if c.GetBlock() != nil {
			return status.Error(codes.InvalidArgument, "block volumes are not supported: volumes are directories")
		}
		if c.GetMount() == nil {
			return status.Error(codes.InvalidArgument, "an access type (mount) is required")
		}
		if c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
			return status.Error(codes.InvalidArgument, "an access mode is required")
		}
	}
	return nil
}

// CreateVolume implements csi.ControllerServer: a directory, empty or a
// copy of a snapshot's.
func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "a name is required")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	capacity := req.GetCapacityRange().GetRequiredBytes()
	limit := req.GetCapacityRange().GetLimitBytes()
	if capacity < 0 || limit < 0 || (limit > 0 && capacity > limit) {
		return nil, status.Errorf(codes.OutOfRange, "capacity range %d–%d cannot be met", capacity, limit)
	}
	if capacity == 0 {
		capacity = defaultCapacity
		if limit > 0 {
			capacity = min(capacity, limit)
		}
	}
	var fromSnapshot string
	if src := req.GetVolumeContentSource(); src != nil {
		if src.GetSnapshot() == nil {
			return nil, status.Error(codes.InvalidArgument, "volumes can be made from a snapshot only")
		}
		fromSnapshot = src.GetSnapshot().GetSnapshotId()
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	existing, err := d.byName(volumesDir, req.GetName())
	if err != nil {
		return nil, err
	}
	if existing != nil {
		if existing.Capacity < capacity || (limit > 0 && existing.Capacity > limit) || existing.Source != fromSnapshot {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with another size or source", req.GetName())
		}
		return &csi.CreateVolumeResponse{Volume: d.volume(existing, req.GetVolumeContentSource())}, nil
	}
	r := &record{ID: uuid.NewString(), Name: req.GetName(), Capacity: capacity, Source: fromSnapshot}
	if fromSnapshot != "" {
		snap, err := d.read(snapshotsDir, fromSnapshot)
		if err != nil {
			return nil, err
		}
		if snap == nil {
			return nil, status.Errorf(codes.NotFound, "snapshot %s not found", fromSnapshot)
		}
		if snap.Pending {
			return nil, status.Errorf(codes.Unavailable, "snapshot %s is not ready", fromSnapshot)
		}
		if snap.Capacity > capacity {
			return nil, status.Errorf(codes.OutOfRange, "snapshot %s holds %d bytes, more than %d", fromSnapshot, snap.Capacity, capacity)
		}
		if err := os.MkdirAll(d.path(volumesDir, r.ID), 0o755); err != nil {
			return nil, status.Errorf(codes.Internal, "creating volume %s: %v", r.ID, err)
		}
		if err := copyTree(d.path(snapshotsDir, fromSnapshot, "data"), d.path(volumesDir, r.ID, "data")); err != nil {
			return nil, status.Errorf(codes.Internal, "copying snapshot %s: %v", fromSnapshot, err)
		}
	}
	if err := d.write(volumesDir, r); err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: d.volume(r, req.GetVolumeContentSource())}, nil
}

func (d *Driver) volume(r *record, source *csi.VolumeContentSource) *csi.Volume {
	return &csi.Volume{VolumeId: r.ID, CapacityBytes: r.Capacity, ContentSource: source}
}

// DeleteVolume implements csi.ControllerServer; a volume that is not there is deleted.
func (d *Driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "a volume ID is required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !validID(req.GetVolumeId()) {
		return &csi.DeleteVolumeResponse{}, nil
	}
	if err := os.RemoveAll(d.path(volumesDir, req.GetVolumeId())); err != nil {
		return nil, status.Errorf(codes.Internal, "deleting volume %s: %v", req.GetVolumeId(), err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// ValidateVolumeCapabilities implements csi.ControllerServer.
func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "a volume ID is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	d.mu.Lock()
	r, err := d.read(volumesDir, req.GetVolumeId())
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

// CreateSnapshot implements csi.ControllerServer: a copy of the volume's
// directory, ready at once; or, while the volume's fail-snapshot file
// exists, cut but not ready, and at every later call not ready (the file
// empty) or failing with its content, until the file is gone (see the
// package's doc).
func (d *Driver) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "a name is required")
	}
	if req.GetSourceVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "a source volume ID is required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	existing, err := d.byName(snapshotsDir, req.GetName())
	if err != nil {
		return nil, err
	}
	if existing != nil {
		if existing.Source != req.GetSourceVolumeId() {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %s exists of another volume", req.GetName())
		}
		if existing.Pending {
			held, msg := d.held(existing.Source)
			if msg != "" {
				return nil, status.Error(codes.Internal, msg)
			}
			if held {
				return &csi.CreateSnapshotResponse{Snapshot: snapshot(existing)}, nil
			}
			existing.Pending = false
			if err := d.write(snapshotsDir, existing); err != nil {
				return nil, err
			}
		}
		return &csi.CreateSnapshotResponse{Snapshot: snapshot(existing)}, nil
	}
	volume, err := d.read(volumesDir, req.GetSourceVolumeId())
	if err != nil {
		return nil, err
	}
	if volume == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetSourceVolumeId())
	}
	if msg := d.refusal(volume.ID); msg != "" {
		return nil, status.Error(codes.Unavailable, msg)
	}
	held, _ := d.held(volume.ID)
	r := &record{ID: uuid.NewString(), Name: req.GetName(), Capacity: volume.Capacity, Source: volume.ID, Created: time.Now().UnixNano(),
		Pending: held}
	if err := os.MkdirAll(d.path(snapshotsDir, r.ID), 0o755); err != nil {
		return nil, status.Errorf(codes.Internal, "creating snapshot %s: %v", r.ID, err)
	}
	if err := copyTree(d.path(volumesDir, volume.ID, "data"), d.path(snapshotsDir, r.ID, "data")); err != nil {
		_ = os.RemoveAll(d.path(snapshotsDir, r.ID))
		return nil, status.Errorf(codes.Internal, "copying volume %s: %v", volume.ID, err)
	}
	if err := d.write(snapshotsDir, r); err != nil {
		return nil, err
	}
	return &csi.CreateSnapshotResponse{Snapshot: snapshot(r)}, nil
}

func snapshot(r *record) *csi.Snapshot {
	return &csi.Snapshot{SnapshotId: r.ID, SourceVolumeId: r.Source, SizeBytes: r.Capacity,
		CreationTime: timestamppb.New(time.Unix(0, r.Created)), ReadyToUse: !r.Pending}
}

// DeleteSnapshot implements csi.ControllerServer; a snapshot that is not there is deleted.
func (d *Driver) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "a snapshot ID is required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !validID(req.GetSnapshotId()) {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	if err := os.RemoveAll(d.path(snapshotsDir, req.GetSnapshotId())); err != nil {
		return nil, status.Errorf(codes.Internal, "deleting snapshot %s: %v", req.GetSnapshotId(), err)
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots implements csi.ControllerServer: every snapshot, or the one
// with an ID, or those of a volume, by creation, a page at a time (the
// token is the index of the next one).
func (d *Driver) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries cannot be negative")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	entries, err := os.ReadDir(filepath.Join(d.Root, snapshotsDir))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "listing snapshots: %v", err)
	}
	var all []*record
	for _, e := range entries {
		r, err := d.read(snapshotsDir, e.Name())
		if err != nil {
			return nil, err
		}
		if r == nil || (req.GetSnapshotId() != "" && r.ID != req.GetSnapshotId()) ||
			(req.GetSourceVolumeId() != "" && r.Source != req.GetSourceVolumeId()) {
			continue
		}
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b *record) int {
		if a.Created != b.Created {
			return cmp.Compare(a.Created, b.Created)
		}
		return strings.Compare(a.ID, b.ID)
	})
	start := 0
	if token := req.GetStartingToken(); token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(all) {
			return nil, status.Errorf(codes.Aborted, "starting token %q is not one of this driver's", token)
		}
		start = n
	}
	end := len(all)
	if limit := int(req.GetMaxEntries()); limit > 0 && start+limit < end {
		end = start + limit
	}
	resp := &csi.ListSnapshotsResponse{}
	for _, r := range all[start:end] {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: snapshot(r)})
	}
	if end < len(all) {
		resp.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}
