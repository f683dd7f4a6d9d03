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

// Command image assembles itemops' manager image without a Docker engine,
// from static binaries built beforehand (hack/image.sh builds them as the
// Dockerfile does): for each platform, one layer as small as distroless'
// static:nonroot base (the users root, nobody and nonroot 65532, a CA
// bundle, /tmp, /home/nonroot, /plugins, the last two also group 0's, for
// a user a platform assigns with group 0) and one with /itemops and
// /cp-plugin; the config runs /itemops as 65532:65532. Every file and the
// image carry the commit's time, so the same commit gives the same digests.
//
// It writes an OCI image layout holding an index of every platform, and a
// tarball of one platform that `docker load` and `podman load` read.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The user the manager runs as, distroless' nonroot.
const (
	uid  = 65532
	user = "65532:65532"
)

func main() {
	binaries := flag.String("binaries", "", "directory holding <os>-<arch>/itemops and <os>-<arch>/cp-plugin for each platform")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "platforms of the image, comma-separated")
	ociDir := flag.String("oci", "", "where to write the OCI image layout (every platform)")
	tarPath := flag.String("tarball", "", "where to write the image of -tarball-platform as a tarball for docker load (optional)")
	tarPlatform := flag.String("tarball-platform", "linux/amd64", "the platform of -tarball")
	tag := flag.String("tag", "ghcr.io/itemops/itemops:latest", "the image's name in the tarball and the layout's index")
	version := flag.String("version", "dev", "org.opencontainers.image.version")
	revision := flag.String("revision", "", "org.opencontainers.image.revision: the commit")
	created := flag.String("created", "", "the commit's time (RFC 3339): every file's and the image's time")
	bundle := flag.String("bundle", "", "write the OLM bundle image of this bundle directory instead, and print its digest")
	catalog := flag.String("catalog", "", "write the image of this file-based catalog instead (with -opm and -grpc-health-probe), and print its digest")
	opm := flag.String("opm", "", "operator-registry's opm, static, for -catalog")
	probe := flag.String("grpc-health-probe", "", "grpc_health_probe, static, for -catalog")
	flag.Parse()
	var err error
	switch {
	case *bundle != "" && *catalog != "":
		err = fmt.Errorf("-bundle or -catalog, not both")
	case *bundle != "":
		err = runBundle(*bundle, *ociDir, *tarPath, *tag, *version, *revision, *created)
	case *catalog != "":
		err = runCatalog(*catalog, *opm, *probe, *ociDir, *tarPath, *tag, *version, *revision, *created)
	default:
		err = run(*binaries, *platforms, *ociDir, *tarPath, *tarPlatform, *tag, *version, *revision, *created)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binaries, platforms, ociDir, tarPath, tarPlatform, tag, version, revision, created string) error {
	if binaries == "" || ociDir == "" {
		return fmt.Errorf("-binaries and -oci are required")
	}
	when, err := createdTime(created)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "itemops",
		"org.opencontainers.image.description": "Follows the asynchronous operations of Velero's plugins as ItemOperations",
		"org.opencontainers.image.source":      "https://github.com/itemops/itemops",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
		"org.opencontainers.image.created":     when.Format(time.RFC3339),
	}
	base, err := baseLayer(when)
	if err != nil {
		return err
	}
	index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var forTarball v1.Image
	for _, p := range strings.Split(platforms, ",") {
		platform, err := v1.ParsePlatform(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		img, err := image(filepath.Join(binaries, platform.OS+"-"+platform.Architecture), platform, base, when, labels)
		if err != nil {
			return fmt.Errorf("%s: %w", platform, err)
		}
		index = mutate.AppendManifests(index, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: platform,
				Annotations: map[string]string{"org.opencontainers.image.ref.name": ref.TagStr()}}})
		if platform.String() == tarPlatform {
			forTarball = img
		}
	}
	if err := os.RemoveAll(ociDir); err != nil {
		return err
	}
	if _, err := layout.Write(ociDir, index); err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	if tarPath != "" {
		if forTarball == nil {
			return fmt.Errorf("-tarball-platform %s is not one of -platforms %s", tarPlatform, platforms)
		}
		if err := tarball.WriteToFile(tarPath, ref, forTarball); err != nil {
			return fmt.Errorf("writing the tarball: %w", err)
		}
	}
	return nil
}

func runBundle(dir, ociDir, tarPath, tag, version, revision, created string) error {
	if ociDir == "" {
		return fmt.Errorf("-oci is required")
	}
	when, err := createdTime(created)
	if err != nil {
		return err
	}
	return bundleImage(dir, ociDir, tarPath, tag, version, revision, when)
}

func runCatalog(dir, opm, probe, ociDir, tarPath, tag, version, revision, created string) error {
	if ociDir == "" || opm == "" || probe == "" {
		return fmt.Errorf("-oci, -opm and -grpc-health-probe are required with -catalog")
	}
	when, err := createdTime(created)
	if err != nil {
		return err
	}
	return catalogImage(dir, opm, probe, ociDir, tarPath, tag, version, revision, when)
}

// createdTime is -created's time, or the epoch.
func createdTime(created string) (time.Time, error) {
	if created == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return time.Time{}, fmt.Errorf("-created: %w", err)
	}
	return t.UTC(), nil
}

// image is the manager image of one platform.
func image(dir string, platform *v1.Platform, base v1.Layer, when time.Time, labels map[string]string) (v1.Image, error) {
	app, err := appLayer(dir, when)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: when},
			CreatedBy: "the users root, nobody and nonroot, a CA bundle, /tmp, /home/nonroot, /plugins", Comment: "base"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: v1.Time{Time: when},
			CreatedBy: "/itemops and /cp-plugin, built with CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -ldflags \"-s -w\""}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = platform.OS, platform.Architecture, platform.Variant
	cf.Created = v1.Time{Time: when}
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{"/itemops"},
		WorkingDir: "/",
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		// Velero plugin binaries are copied here by init containers.
		Volumes: map[string]struct{}{"/plugins": {}},
		Labels:  labels,
	}
	return mutate.ConfigFile(img, cf)
}

// entry is one file or directory of a layer.
type entry struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte
	dir      bool
}

// baseLayer holds what distroless' static:nonroot gives a static binary,
// and /plugins.
func baseLayer(when time.Time) (v1.Layer, error) {
	entries, err := baseEntries()
	if err != nil {
		return nil, err
	}
	// Before tmp/, the last: the entries stay in the order of their names.
	return layer(when, slices.Insert(entries, len(entries)-1, entry{name: "plugins/", mode: 0o775, uid: uid, dir: true}))
}

// baseEntries are what distroless' static:nonroot gives a static binary:
// the users root, nobody and nonroot, a CA bundle, /tmp and nonroot's home.
func baseEntries() ([]entry, error) {
	var certs bytes.Buffer
	for root := range bundle.Roots() {
		if err := pem.Encode(&certs, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
	}
	return []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: certs.Bytes()},
		{name: "home/", mode: 0o755, dir: true},
		// Group 0 may do what the user may, as for any user a platform
		// assigns with group 0 (OpenShift's restricted-v2).
		{name: "home/nonroot/", mode: 0o770, uid: uid, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
	}, nil
}

// appLayer holds the manager and cp-plugin of dir.
func appLayer(dir string, when time.Time) (v1.Layer, error) {
	var entries []entry
	for _, name := range []string{"itemops", "cp-plugin"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{name: name, mode: 0o755, data: data})
	}
	return layer(when, entries)
}

// layer makes a gzipped tar layer of entries, in order.
func layer(when time.Time, entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: when}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}
