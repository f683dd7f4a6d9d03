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
	"io"

	"github.com/go-logr/logr"
	hclog "github.com/hashicorp/go-hclog"
)

// newHCLogger returns the logger go-plugin writes to: its own lifecycle
// messages and every line a plugin logs on stderr. Velero plugins log with
// logrus as JSON, which go-plugin parses into levelled entries; they end up in
// the manager's logr logger here.
func newHCLogger(log logr.Logger) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:   "plugin",
		Output: io.Discard,
		Level:  hclog.Trace,
	})
	l.RegisterSink(logrSink{log: log})
	return l
}

// logrSink forwards hclog entries to logr. A plugin's info lines are per-call
// chatter, so they go to V(1); warnings and errors stay visible.
type logrSink struct {
	log logr.Logger
}

// Accept implements hclog.SinkAdapter.
func (s logrSink) Accept(name string, level hclog.Level, msg string, args ...interface{}) {
	log := s.log
	if name != "" {
		log = log.WithName(name)
	}
	switch {
	case level >= hclog.Error:
		log.Error(nil, msg, args...)
	case level == hclog.Warn:
		log.Info(msg, args...)
	case level == hclog.Info:
		log.V(1).Info(msg, args...)
	case level == hclog.Debug:
		log.V(2).Info(msg, args...)
	default:
		log.V(3).Info(msg, args...)
	}
}
