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
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"invalid operation ID", status.Error(codes.Unknown, "operation ID op-1 is invalid"), ErrInvalidOperationID},
		{"another operation's ID is a plain failure", status.Error(codes.Unknown, "operation ID op-2 is invalid"), ErrPluginError},
		{"async not supported", status.Error(codes.Unknown, "Plugin does not support asynchronous operations"), ErrNotSupported},
		{"name not served by the binary", status.Error(codes.Unknown, "BackupItemActionV2 plugin: x/y was not found or has an invalid name format"), ErrPluginNotFound},
		{"error of the plugin", status.Error(codes.Unknown, "DataUpload not found"), ErrPluginError},
		{"panic in the plugin", status.Error(codes.Aborted, "plugin panicked: boom"), ErrPluginError},
		{"service not served", status.Error(codes.Unimplemented, "unknown service"), ErrNotSupported},
		{"connection lost", status.Error(codes.Unavailable, "error reading from server: EOF"), ErrTransport},
		{"deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), ErrTransport},
		{"not a status", fmt.Errorf("dial: %w", context.DeadlineExceeded), ErrTransport},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := classify("Progress", "x.io/y", "op-1", tc.err)
			if !errors.Is(err, tc.want) {
				t.Fatalf("classify(%v) = %v, want kind %v", tc.err, err, tc.want)
			}
			if IsRetryable(err) != (tc.want == ErrTransport) {
				t.Fatalf("IsRetryable(%v) = %v", err, IsRetryable(err))
			}
		})
	}
}

func TestRestartBackoff(t *testing.T) {
	cases := map[int]time.Duration{0: 0, 1: 0, 2: time.Second, 3: 2 * time.Second, 4: 4 * time.Second,
		7: 32 * time.Second, 8: time.Minute, 50: time.Minute}
	for failures, want := range cases {
		if got := restartBackoff(failures); got != want {
			t.Errorf("restartBackoff(%d) = %s, want %s", failures, got, want)
		}
	}
}
