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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var _ = Describe("Plugin errors", Label("unit"), func() {
	Describe("classify", func() {
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
			It(tc.name, func() {
				t := GinkgoTB()
				err := classify("Progress", "x.io/y", "op-1", tc.err)
				if !errors.Is(err, tc.want) {
					t.Fatalf("classify(%v) = %v, want kind %v", tc.err, err, tc.want)
				}
				if IsRetryable(err) != (tc.want == ErrTransport) {
					t.Fatalf("IsRetryable(%v) = %v", err, IsRetryable(err))
				}
			})
		}
	})

	It("restart backoff", func() {
		t := GinkgoTB()
		cases := map[int]time.Duration{0: 0, 1: 0, 2: time.Second, 3: 2 * time.Second, 4: 4 * time.Second,
			7: 32 * time.Second, 8: time.Minute, 50: time.Minute}
		for failures, want := range cases {
			if got := restartBackoff(failures); got != want {
				t.Errorf("restartBackoff(%d) = %s, want %s", failures, got, want)
			}
		}
	})

	Describe("forbidden finds the missing permission", func() {
		for _, tc := range []struct {
			name, message string
			want          *Denial
			permission    string
		}{
			{
				name: "Velero's data mover listing DataUploads",
				message: `error to list DataUpload: datauploads.velero.io is forbidden: User "system:serviceaccount:velero:itemops" ` +
					`cannot list resource "datauploads" in API group "velero.io" in the namespace "velero"`,
				want:       &Denial{User: "system:serviceaccount:velero:itemops", Verb: "list", Resource: "datauploads", Group: "velero.io", Namespace: "velero"},
				permission: "list datauploads.velero.io in namespace velero",
			},
			{
				name: "a cluster-scoped read",
				message: `volumesnapshotcontents.snapshot.storage.k8s.io "snapcontent-1" is forbidden: User "itemops" ` +
					`cannot get resource "volumesnapshotcontents" in API group "snapshot.storage.k8s.io" at the cluster scope`,
				want:       &Denial{User: "itemops", Verb: "get", Resource: "volumesnapshotcontents", Group: "snapshot.storage.k8s.io"},
				permission: "get volumesnapshotcontents.snapshot.storage.k8s.io at the cluster scope",
			},
			{
				name:       "the core group",
				message:    `secrets "cloud" is forbidden: User "u" cannot get resource "secrets" in API group "" in the namespace "apps"`,
				want:       &Denial{User: "u", Verb: "get", Resource: "secrets", Namespace: "apps"},
				permission: "get secrets in namespace apps",
			},
			{name: "any other error", message: `not found DataUpload for operationID du-1`},
			{name: "forbidden words without the API server's shape", message: `upload is forbidden by policy`},
		} {
			It(tc.name, func() {
				g := NewWithT(GinkgoT())
				err := &Error{Kind: ErrPluginError, Plugin: "velero.io/csi-pvc-backupper", Call: "Progress", Err: errors.New(tc.message)}
				got, ok := Forbidden(err)
				if tc.want == nil {
					g.Expect(ok).To(BeFalse())
					return
				}
				g.Expect(ok).To(BeTrue())
				g.Expect(got).To(Equal(*tc.want))
				g.Expect(got.Permission()).To(Equal(tc.permission))
			})
		}
	})
})
