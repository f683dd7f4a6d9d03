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

package localcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/itemops/itemops/test/envtest"
)

// Image is a single-layer image assembled from files on this machine.
type Image struct {
	// Ref is the image's reference, as pods name it.
	Ref string
	// Files maps a path in the image to a file on this machine; each is
	// copied with mode 0755 (they are binaries).
	Files map[string]string
	// Dirs are empty directories to create, mode 1777 when under /tmp and
	// 0755 otherwise.
	Dirs []string
	// Home is an empty directory owned by User's numeric "uid:gid", mode
	// 0755: the user's home, where programs keep their configuration.
	Home string
	// Entrypoint, Cmd, User, WorkingDir and Env are the config's.
	Entrypoint, Cmd  []string
	User, WorkingDir string
	Env              []string
}

// Write writes the image as a docker tarball (what ctr imports).
func (img Image) Write(file string) error {
	ref, err := name.NewTag(img.Ref)
	if err != nil {
		return err
	}
	layerData, err := img.layer()
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerData)), nil
	})
	if err != nil {
		return err
	}
	image, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := image.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Entrypoint: img.Entrypoint, Cmd: img.Cmd, User: img.User, WorkingDir: img.WorkingDir,
		Env: append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, img.Env...)}
	image, err = mutate.ConfigFile(image, cf)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(file, ref, image)
}

// layer is the image's one layer: its directories, then its files, each
// dated at the epoch so that the same files give the same digest.
func (img Image) layer() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]int64{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	for _, d := range img.Dirs {
		mode := int64(0o755)
		if strings.HasPrefix(d, "/tmp") {
			mode = 0o1777
		}
		dirs[d] = mode
		addParents(d)
	}
	for p := range img.Files {
		addParents(p)
	}
	var uid, gid int
	if img.Home != "" {
		if _, err := fmt.Sscanf(img.User, "%d:%d", &uid, &gid); err != nil {
			return nil, fmt.Errorf("image %s: a home needs a numeric user uid:gid, not %q", img.Ref, img.User)
		}
		dirs[img.Home] = 0o755
		addParents(img.Home)
	}
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	for _, d := range names {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: dirs[d], ModTime: epoch}
		if d == img.Home {
			h.Uid, h.Gid = uid, gid
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	names = names[:0]
	for p := range img.Files {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		data, err := os.ReadFile(img.Files[p])
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: 0o755, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// StaticFlags are the flags every itemops program is built with: by the
// Dockerfile, hack/image.sh, hack/krew and, in make test, every go command
// (CGO_ENABLED=0 beside them): static, without this machine's paths, without
// debug information (the linker's -s -w drops it; -dwarf=false does not
// write it). One set of flags means that what the images' programs, the
// test binaries and the Kubernetes binaries share compiles once.
var StaticFlags = []string{"-trimpath", "-gcflags=all=-dwarf=false", "-ldflags=-s -w"}

// BuildStatic builds Go main packages of this repository as static
// binaries into dir, in one go build (which compiles what they share once
// and links them side by side), and returns their paths, in the order of
// pkgs: each is named after its package's directory.
func BuildStatic(ctx context.Context, dir string, pkgs ...string) ([]string, error) {
	root, err := envtest.RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := append(append([]string{"build"}, StaticFlags...), "-o", dir+string(filepath.Separator))
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s: %w: %s", strings.Join(pkgs, " "), err, b)
	}
	out := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		out[i] = filepath.Join(dir, path.Base(pkg))
	}
	return out, nil
}
