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
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/itemops/itemops/test/envtest"
)

const module = "github.com/itemops/itemops"

// dockerfile returns the Dockerfile's lines.
func dockerfile(t *testing.T, root string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	return lines
}

// buildLine is the Dockerfile's `RUN CGO_ENABLED=0 ... go build ...`.
var buildLine = regexp.MustCompile(`^RUN (CGO_ENABLED=\S+) .*go build (.*) -o itemops \.$`)

// dockerfileBuild builds the manager for linux with the Dockerfile's own
// command and flags, and returns the binary.
func dockerfileBuild(t *testing.T, root string) string {
	t.Helper()
	g := NewWithT(t)
	var cgo, flags string
	for _, line := range dockerfile(t, root) {
		if m := buildLine.FindStringSubmatch(line); m != nil {
			cgo, flags = m[1], m[2]
		}
	}
	g.Expect(cgo).To(Equal("CGO_ENABLED=0"), "the Dockerfile builds without cgo")

	out := filepath.Join(t.TempDir(), "itemops")
	args := []string{"build"}
	for _, f := range regexp.MustCompile(`"[^"]*"|\S+`).FindAllString(flags, -1) {
		args = append(args, strings.Trim(f, `"`))
	}
	cmd := exec.Command("go", append(args, "-o", out, ".")...)
	cmd.Dir = root
	// The Dockerfile's flags alone: not those of the environment (make test
	// sets GOFLAGS).
	cmd.Env = append(os.Environ(), cgo, "GOFLAGS=", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	output, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", output)
	return out
}

// expectStatic checks that a binary links nothing at run time.
func expectStatic(g Gomega, path string) {
	bin, err := elf.Open(path)
	g.Expect(err).NotTo(HaveOccurred())
	defer bin.Close()
	for _, p := range bin.Progs {
		g.Expect(p.Type).NotTo(Equal(elf.PT_INTERP), "a static binary has no dynamic loader")
		g.Expect(p.Type).NotTo(Equal(elf.PT_DYNAMIC), "a static binary links nothing at run time")
	}
	libs, err := bin.ImportedLibraries()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(libs).To(BeEmpty())
	g.Expect(bin.Section(".symtab")).To(BeNil(), "-s strips the symbol table, as the Dockerfile asks")
}

func TestTheImagesBinaryIsStatic(t *testing.T) {
	g := NewWithT(t)
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux")
	}
	root, err := envtest.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	expectStatic(g, dockerfileBuild(t, root))
}

// TestTheDockerfileCopiesEverySourceDirectory: a package of the module the
// manager imports but the Dockerfile does not copy would break the image build.
func TestTheDockerfileCopiesEverySourceDirectory(t *testing.T) {
	g := NewWithT(t)
	root, err := envtest.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".")
	cmd.Dir = root
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred())
	copied := map[string]bool{}
	for _, line := range dockerfile(t, root) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "COPY" {
			copied[strings.TrimSuffix(f[1], "/")] = true
		}
	}
	needed := map[string]bool{}
	for _, pkg := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(pkg, module+"/")
		if !ok {
			continue
		}
		needed[strings.SplitN(rel, "/", 2)[0]] = true
	}
	g.Expect(needed).NotTo(BeEmpty())
	for dir := range needed {
		g.Expect(copied).To(HaveKey(dir), "the Dockerfile must COPY %s/", dir)
	}
	g.Expect(copied).To(HaveKey("main.go"))
}
