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

// Package framework serves Velero plugins, VolumeSnapshotter v2 among them,
// from one binary. It is Velero's own plugin server (same handshake, same
// plugin implementations for Velero's kinds) with one more kind:
//
//	framework.NewServer().
//		RegisterBackupItemActionV2("example.io/mover", newMover).
//		RegisterVolumeSnapshotterV2("example.io/disks", framework.VolumeSnapshotterV2(newDisks)).
//		Serve()
//
// Velero lists and calls the binary's Velero kinds as it always has; a
// VolumeSnapshotter v2 is also served as a v1 VolumeSnapshotter of the same
// name, so Velero takes its snapshots while itemops follows their progress.
// The binary lists the VolumeSnapshotterV2 kind only to a caller that asks
// for it (itemops), because Velero refuses a plugin binary that lists a kind
// it does not know.
//
// A complete VolumeSnapshotter v2 is in examples/volumesnapshotter, and
// docs/plugins.md ("Writing a VolumeSnapshotter v2") says what itemops
// expects of each method.
package framework
