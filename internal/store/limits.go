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
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sync/semaphore"

	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
)

// ErrTooLarge: a file of the bucket is over one of the read limits. It is
// not read, so it cannot run itemops out of memory.
var ErrTooLarge = errors.New("file over itemops' read limits")

// Limits bound what is read from object storage: every file Velero's
// persistence package reads through itemops (the operations files, the
// volume snapshot records). A zero field takes its default.
type Limits struct {
	// Compressed bounds the bytes of the object as stored.
	Compressed int64
	// Inflated bounds the bytes a gzip object inflates to: a small file
	// can inflate to gigabytes.
	Inflated int64
	// Records bounds the elements of the JSON list it holds; each becomes
	// an object in memory (and an ItemOperation) whatever its size.
	Records int
	// Items bounds the elements of the lists inside those records (a
	// Backup's postOperationItems), all records together: each becomes
	// an object in memory however few bytes it takes, so the inflated
	// size alone does not bound them.
	Items int
}

// The defaults, sized to real files: a record of Velero's CSI data mover is
// about 735 bytes of JSON, gzip shrinks such files about 9 times, and
// 50,000 records decode to about 63 MiB of Go objects (measured with
// Velero v1.18.3's types). 20,000 operations in one Backup or Restore is
// 15 MB of JSON and 1.6 MB stored; the defaults leave twice that room, and
// the flags raise them.
const (
	DefaultCompressedLimit = 8 << 20
	DefaultInflatedLimit   = 32 << 20
	DefaultRecordLimit     = 20000
	// Velero's data mover gives each record one post-operation item; the
	// default leaves five per record at the records' limit: 100,000
	// elements, which decode to about 20 MiB in use (32 MiB allocated)
	// however small each is. Eleven million empty ones fit in the
	// inflated limit and would decode to about 1.9 GiB.
	DefaultItemLimit = 100000
)

func (l Limits) withDefaults() Limits {
	if l.Compressed <= 0 {
		l.Compressed = DefaultCompressedLimit
	}
	if l.Inflated <= 0 {
		l.Inflated = DefaultInflatedLimit
	}
	if l.Records <= 0 {
		l.Records = DefaultRecordLimit
	}
	if l.Items <= 0 {
		l.Items = DefaultItemLimit
	}
	return l
}

// boundedObjectStore is the object store of one session, whose reads are
// checked against the limits before Velero's persistence package decodes
// them. Fetching a file holds Limits.Compressed of the fetching budget
// until the file is checked and its decoding holds its share of the
// budget: up to Limits.Inflated for the bytes it inflates to. Files read
// and decoded at once together stay within those two budgets, however many
// parents are reconciled at once.
type boundedObjectStore struct {
	velero.ObjectStore
	ctx              context.Context
	limits           Limits
	budget, fetching *semaphore.Weighted
}

// GetObject implements velero.ObjectStore: the object, once it is known to
// be within the limits.
func (s boundedObjectStore) GetObject(bucket, key string) (io.ReadCloser, error) {
	if err := s.fetching.Acquire(s.ctx, s.limits.Compressed); err != nil {
		return nil, err
	}
	// Decoding waits for its share while the file is held: the budget
	// is taken before the fetching one is given back, never the other
	// way round.
	defer s.fetching.Release(s.limits.Compressed)
	body, err := s.ObjectStore.GetObject(bucket, key)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	stored, err := io.ReadAll(io.LimitReader(body, s.limits.Compressed+1))
	if err != nil {
		return nil, err
	}
	if int64(len(stored)) > s.limits.Compressed {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes (--max-operations-file-bytes)", ErrTooLarge, key, s.limits.Compressed)
	}
	inflated, err := s.check(key, stored)
	if err != nil {
		return nil, err
	}
	weight := min(max(inflated, int64(len(stored))), s.limits.Inflated)
	if err := s.budget.Acquire(s.ctx, weight); err != nil {
		return nil, err
	}
	return &budgeted{Reader: bytes.NewReader(stored), release: func() { s.budget.Release(weight) }}, nil
}

// check inflates a gzip object into nothing, counting its bytes and the
// elements of the JSON lists it holds, and returns its inflated size. Every
// file itemops reads is a gzip JSON list: one of another shape (an object,
// a string, a number at the top), or that cannot be inflated, is refused
// here too, as the decoder would hold its whole top-level value before it
// found out. What is not gzip is left to the decoder, which refuses it at
// its first bytes.
func (s boundedObjectStore) check(key string, stored []byte) (int64, error) {
	zr, err := gzip.NewReader(bytes.NewReader(stored))
	if err != nil {
		return int64(len(stored)), nil
	}
	counted := &countingReader{r: io.LimitReader(zr, s.limits.Inflated+1)}
	n, err := countElements(counted, s.limits)
	if counted.n > s.limits.Inflated {
		return 0, fmt.Errorf("%w: %s inflates to more than %d bytes (--max-operations-file-inflated-bytes)", ErrTooLarge, key, s.limits.Inflated)
	}
	switch {
	case n.long:
		return 0, fmt.Errorf("%w: %s holds a string longer than %d bytes", ErrTooLarge, key, maxStringBytes)
	case n.records > s.limits.Records:
		return 0, fmt.Errorf("%w: %s holds more than %d records (--max-operations-file-records)", ErrTooLarge, key, s.limits.Records)
	case n.items > s.limits.Items:
		return 0, fmt.Errorf("%w: %s holds more than %d elements in the lists of its records (--max-operations-file-items)", ErrTooLarge, key, s.limits.Items)
	case n.deep:
		return 0, fmt.Errorf("%w: %s nests lists and objects more than %d deep", ErrTooLarge, key, maxDepth)
	}
	if err != nil {
		// Never handed to the decoder: a malformed file.
		return 0, fmt.Errorf("%s is not a gzip JSON list: %w", key, err)
	}
	// What is left after the list is inflated too: it counts.
	if _, err := io.Copy(io.Discard, counted); err == nil && counted.n > s.limits.Inflated {
		return 0, fmt.Errorf("%w: %s inflates to more than %d bytes (--max-operations-file-inflated-bytes)", ErrTooLarge, key, s.limits.Inflated)
	}
	return counted.n, nil
}

// maxDepth bounds how deep lists and objects nest in a file. Velero's
// records nest 4 deep (the list, a record, its spec, its
// postOperationItems, an item); the decoder itself allows 10,000.
const maxDepth = 32

// maxStringBytes bounds each string of a file, escapes counted as written.
// Velero's records hold names, IDs, phases and a plugin's messages; the
// decoder holds a whole string in memory at once.
const maxStringBytes = 1 << 20

// counts are what countElements found, each up to one past its limit.
type counts struct {
	// records are the elements of the top-level list.
	records int
	// items are the elements of every list inside the records, at any
	// depth, all records together: each costs an object once decoded,
	// however few bytes it takes ("{}," is three).
	items int
	// deep: lists and objects nested deeper than maxDepth.
	deep bool
	// long: a string longer than maxStringBytes.
	long bool
}

func (n counts) over(l Limits) bool {
	return n.records > l.Records || n.items > l.Items || n.deep || n.long
}

// countElements counts the elements of the JSON list r holds and of every
// list inside it, and the length of each string, stopping as soon as one
// count is over its limit, without keeping any of it: a string of a
// gigabyte costs no memory here, nor does a list of millions of elements.
// A top-level value that is not a list, or a list that does not end, is an
// error. It checks no more of the syntax than it needs; the decoder
// refuses what is not JSON.
func countElements(r io.Reader, l Limits) (counts, error) {
	br := bufio.NewReader(r)
	var n counts
	// The lists and objects open at this point, innermost last: whether
	// each is a list, and, for a list, whether its next element has yet
	// to start.
	type open struct{ list, pending bool }
	stack := make([]open, 0, maxDepth)
	inString, escaped := false, false
	var stringBytes int
	for !n.over(l) {
		c, err := br.ReadByte()
		if err != nil {
			if err == io.EOF {
				if len(stack) == 0 {
					return n, errors.New("empty")
				}
				return n, io.ErrUnexpectedEOF
			}
			return n, err
		}
		switch {
		case inString:
			if c == '"' && !escaped {
				inString = false
				continue
			}
			escaped = !escaped && c == '\\'
			if stringBytes++; stringBytes > maxStringBytes {
				n.long = true
			}
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		}
		if len(stack) == 0 && c != '[' {
			return n, errors.New("not a JSON list")
		}
		if top := len(stack) - 1; top >= 0 && stack[top].list && stack[top].pending && c != ']' {
			// The first byte of an element.
			stack[top].pending = false
			if top == 0 {
				n.records++
			} else {
				n.items++
			}
		}
		switch c {
		case '"':
			inString, stringBytes = true, 0
		case '[', '{':
			if len(stack) == maxDepth {
				n.deep = true
				continue
			}
			stack = append(stack, open{list: c == '[', pending: c == '['})
		case ']', '}':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			if len(stack) == 0 {
				return n, nil
			}
		case ',':
			if top := len(stack) - 1; stack[top].list {
				stack[top].pending = true
			}
		}
	}
	return n, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// budgeted gives its share of the decoding budget back when closed: Velero
// closes an object once it has decoded it.
type budgeted struct {
	*bytes.Reader
	release func()
	closed  bool
}

func (b *budgeted) Close() error {
	if !b.closed {
		b.closed = true
		b.release()
	}
	return nil
}
