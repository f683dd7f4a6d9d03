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
//
// Serve one with github.com/itemops/itemops/pkg/plugin/framework
// (RegisterVolumeSnapshotterV2); docs/plugins.md has a complete plugin.
package v2

import (
	"fmt"

	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	vsv1 "github.com/vmware-tanzu/velero/pkg/plugin/velero/volumesnapshotter/v1"
)

// PluginKind is the kind a VolumeSnapshotter v2 plugin is listed as.
const PluginKind common.PluginKind = "VolumeSnapshotterV2"

// UnitsBytes is the OperationUnits that makes itemops show a snapshot's
// progress as bytes, "4.2Gi/10Gi (42%)", and count it in the bytes metrics.
// Any other unit is shown as "42/100 <units> (42%)".
const UnitsBytes = "Bytes"

// VolumeSnapshotter takes, restores and deletes volume snapshots (the v1
// methods, which Velero calls) and reports how far a snapshot's data has
// been copied to durable storage (Progress and Cancel, which itemops calls).
//
// The methods run in different processes: Velero starts the plugin binary
// for a backup and calls Init and CreateSnapshot there; itemops runs the same
// binary in its own pod and calls Init (with the same
// VolumeSnapshotLocation config) and then Progress and Cancel there, for as
// long as the snapshot copies. Nothing kept in memory by CreateSnapshot
// reaches Progress: whatever Progress needs must be found from the snapshot
// ID at the provider (the cloud's API, or storage both processes reach).
//
// itemops keeps one instance per process and calls Progress and Cancel on it
// concurrently, for several snapshots at once; Init is never concurrent with
// them. The methods must be safe for concurrent use.
type VolumeSnapshotter interface {
	vsv1.VolumeSnapshotter

	// Progress reports how far the snapshot's data has been copied.
	//
	//   - Copying: Completed false, Err empty; NCompleted of NTotal in
	//     OperationUnits (UnitsBytes for bytes), Started when the copy began.
	//   - Durable: Completed true, Err empty, NCompleted == NTotal. Report it
	//     only when a restore from the snapshot would succeed.
	//   - Failed: Completed true and Err saying why (Velero's convention for
	//     asynchronous operations, which reads Err only when Completed is
	//     true; itemops fails the operation on a non-empty Err either way).
	//
	// A snapshotter whose snapshots are durable as soon as CreateSnapshot
	// returns reports Completed at once. An unknown snapshot ID is
	// InvalidOperationIDError(snapshotID), which ends the operation Failed
	// without retries; any other error is retried within itemops'
	// --max-progress-failures, as a transient failure.
	//
	// itemops stops calling Progress once the operation has ended:
	// Completed, Failed, or after Cancel.
	Progress(snapshotID string) (velero.OperationProgress, error)

	// Cancel stops copying the snapshot's data. itemops calls it once per
	// operation that has not ended (on a timeout, spec.cancel, the Backup's
	// deletion or failure; again only when the call did not reach the
	// plugin), records its answer in the operation's Canceled condition, and
	// calls Progress no more. Return nil for a
	// snapshot that already finished or that the provider cannot stop (it is
	// then reported as it completes); an error is recorded, not retried.
	// Velero's DeleteSnapshot may follow at once (velero backup delete
	// cancels, then deletes), so Cancel must leave the snapshot deletable.
	Cancel(snapshotID string) error
}

// InvalidOperationIDError is the error Progress and Cancel return for a
// snapshot ID the provider does not know. Its text is Velero's (the
// InvalidOperationIDError of Velero's backupitemaction/v2 package), which
// is how itemops tells it from other errors across gRPC.
func InvalidOperationIDError(snapshotID string) error {
	return fmt.Errorf("operation ID %v is invalid", snapshotID)
}
