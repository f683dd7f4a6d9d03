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

package kube

import (
	"slices"

	"github.com/go-logr/logr"
)

// DeferValues returns log, whose WithValues only keeps the pairs until a
// line is written. controller-runtime adds the object to the logger of
// every reconcile, and zap encodes such values at once, into a copied
// encoder: a reconcile that writes no line (a poll, nearly always) paid
// for that.
func DeferValues(log logr.Logger) logr.Logger {
	sink := log.GetSink()
	// The line's caller is one frame further out, past this sink.
	if withDepth, ok := sink.(logr.CallDepthLogSink); ok {
		sink = withDepth.WithCallDepth(1)
	}
	return logr.New(&deferredSink{sink: sink})
}

// deferredSink hands its pending values to sink with each line. Each
// WithValues keeps only its own pairs and points to the sink it was made
// from: a reconcile's logger is derived three or four times over, and
// copying every pair at every step was a twentieth of itemops' allocations.
type deferredSink struct {
	sink   logr.LogSink
	parent *deferredSink
	values []any
}

var (
	_ logr.LogSink          = (*deferredSink)(nil)
	_ logr.CallDepthLogSink = (*deferredSink)(nil)
)

// Init implements logr.LogSink; sink was initialised by its own logger.
func (s *deferredSink) Init(logr.RuntimeInfo) {}

// Enabled implements logr.LogSink.
func (s *deferredSink) Enabled(level int) bool { return s.sink.Enabled(level) }

// Info implements logr.LogSink.
func (s *deferredSink) Info(level int, msg string, keysAndValues ...any) {
	s.sink.Info(level, msg, s.with(keysAndValues)...)
}

// Error implements logr.LogSink.
func (s *deferredSink) Error(err error, msg string, keysAndValues ...any) {
	s.sink.Error(err, msg, s.with(keysAndValues)...)
}

// WithValues implements logr.LogSink; the pairs are copied, so the caller
// may reuse its slice, and loggers derived from one parent share only the
// parent's pairs, which never change.
func (s *deferredSink) WithValues(keysAndValues ...any) logr.LogSink {
	if len(keysAndValues) == 0 {
		return s
	}
	return &deferredSink{sink: s.sink, parent: s, values: slices.Clone(keysAndValues)}
}

// WithName implements logr.LogSink.
func (s *deferredSink) WithName(name string) logr.LogSink {
	return &deferredSink{sink: s.sink.WithName(name), parent: s.parent, values: s.values}
}

// WithCallDepth implements logr.CallDepthLogSink.
func (s *deferredSink) WithCallDepth(depth int) logr.LogSink {
	sink, ok := s.sink.(logr.CallDepthLogSink)
	if !ok {
		return s
	}
	return &deferredSink{sink: sink.WithCallDepth(depth), parent: s.parent, values: s.values}
}

// with is every pending pair, the oldest first, and then keysAndValues.
func (s *deferredSink) with(keysAndValues []any) []any {
	if s.parent == nil && len(s.values) == 0 {
		return keysAndValues
	}
	n := len(keysAndValues)
	for d := s; d != nil; d = d.parent {
		n += len(d.values)
	}
	out := make([]any, n)
	end := n - copy(out[n-len(keysAndValues):], keysAndValues)
	for d := s; d != nil; d = d.parent {
		end -= copy(out[end-len(d.values):end], d.values)
	}
	return out
}
