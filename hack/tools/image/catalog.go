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

package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// catalogImage writes the image of a file-based catalog as `opm generate
// dockerfile` describes it, without a Docker engine: what operator-registry's
// opm image holds (/bin/opm, /bin/grpc_health_probe, which OLM's catalog
// pods probe, on distroless' static base), the catalog at /configs and the
// cache `opm serve --cache-only` builds from it at /tmp/cache; it runs
// `opm serve /configs --cache-dir=/tmp/cache` and is labelled with where
// its catalog is. opm and the probe are static binaries of this machine's
// platform, which the image is for. It prints the image's digest.
func catalogImage(catalog, opm, probe, ociDir, tarPath, tag, version, revision string, when time.Time) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	cache, err := os.MkdirTemp("", "catalog-cache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	serve := exec.Command(opm, "serve", catalog, "--cache-dir="+cache, "--cache-only")
	if out, err := serve.CombinedOutput(); err != nil {
		return fmt.Errorf("opm serve %s --cache-only: %w: %s", catalog, err, out)
	}

	baseFiles, err := baseEntries()
	if err != nil {
		return err
	}
	base, err := layer(when, baseFiles)
	if err != nil {
		return err
	}
	var tools []entry
	for _, t := range []struct{ name, path string }{{"bin/opm", opm}, {"bin/grpc_health_probe", probe}} {
		data, err := os.ReadFile(t.path)
		if err != nil {
			return err
		}
		tools = append(tools, entry{name: t.name, mode: 0o755, data: data})
	}
	bin, err := layer(when, append([]entry{{name: "bin/", mode: 0o755, dir: true}}, tools...))
	if err != nil {
		return err
	}
	configs, err := treeEntries(catalog, "configs", false)
	if err != nil {
		return err
	}
	// opm opens its cache to write (a lock file, its database) as
	// whatever user runs it: OLM's 1001, or one OpenShift assigns.
	cached, err := treeEntries(cache, "tmp/cache", true)
	if err != nil {
		return err
	}
	content, err := layer(when, append(configs, cached...))
	if err != nil {
		return err
	}

	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: when},
			CreatedBy: "the users root, nobody and nonroot, a CA bundle, /tmp, /home/nonroot", Comment: "base"}},
		mutate.Addendum{Layer: bin, History: v1.History{Created: v1.Time{Time: when},
			CreatedBy: "operator-registry's /bin/opm and /bin/grpc_health_probe"}},
		mutate.Addendum{Layer: content, History: v1.History{Created: v1.Time{Time: when},
			CreatedBy: "the catalog at /configs, and opm serve /configs --cache-dir=/tmp/cache --cache-only"}})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: when}
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{"/bin/opm"},
		Cmd:        []string{"serve", "/configs", "--cache-dir=/tmp/cache"},
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels: map[string]string{
			"operators.operatorframework.io.index.configs.v1": "/configs",
			"org.opencontainers.image.title":                  "itemops-catalog",
			"org.opencontainers.image.source":                 "https://github.com/itemops/itemops",
			"org.opencontainers.image.version":                version,
			"org.opencontainers.image.revision":               revision,
			"org.opencontainers.image.created":                when.Format(time.RFC3339),
		},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	return writeImage(img, ref, ociDir, tarPath)
}

// treeEntries are the directories and files under dir, by name, as
// entries under prefix, owned by root: files keep their mode's permission
// bits, or, writable, every user may write them and their directories.
func treeEntries(dir, prefix string, writable bool) ([]entry, error) {
	var entries []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(filepath.Join(prefix, rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			mode := int64(0o755)
			if writable {
				mode = 0o777
			}
			entries = append(entries, entry{name: name + "/", mode: mode, dir: true})
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			mode := int64(info.Mode().Perm())
			if writable {
				mode |= 0o666
			}
			entries = append(entries, entry{name: name, mode: mode, data: data})
		default:
			return fmt.Errorf("%s: neither a file nor a directory", p)
		}
		return nil
	})
	return entries, err
}

// writeImage writes a one-platform image as an OCI layout of one manifest
// named ref and, with tarPath, a tarball for docker load, and prints its
// digest.
func writeImage(img v1.Image, ref name.Tag, ociDir, tarPath string) error {
	if err := os.RemoveAll(ociDir); err != nil {
		return err
	}
	index := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{Add: img,
		Descriptor: v1.Descriptor{Annotations: map[string]string{"org.opencontainers.image.ref.name": ref.TagStr()}}})
	if _, err := layout.Write(ociDir, index); err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	if tarPath != "" {
		if err := tarball.WriteToFile(tarPath, ref, img); err != nil {
			return fmt.Errorf("writing the tarball: %w", err)
		}
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}
