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
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

// EventReason is the reason of an Event itemops emits. Every Event goes
// through Emit or Emitf, so the reasons are the constant values of this
// type in the code; docs/api.md lists each of them, and a test reads them
// from the code and compares.
type EventReason string

// Emit records an Event with a fixed message.
func Emit(recorder record.EventRecorder, obj runtime.Object, eventType string, reason EventReason, message string) {
	recorder.Event(obj, eventType, string(reason), message)
}

// Emitf records an Event whose message is formatted.
func Emitf(recorder record.EventRecorder, obj runtime.Object, eventType string, reason EventReason, format string, args ...any) {
	recorder.Event(obj, eventType, string(reason), fmt.Sprintf(format, args...))
}
