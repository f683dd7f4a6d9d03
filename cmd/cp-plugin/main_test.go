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
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestCopyMakesAnExecutableAndLeavesNothingElse(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	source := filepath.Join(dir, "velero")
	g.Expect(os.WriteFile(source, []byte("#!/bin/sh\necho plugin\n"), 0o600)).To(Succeed())
	target := filepath.Join(dir, "plugins", "velero")
	g.Expect(os.Mkdir(filepath.Dir(target), 0o755)).To(Succeed())

	g.Expect(copyExecutable(source, target)).To(Succeed())
	info, err := os.Stat(target)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o755)))
	got, err := os.ReadFile(target)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("#!/bin/sh\necho plugin\n"))
	entries, err := os.ReadDir(filepath.Dir(target))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(1), "no temporary file is left")

	err = copyExecutable(filepath.Join(dir, "missing"), filepath.Join(dir, "plugins", "other"))
	g.Expect(err).To(MatchError(ContainSubstring("missing")))
	entries, _ = os.ReadDir(filepath.Dir(target))
	g.Expect(entries).To(HaveLen(1))
}
