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

package cluster

import (
	"fmt"
	"sync"

	. "github.com/onsi/ginkgo/v2"
)

// The suite's specs build on each other: a mode switch, then specs in that
// mode; a Backup, then its restore. In make test the suite goes on after a
// failed spec (EnvContinue), so that one failure does not hide the other
// specs' results; a spec that needs what a failed one was to leave is then
// skipped, with a line that names it, not run on a broken state.

// What specs leave for the ones after them.
const (
	// theMode is itemops' release and the mode it and Velero run in, as
	// the specs before set them.
	theMode = "itemops' release in the mode the specs before set"
	// backupObserved is the Backup observed, made in observe mode.
	backupObserved = "the Backup observed"
	// backupWhyTaint is the Backup why-taint of a data mover's volume.
	backupWhyTaint = "the Backup why-taint"
	// veleroOfOpenShift is Velero and itemops in openshift-adp.
	veleroOfOpenShift = "Velero and itemops in openshift-adp"
)

// handoffs maps what a failed spec was to leave to that spec's text.
var handoffs = struct {
	sync.Mutex
	broken map[string]string
}{broken: map[string]string{}}

// leaves declares what the running spec leaves for the ones after it: when
// it fails, each is broken until a later spec that leaves it passes.
func leaves(what ...string) {
	spec := CurrentSpecReport().LeafNodeText
	DeferCleanup(func() {
		failed := CurrentSpecReport().Failed()
		handoffs.Lock()
		defer handoffs.Unlock()
		for _, w := range what {
			if failed {
				handoffs.broken[w] = spec
			} else {
				delete(handoffs.broken, w)
			}
		}
	})
}

// needs skips the running spec when an earlier spec that was to leave
// what it needs failed.
func needs(what ...string) {
	handoffs.Lock()
	defer handoffs.Unlock()
	for _, w := range what {
		if spec, ok := handoffs.broken[w]; ok {
			Skip(fmt.Sprintf("skipped: it needs %s, which the spec %q was to leave, and that spec failed", w, spec))
		}
	}
}
