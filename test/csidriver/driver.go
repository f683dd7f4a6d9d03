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
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Version is the driver's version, as GetPluginInfo reports it.
const Version = "v1.0.0"

// Driver serves the CSI Identity, Controller and Node services from one
// process, on one node. Its state is the directories and records under
// Root, so a restarted driver knows every volume and snapshot.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	// Name is the driver's name (csi.itemops.io); NodeID the node's.
	Name, NodeID string
	// Root holds volumes/, snapshots/ and fail-snapshot/.
	Root string
	// Log, when set, logs every call.
	Log logr.Logger

	mu sync.Mutex
}

// record is what the driver keeps of a volume or a snapshot.
type record struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Capacity is a volume's size, or a snapshot's source volume's.
	Capacity int64 `json:"capacity"`
	// Source is a snapshot's volume, or the snapshot a volume was made from.
	Source string `json:"source,omitempty"`
	// Created is a snapshot's creation, in Unix nanoseconds.
	Created int64 `json:"created,omitempty"`
	// Pending is a snapshot cut while its volume's fail-snapshot file
	// existed: not ready to use.
	Pending bool `json:"pending,omitempty"`
}

const (
	volumesDir        = "volumes"
	snapshotsDir      = "snapshots"
	failSnapshotDir   = "fail-snapshot"
	refuseSnapshotDir = "refuse-snapshot"
)

// Serve listens on the Unix socket at path and serves until ctx ends.
func (d *Driver) Serve(ctx context.Context, path string) error {
	for _, dir := range []string{volumesDir, snapshotsDir, failSnapshotDir, refuseSnapshotDir} {
		if err := os.MkdirAll(filepath.Join(d.Root, dir), 0o755); err != nil {
			return err
		}
	}
	l, err := listenUnix(path)
	if err != nil {
		return err
	}
	server := grpc.NewServer(grpc.UnaryInterceptor(d.logCalls))
	csi.RegisterIdentityServer(server, d)
	csi.RegisterControllerServer(server, d)
	csi.RegisterNodeServer(server, d)
	go func() {
		<-ctx.Done()
		server.GracefulStop()
	}()
	return server.Serve(l)
}

// listenUnix listens on a Unix socket at path, in place of one a process
// before left there.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// logCalls logs each call and its answer, secrets left out.
func (d *Driver) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if d.Log.GetSink() != nil {
		if err != nil {
			d.Log.Info("call failed", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req).String(), "error", err.Error())
		} else {
			d.Log.V(1).Info("call", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req).String())
		}
	}
	return resp, err
}

// path is where kind's record or data of id lives.
func (d *Driver) path(kind, id string, parts ...string) string {
	return filepath.Join(append([]string{d.Root, kind, id}, parts...)...)
}

// read is the record of id, or nil when there is none.
func (d *Driver) read(kind, id string) (*record, error) {
	if !validID(id) {
		return nil, nil
	}
	data, err := os.ReadFile(d.path(kind, id, "record.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading %s %s: %v", kind, id, err)
	}
	r := &record{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, status.Errorf(codes.Internal, "reading %s %s: %v", kind, id, err)
	}
	return r, nil
}

// byName is the record of kind named name, or nil.
func (d *Driver) byName(kind, name string) (*record, error) {
	entries, err := os.ReadDir(filepath.Join(d.Root, kind))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "listing %s: %v", kind, err)
	}
	for _, e := range entries {
		r, err := d.read(kind, e.Name())
		if err != nil {
			return nil, err
		}
		if r != nil && r.Name == name {
			return r, nil
		}
	}
	return nil, nil
}

// write stores r with its data directory, written last so that a record
// without data is never seen.
func (d *Driver) write(kind string, r *record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.path(kind, r.ID, "data"), 0o777); err != nil {
		return status.Errorf(codes.Internal, "creating %s %s: %v", kind, r.ID, err)
	}
	tmp := d.path(kind, r.ID, "record.json.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return status.Errorf(codes.Internal, "writing %s %s: %v", kind, r.ID, err)
	}
	return os.Rename(tmp, d.path(kind, r.ID, "record.json"))
}

// validID reports whether id can name a directory of the driver's.
func validID(id string) bool {
	return id != "" && !strings.ContainsAny(id, `/\`) && id != "." && id != ".."
}

// copyTree copies the directory from into to, files, directories and
// symbolic links, with their modes.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		target := filepath.Join(to, rel)
		info, err := e.Info()
		if err != nil {
			return err
		}
		switch {
		case e.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		}
		return nil
	})
}

func copyFile(from, to string, mode fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := out.ReadFrom(in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// refusal is the message a new snapshot of a volume is refused with (its
// refuse-snapshot file's content), or "".
func (d *Driver) refusal(volumeID string) string {
	data, err := os.ReadFile(filepath.Join(d.Root, refuseSnapshotDir, volumeID))
	if err != nil {
		return ""
	}
	if msg := strings.TrimSpace(string(data)); msg != "" {
		return msg
	}
	return "snapshots of volume " + volumeID + " are refused"
}

// held reports whether a volume's snapshots are held back (its
// fail-snapshot file exists), and the message they fail with: the file's
// content, or "" while they are only not ready yet.
func (d *Driver) held(volumeID string) (bool, string) {
	data, err := os.ReadFile(filepath.Join(d.Root, failSnapshotDir, volumeID))
	if err != nil {
		return false, ""
	}
	return true, strings.TrimSpace(string(data))
}
