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

// Command krew builds the archives of the kubectl plugin kubectl-itemops,
// one per platform, and writes the krew plugin manifest that names them with
// their checksums.
//
// The archives are reproducible: the binaries are built with -trimpath and
// without VCS stamps (and without debug information: the manager image's
// flags, so the linux builds share its compiles), and the tar entries carry
// fixed times and owners, so the same toolchain gives the same checksums.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
	"time"
)

// Platform is one os/arch a plugin archive is built for.
type Platform struct{ OS, Arch string }

// Archive is one built archive.
type Archive struct {
	Platform
	Name, SHA256 string
}

// Options of a build.
type Options struct {
	// Root is the repository's root.
	Root    string
	Version string
	// Out receives the archives.
	Out       string
	Platforms []Platform
	// Manifest is the path of the krew manifest to write.
	Manifest string
	// ReleaseURL is where the release's files are downloaded from.
	ReleaseURL string
}

// archiveTime is the time of every archive entry, so that archives are the
// same from build to build.
var archiveTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func main() {
	opts := Options{Root: "."}
	platforms := flag.String("platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "os/arch pairs, comma separated")
	flag.StringVar(&opts.Version, "version", "", "the release, v0.1.0 for example")
	flag.StringVar(&opts.Out, "out", "dist/krew", "directory of the archives")
	flag.StringVar(&opts.Manifest, "manifest", "krew/itemops.yaml", "path of the krew manifest to write")
	flag.StringVar(&opts.ReleaseURL, "release-url", "https://github.com/itemops/itemops/releases/download", "base of the release downloads")
	flag.Parse()
	for _, p := range strings.Split(*platforms, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok {
			fmt.Fprintf(flag.CommandLine.Output(), "krew: platform %q is not os/arch\n", p)
			exit(2)
		}
		opts.Platforms = append(opts.Platforms, Platform{OS: os, Arch: arch})
	}
	if opts.Version == "" || !strings.HasPrefix(opts.Version, "v") {
		fmt.Fprintln(flag.CommandLine.Output(), "krew: -version must be a release such as v0.1.0")
		exit(2)
	}
	archives, err := Build(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "krew:", err)
		exit(1)
	}
	for _, a := range archives {
		fmt.Printf("%s  %s\n", a.SHA256, filepath.Join(opts.Out, a.Name))
	}
	fmt.Println("wrote", opts.Manifest)
}

func exit(code int) { os.Exit(code) }

// Build builds one archive per platform and writes the manifest.
func Build(opts Options) ([]Archive, error) {
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "kubectl-itemops-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()
	var archives []Archive
	for _, p := range opts.Platforms {
		binary := filepath.Join(work, p.OS+"-"+p.Arch, "kubectl-itemops")
		build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-gcflags=all=-dwarf=false", "-ldflags=-s -w -buildid=", "-o", binary, "./cmd/kubectl-itemops")
		build.Dir, build.Stdout, build.Stderr = opts.Root, os.Stderr, os.Stderr
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
		if err := build.Run(); err != nil {
			return nil, fmt.Errorf("building kubectl-itemops for %s/%s: %w", p.OS, p.Arch, err)
		}
		a := Archive{Platform: p, Name: fmt.Sprintf("kubectl-itemops_%s_%s_%s.tar.gz", opts.Version, p.OS, p.Arch)}
		a.SHA256, err = writeArchive(filepath.Join(opts.Out, a.Name), map[string]string{
			"kubectl-itemops":          binary,
			"kubectl_complete-itemops": filepath.Join(opts.Root, "cmd", "kubectl-itemops", "kubectl_complete-itemops"),
			"LICENSE":                  filepath.Join(opts.Root, "LICENSE"),
		})
		if err != nil {
			return nil, err
		}
		archives = append(archives, a)
	}
	return archives, writeManifest(opts, archives)
}

// writeArchive writes a gzipped tar of files (name in the archive → path)
// and returns its SHA-256.
func writeArchive(path string, files map[string]string) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	sum := sha256.New()
	zw, err := gzip.NewWriterLevel(io.MultiWriter(f, sum), gzip.BestCompression)
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(zw)
	for _, name := range []string{"LICENSE", "kubectl-itemops", "kubectl_complete-itemops"} {
		data, err := os.ReadFile(files[name])
		if err != nil {
			return "", err
		}
		mode := int64(0o755)
		if name == "LICENSE" {
			mode = 0o644
		}
		header := &tar.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: archiveTime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(header); err != nil {
			return "", err
		}
		if _, err := tw.Write(data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(sum.Sum(nil)), f.Close()
}

var manifest = template.Must(template.New("krew").Parse(`# The krew plugin manifest of kubectl-itemops, written by make krew (hack/krew).
# Install from a clone: make krew, then
#   kubectl krew install --manifest=krew/itemops.yaml --archive=dist/krew/kubectl-itemops_<version>_<os>_<arch>.tar.gz
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: itemops
spec:
  version: {{ .Version }}
  homepage: https://github.com/itemops/itemops
  shortDescription: Watch Velero backups' plugin operations move, wait for them, cancel them
  description: |
    Shows the asynchronous operations of Velero Backups and Restores (CSI
    data-mover uploads, snapshots still copying) that the itemops operator
    follows: one row per Backup or Restore with counts, bytes, progress and
    ETA; a live view with a progress bar per operation that ends with the
    outcome as its exit code; and cancel. Needs itemops installed beside Velero.
  caveats: |
    kubectl itemops works in Velero's namespace (-n, else the velero CLI's).
    For shell completion, put kubectl_complete-itemops from the plugin's
    directory on your PATH (kubectl v1.26 or later).
  platforms:
{{- range .Archives }}
  - selector:
      matchLabels:
        os: {{ .OS }}
        arch: {{ .Arch }}
    uri: {{ $.ReleaseURL }}/{{ $.Version }}/{{ .Name }}
    sha256: {{ .SHA256 }}
    bin: kubectl-itemops
    files:
    - from: kubectl-itemops
      to: .
    - from: kubectl_complete-itemops
      to: .
    - from: LICENSE
      to: .
{{- end }}
`))

func writeManifest(opts Options, archives []Archive) error {
	if err := os.MkdirAll(filepath.Dir(opts.Manifest), 0o755); err != nil {
		return err
	}
	f, err := os.Create(opts.Manifest)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := manifest.Execute(f, struct {
		Options
		Archives []Archive
	}{opts, archives}); err != nil {
		return err
	}
	return f.Close()
}
