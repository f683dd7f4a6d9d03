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

package store

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestCountElements(t *testing.T) {
	wide := Limits{Records: 100, Items: 100}
	cases := map[string]counts{
		`[]`: {}, ` [ ] `: {}, `[{}]`: {records: 1}, `[{},{}]`: {records: 2},
		`[{"a":[1,2,3]},{"b":"x,y]"},3]`: {records: 3, items: 3},
		`[ "a\"],", {} ]`:                {records: 2},
		`[[],[[]],{}]`:                   {records: 3, items: 1},
		`[{"spec":{"p":[{},{},{}]}},{"p":[[1,[2,3]],[]]}]`: {records: 2, items: 9},
		`[{"p":[ ]},{"p":["]",",",{"q":"["}]}]`:            {records: 2, items: 3},
	}
	for in, want := range cases {
		t.Run(in, func(t *testing.T) {
			g := NewWithT(t)
			n, err := countElements(strings.NewReader(in), wide)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(n).To(Equal(want))
		})
	}
	t.Run("not a list", func(t *testing.T) {
		_, err := countElements(strings.NewReader(`{"a":1}`), wide)
		NewWithT(t).Expect(err).To(MatchError("not a JSON list"))
	})
	t.Run("records: stops one past the limit", func(t *testing.T) {
		n, err := countElements(strings.NewReader(`[1,2,3,4,5,6]`), Limits{Records: 3, Items: 100})
		g := NewWithT(t)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(Equal(counts{records: 4}))
	})
	t.Run("items of all records together: stops one past the limit", func(t *testing.T) {
		n, err := countElements(strings.NewReader(`[{"p":[{},{}]},{"p":[{},{},{}]},{"p":[{}]}]`), Limits{Records: 100, Items: 3})
		g := NewWithT(t)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(Equal(counts{records: 2, items: 4}))
	})
	t.Run("too deep", func(t *testing.T) {
		in := "[" + strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth) + "]"
		n, err := countElements(strings.NewReader(in), wide)
		g := NewWithT(t)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.deep).To(BeTrue())
		in = "[" + strings.Repeat(`{"a":`, maxDepth-1) + "1" + strings.Repeat("}", maxDepth-1) + "]"
		n, err = countElements(strings.NewReader(in), wide)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(Equal(counts{records: 1}))
	})
}
