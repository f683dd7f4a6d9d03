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
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// bundleImage writes the OLM bundle image of a bundle directory (`make
// bundle`'s manifests/ and metadata/), as operator-sdk's bundle.Dockerfile
// builds one FROM scratch: one layer with the two directories, and the
// annotations of metadata/annotations.yaml as the image's labels, where
// tools that read a bundle image without unpacking it look. Its files and
// the image carry the commit's time, so the same bundle gives the same
// digest, which it prints: a catalog names the bundle by it.
func bundleImage(dir, ociDir, tarPath, tag, version, revision string, when time.Time) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "metadata", "annotations.yaml"))
	if err != nil {
		return err
	}
	var metadata struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.UnmarshalStrict(raw, &metadata); err != nil {
		return fmt.Errorf("metadata/annotations.yaml: %w", err)
	}
	if metadata.Annotations["operators.operatorframework.io.bundle.mediatype.v1"] == "" {
		return fmt.Errorf("%s is not a bundle: metadata/annotations.yaml names no bundle media type", dir)
	}
	labels := map[string]string{
		"org.opencontainers.image.title":    "itemops-bundle",
		"org.opencontainers.image.source":   "https://github.com/itemops/itemops",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.created":  when.Format(time.RFC3339),
	}
	maps.Copy(labels, metadata.Annotations)

	var entries []entry
	for _, sub := range []string{"manifests", "metadata"} {
		files, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			return err
		}
		entries = append(entries, entry{name: sub + "/", mode: 0o755, dir: true})
		for _, f := range files { // by name
			if f.IsDir() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, sub, f.Name()))
			if err != nil {
				return err
			}
			entries = append(entries, entry{name: sub + "/" + f.Name(), mode: 0o644, data: data})
		}
	}
	content, err := layer(when, entries)
	if err != nil {
		return err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: content, History: v1.History{Created: v1.Time{Time: when},
		CreatedBy: "the bundle's manifests/ and metadata/"}})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	// A bundle holds no program: any platform may pull it.
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: when}
	cf.Config = v1.Config{Labels: labels}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	return writeImage(img, ref, ociDir, tarPath)
}
