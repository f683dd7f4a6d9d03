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

// Package files writes a directory of files of pseudo-random bytes and sums
// a directory tree: the data of the real-node suite's volumes.
package files

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// filesPerVolume is how many files Write spreads the bytes over, in two
// directories, so that a restore must give back a tree and not one file.
const filesPerVolume = 4

// Write writes mib MiB of bytes derived from seed into dir, as
// filesPerVolume files. The bytes do not compress or deduplicate: a
// backup of them moves them all.
func Write(dir, seed string, mib int) error {
	if mib < filesPerVolume {
		return fmt.Errorf("at least %d MiB", filesPerVolume)
	}
	key := sha256.Sum256([]byte(seed))
	random := rand.NewChaCha8(key)
	for i := range filesPerVolume {
		name := filepath.Join(dir, fmt.Sprintf("part-%d", i%2), fmt.Sprintf("file-%d.bin", i))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		f, err := os.Create(name)
		if err != nil {
			return err
		}
		size := int64(mib) << 20 / filesPerVolume
		if _, err := io.CopyN(f, random, size); err != nil {
			_ = f.Close()
			return fmt.Errorf("writing %s: %w", name, err)
		}
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// Sum is the SHA-256 of the tree under dir: of each regular file's path
// relative to dir and SHA-256, in path order, followed by the total size.
// Directories, owners and modes do not count: a restore may change them.
// Top-level directories named in skip are left out (Velero's file-system
// restore leaves its marks in .velero/ when the restored pod's user may
// not remove them).
func Sum(dir string, skip ...string) (string, error) {
	type entry struct{ path, sum string }
	var (
		entries []entry
		total   int64
	)
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() && filepath.Dir(path) == filepath.Clean(dir) && slices.Contains(skip, e.Name()) {
			return fs.SkipDir
		}
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return err
		}
		total += n
		entries = append(entries, entry{rel, hex.EncodeToString(h.Sum(nil))})
		return nil
	})
	if err != nil {
		return "", err
	}
	if len(entries) == 0 {
		return "", fmt.Errorf("no file under %s", dir)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%s %s\n", e.sum, e.path)
	}
	return fmt.Sprintf("%x %d", h.Sum(nil), total), nil
}
