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
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	biav2 "github.com/vmware-tanzu/velero/pkg/plugin/velero/backupitemaction/v2"
)

// The kinds of failure a caller can branch on with errors.Is.
var (
	// ErrPluginNotFound: no discovered binary serves the plugin name.
	ErrPluginNotFound = errors.New("plugin not found")
	// ErrNotSupported: the plugin cannot report on asynchronous operations
	// (a v1 plugin, or a v2 plugin that says so).
	ErrNotSupported = errors.New("asynchronous operations not supported")
	// ErrInvalidOperationID: the plugin does not know the operation ID.
	ErrInvalidOperationID = errors.New("invalid operation ID")
	// ErrOperationFailed: the plugin reported that the operation failed (an
	// answer with an error in it).
	ErrOperationFailed = errors.New("operation failed")
	// ErrPluginError: the call failed inside the plugin (it returned an
	// error, or panicked) without saying the operation failed. Velero's
	// own data mover, for one, returns an error from Progress when it cannot
	// read its DataUpload for a moment, and reports a failed upload as an
	// answer.
	ErrPluginError = errors.New("the plugin's call failed")
	// ErrTransport: the plugin could not be reached or did not answer in
	// time. The only kind worth retrying.
	ErrTransport = errors.New("plugin unreachable")
)

// Error is a failed call into a plugin.
type Error struct {
	// Kind is one of the Err* sentinels above.
	Kind error
	// Plugin is the plugin's registered name.
	Plugin string
	// Call names the call, for example Progress.
	Call string
	// Err is the cause.
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("%s of plugin %s: %v: %v", e.Call, e.Plugin, e.Kind, e.Err)
}

// Is reports whether target is the kind of e.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// startFailure is the kind of a failure to reach a plugin's process: a
// binary that changed since discovery is refused, not unreachable.
func startFailure(err error) error {
	if errors.Is(err, ErrBinaryChanged) {
		return ErrBinaryChanged
	}
	return ErrTransport
}

// IsRetryable reports whether err is a transport failure or a deadline,
// which a later call may not repeat.
func IsRetryable(err error) bool { return errors.Is(err, ErrTransport) }

// IsUnreachable reports whether err is a transport failure that is not a
// deadline: the process exited or its connection broke, so the same call
// may succeed as soon as the process is started again. A plugin that does
// not answer in time is not unreachable: calling it again would only wait
// as long again.
func IsUnreachable(err error) bool {
	return errors.Is(err, ErrTransport) && !errors.Is(err, context.DeadlineExceeded) &&
		status.Code(err) != codes.DeadlineExceeded
}

// serverMuxNotFound is how Velero's plugin server answers a name it does not serve.
const serverMuxNotFound = "was not found or has an invalid name format"

// classify turns what a gRPC call returned into an *Error of the right kind.
func classify(call, plugin, operationID string, err error) error {
	kind := ErrTransport
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unknown:
			// Velero's plugin server sends every error of the plugin itself
			// with code Unknown; only the message tells them apart.
			switch msg := s.Message(); {
			case operationID != "" && msg == biav2.InvalidOperationIDError(operationID).Error():
				kind = ErrInvalidOperationID
			case msg == biav2.AsyncOperationsNotSupportedError().Error():
				kind = ErrNotSupported
			case strings.Contains(msg, serverMuxNotFound):
				kind = ErrPluginNotFound
			default:
				kind = ErrPluginError
			}
			err = errors.New(s.Message())
		case codes.Aborted:
			// Velero's plugin server reports a panic with code Aborted.
			kind = ErrPluginError
			err = errors.New(s.Message())
		case codes.Unimplemented:
			kind = ErrNotSupported
		}
	}
	return &Error{Kind: kind, Plugin: plugin, Call: call, Err: err}
}

// Denial is a request of a plugin that the API server refused: the plugin
// process runs with itemops' identity, which lacks the permission.
type Denial struct {
	// User is the identity the API server saw.
	User string
	// Verb, Resource and Group name the permission; Namespace is empty at
	// the cluster scope.
	Verb, Resource, Group, Namespace string
}

// Permission names what is missing, for example
// "list datauploads.velero.io in namespace velero".
func (d Denial) Permission() string {
	resource := d.Resource
	if d.Group != "" {
		resource += "." + d.Group
	}
	if d.Namespace == "" {
		return d.Verb + " " + resource + " at the cluster scope"
	}
	return d.Verb + " " + resource + " in namespace " + d.Namespace
}

// forbiddenMessage is how the API server's authorizer words a refusal
// (k8s.io/apiserver's forbidden message), which reaches itemops only as text
// inside the plugin's error.
var forbiddenMessage = regexp.MustCompile(`User "([^"]*)" cannot (\S+) resource "([^"]+)" in API group "([^"]*)"(?: in the namespace "([^"]*)")?`)

// Forbidden finds a refusal of the API server in what a plugin returned.
func Forbidden(err error) (Denial, bool) {
	if err == nil {
		return Denial{}, false
	}
	m := forbiddenMessage.FindStringSubmatch(err.Error())
	if m == nil {
		return Denial{}, false
	}
	return Denial{User: m[1], Verb: m[2], Resource: m[3], Group: m[4], Namespace: m[5]}, true
}
