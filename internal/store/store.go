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

package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/semaphore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"
	"github.com/vmware-tanzu/velero/pkg/persistence"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	"github.com/vmware-tanzu/velero/pkg/util/encode"

	"github.com/itemops/itemops/internal/plugin"
)

// The failures a caller can branch on with errors.Is. Anything else (the
// plugin unreachable, a Secret missing, the object store down) may pass.
var (
	// ErrNoLocation: the BackupStorageLocation (or, for a restore, its
	// Backup) does not exist or has no object storage.
	ErrNoLocation = errors.New("backup storage location unavailable")
	// ErrReadOnly: the location is in ReadOnly access mode and a write was asked for.
	ErrReadOnly = errors.New("backup storage location is read-only")
	// ErrMalformed: the operations file exists but is not a gzip JSON list
	// of operation records.
	ErrMalformed = errors.New("malformed item operations file")
)

// Store reads and writes operations files. Its zero value is not usable.
type Store struct {
	// Client reads BackupStorageLocations and Backups.
	Client client.Reader
	// Secrets reads the credential Secrets BSLs name; an uncached reader, so
	// that no Secret is held in memory or watched.
	Secrets client.Reader
	// Plugins serves the ObjectStore plugins.
	Plugins plugin.ObjectStores
	// Namespace is Velero's namespace: BSLs and their Secrets live there only.
	Namespace string
	// CredentialsDir receives the credential files handed to plugins.
	CredentialsDir string
	// Limits bound every read from object storage.
	Limits Limits

	budgetOnce sync.Once
	budget     *semaphore.Weighted
	// fetching bounds the bytes read from the bucket at once, before a
	// file's decoding takes its share of the budget: two files of the
	// largest size.
	fetching *semaphore.Weighted
}

// BackupOperations returns the records of a backup's operations file; no
// file means no operations.
func (s *Store) BackupOperations(ctx context.Context, backup *velerov1api.Backup) ([]*itemoperation.BackupOperation, error) {
	var ops []*itemoperation.BackupOperation
	err := s.withBackupStore(ctx, backup.Spec.StorageLocation, false, func(bs persistence.BackupStore) error {
		var err error
		ops, err = bs.GetBackupItemOperations(backup.Name)
		return classifyRead(err)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the item operations of backup %s: %w", backup.Name, err)
	}
	return ops, nil
}

// UpdateBackupOperations replaces a backup's operations file with what
// update makes of the records it holds, read and written in one session
// with the object store plugin: one credential read and one Init, not two.
// update gets the read's error as well, so that it may replace a malformed
// file (ErrMalformed); an error it returns leaves the file as it was.
func (s *Store) UpdateBackupOperations(ctx context.Context, backup *velerov1api.Backup,
	update func([]*itemoperation.BackupOperation, error) ([]*itemoperation.BackupOperation, error)) error {
	return updateFile(ctx, s, backup.Spec.StorageLocation, "backup "+backup.Name,
		func(bs persistence.BackupStore) ([]*itemoperation.BackupOperation, error) {
			return bs.GetBackupItemOperations(backup.Name)
		},
		func(bs persistence.BackupStore, body io.Reader) error {
			return bs.PutBackupItemOperations(backup.Name, body)
		},
		update)
}

// updateFile is the read, update and write of one operations file in one
// session, for UpdateBackupOperations and UpdateRestoreOperations; what
// names the file's parent in errors.
func updateFile[R any](ctx context.Context, s *Store, location, what string,
	get func(persistence.BackupStore) ([]R, error), put func(persistence.BackupStore, io.Reader) error,
	update func([]R, error) ([]R, error)) error {
	opened := false
	err := s.withBackupStore(ctx, location, true, func(bs persistence.BackupStore) error {
		opened = true
		records, err := get(bs)
		if err = classifyRead(err); err != nil {
			err = fmt.Errorf("reading the item operations of %s: %w", what, err)
		}
		if records, err = update(records, err); err != nil {
			return err
		}
		body, err := gzipJSON(records)
		if err == nil {
			err = put(bs, body)
		}
		if err != nil {
			return fmt.Errorf("writing the item operations of %s: %w", what, err)
		}
		return nil
	})
	if err != nil && !opened {
		return fmt.Errorf("writing the item operations of %s: %w", what, err)
	}
	return err
}

// RestoreOperations returns the records of a restore's operations file,
// kept in the location of the restore's backup; no file means no operations.
func (s *Store) RestoreOperations(ctx context.Context, restore *velerov1api.Restore) ([]*itemoperation.RestoreOperation, error) {
	location, err := s.restoreLocation(ctx, restore)
	if err != nil {
		return nil, fmt.Errorf("reading the item operations of restore %s: %w", restore.Name, err)
	}
	var ops []*itemoperation.RestoreOperation
	err = s.withBackupStore(ctx, location, false, func(bs persistence.BackupStore) error {
		var err error
		ops, err = bs.GetRestoreItemOperations(restore.Name)
		return classifyRead(err)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the item operations of restore %s: %w", restore.Name, err)
	}
	return ops, nil
}

// CheckWritable returns ErrReadOnly when the location of a Backup or
// Restore is in ReadOnly access mode.
func (s *Store) CheckWritable(ctx context.Context, parent client.Object) error {
	var name string
	switch p := parent.(type) {
	case *velerov1api.Backup:
		name = p.Spec.StorageLocation
	case *velerov1api.Restore:
		var err error
		if name, err = s.restoreLocation(ctx, p); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%T has no backup storage location", parent)
	}
	if name == "" {
		return nil
	}
	location, err := s.location(ctx, name)
	if err != nil {
		return err
	}
	if location.Spec.AccessMode == velerov1api.BackupStorageLocationAccessModeReadOnly {
		return fmt.Errorf("%w: BackupStorageLocation %s", ErrReadOnly, name)
	}
	return nil
}

// UpdateRestoreOperations is UpdateBackupOperations for a restore's file,
// kept in the location of the restore's backup.
func (s *Store) UpdateRestoreOperations(ctx context.Context, restore *velerov1api.Restore,
	update func([]*itemoperation.RestoreOperation, error) ([]*itemoperation.RestoreOperation, error)) error {
	location, err := s.restoreLocation(ctx, restore)
	if err != nil {
		return fmt.Errorf("writing the item operations of restore %s: %w", restore.Name, err)
	}
	return updateFile(ctx, s, location, "restore "+restore.Name,
		func(bs persistence.BackupStore) ([]*itemoperation.RestoreOperation, error) {
			return bs.GetRestoreItemOperations(restore.Name)
		},
		func(bs persistence.BackupStore, body io.Reader) error {
			return bs.PutRestoreItemOperations(restore.Name, body)
		},
		update)
}

// restoreLocation is the location of the backup a restore reads, where
// Velero keeps the restore's files too.
func (s *Store) restoreLocation(ctx context.Context, restore *velerov1api.Restore) (string, error) {
	backup := &velerov1api.Backup{}
	if err := s.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: restore.Spec.BackupName}, backup); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("%w: backup %s of the restore does not exist", ErrNoLocation, restore.Spec.BackupName)
		}
		return "", fmt.Errorf("reading backup %s of the restore: %w", restore.Spec.BackupName, err)
	}
	return backup.Spec.StorageLocation, nil
}

// location reads the named BackupStorageLocation; ErrNoLocation when there
// is none.
func (s *Store) location(ctx context.Context, name string) (*velerov1api.BackupStorageLocation, error) {
	location := &velerov1api.BackupStorageLocation{}
	if err := s.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, location); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: BackupStorageLocation %q does not exist", ErrNoLocation, name)
		}
		return nil, fmt.Errorf("reading BackupStorageLocation %s: %w", name, err)
	}
	return location, nil
}

// withBackupStore opens Velero's BackupStore on the named location through
// its ObjectStore plugin and calls fn with it. A parent that names no
// location was not made by Velero (Velero always sets one): it has no
// operations file, so there is nothing to read or write.
func (s *Store) withBackupStore(ctx context.Context, name string, write bool, fn func(persistence.BackupStore) error) error {
	if name == "" {
		return nil
	}
	location, err := s.location(ctx, name)
	if err != nil {
		return err
	}
	if location.Spec.ObjectStorage == nil {
		return fmt.Errorf("%w: BackupStorageLocation %s has no object storage", ErrNoLocation, name)
	}
	if write && location.Spec.AccessMode == velerov1api.BackupStorageLocationAccessModeReadOnly {
		return fmt.Errorf("%w: BackupStorageLocation %s", ErrReadOnly, name)
	}
	return s.Plugins.WithObjectStore(ctx, location.Spec.Provider, func(objectStore velero.ObjectStore) error {
		getter := persistence.NewObjectBackupStoreGetterWithSecretStore(
			&credentialFiles{ctx: ctx, store: s}, &secretValues{ctx: ctx, store: s})
		limits := s.Limits.withDefaults()
		s.budgetOnce.Do(func() {
			s.budget = semaphore.NewWeighted(limits.Inflated)
			s.fetching = semaphore.NewWeighted(2 * limits.Compressed)
		})
		bounded := boundedObjectStore{ObjectStore: objectStore, ctx: ctx, limits: limits, budget: s.budget, fetching: s.fetching}
		bs, err := getter.Get(location, singleObjectStore{bounded}, discardLogger())
		if err != nil {
			return fmt.Errorf("opening BackupStorageLocation %s: %w", name, err)
		}
		return fn(bs)
	})
}

// classifyRead tells a file that could not be decoded from one that could
// not be fetched: every failure to fetch is a plugin error.
func classifyRead(err error) error {
	if err == nil {
		return nil
	}
	var perr *plugin.Error
	if errors.As(err, &perr) || errors.Is(err, ErrTooLarge) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrMalformed, err)
}

// gzipJSON encodes records the way Velero does.
func gzipJSON(records any) (io.Reader, error) {
	buf, errs := encode.ToJSONGzip(records, "item operations")
	if len(errs) > 0 {
		return nil, fmt.Errorf("encoding item operations: %w", errors.Join(errs...))
	}
	return bytes.NewReader(buf.Bytes()), nil
}

// singleObjectStore hands persistence the store of the current session.
type singleObjectStore struct{ velero.ObjectStore }

// GetObjectStore implements persistence.ObjectStoreGetter.
func (s singleObjectStore) GetObjectStore(string) (velero.ObjectStore, error) {
	return s.ObjectStore, nil
}

// discardLogger quiets Velero's persistence package; every failure it meets
// comes back as an error.
func discardLogger() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}
