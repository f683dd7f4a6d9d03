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

func TestCountListElements(t *testing.T) {
	cases := map[string]int{
		`[]`: 0, ` [ ] `: 0, `[{}]`: 1, `[{},{}]`: 2,
		`[{"a":[1,2,3]},{"b":"x,y]"},3]`: 3, `[ "a\"],", {} ]`: 2, `[[],[[]],{}]`: 3,
	}
	for in, want := range cases {
		t.Run(in, func(t *testing.T) {
			g := NewWithT(t)
			n, err := countListElements(strings.NewReader(in), 100)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(n).To(Equal(want))
		})
	}
	t.Run("not a list", func(t *testing.T) {
		_, err := countListElements(strings.NewReader(`{"a":1}`), 10)
		NewWithT(t).Expect(err).To(MatchError("not a JSON list"))
	})
	t.Run("stops one past the limit", func(t *testing.T) {
		n, err := countListElements(strings.NewReader(`[1,2,3,4,5,6]`), 3)
		g := NewWithT(t)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(Equal(4))
	})
}
