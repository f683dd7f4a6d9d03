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

package veleroenv

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/vmware-tanzu/velero/pkg/itemoperation"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// BackupOperationsFile is where a backup's operations file lies in the
// bucket's directory, at the key Velero's object store layout gives it.
func BackupOperationsFile(bucketDir, backup string) string {
	return filepath.Join(bucketDir, "backups", backup, backup+"-itemoperations.json.gz")
}

// WriteBackupOperations writes a backup's operations file as Velero does at
// the end of a backup: gzipped JSON.
func WriteBackupOperations(bucketDir, backup string, recs []*itemoperation.BackupOperation) error {
	data, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	path := BackupOperationsFile(bucketDir, backup)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// ReadBackupOperations reads a backup's operations file back.
func ReadBackupOperations(bucketDir, backup string) ([]*itemoperation.BackupOperation, error) {
	f, err := os.Open(BackupOperationsFile(bucketDir, backup))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	var recs []*itemoperation.BackupOperation
	return recs, json.NewDecoder(zr).Decode(&recs)
}

// RestoreOperationsFile is where a restore's operations file lies in the
// bucket's directory.
func RestoreOperationsFile(bucketDir, restore string) string {
	return filepath.Join(bucketDir, "restores", restore, "restore-"+restore+"-itemoperations.json.gz")
}

// ReadRestoreOperations reads a restore's operations file.
func ReadRestoreOperations(bucketDir, restore string) ([]*itemoperation.RestoreOperation, error) {
	f, err := os.Open(RestoreOperationsFile(bucketDir, restore))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	var recs []*itemoperation.RestoreOperation
	return recs, json.NewDecoder(zr).Decode(&recs)
}

// WrittenAs says whether an operations file's phase is how Velero's file
// records an ItemOperation's phase: the file knows no Canceled, which
// Velero reads as Failed.
func WrittenAs(file itemoperation.OperationPhase, op itemopsv1alpha1.OperationPhase) bool {
	if op == itemopsv1alpha1.OperationPhaseCanceled {
		return file == itemoperation.OperationPhaseFailed
	}
	return string(file) == string(op)
}
