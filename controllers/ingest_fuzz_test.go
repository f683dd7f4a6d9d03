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
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/store"
)

// memoryObjectStore is a bucket in memory behind Velero's ObjectStore
// interface, so that Velero's own persistence code decodes the file.
type memoryObjectStore struct{ objects map[string][]byte }

var _ velero.ObjectStore = (*memoryObjectStore)(nil)

func (m *memoryObjectStore) Init(map[string]string) error { return nil }
func (m *memoryObjectStore) PutObject(_, key string, body io.Reader) error {
	data, err := io.ReadAll(body)
	m.objects[key] = data
	return err
}
func (m *memoryObjectStore) ObjectExists(_, key string) (bool, error) {
	_, ok := m.objects[key]
	return ok, nil
}
func (m *memoryObjectStore) GetObject(_, key string) (io.ReadCloser, error) {
	data, ok := m.objects[key]
	if !ok {
		return nil, errors.New("no such key")
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}
func (m *memoryObjectStore) ListCommonPrefixes(string, string, string) ([]string, error) {
	return nil, nil
}
func (m *memoryObjectStore) ListObjects(string, string) ([]string, error) { return nil, nil }
func (m *memoryObjectStore) DeleteObject(_, key string) error {
	delete(m.objects, key)
	return nil
}
func (m *memoryObjectStore) CreateSignedURL(string, string, time.Duration) (string, error) {
	return "", errors.New("not signed here")
}

// memoryPlugins serves the memory bucket as every ObjectStore plugin.
type memoryPlugins struct{ store *memoryObjectStore }

func (p memoryPlugins) WithObjectStore(_ context.Context, _ string, fn func(velero.ObjectStore) error) error {
	return fn(p.store)
}

// fuzzBackup is the Backup whose operations file the fuzzer writes.
var fuzzBackup = &velerov1api.Backup{
	ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "nightly-2026-11-23", UID: "5a4f3c2e-8d7b-4c1a-9e6f-0b1c2d3e4f5a"},
	Spec:       velerov1api.BackupSpec{StorageLocation: "default"},
}

// FuzzOperationsFile: any bytes in a Backup's operations file are either
// refused as malformed (and nothing else) or read, through Velero's own
// decoder, into records whose ItemOperations have valid names and labels,
// are named the same on every read, and are written back as read.
// fuzzLimits are small, so that the fuzzer reaches them.
var fuzzLimits = store.Limits{Compressed: 64 << 10, Inflated: 1 << 20, Records: 1000, Items: 2000}

func FuzzOperationsFile(f *testing.F) {
	ops := []*itemoperation.BackupOperation{{
		Spec: itemoperation.BackupOperationSpec{BackupName: fuzzBackup.Name, BackupUID: string(fuzzBackup.UID),
			BackupItemAction: "example.io/data-mover", OperationID: "upload-1",
			ResourceIdentifier: velero.ResourceIdentifier{Namespace: "app", Name: "data"},
			PostOperationItems: []velero.ResourceIdentifier{{Namespace: "app", Name: "snapshot"}}},
		Status: itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseInProgress, NCompleted: 5, NTotal: 10,
			OperationUnits: "Bytes", Created: &metav1.Time{Time: time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)}},
	}, {
		Spec: itemoperation.BackupOperationSpec{BackupItemAction: "example.io/data-mover", OperationID: "upload-2"},
	}, nil}
	valid, err := gzipRecords(ops)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	for _, raw := range []string{`[]`, `null`, `[null]`, `[{}]`, `{"spec":{}}`, `[{"spec":{"operationID":"` + string(bytes.Repeat([]byte("x"), 2000)) + `"}}]`,
		`[{"spec":{"backupUID":"someone-else","operationID":"a"}},{"spec":{"operationID":"a"}},{"spec":{"operationID":"a"}}]`,
		`[{"status":{"phase":"Completed","nCompleted":-3,"nTotal":-1,"created":"9999-12-31T23:59:59Z"}}]`} {
		data, err := gzipBytes([]byte(raw))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("not gzip"))
	f.Add(valid[:len(valid)/2])
	f.Add([]byte{})
	// Bombs: 10 KiB inflating to 10 MiB (over fuzzLimits.Inflated), a
	// short file of more records than fuzzLimits.Records, one of more
	// post-operation items than fuzzLimits.Items in one record and over
	// several, and nested shapes: lists in unknown fields, in items, deeper
	// than the reader allows.
	items := func(n int) string { return `"postOperationItems":[` + strings.Repeat("{},", n-1) + "{}]" }
	for _, raw := range [][]byte{
		append(append([]byte(`["`), bytes.Repeat([]byte("a"), 10<<20)...), `"]`...),
		[]byte("[" + strings.Repeat("{},", fuzzLimits.Records) + "{}]"),
		[]byte(`[{"spec":{"operationID":"a",` + items(fuzzLimits.Items+1) + `}}]`),
		[]byte(`[{"spec":{"operationID":"a",` + items(fuzzLimits.Items/2) + `}},{"spec":{"operationID":"b",` + items(fuzzLimits.Items/2+1) + `}}]`),
		[]byte(`[{"spec":{"operationID":"a",` + items(3) + `,"unknown":[[1,[2,[3]]],{"x":[4]}]}}]`),
		[]byte(`[{"spec":{"operationID":"a","postOperationItems":[{"namespace":"n","name":["x"]}]}}]`),
		[]byte(`[{"spec":{"operationID":"a","unknown":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}}]`),
	} {
		data, err := gzipBytes(raw)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}

	reader := defaultLocation(f)
	gvk := velerov1api.SchemeGroupVersion.WithKind("Backup")

	f.Fuzz(func(t *testing.T, file []byte) {
		bucket := &memoryObjectStore{objects: map[string][]byte{
			"backups/" + fuzzBackup.Name + "/" + fuzzBackup.Name + "-itemoperations.json.gz": file,
		}}
		s := &store.Store{Client: reader, Secrets: reader, Plugins: memoryPlugins{bucket}, Namespace: "velero", CredentialsDir: t.TempDir(),
			Limits: fuzzLimits}
		read, err := s.BackupOperations(context.Background(), fuzzBackup)
		if err != nil {
			if !errors.Is(err, store.ErrMalformed) && !errors.Is(err, store.ErrTooLarge) {
				t.Fatalf("reading the file failed with %v, not as a malformed or too large file", err)
			}
			return
		}
		if len(read) > fuzzLimits.Records {
			t.Fatalf("%d records read, over the limit of %d", len(read), fuzzLimits.Records)
		}
		items := 0
		for _, op := range read {
			if op != nil {
				items += len(op.Spec.PostOperationItems)
			}
		}
		if items > fuzzLimits.Items {
			t.Fatalf("%d post-operation items read, over the limit of %d", items, fuzzLimits.Items)
		}
		names := map[string]opRecord{}
		for i, rec := range fromBackupOperations(read) {
			if rec.ParentUID != "" && rec.ParentUID != string(fuzzBackup.UID) {
				continue // another Backup's record: ignored with an event
			}
			op, err := newItemOperation(fuzzBackup, gvk, itemopsv1alpha1.ParentKindBackup, itemopsv1alpha1.PluginKindBackupItemAction, i, rec)
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			if problems := validation.IsDNS1123Subdomain(op.Name); len(problems) > 0 || len(op.Name) > maxNameLength {
				t.Fatalf("record %d gives the name %q: %v", i, op.Name, problems)
			}
			for key, value := range op.Labels {
				if problems := validation.IsValidLabelValue(value); len(problems) > 0 {
					t.Fatalf("record %d gives label %s=%q: %v", i, key, value, problems)
				}
			}
			again, _ := newItemOperation(fuzzBackup, gvk, itemopsv1alpha1.ParentKindBackup, itemopsv1alpha1.PluginKindBackupItemAction, i, rec)
			if again.Name != op.Name {
				t.Fatalf("record %d is named %q, then %q", i, op.Name, again.Name)
			}
			if other, seen := names[op.Name]; seen && (other.Plugin != rec.Plugin || other.OperationID != rec.OperationID) {
				t.Fatalf("records of %s/%s and %s/%s share the name %q", other.Plugin, other.OperationID, rec.Plugin, rec.OperationID, op.Name)
			}
			names[op.Name] = rec

			status, err := recordStatus(op)
			if err != nil || status == nil {
				t.Fatalf("record %d: the status annotation does not read back: %v", i, err)
			}
			if !equality.Semantic.DeepEqual(*status, rec.Status) {
				t.Fatalf("record %d: the status annotation reads back as %+v, not %+v", i, *status, rec.Status)
			}
			if recordIndex(op) != i {
				t.Fatalf("record %d: the index annotation reads back as %d", i, recordIndex(op))
			}
			back := toBackupOperations(fuzzBackup, []opRecord{toRecord(op)})[0].Spec
			want := read[i].Spec
			want.BackupName, want.BackupUID = fuzzBackup.Name, string(fuzzBackup.UID)
			if !equality.Semantic.DeepEqual(back, want) {
				t.Fatalf("record %d is written back as %+v, not as read: %+v", i, back, want)
			}
		}
	})
}

// defaultLocation reads a BackupStorageLocation "default" in the velero
// namespace, on the bucket "backups", and nothing else.
func defaultLocation(tb testing.TB) client.Reader {
	tb.Helper()
	scheme := runtime.NewScheme()
	if err := velerov1api.AddToScheme(scheme); err != nil {
		tb.Fatal(err)
	}
	location := &velerov1api.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "default"},
		Spec: velerov1api.BackupStorageLocationSpec{Provider: "aws",
			StorageType: velerov1api.StorageType{ObjectStorage: &velerov1api.ObjectStorageLocation{Bucket: "backups"}}},
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(location).Build()
}

// gzipRecords encodes records as Velero writes an operations file.
func gzipRecords(records any) ([]byte, error) {
	data, err := json.Marshal(records)
	if err != nil {
		return nil, err
	}
	return gzipBytes(data)
}

func gzipBytes(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
