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

package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	"github.com/itemops/itemops/internal/store"
)

// fakeStore keeps operations files in memory, by parent UID. A parent can
// be given a malformed file, a read-only location or no location.
type fakeStore struct {
	mu       sync.Mutex
	backups  map[string][]*itemoperation.BackupOperation
	restores map[string][]*itemoperation.RestoreOperation
	failures map[string]error
	readOnly map[string]bool
	reads    map[string]int
	writes   map[string]int

	snapshots     map[string][]store.VolumeSnapshot
	snapshotReads map[string]int
	// notDurable is what MarkSnapshotsNotDurable was last given, by UID:
	// the PersistentVolumes, and the backup's phase and errors.
	notDurable map[string]markedNotDurable
	// locations reads VolumeSnapshotLocations from the API server for real.
	locations *store.Store
}

var (
	_ OperationsStore = (*fakeStore)(nil)
	_ SnapshotStore   = (*fakeStore)(nil)
)

func newFakeStore() *fakeStore {
	return &fakeStore{backups: map[string][]*itemoperation.BackupOperation{}, restores: map[string][]*itemoperation.RestoreOperation{},
		failures: map[string]error{}, readOnly: map[string]bool{}, reads: map[string]int{}, writes: map[string]int{},
		snapshots: map[string][]store.VolumeSnapshot{}, snapshotReads: map[string]int{}, notDurable: map[string]markedNotDurable{}}
}

func (f *fakeStore) setBackup(uid string, ops []*itemoperation.BackupOperation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backups[uid] = ops
}

func (f *fakeStore) setRestore(uid string, ops []*itemoperation.RestoreOperation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restores[uid] = ops
}

func (f *fakeStore) fail(uid string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures[uid] = err
}

func (f *fakeStore) setReadOnly(uid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readOnly[uid] = true
}

func (f *fakeStore) backup(uid string) []*itemoperation.BackupOperation {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*itemoperation.BackupOperation, 0, len(f.backups[uid]))
	for _, op := range f.backups[uid] {
		out = append(out, op.DeepCopy())
	}
	return out
}

func (f *fakeStore) counts(uid string) (reads, writes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads[uid], f.writes[uid]
}

func (f *fakeStore) BackupOperations(_ context.Context, b *velerov1api.Backup) ([]*itemoperation.BackupOperation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	uid := string(b.UID)
	f.reads[uid]++
	if err := f.failures[uid]; err != nil {
		return nil, err
	}
	// A parent its test gave no file has none, like a backup without
	// records in object storage.
	ops := f.backups[uid]
	out := make([]*itemoperation.BackupOperation, 0, len(ops))
	for _, op := range ops {
		out = append(out, op.DeepCopy())
	}
	return out, nil
}

func (f *fakeStore) UpdateBackupOperations(ctx context.Context, b *velerov1api.Backup,
	update func([]*itemoperation.BackupOperation, error) ([]*itemoperation.BackupOperation, error)) error {
	if err := f.CheckWritable(ctx, b); err != nil {
		return err
	}
	ops, err := update(f.BackupOperations(ctx, b))
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	uid := string(b.UID)
	f.writes[uid]++
	f.backups[uid] = ops
	return nil
}

func (f *fakeStore) RestoreOperations(_ context.Context, r *velerov1api.Restore) ([]*itemoperation.RestoreOperation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	uid := string(r.UID)
	f.reads[uid]++
	if err := f.failures[uid]; err != nil {
		return nil, err
	}
	return f.restores[uid], nil
}

func (f *fakeStore) UpdateRestoreOperations(ctx context.Context, r *velerov1api.Restore,
	update func([]*itemoperation.RestoreOperation, error) ([]*itemoperation.RestoreOperation, error)) error {
	if err := f.CheckWritable(ctx, r); err != nil {
		return err
	}
	ops, err := update(f.RestoreOperations(ctx, r))
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	uid := string(r.UID)
	f.writes[uid]++
	f.restores[uid] = ops
	return nil
}

func (f *fakeStore) CheckWritable(_ context.Context, parent client.Object) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readOnly[string(parent.GetUID())] {
		return fmt.Errorf("%w: fake", store.ErrReadOnly)
	}
	return nil
}

func (f *fakeStore) setSnapshots(uid string, snapshots []store.VolumeSnapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapshots[uid] = snapshots
}

func (f *fakeStore) snapshotReadsOf(uid string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshotReads[uid]
}

func (f *fakeStore) BackupVolumeSnapshots(_ context.Context, b *velerov1api.Backup) ([]store.VolumeSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	uid := string(b.UID)
	f.snapshotReads[uid]++
	if err := f.failures[uid]; err != nil {
		return nil, err
	}
	return append([]store.VolumeSnapshot(nil), f.snapshots[uid]...), nil
}

// markedNotDurable is one MarkSnapshotsNotDurable call.
type markedNotDurable struct {
	pvs    []string
	phase  velerov1api.BackupPhase
	errors int
}

func (f *fakeStore) MarkSnapshotsNotDurable(_ context.Context, b *velerov1api.Backup, pvs []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	uid := string(b.UID)
	if err := f.failures[uid]; err != nil {
		return err
	}
	f.notDurable[uid] = markedNotDurable{pvs: append([]string(nil), pvs...), phase: b.Status.Phase, errors: b.Status.Errors}
	return nil
}

func (f *fakeStore) SnapshotLocation(ctx context.Context, name string) (store.SnapshotLocation, error) {
	return f.locations.SnapshotLocation(ctx, name)
}

// waitingBackupWithRecords is a Backup waiting for n new operations, and a
// fakeStore whose operations file lists them.
func waitingBackupWithRecords(name, uid string, n int) (*velerov1api.Backup, *fakeStore) {
	backup := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "velero", UID: types.UID(uid)},
		Status:     velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations, BackupItemOperationsAttempted: n},
	}
	records := make([]*itemoperation.BackupOperation, n)
	for i := range records {
		records[i] = backupRecord(backup, fmt.Sprintf("operation-%06d", i), itemoperation.OperationPhaseNew, time.Now())
	}
	store := newFakeStore()
	store.setBackup(uid, records)
	return backup, store
}
