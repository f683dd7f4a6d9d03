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

package image

import (
	"archive/tar"
	"compress/gzip"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/itemops/itemops/test/envtest"
)

// layout is an OCI image layout on disk.
type layout string

func (l layout) blob(g Gomega, d digest.Digest) []byte {
	data, err := os.ReadFile(filepath.Join(string(l), "blobs", d.Algorithm().String(), d.Encoded()))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(digest.FromBytes(data)).To(Equal(d), "a blob's content matches its digest")
	return data
}

func (l layout) decode(g Gomega, d digest.Digest, v any) {
	g.Expect(json.Unmarshal(l.blob(g, d), v)).To(Succeed())
}

// file is a regular file, directory or link of an image's layers.
type file struct {
	header *tar.Header
	data   []byte
}

// files reads every layer of an image, later layers over earlier ones.
func (l layout) files(g Gomega, m ocispec.Manifest) map[string]file {
	files := map[string]file{}
	for _, desc := range m.Layers {
		g.Expect(desc.MediaType).To(Equal(ocispec.MediaTypeImageLayerGzip))
		zr, err := gzip.NewReader(strings.NewReader(string(l.blob(g, desc.Digest))))
		g.Expect(err).NotTo(HaveOccurred())
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			g.Expect(err).NotTo(HaveOccurred())
			data, err := io.ReadAll(tr)
			g.Expect(err).NotTo(HaveOccurred())
			files[path.Clean("/"+h.Name)] = file{header: h, data: data}
		}
	}
	return files
}

// TestTheBuiltImage builds the image as `make image` does (hack/image.sh,
// here for this machine's platform only) and inspects what it holds: the
// config, the files of its layers and the manager binary in them.
func TestTheBuiltImage(t *testing.T) {
	g := NewWithT(t)
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux")
	}
	root, err := envtest.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	out := t.TempDir()
	platform := "linux/" + runtime.GOARCH
	const name = "example.org/itemops:v0.0.0-test"
	cmd := exec.Command(filepath.Join(root, "hack", "image.sh"))
	cmd.Dir = root
	// With its own flags alone, as dockerfileBuild builds: not those of the
	// environment (make test sets GOFLAGS).
	cmd.Env = append(os.Environ(), "GOFLAGS=", "OUT="+out, "IMG="+name, "VERSION=v0.0.0-test",
		"PLATFORMS="+platform, "TARBALL_PLATFORM="+platform)
	output, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "hack/image.sh: %s", output)

	oci := layout(filepath.Join(out, "oci"))
	var index ocispec.Index
	data, err := os.ReadFile(filepath.Join(string(oci), "index.json"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(json.Unmarshal(data, &index)).To(Succeed())
	g.Expect(index.Manifests).To(HaveLen(1))
	desc := index.Manifests[0]
	g.Expect(desc.MediaType).To(Equal(ocispec.MediaTypeImageManifest))
	g.Expect(desc.Platform).NotTo(BeNil())
	g.Expect(desc.Platform.OS + "/" + desc.Platform.Architecture).To(Equal(platform))
	g.Expect(desc.Annotations).To(HaveKeyWithValue(ocispec.AnnotationRefName, "v0.0.0-test"))

	var manifest ocispec.Manifest
	oci.decode(g, desc.Digest, &manifest)
	var config ocispec.Image
	oci.decode(g, manifest.Config.Digest, &config)
	g.Expect(config.OS + "/" + config.Architecture).To(Equal(platform))
	g.Expect(config.Config.User).To(Equal("65532:65532"), "non-root, as the chart's securityContext expects")
	g.Expect(config.Config.Entrypoint).To(Equal([]string{"/itemops"}))
	g.Expect(config.Config.Cmd).To(BeEmpty())
	g.Expect(config.Config.Volumes).To(HaveKey("/plugins"))
	revision, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(config.Config.Labels).To(And(
		HaveKeyWithValue(ocispec.AnnotationVersion, "v0.0.0-test"),
		HaveKeyWithValue(ocispec.AnnotationRevision, HavePrefix(strings.TrimSpace(string(revision)))),
		HaveKeyWithValue(ocispec.AnnotationSource, "https://github.com/itemops/itemops"),
		HaveKeyWithValue(ocispec.AnnotationLicenses, "Apache-2.0"),
		HaveKey(ocispec.AnnotationCreated)))

	// What the Dockerfile says of the image, the built one says too.
	recipe := strings.Join(dockerfile(t, root), "\n")
	g.Expect(recipe).To(ContainSubstring("\nUSER " + config.Config.User + "\n"))
	g.Expect(recipe).To(ContainSubstring(`ENTRYPOINT ["/itemops"]`))
	g.Expect(recipe).To(ContainSubstring(`VOLUME ["/plugins"]`))
	for key := range config.Config.Labels {
		if key != ocispec.AnnotationCreated {
			g.Expect(recipe).To(ContainSubstring(key+"="), "the Dockerfile's LABEL %s", key)
		}
	}

	files := oci.files(g, manifest)
	for name, f := range files {
		base := path.Base(name)
		g.Expect(base).NotTo(BeElementOf("sh", "bash", "ash", "dash", "busybox", "toybox"), "no shell in the image: %s", name)
		g.Expect(name).NotTo(Or(HavePrefix("/bin/"), HavePrefix("/usr/")), "nothing but the manager runs: %s", name)
		if f.header.Typeflag == tar.TypeReg && f.header.Mode&0o111 != 0 {
			g.Expect(name).To(BeElementOf("/itemops", "/cp-plugin"), "the only programs")
		}
	}
	g.Expect(files).To(HaveKey("/etc/ssl/certs/ca-certificates.crt"), "plugins reach object storage over TLS")
	g.Expect(strings.Count(string(files["/etc/ssl/certs/ca-certificates.crt"].data), "BEGIN CERTIFICATE")).To(BeNumerically(">", 100))
	g.Expect(string(files["/etc/passwd"].data)).To(ContainSubstring("nonroot:x:65532:65532:"))
	g.Expect(files["/tmp"].header.Mode & 0o1777).To(Equal(int64(0o1777)))
	// Any user a platform assigns with group 0 may use them as the image's own.
	for _, dir := range []string{"/plugins", "/home/nonroot"} {
		h := files[dir].header
		g.Expect([]int{h.Uid, h.Gid}).To(Equal([]int{65532, 0}), dir)
		g.Expect(h.Mode&0o070>>3).To(Equal(h.Mode&0o700>>6), "%s: group 0 may do what its user may (mode %#o)", dir, h.Mode)
	}

	// The manager in the image: static, and built with the Dockerfile's flags.
	inImage := filepath.Join(t.TempDir(), "itemops")
	g.Expect(os.WriteFile(inImage, files["/itemops"].data, 0o755)).To(Succeed())
	expectStatic(g, inImage)
	settings := func(bin string) map[string]string {
		info, err := buildinfo.ReadFile(bin)
		g.Expect(err).NotTo(HaveOccurred())
		s := map[string]string{}
		for _, kv := range info.Settings {
			s[kv.Key] = kv.Value
		}
		return s
	}
	fromDockerfile := settings(dockerfileBuild(t, root))
	g.Expect(settings(inImage)).To(Equal(fromDockerfile), "make image and the Dockerfile build the manager alike")
	// Go records no -ldflags with -trimpath; expectStatic saw -s's effect.
	g.Expect(fromDockerfile).To(And(HaveKeyWithValue("CGO_ENABLED", "0"), HaveKeyWithValue("-trimpath", "true"),
		HaveKeyWithValue("-gcflags", "all=-dwarf=false")))

	var size int64
	for _, l := range manifest.Layers {
		size += l.Size
	}
	t.Logf("image %s: %d layers, %.1f MiB compressed", platform, len(manifest.Layers), float64(size)/(1<<20))
	g.Expect(size).To(BeNumerically("<", 60<<20), "the image stays small: a static binary and a few files")

	// The tarball docker load reads: the same config, under its name.
	tarball, err := os.Open(filepath.Join(out, "itemops.tar"))
	g.Expect(err).NotTo(HaveOccurred())
	defer tarball.Close()
	tr := tar.NewReader(tarball)
	var saved []struct {
		Config   string
		RepoTags []string
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		if h.Name == "manifest.json" {
			g.Expect(json.NewDecoder(tr).Decode(&saved)).To(Succeed())
		}
	}
	g.Expect(saved).To(HaveLen(1))
	g.Expect(saved[0].RepoTags).To(Equal([]string{name}))
	g.Expect(saved[0].Config).To(ContainSubstring(manifest.Config.Digest.Encoded()), "the same image as the layout's")
}
