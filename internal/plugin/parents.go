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

package plugin

import (
	"encoding/json"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// parentJSON encodes the Backup or Restore the way Velero sends it to
// plugins; a nil parent is sent as an empty one. Every call of every
// operation sends its parent, whose encoding changes only with its
// resourceVersion: it is encoded once per version (cache).
func parentJSON[T any, P interface {
	*T
	metav1.Object
}](cache *encodedParents, parent P) ([]byte, error) {
	if parent == nil {
		parent = new(T)
	}
	uid, version := parent.GetUID(), parent.GetResourceVersion()
	if b, ok := cache.get(uid, version); ok {
		return b, nil
	}
	b, err := json.Marshal(parent)
	if err != nil {
		return nil, fmt.Errorf("encoding the parent for the plugin: %w", err)
	}
	cache.put(uid, version, b)
	return b, nil
}

// maxEncodedParents bounds the parents whose encoding is kept; past it the
// cache starts again empty. Parents in flight at once number far fewer.
const maxEncodedParents = 4096

// encodedParents keeps the last encoding of each parent, by UID. The bytes
// are shared by every call that sends them and never written to.
type encodedParents struct {
	mu sync.Mutex
	m  map[types.UID]encodedParent
}

type encodedParent struct {
	version string
	json    []byte
}

// get returns the encoding of this version of a parent, if kept. A parent
// not read from the API server (no UID or version) is never kept.
func (c *encodedParents) get(uid types.UID, version string) ([]byte, bool) {
	if uid == "" || version == "" {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[uid]
	return e.json, ok && e.version == version
}

func (c *encodedParents) put(uid types.UID, version string, b []byte) {
	if uid == "" || version == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxEncodedParents {
		c.m = map[types.UID]encodedParent{}
	}
	c.m[uid] = encodedParent{version: version, json: b}
}
