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

package progress

import (
	"slices"
	"sync"
	"time"
)

// Bounds of what Lateness keeps.
const (
	// LatenessSamples is how many of a plugin's latest operations it
	// learns from.
	LatenessSamples = 200
	// MinLatenessSamples is how many it needs before it leads at all.
	MinLatenessSamples = 20
)

// Lateness learns, plugin by plugin, how much later than an operation's
// real end the completion estimated from its last reading came. A plugin
// whose readings are fresh (its answer carries the time of the reading) and
// whose rate is steady is estimated on time. One whose readings are old
// when read is not: Velero's data mover writes a DataUpload's progress
// every 10 s, its Progress reports no time of the reading, and an estimate
// from a reading up to 10 s old ends up to 10 s after the transfer did.
// Polls made ahead of the estimate by what the plugin's estimates ran late
// catch such ends sooner.
type Lateness struct {
	// Max bounds a sample either way: a transfer that paused or jumped
	// says nothing of the next one's reading.
	Max time.Duration

	mu      sync.Mutex
	plugins map[string]*samples
}

type samples struct {
	ring   []time.Duration
	next   int
	sorted []time.Duration // ring sorted, nil when stale
}

// Add records that an operation of plugin ended late after the completion
// estimated for it (negative: it ended after the estimate).
func (l *Lateness) Add(plugin string, late time.Duration) {
	if l.Max > 0 {
		late = min(max(late, -l.Max), l.Max)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.plugins == nil {
		l.plugins = map[string]*samples{}
	}
	s := l.plugins[plugin]
	if s == nil {
		s = &samples{}
		l.plugins[plugin] = s
	}
	if len(s.ring) < LatenessSamples {
		s.ring = append(s.ring, late)
	} else {
		s.ring[s.next] = late
		s.next = (s.next + 1) % LatenessSamples
	}
	s.sorted = nil
}

// Lead is how far ahead of an estimate to poll: the q-quantile of how late
// the plugin's estimates came, never negative (an estimate that tends to
// come early is not polled later for it), zero until MinLatenessSamples of
// its operations have ended.
func (l *Lateness) Lead(plugin string, q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.plugins[plugin]
	if s == nil || len(s.ring) < MinLatenessSamples {
		return 0
	}
	if s.sorted == nil {
		s.sorted = slices.Clone(s.ring)
		slices.Sort(s.sorted)
	}
	i := min(len(s.sorted)-1, max(0, int(q*float64(len(s.sorted)))))
	return max(0, s.sorted[i])
}
