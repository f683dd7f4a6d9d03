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

// Package v2 is the interface of a VolumeSnapshotter v2 plugin: Velero's
// VolumeSnapshotter v1 plus Progress and Cancel, so that a snapshot whose data
// is still being copied to durable storage (an EBS snapshot that is still
// pending, a vSphere snapshot uploading to S3) is an asynchronous operation
// whose ID is the snapshot ID that CreateSnapshot returned.
package v2

import (
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	vsv1 "github.com/vmware-tanzu/velero/pkg/plugin/velero/volumesnapshotter/v1"
)

// PluginKind is the kind a VolumeSnapshotter v2 plugin is listed as.
const PluginKind common.PluginKind = "VolumeSnapshotterV2"

// VolumeSnapshotter takes, restores and deletes volume snapshots (the v1
// methods, which Velero calls) and reports how far a snapshot's data has
// been copied to durable storage (Progress and Cancel, which itemops calls).
type VolumeSnapshotter interface {
	vsv1.VolumeSnapshotter

	// Progress reports how far the snapshot's data has been copied. Completed
	// means the snapshot is durable and can be restored from; a non-empty Err
	// means the copy failed. A snapshotter whose snapshots are durable as soon
	// as CreateSnapshot returns reports Completed at once.
	Progress(snapshotID string) (velero.OperationProgress, error)

	// Cancel stops copying the snapshot's data. A snapshotter that cannot
	// stop a copy returns nil; the snapshot is then reported as it completes.
	Cancel(snapshotID string) error
}
