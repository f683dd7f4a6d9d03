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

// Package plugin talks to unmodified Velero plugin binaries over Velero's
// plugin protocol (hashicorp/go-plugin, gRPC, handshake VELERO_PLUGIN=hello,
// protocol version 2), reusing Velero's own handshake, kinds and generated
// gRPC stubs.
//
// Unlike Velero, which starts a plugin process for every poll and calls it
// without deadlines, a Manager keeps one process per plugin binary for all
// callers, restarts it (with backoff) when it exits, and gives every call a
// deadline. Plugins are found by discovery in one directory and named only by
// the (kind, name) they register, so no input can make itemops run a path.
package plugin
