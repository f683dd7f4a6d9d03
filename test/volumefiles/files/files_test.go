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

package files

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestSumOfAWrittenTree(t *testing.T) {
	g := NewWithT(t)
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	g.Expect(Write(a, "shop/data-0", 8)).To(Succeed())
	g.Expect(Write(b, "shop/data-0", 8)).To(Succeed())
	g.Expect(Write(c, "shop/data-1", 8)).To(Succeed())
	sumA, err := Sum(a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sumA).To(HaveSuffix(" 8388608"), "the total size")
	g.Expect(Sum(b)).To(Equal(sumA), "the same seed, the same tree")
	g.Expect(Sum(c)).NotTo(Equal(sumA), "another seed")

	// One byte changed, or a file moved, changes the sum.
	name := filepath.Join(b, "part-1", "file-3.bin")
	data, err := os.ReadFile(name)
	g.Expect(err).NotTo(HaveOccurred())
	data[100] ^= 1
	g.Expect(os.WriteFile(name, data, 0o644)).To(Succeed())
	g.Expect(Sum(b)).NotTo(Equal(sumA))
	g.Expect(os.Rename(filepath.Join(a, "part-0", "file-0.bin"), filepath.Join(a, "part-1", "file-0.bin"))).To(Succeed())
	g.Expect(Sum(a)).NotTo(Equal(sumA))

	_, err = Sum(t.TempDir())
	g.Expect(err).To(MatchError(ContainSubstring("no file")), "an empty volume is not a restored one")
}

// A restore's marks in a skipped top-level directory leave the sum as it
// was; the same files anywhere else, or unskipped, change it.
func TestSumSkipsATopLevelDirectory(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(Write(dir, "shop/data-0", 4)).To(Succeed())
	want, err := Sum(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.MkdirAll(filepath.Join(dir, ".velero"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, ".velero", "3f9d2f0a"), nil, 0o644)).To(Succeed())
	g.Expect(Sum(dir, ".velero")).To(Equal(want))
	g.Expect(Sum(dir)).NotTo(Equal(want), "not skipped")
	g.Expect(os.MkdirAll(filepath.Join(dir, "part-0", ".velero"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "part-0", ".velero", "x"), nil, 0o644)).To(Succeed())
	g.Expect(Sum(dir, ".velero")).NotTo(Equal(want), "only the top level's is skipped")
}
