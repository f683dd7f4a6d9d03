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
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// krewManifest is the part of a krew Plugin manifest that krew checks
// before it installs.
type krewManifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestArchivesAreReproducibleAndNamedByTheManifest builds the archive of
// this machine's platform twice and checks the manifest krew would install
// it by.
func TestArchivesAreReproducibleAndNamedByTheManifest(t *testing.T) {
	g := NewWithT(t)
	root, err := filepath.Abs("../..")
	g.Expect(err).NotTo(HaveOccurred())
	// The tool runs as make krew runs it: built on its own, not inside this
	// (race-instrumented) test binary.
	tool := filepath.Join(t.TempDir(), "krew")
	build := exec.Command("go", "build", "-o", tool, ".")
	build.Stderr = os.Stderr
	g.Expect(build.Run()).To(Succeed())
	name := "kubectl-itemops_v9.8.7_" + runtime.GOOS + "_" + runtime.GOARCH + ".tar.gz"
	var sums []string
	var out, manifestPath string
	for range 2 {
		out = t.TempDir()
		manifestPath = filepath.Join(out, "itemops.yaml")
		run := exec.Command(tool, "-version", "v9.8.7", "-out", out, "-manifest", manifestPath,
			"-platforms", runtime.GOOS+"/"+runtime.GOARCH, "-release-url", "https://example.com/releases")
		run.Dir, run.Stderr = root, os.Stderr
		g.Expect(run.Run()).To(Succeed())
		data, err := os.ReadFile(filepath.Join(out, name))
		g.Expect(err).NotTo(HaveOccurred())
		sum := sha256.Sum256(data)
		sums = append(sums, hex.EncodeToString(sum[:]))
	}
	g.Expect(sums[0]).To(Equal(sums[1]), "the same sources give the same archive")
	data, err := os.ReadFile(filepath.Join(out, name))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries(g, data)).To(Equal(map[string]int64{"LICENSE": 0o644, "kubectl-itemops": 0o755, "kubectl_complete-itemops": 0o755}))

	manifestData, err := os.ReadFile(manifestPath)
	g.Expect(err).NotTo(HaveOccurred())
	var m krewManifest
	g.Expect(yaml.UnmarshalStrict(manifestData, &m)).To(Succeed())
	g.Expect(m.APIVersion).To(Equal("krew.googlecontainertools.github.com/v1alpha2"))
	g.Expect(m.Kind).To(Equal("Plugin"))
	g.Expect(m.Metadata.Name).To(Equal("itemops"))
	g.Expect(m.Spec.Version).To(Equal("v9.8.7"))
	g.Expect(m.Spec.Platforms).To(HaveLen(1))
	p := m.Spec.Platforms[0]
	g.Expect(p.Selector.MatchLabels).To(Equal(map[string]string{"os": runtime.GOOS, "arch": runtime.GOARCH}))
	g.Expect(p.URI).To(Equal("https://example.com/releases/v9.8.7/" + name))
	g.Expect(p.SHA256).To(Equal(sums[1]))
	g.Expect(p.Bin).To(Equal("kubectl-itemops"))
	for _, f := range p.Files {
		g.Expect(entries(g, data)).To(HaveKey(f.From))
	}
}

// TestTheCommittedManifestNamesEveryPlatform checks krew/itemops.yaml.
func TestTheCommittedManifestNamesEveryPlatform(t *testing.T) {
	g := NewWithT(t)
	data, err := os.ReadFile("../../krew/itemops.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	var m krewManifest
	g.Expect(yaml.UnmarshalStrict(data, &m)).To(Succeed())
	var platforms []string
	for _, p := range m.Spec.Platforms {
		platforms = append(platforms, p.Selector.MatchLabels["os"]+"/"+p.Selector.MatchLabels["arch"])
		g.Expect(p.SHA256).To(MatchRegexp(`^[0-9a-f]{64}$`))
		g.Expect(p.URI).To(HaveSuffix("/" + m.Spec.Version + "/kubectl-itemops_" + m.Spec.Version + "_" +
			p.Selector.MatchLabels["os"] + "_" + p.Selector.MatchLabels["arch"] + ".tar.gz"))
	}
	g.Expect(platforms).To(ConsistOf("linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"))
}

// entries are the names and modes of a gzipped tar's files.
func entries(g Gomega, data []byte) map[string]int64 {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	g.Expect(err).NotTo(HaveOccurred())
	tr := tar.NewReader(zr)
	found := map[string]int64{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return found
		}
		g.Expect(err).NotTo(HaveOccurred())
		found[h.Name] = h.Mode
	}
}
