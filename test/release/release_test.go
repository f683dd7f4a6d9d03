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

package release

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/itemops/itemops/test/envtest"
)

const version, semver = "v0.0.0-test", "0.0.0-test"

// entries returns the names and contents of a tar archive's regular files,
// gunzipped first when gzipped.
func entries(g Gomega, path string, gzipped bool) map[string][]byte {
	f, err := os.Open(path)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	var r io.Reader = f
	if gzipped {
		zr, err := gzip.NewReader(f)
		g.Expect(err).NotTo(HaveOccurred())
		r = zr
	}
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		g.Expect(err).NotTo(HaveOccurred())
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		g.Expect(err).NotTo(HaveOccurred())
		out[strings.TrimPrefix(h.Name, "./")] = data
	}
}

// cachedBinary builds a tool once per machine (hack/cached-binary.sh).
func cachedBinary(g Gomega, root, name string) string {
	cmd := exec.Command(filepath.Join(root, "hack", "cached-binary.sh"), name)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred(), "building %s", name)
	return strings.TrimSpace(string(out))
}

func TestReleaseWritesEveryArtifact(t *testing.T) {
	g := NewWithT(t)
	root, err := envtest.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	dist := t.TempDir()
	// The maintainers' key pair, as cosign makes one.
	cosign := cachedBinary(g, root, "cosign")
	keys := t.TempDir()
	generate := exec.Command(cosign, "generate-key-pair")
	generate.Dir = keys
	generate.Env = append(os.Environ(), "COSIGN_PASSWORD=release-test")
	output, err := generate.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "cosign generate-key-pair: %s", output)

	cmd := exec.Command(filepath.Join(root, "hack", "release.sh"), version)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DIST="+dist, "COSIGN_KEY="+filepath.Join(keys, "cosign.key"), "COSIGN_PASSWORD=release-test")
	output, err = cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "hack/release.sh: %s", output)

	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(dist, name))
		g.Expect(err).NotTo(HaveOccurred())
		return string(data)
	}
	image := "ghcr.io/itemops/itemops:" + semver
	g.Expect(read("install.yaml")).To(And(HavePrefix("# itemops "+semver+":"), ContainSubstring("image: "+image),
		ContainSubstring("kind: CustomResourceDefinition"), ContainSubstring("kind: Deployment")))

	chart := entries(g, filepath.Join(dist, "itemops-"+semver+".tgz"), true)
	g.Expect(string(chart["itemops/Chart.yaml"])).To(And(ContainSubstring("version: "+semver), ContainSubstring("appVersion: "+semver)))
	g.Expect(chart).To(HaveKey("itemops/values.schema.json"))

	manifest := read("itemops.yaml")
	for _, platform := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64"} {
		archive := "kubectl-itemops_" + version + "_" + platform + ".tar.gz"
		files := entries(g, filepath.Join(dist, archive), true)
		g.Expect(files).To(HaveKey("kubectl-itemops"), archive)
		g.Expect(files).To(HaveKey("LICENSE"), archive)
		g.Expect(manifest).To(ContainSubstring(archive))
	}
	g.Expect(manifest).To(ContainSubstring("version: " + version))

	oci := entries(g, filepath.Join(dist, "itemops-image-"+version+".oci.tar"), false)
	var index ocispec.Index
	g.Expect(json.Unmarshal(oci["index.json"], &index)).To(Succeed())
	var platforms []string
	for _, m := range index.Manifests {
		g.Expect(m.Platform).NotTo(BeNil())
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
		g.Expect(oci).To(HaveKey("blobs/sha256/" + m.Digest.Encoded()))
	}
	g.Expect(platforms).To(ConsistOf("linux/amd64", "linux/arm64"))
	docker := entries(g, filepath.Join(dist, "itemops-image-"+version+"-linux-amd64.tar"), false)
	g.Expect(string(docker["manifest.json"])).To(ContainSubstring(`"RepoTags":["` + image + `"]`))

	// The OLM bundle, its image, and a catalog naming that image by its
	// digest.
	bundle := entries(g, filepath.Join(dist, "itemops-bundle-"+version+".tar.gz"), true)
	g.Expect(string(bundle["bundle/manifests/itemops.clusterserviceversion.yaml"])).To(And(
		ContainSubstring("name: itemops.v"+semver), ContainSubstring("image: "+image)))
	g.Expect(bundle).To(HaveKey("bundle/metadata/annotations.yaml"))
	bundleImage := entries(g, filepath.Join(dist, "itemops-bundle-image-"+version+".oci.tar"), false)
	var bundleIndex ocispec.Index
	g.Expect(json.Unmarshal(bundleImage["index.json"], &bundleIndex)).To(Succeed())
	g.Expect(bundleIndex.Manifests).To(HaveLen(1))
	bundleDigest := bundleIndex.Manifests[0].Digest
	g.Expect(bundleImage).To(HaveKey("blobs/sha256/" + bundleDigest.Encoded()))
	catalog := entries(g, filepath.Join(dist, "itemops-catalog-"+version+".tar.gz"), true)
	g.Expect(string(catalog["catalog/itemops/index.yaml"])).To(And(
		ContainSubstring("image: ghcr.io/itemops/itemops-bundle@"+bundleDigest.String()),
		ContainSubstring("schema: olm.channel"), ContainSubstring("- name: itemops.v"+semver)))
	g.Expect(string(catalog["catalog.Dockerfile"])).To(ContainSubstring("operators.operatorframework.io.index.configs.v1=/configs"))

	notes := read("RELEASE-NOTES.md")
	g.Expect(notes).To(HavePrefix("# itemops " + version + "\n"))
	g.Expect(notes).To(ContainSubstring("\n- "), "at least one change")

	// An SBOM of each binary: the modules linked into it, itemops' own
	// dependencies among them.
	for _, name := range []string{"itemops-" + version + ".cdx.json", "kubectl-itemops-" + version + ".cdx.json"} {
		var bom struct {
			BOMFormat  string `json:"bomFormat"`
			Metadata   struct{ Component struct{ Name string } }
			Components []struct {
				Name, Version, Purl string
			}
		}
		g.Expect(json.Unmarshal([]byte(read(name)), &bom)).To(Succeed(), name)
		g.Expect(bom.BOMFormat).To(Equal("CycloneDX"), name)
		g.Expect(bom.Metadata.Component.Name).To(Equal("github.com/itemops/itemops"), name)
		var purls []string
		for _, c := range bom.Components {
			purls = append(purls, c.Purl)
		}
		g.Expect(purls).To(ContainElement(HavePrefix("pkg:golang/k8s.io/client-go@v0.")), name)
		if strings.HasPrefix(name, "itemops-") {
			g.Expect(purls).To(ContainElement(HavePrefix("pkg:golang/github.com/vmware-tanzu/velero@v1.")), name)
		}
	}

	// The signature checks offline with the public key, and fails for
	// checksums changed after signing.
	verify := func(sums string) ([]byte, error) {
		return exec.Command(cosign, "verify-blob", "--key", filepath.Join(keys, "cosign.pub"),
			"--signature", filepath.Join(dist, "SHA256SUMS.sig"), "--insecure-ignore-tlog", sums).CombinedOutput()
	}
	output, err = verify(filepath.Join(dist, "SHA256SUMS"))
	g.Expect(err).NotTo(HaveOccurred(), "cosign verify-blob: %s", output)
	g.Expect(string(output)).To(ContainSubstring("Verified OK"))
	tampered := filepath.Join(t.TempDir(), "SHA256SUMS")
	g.Expect(os.WriteFile(tampered, []byte(strings.Replace(read("SHA256SUMS"), "install.yaml", "install.yml", 1)), 0o644)).To(Succeed())
	output, err = verify(tampered)
	g.Expect(err).To(HaveOccurred(), "a changed SHA256SUMS verified: %s", output)

	// SHA256SUMS names every other file, with its checksum.
	listed := map[string]string{}
	s := bufio.NewScanner(strings.NewReader(read("SHA256SUMS")))
	for s.Scan() {
		sum, name, ok := strings.Cut(s.Text(), "  ")
		g.Expect(ok).To(BeTrue(), s.Text())
		listed[name] = sum
	}
	all, err := os.ReadDir(dist)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(listed).To(HaveLen(len(all) - 2))
	for _, e := range all {
		if e.Name() == "SHA256SUMS" || e.Name() == "SHA256SUMS.sig" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dist, e.Name()))
		g.Expect(err).NotTo(HaveOccurred())
		sum := sha256.Sum256(data)
		g.Expect(listed).To(HaveKeyWithValue(e.Name(), hex.EncodeToString(sum[:])))
	}
}
