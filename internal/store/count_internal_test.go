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
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/sync/semaphore"

	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
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

// slowBucket serves one gzip file, counting the fetches under way.
type slowBucket struct {
	velero.ObjectStore
	file             []byte
	mu               sync.Mutex
	now, most        int
	release          chan struct{}
	started, fetched atomic.Int32
}

func (b *slowBucket) GetObject(string, string) (io.ReadCloser, error) {
	b.mu.Lock()
	b.now++
	b.most = max(b.most, b.now)
	b.mu.Unlock()
	b.started.Add(1)
	<-b.release
	b.mu.Lock()
	b.now--
	b.mu.Unlock()
	b.fetched.Add(1)
	return io.NopCloser(bytes.NewReader(b.file)), nil
}

// Files fetched at once hold at most two of the largest file's worth of
// memory before their decoding takes its share: the other fetches wait.
func TestFetchesAreBounded(t *testing.T) {
	g := NewWithT(t)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write([]byte(`[{"spec":{}}]`))
	_ = w.Close()
	bucket := &slowBucket{file: gz.Bytes(), release: make(chan struct{})}
	limits := Limits{}.withDefaults()
	s := boundedObjectStore{ObjectStore: bucket, ctx: context.Background(), limits: limits,
		budget: semaphore.NewWeighted(limits.Inflated), fetching: semaphore.NewWeighted(2 * limits.Compressed)}
	var readers sync.WaitGroup
	for range 10 {
		readers.Go(func() {
			r, err := s.GetObject("bucket", "key")
			if err == nil {
				_ = r.Close()
			}
		})
	}
	g.Eventually(bucket.started.Load).Should(Equal(int32(2)))
	g.Consistently(bucket.started.Load).WithTimeout(200*time.Millisecond).Should(Equal(int32(2)), "the other fetches wait")
	close(bucket.release)
	readers.Wait()
	g.Expect(bucket.fetched.Load()).To(Equal(int32(10)))
	g.Expect(bucket.most).To(Equal(2))
}

func TestCountElementsOfOtherShapes(t *testing.T) {
	wide := Limits{Records: 100, Items: 100}
	for in, want := range map[string]string{
		`{"x":"` + strings.Repeat("a", 64) + `"}`: "not a JSON list",
		`"a list?"`:    "not a JSON list",
		`12345`:        "not a JSON list",
		`null`:         "not a JSON list",
		``:             "empty",
		`  `:           "empty",
		`[{"a":[1,2]`:  "unexpected EOF",
		`["unclosed]`:  "unexpected EOF",
		`[{"a":"\"]"}`: "unexpected EOF",
	} {
		t.Run(in, func(t *testing.T) {
			_, err := countElements(strings.NewReader(in), wide)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(want)))
		})
	}
	t.Run("a string one byte too long, in a list", func(t *testing.T) {
		g := NewWithT(t)
		n, err := countElements(strings.NewReader(`["`+strings.Repeat("a", maxStringBytes)+`"]`), wide)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.long).To(BeFalse(), "at the limit (its closing quote counted)")
		n, err = countElements(strings.NewReader(`[{"k":"`+strings.Repeat("a", maxStringBytes+1)+`"}]`), wide)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.long).To(BeTrue())
	})
}

// FuzzCheck feeds check files of every shape, gzipped, under small limits:
// whatever it accepts decodes within them (a list at the top, no string
// longer than maxStringBytes, no deeper than maxDepth, its records and the
// elements of their lists within their limits), and it never accepts a
// file larger inflated than the limit.
func FuzzCheck(f *testing.F) {
	for _, seed := range []string{
		`[]`, `[{"spec":{"operationID":"a"}}]`, `{"x":"aaaa"}`, `"aaaa"`, `1234`, `[1,2,3`, `[[[[[]]]]]`,
		`[{"p":[{},{},{}]}]`, `["\"\\"]`, `[` + strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40) + `]`,
	} {
		f.Add([]byte(seed))
	}
	limits := Limits{Compressed: 1 << 20, Inflated: 4 << 10, Records: 8, Items: 16}
	s := boundedObjectStore{limits: limits}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var gz bytes.Buffer
		w := gzip.NewWriter(&gz)
		_, _ = w.Write(raw)
		_ = w.Close()
		n, err := s.check("key", gz.Bytes())
		if err != nil {
			return
		}
		if n != int64(len(raw)) || n > limits.Inflated {
			t.Fatalf("accepted %d bytes inflated as %d (limit %d)", len(raw), n, limits.Inflated)
		}
		var top []json.RawMessage
		if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&top); err != nil {
			return // not JSON: the decoder refuses it, having held at most the limit
		}
		if len(top) > limits.Records {
			t.Fatalf("accepted %d records (limit %d): %q", len(top), limits.Records, raw)
		}
		items := 0
		var walk func(v any, depth int)
		walk = func(v any, depth int) {
			if depth > maxDepth {
				t.Fatalf("accepted lists and objects nested deeper than %d: %q", maxDepth, raw)
			}
			switch v := v.(type) {
			case string:
				if len(v) > maxStringBytes {
					t.Fatalf("accepted a string of %d bytes", len(v))
				}
			case []any:
				if depth > 1 {
					items += len(v)
				}
				for _, e := range v {
					walk(e, depth+1)
				}
			case map[string]any:
				for k, e := range v {
					walk(k, depth+1)
					walk(e, depth+1)
				}
			}
		}
		var decoded any
		if err := json.Unmarshal(raw, &decoded); err != nil {
			return
		}
		walk(decoded, 1)
		if items > limits.Items {
			t.Fatalf("accepted %d elements in the lists of its records (limit %d): %q", items, limits.Items, raw)
		}
	})
}
