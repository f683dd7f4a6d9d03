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
	"io"
	"strings"
	"sync"
	"time"

	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	proto "github.com/vmware-tanzu/velero/pkg/plugin/generated"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
)

// ObjectStores opens sessions with the ObjectStore plugins that back
// BackupStorageLocations.
type ObjectStores interface {
	// WithObjectStore calls fn with the ObjectStore plugin that serves
	// provider (a BSL's spec.provider; a name without a slash means
	// velero.io/<name>, as in Velero). Every call fn makes is bound to ctx
	// and to the plugin call timeout. fn must Init the store first.
	WithObjectStore(ctx context.Context, provider string, fn func(velero.ObjectStore) error) error
}

var _ ObjectStores = (*Manager)(nil)

// objectStoreChunk is the size of the chunks PutObject streams, as in Velero.
const objectStoreChunk = 1 << 20

// ObjectStoreName turns a BSL provider into the plugin name Velero resolves it to.
func ObjectStoreName(provider string) string {
	if !strings.Contains(provider, "/") {
		return "velero.io/" + provider
	}
	return provider
}

// VolumeSnapshotterName turns a VolumeSnapshotLocation provider into the
// plugin name Velero resolves it to.
func VolumeSnapshotterName(provider string) string { return ObjectStoreName(provider) }

// WithObjectStore implements ObjectStores. A plugin process holds a single
// ObjectStore per name, configured by the last Init, so sessions with the same
// binary run one at a time: two locations' configurations never mix.
func (m *Manager) WithObjectStore(ctx context.Context, provider string, fn func(velero.ObjectStore) error) error {
	name := ObjectStoreName(provider)
	id := ID{Kind: common.PluginKindObjectStore, Name: name}
	path, err := m.lookup(ctx, id).Command(id)
	if err != nil {
		return &Error{Kind: ErrPluginNotFound, Plugin: name, Call: "ObjectStore", Err: err}
	}
	p, err := m.process(path)
	if err != nil {
		return &Error{Kind: ErrTransport, Plugin: name, Call: "ObjectStore", Err: err}
	}
	lock := m.objectStoreLock(path)
	select {
	case lock <- struct{}{}:
		defer func() { <-lock }()
	case <-ctx.Done():
		return &Error{Kind: ErrTransport, Plugin: name, Call: "ObjectStore",
			Err: fmt.Errorf("waiting for the object store plugin's other session: %w", ctx.Err())}
	}
	return fn(&objectStore{ctx: ctx, process: p, name: name, timeout: m.opts.CallTimeout})
}

// objectStoreLock returns the one-slot semaphore of the binary at path.
func (m *Manager) objectStoreLock(path string) chan struct{} {
	m.storeLocksMu.Lock()
	defer m.storeLocksMu.Unlock()
	if m.storeLocks == nil {
		m.storeLocks = map[string]chan struct{}{}
	}
	lock, ok := m.storeLocks[path]
	if !ok {
		lock = make(chan struct{}, 1)
		m.storeLocks[path] = lock
	}
	return lock
}

// objectStore is Velero's ObjectStore interface over the generated gRPC
// client; unlike Velero's own client every call has a deadline.
type objectStore struct {
	ctx     context.Context
	process *process
	name    string
	timeout time.Duration
}

var _ velero.ObjectStore = (*objectStore)(nil)

// call prepares one call: its deadline and the client of a live process.
func (s *objectStore) call(name string) (context.Context, context.CancelFunc, proto.ObjectStoreClient, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	conn, err := s.process.conn(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, &Error{Kind: startFailure(err), Plugin: s.name, Call: name, Err: err}
	}
	return ctx, cancel, proto.NewObjectStoreClient(conn), nil
}

// Init implements velero.ObjectStore.
func (s *objectStore) Init(config map[string]string) error {
	ctx, cancel, c, err := s.call("Init")
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := c.Init(ctx, &proto.ObjectStoreInitRequest{Plugin: s.name, Config: config}); err != nil {
		return classify("Init", s.name, "", err)
	}
	return nil
}

// PutObject implements velero.ObjectStore.
func (s *objectStore) PutObject(bucket, key string, body io.Reader) error {
	ctx, cancel, c, err := s.call("PutObject")
	if err != nil {
		return err
	}
	defer cancel()
	stream, err := c.PutObject(ctx)
	if err != nil {
		return classify("PutObject", s.name, "", err)
	}
	chunk := make([]byte, objectStoreChunk)
	sent := false
	for {
		n, readErr := body.Read(chunk)
		// An empty object still needs one message: it names the bucket and key.
		if n > 0 || (!sent && errors.Is(readErr, io.EOF)) {
			if err := stream.Send(&proto.PutObjectRequest{Plugin: s.name, Bucket: bucket, Key: key, Body: chunk[:n]}); err != nil {
				return classify("PutObject", s.name, "", err)
			}
			sent = true
		}
		if errors.Is(readErr, io.EOF) {
			break
		}
		if readErr != nil {
			return fmt.Errorf("reading the object to upload: %w", readErr)
		}
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		return classify("PutObject", s.name, "", err)
	}
	return nil
}

// ObjectExists implements velero.ObjectStore.
func (s *objectStore) ObjectExists(bucket, key string) (bool, error) {
	ctx, cancel, c, err := s.call("ObjectExists")
	if err != nil {
		return false, err
	}
	defer cancel()
	res, err := c.ObjectExists(ctx, &proto.ObjectExistsRequest{Plugin: s.name, Bucket: bucket, Key: key})
	if err != nil {
		return false, classify("ObjectExists", s.name, "", err)
	}
	return res.GetExists(), nil
}

// GetObject implements velero.ObjectStore. The deadline covers reading the
// whole object; Close releases the stream.
func (s *objectStore) GetObject(bucket, key string) (io.ReadCloser, error) {
	ctx, cancel, c, err := s.call("GetObject")
	if err != nil {
		return nil, err
	}
	stream, err := c.GetObject(ctx, &proto.GetObjectRequest{Plugin: s.name, Bucket: bucket, Key: key})
	if err != nil {
		cancel()
		return nil, classify("GetObject", s.name, "", err)
	}
	return &streamReader{recv: func() ([]byte, error) {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		if err != nil {
			return nil, classify("GetObject", s.name, "", err)
		}
		return msg.GetData(), nil
	}, cancel: cancel}, nil
}

// ListCommonPrefixes implements velero.ObjectStore.
func (s *objectStore) ListCommonPrefixes(bucket, prefix, delimiter string) ([]string, error) {
	ctx, cancel, c, err := s.call("ListCommonPrefixes")
	if err != nil {
		return nil, err
	}
	defer cancel()
	res, err := c.ListCommonPrefixes(ctx, &proto.ListCommonPrefixesRequest{Plugin: s.name, Bucket: bucket, Prefix: prefix, Delimiter: delimiter})
	if err != nil {
		return nil, classify("ListCommonPrefixes", s.name, "", err)
	}
	return res.GetPrefixes(), nil
}

// ListObjects implements velero.ObjectStore.
func (s *objectStore) ListObjects(bucket, prefix string) ([]string, error) {
	ctx, cancel, c, err := s.call("ListObjects")
	if err != nil {
		return nil, err
	}
	defer cancel()
	res, err := c.ListObjects(ctx, &proto.ListObjectsRequest{Plugin: s.name, Bucket: bucket, Prefix: prefix})
	if err != nil {
		return nil, classify("ListObjects", s.name, "", err)
	}
	return res.GetKeys(), nil
}

// DeleteObject implements velero.ObjectStore.
func (s *objectStore) DeleteObject(bucket, key string) error {
	ctx, cancel, c, err := s.call("DeleteObject")
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := c.DeleteObject(ctx, &proto.DeleteObjectRequest{Plugin: s.name, Bucket: bucket, Key: key}); err != nil {
		return classify("DeleteObject", s.name, "", err)
	}
	return nil
}

// CreateSignedURL implements velero.ObjectStore.
func (s *objectStore) CreateSignedURL(bucket, key string, ttl time.Duration) (string, error) {
	ctx, cancel, c, err := s.call("CreateSignedURL")
	if err != nil {
		return "", err
	}
	defer cancel()
	res, err := c.CreateSignedURL(ctx, &proto.CreateSignedURLRequest{Plugin: s.name, Bucket: bucket, Key: key, Ttl: int64(ttl)})
	if err != nil {
		return "", classify("CreateSignedURL", s.name, "", err)
	}
	return res.GetUrl(), nil
}

// streamReader reads a GetObject stream chunk by chunk.
type streamReader struct {
	recv   func() ([]byte, error)
	cancel context.CancelFunc
	buf    []byte
	err    error
	once   sync.Once
}

// Read implements io.Reader.
func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.buf, r.err = r.recv()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close implements io.Closer.
func (r *streamReader) Close() error {
	r.once.Do(r.cancel)
	return nil
}
