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
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
)

// ErrBinaryChanged: a plugin binary is no longer the file discovery found
// at its path, and is never run.
var ErrBinaryChanged = errors.New("plugin binary changed since discovery")

// BinaryChangedError is a launch refused because the binary's SHA-256
// digest is not the one recorded when it was first started.
type BinaryChangedError struct {
	Path           string
	Pinned, Digest string
}

// Error implements error.
func (e *BinaryChangedError) Error() string {
	return fmt.Sprintf("%s is not the binary itemops discovered (sha256 %s, now %s): it is not run; "+
		"whoever can write the plugin directory replaced it. Put the discovered binary back, or restart itemops to discover the directory again",
		e.Path, short(e.Pinned), short(e.Digest))
}

// Is makes errors.Is(err, ErrBinaryChanged) true.
func (e *BinaryChangedError) Is(target error) bool { return target == ErrBinaryChanged }

func short(digest string) string { return digest[:min(len(digest), 12)] }

// pins are the SHA-256 digests of the plugin binaries, by path, recorded
// the first time each is started: by discovery, which starts every binary
// it finds.
type pins struct {
	mu      sync.Mutex
	digests map[string]string
}

// open opens the binary at path to run it, refusing a file anyone may
// write and a file whose digest is not the one recorded for path (the
// first open records it). The caller runs the open file itself (see
// command) and closes it once the process has started, so that a file
// renamed over path after the check is not what runs.
func (p *pins) open(path string) (*os.File, error) {
	f, err := os.Open(path) //nolint:gosec // a plugin binary of the plugin directory
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if info.Mode().Perm()&0o002 != 0 {
		f.Close()
		return nil, fmt.Errorf("%s: %w: writable by every user (mode %#o)", path, errRefused, info.Mode().Perm())
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	digest := hex.EncodeToString(h.Sum(nil))
	p.mu.Lock()
	if p.digests == nil {
		p.digests = map[string]string{}
	}
	pinned, ok := p.digests[path]
	if !ok {
		p.digests[path] = digest
	}
	p.mu.Unlock()
	if ok && pinned != digest {
		f.Close()
		return nil, &BinaryChangedError{Path: path, Pinned: pinned, Digest: digest}
	}
	return f, nil
}

// digest is the digest recorded for path, "" when it was never started.
func (p *pins) digest(path string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.digests[path]
}

// Command returns a command that runs the binary at path with args, if it
// is the binary discovery found there (the same checks as every plugin
// launch); release closes the file once the command has started. The
// Velero version check runs the built-in plugins' velero binary with it.
func (m *Manager) Command(ctx context.Context, path string, args ...string) (cmd *exec.Cmd, release func(), err error) {
	f, err := m.pins.open(path)
	if err != nil {
		return nil, nil, err
	}
	cmd = exec.CommandContext(ctx, path, args...) //nolint:gosec // checked against its pin above
	runOpenFile(cmd, f)
	return cmd, func() { f.Close() }, nil
}
