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

// Package csidriver is a CSI driver for the tests' real one-node cluster:
// host-path volumes (a directory on the node each), snapshots as copies of
// a volume's directory, volumes created from a snapshot, NodePublishVolume
// as a bind mount, and registration with the kubelet through its
// plugin-registration socket. It implements the CSI spec
// (github.com/container-storage-interface/spec) and passes csi-test's
// sanity suite; the snapshot controller, csi-snapshotter and
// external-provisioner drive it in a cluster as they drive any driver.
//
// A volume's snapshot can be made to fail after it was cut, as a cloud
// snapshot whose copy fails: while the file fail-snapshot/<volume ID>
// exists under the driver's root, a new snapshot of that volume is cut (its
// ID given) but not ready to use, and each later CreateSnapshot of it, by
// which csi-snapshotter asks whether it became ready, answers not ready
// while the file is empty (a copy still running) and fails with the file's
// content otherwise; once the file is gone, the next call makes it ready. A
// volume is not made from a snapshot that is not ready. While the file
// refuse-snapshot/<volume ID> exists, a new snapshot of that volume is not
// cut at all: CreateSnapshot fails with the file's content.
package csidriver
