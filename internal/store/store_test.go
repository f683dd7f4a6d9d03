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

package store_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	"github.com/itemops/itemops/internal/store"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/s3"
)

func next() int {
	seqMu.Lock()
	defer seqMu.Unlock()
	seq++
	return seq
}

// forbidden is a reader the API server refuses, as with RBAC missing.
type forbidden struct{ client.Reader }

func (forbidden) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	return apierrors.NewForbidden(corev1.Resource("secrets"), key.Name, errors.New("no RBAC rule allows it"))
}

func newStore(t testing.TB) *store.Store {
	return &store.Store{Client: env.Client, Secrets: env.Client, Plugins: plugins,
		Namespace: envtest.VeleroNamespace, CredentialsDir: t.TempDir()}
}

// location creates a bucket and a BSL on it.
func location(t testing.TB, mutate ...func(*velerov1api.BackupStorageLocation)) *velerov1api.BackupStorageLocation {
	t.Helper()
	name := fmt.Sprintf("bucket-%d", next())
	if _, err := server.Bucket(name); err != nil {
		t.Fatal(err)
	}
	bsl := server.Location(envtest.VeleroNamespace, name, name, secretName, secretKey)
	for _, m := range mutate {
		m(bsl)
	}
	if err := env.Client.Create(context.Background(), bsl); err != nil {
		t.Fatal(err)
	}
	return bsl
}

func backupIn(bsl string) *velerov1api.Backup {
	n := next()
	return &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("backup-%d", n), Namespace: envtest.VeleroNamespace, UID: types.UID(fmt.Sprintf("uid-%d", n))},
		Spec:       velerov1api.BackupSpec{StorageLocation: bsl},
	}
}

// replaceBackup writes ops as the backup's whole file, whatever it held.
func replaceBackup(ctx context.Context, s *store.Store, b *velerov1api.Backup, ops []*itemoperation.BackupOperation) error {
	return s.UpdateBackupOperations(ctx, b, func([]*itemoperation.BackupOperation, error) ([]*itemoperation.BackupOperation, error) {
		return ops, nil
	})
}

func records(b *velerov1api.Backup, n int) []*itemoperation.BackupOperation {
	created := metav1.NewTime(time.Now().Truncate(time.Second))
	var out []*itemoperation.BackupOperation
	for i := range n {
		out = append(out, &itemoperation.BackupOperation{
			Spec: itemoperation.BackupOperationSpec{BackupName: b.Name, BackupUID: string(b.UID), BackupItemAction: "velero.io/csi-pvc-backupper",
				ResourceIdentifier: velero.ResourceIdentifier{GroupResource: schema.GroupResource{Resource: "persistentvolumeclaims"}, Namespace: "shop", Name: fmt.Sprintf("pvc-%d", i)},
				OperationID:        fmt.Sprintf("op-%d", i)},
			Status: itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseCompleted, NCompleted: 10, NTotal: 10, OperationUnits: "bytes", Created: &created},
		})
	}
	return out
}

// putRaw writes an object straight into the bucket through the plugin.
func putRaw(t testing.TB, bsl *velerov1api.BackupStorageLocation, key string, body []byte) {
	t.Helper()
	config := map[string]string{"bucket": bsl.Spec.ObjectStorage.Bucket, "prefix": ""}
	for k, v := range bsl.Spec.Config {
		config[k] = v
	}
	credentials := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(credentials, s3.Credentials(), 0o600); err != nil {
		t.Fatal(err)
	}
	config["credentialsFile"] = credentials
	err := plugins.WithObjectStore(context.Background(), "aws", func(os velero.ObjectStore) error {
		if err := os.Init(config); err != nil {
			return err
		}
		return os.PutObject(bsl.Spec.ObjectStorage.Bucket, key, bytes.NewReader(body))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func gzipped(data []byte) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	_, _ = gz.Write(data)
	_ = gz.Close()
	return buf.Bytes()
}

var _ = Describe("Operations files in object storage", func() {
	It("backup operations round trip in Velero's layout", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		s := newStore(t)
		bsl := location(t)
		b := backupIn(bsl.Name)
		want := records(b, 3)
		g.Expect(replaceBackup(ctx, s, b, want)).To(Succeed())

		// Where Velero keeps it, as Velero encodes it.
		raw, err := os.ReadFile(filepath.Join(server.Root, bsl.Spec.ObjectStorage.Bucket, "backups", b.Name, b.Name+"-itemoperations.json.gz"))
		g.Expect(err).NotTo(HaveOccurred())
		gz, err := gzip.NewReader(bytes.NewReader(raw))
		g.Expect(err).NotTo(HaveOccurred())
		var buf bytes.Buffer
		_, err = buf.ReadFrom(gz)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(buf.String()).To(ContainSubstring(`"backupItemAction":"velero.io/csi-pvc-backupper"`))

		got, err := s.BackupOperations(ctx, b)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(HaveLen(3))
		for i := range got {
			g.Expect(got[i].Spec).To(Equal(want[i].Spec))
			g.Expect(got[i].Status.Phase).To(Equal(want[i].Status.Phase))
			g.Expect(got[i].Status.Created.Time).To(BeTemporally("==", want[i].Status.Created.Time))
		}
	})

	It("an update reads the file and writes what it makes of it, or leaves it", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		s := newStore(t)
		b := backupIn(location(t).Name)
		g.Expect(replaceBackup(ctx, s, b, records(b, 3))).To(Succeed())

		g.Expect(s.UpdateBackupOperations(ctx, b, func(got []*itemoperation.BackupOperation, err error) ([]*itemoperation.BackupOperation, error) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(HaveLen(3))
			got[1].Status.Phase = itemoperation.OperationPhaseFailed
			return got[:2], nil
		})).To(Succeed())
		got, err := s.BackupOperations(ctx, b)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(HaveLen(2))
		g.Expect(got[1].Status.Phase).To(Equal(itemoperation.OperationPhaseFailed))

		refused := errors.New("refused")
		g.Expect(s.UpdateBackupOperations(ctx, b, func([]*itemoperation.BackupOperation, error) ([]*itemoperation.BackupOperation, error) {
			return nil, refused
		})).To(MatchError(refused))
		got, err = s.BackupOperations(ctx, b)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(HaveLen(2), "a refused update leaves the file as it was")
	})

	It("no file means no operations", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		got, err := newStore(t).BackupOperations(context.Background(), backupIn(location(t).Name))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(BeEmpty())
	})

	It("restore operations live in the backup's location", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		s := newStore(t)
		bsl := location(t)
		b := backupIn(bsl.Name)
		b.UID = ""
		g.Expect(env.Client.Create(ctx, b)).To(Succeed())
		r := &velerov1api.Restore{ObjectMeta: metav1.ObjectMeta{Name: b.Name + "-restore", Namespace: envtest.VeleroNamespace, UID: "r-uid"},
			Spec: velerov1api.RestoreSpec{BackupName: b.Name}}
		want := []*itemoperation.RestoreOperation{{Spec: itemoperation.RestoreOperationSpec{RestoreName: r.Name, RestoreUID: "r-uid",
			RestoreItemAction: "velero.io/sample", OperationID: "dl-1"}, Status: itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseNew}}}
		g.Expect(s.UpdateRestoreOperations(ctx, r, func([]*itemoperation.RestoreOperation, error) ([]*itemoperation.RestoreOperation, error) {
			return want, nil
		})).To(Succeed())
		_, err := os.Stat(filepath.Join(server.Root, bsl.Spec.ObjectStorage.Bucket, "restores", r.Name, "restore-"+r.Name+"-itemoperations.json.gz"))
		g.Expect(err).NotTo(HaveOccurred())
		got, err := s.RestoreOperations(ctx, r)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(HaveLen(1))
		g.Expect(got[0].Spec).To(Equal(want[0].Spec))

		_, err = s.RestoreOperations(ctx, &velerov1api.Restore{ObjectMeta: metav1.ObjectMeta{Name: "orphan"}, Spec: velerov1api.RestoreSpec{BackupName: "gone"}})
		g.Expect(err).To(MatchError(store.ErrNoLocation))
	})

	Describe("malformed files are told apart from unreachable storage", func() {
		valid := gzipped([]byte(`[{"spec":{"operationID":"a"},"status":{"phase":"New"}}]`))
		for _, tc := range []struct {
			name string
			body []byte
		}{
			{"not gzip", []byte("this is not gzip")},
			{"gzip of something that is not JSON", gzipped([]byte("not json"))},
			{"gzip of JSON that is not a list of records", gzipped([]byte(`{"spec":1}`))},
			{"truncated", valid[:len(valid)/2]},
			{"empty", nil},
			{"gzip of nothing", gzipped(nil)},
		} {
			It(tc.name, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				bsl := location(t)
				b := backupIn(bsl.Name)
				putRaw(t, bsl, "backups/"+b.Name+"/"+b.Name+"-itemoperations.json.gz", tc.body)
				_, err := newStore(t).BackupOperations(context.Background(), b)
				g.Expect(err).To(MatchError(store.ErrMalformed))
				g.Expect(err.Error()).To(ContainSubstring(b.Name))

				// An update is told so too, and may replace the file.
				err = newStore(t).UpdateBackupOperations(context.Background(), b,
					func(got []*itemoperation.BackupOperation, err error) ([]*itemoperation.BackupOperation, error) {
						g.Expect(err).To(MatchError(store.ErrMalformed))
						g.Expect(got).To(BeEmpty())
						return records(b, 2), nil
					})
				g.Expect(err).NotTo(HaveOccurred())
				got, err := newStore(t).BackupOperations(context.Background(), b)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(HaveLen(2))
			})
		}
	})

	// What whoever writes the bucket could use to run itemops out of
	// memory is measured, not read: the limits, through the real object
	// store plugin. An update leaves such a file as it is.
	Describe("files over the read limits are not read", func() {
		limits := store.Limits{Compressed: 1 << 20, Inflated: 4 << 20, Records: 100, Items: 300}
		for _, tc := range []struct {
			name, want string
			body       []byte
		}{
			{"a gzip bomb", "inflates to more than 4194304 bytes", gzipped(append(append([]byte(`[`), bytes.Repeat([]byte(" "), 256<<20)...), `]`...))},
			{"too many records", "holds more than 100 records", gzipped([]byte("[" + strings.Repeat(`{"spec":{}},`, 100) + `{"spec":{}}]`))},
			{"too large as stored", "is larger than 1048576 bytes", bytes.Repeat([]byte("x"), 1<<20+1)},
			{"too many elements in the lists of its records", "holds more than 300 elements in the lists of its records",
				gzipped([]byte("[" + strings.Repeat(`{"spec":{"postOperationItems":[`+strings.Repeat(`{},`, 100)+`{}]}},`, 2) + `{"spec":{"postOperationItems":[` + strings.Repeat(`{},`, 100) + `{}]}}]`))},
			{"nested too deep", "nests lists and objects more than 32 deep",
				gzipped([]byte(`[{"spec":{"x":` + strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40) + `}}]`))},
			{"a string too long in a record", "holds a string longer than 1048576 bytes",
				gzipped([]byte(`[{"spec":{"operationID":"` + strings.Repeat("a", 2<<20) + `"}}]`))},
		} {
			It(tc.name, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				bsl := location(t)
				b := backupIn(bsl.Name)
				key := "backups/" + b.Name + "/" + b.Name + "-itemoperations.json.gz"
				putRaw(t, bsl, key, tc.body)
				s := newStore(t)
				s.Limits = limits
				_, err := s.BackupOperations(context.Background(), b)
				g.Expect(err).To(MatchError(store.ErrTooLarge))
				g.Expect(errors.Is(err, store.ErrMalformed)).To(BeFalse(), "not a malformed file: never replaced")
				g.Expect(err.Error()).To(And(ContainSubstring(key), ContainSubstring(tc.want)))
				err = s.UpdateBackupOperations(context.Background(), b,
					func(_ []*itemoperation.BackupOperation, err error) ([]*itemoperation.BackupOperation, error) {
						return nil, err
					})
				g.Expect(err).To(MatchError(store.ErrTooLarge))
			})
		}
		It("a file at the limits is read", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			bsl := location(t)
			b := backupIn(bsl.Name)
			s := newStore(t)
			g.Expect(s.UpdateBackupOperations(context.Background(), b,
				func([]*itemoperation.BackupOperation, error) ([]*itemoperation.BackupOperation, error) {
					ops := records(b, 100)
					for _, op := range ops {
						for i := range 3 {
							op.Spec.PostOperationItems = append(op.Spec.PostOperationItems, velero.ResourceIdentifier{
								GroupResource: schema.GroupResource{Group: "velero.io", Resource: "datauploads"}, Namespace: "velero", Name: fmt.Sprintf("%s-%d", op.Spec.OperationID, i)})
						}
					}
					return ops, nil
				})).To(Succeed())
			s.Limits = limits
			got, err := s.BackupOperations(context.Background(), b)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(HaveLen(100))
			g.Expect(got[99].Spec.PostOperationItems).To(HaveLen(3))
		})
		// A file whose one record holds 11,184,761 empty post-operation
		// items inflates to just under the default 32 MiB and is stored
		// in 32 KiB; decoded, it would take about 1.9 GiB. With the
		// default limits it is refused, and finding that out allocates
		// little: it is never held whole, inflated or decoded.
		It("a file of millions of empty items inside one record is refused within a small memory bound", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			bsl := location(t)
			b := backupIn(bsl.Name)
			const items = 11184761
			var raw bytes.Buffer
			raw.WriteString(`[{"spec":{"backupName":"` + b.Name + `","operationID":"planted","postOperationItems":[`)
			raw.WriteString(strings.Repeat(`{},`, items-1))
			raw.WriteString(`{}]},"status":{"phase":"InProgress"}}]`)
			g.Expect(int64(raw.Len())).To(BeNumerically("<=", store.DefaultInflatedLimit), "within the inflated limit")
			body := gzipped(raw.Bytes())
			raw = bytes.Buffer{}
			g.Expect(int64(len(body))).To(BeNumerically("<=", store.DefaultCompressedLimit), "within the stored limit")
			key := "backups/" + b.Name + "/" + b.Name + "-itemoperations.json.gz"
			putRaw(t, bsl, key, body)
			s := newStore(t)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := s.BackupOperations(context.Background(), b)
			runtime.ReadMemStats(&after)
			g.Expect(err).To(MatchError(store.ErrTooLarge))
			g.Expect(err.Error()).To(ContainSubstring("holds more than 100000 elements in the lists of its records (--max-operations-file-items)"))
			allocated := after.TotalAlloc - before.TotalAlloc
			GinkgoWriter.Printf("MEASURED the planted file (%d bytes stored): refused having allocated %d KiB in all\n", len(body), allocated>>10)
			g.Expect(allocated).To(BeNumerically("<", 8<<20), "all the reader allocated, with the object store plugin's session")
		})
	})

	// A file of about 1 MiB stored whose JSON is an object holding a
	// string of a gigabyte: the decoder would hold all of it (3.5 GiB of
	// heap in use, measured) before it found the object is not a list.
	// Every top-level shape but a list is refused before any decoder sees
	// it, as a malformed file, and finding that out allocates little.
	Describe("files whose JSON is not a list are not decoded", func() {
		for _, tc := range []struct {
			name  string
			write func(w io.Writer)
		}{
			{"an object holding a string of a gigabyte, 1 MiB stored", func(w io.Writer) {
				_, _ = io.WriteString(w, `{"x":"`)
				chunk := bytes.Repeat([]byte("a"), 1<<20)
				for range 1 << 10 {
					_, _ = w.Write(chunk)
				}
				_, _ = io.WriteString(w, `"}`)
			}},
			{"a string", func(w io.Writer) { _, _ = io.WriteString(w, `"`+strings.Repeat("a", 16<<20)+`"`) }},
			{"a number", func(w io.Writer) { _, _ = io.WriteString(w, strings.Repeat("1", 16<<20)) }},
			{"a list that never ends", func(w io.Writer) { _, _ = io.WriteString(w, `[{"spec":{}},`+strings.Repeat(`[`, 20)) }},
		} {
			It(tc.name, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				bsl := location(t)
				b := backupIn(bsl.Name)
				var body bytes.Buffer
				w, err := gzip.NewWriterLevel(&body, gzip.BestCompression)
				g.Expect(err).NotTo(HaveOccurred())
				tc.write(w)
				g.Expect(w.Close()).To(Succeed())
				g.Expect(int64(body.Len())).To(BeNumerically("<=", store.DefaultCompressedLimit), "within the stored limit")
				key := "backups/" + b.Name + "/" + b.Name + "-itemoperations.json.gz"
				putRaw(t, bsl, key, body.Bytes())
				stored := body.Len()
				body = bytes.Buffer{}
				s := newStore(t)
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				_, err = s.BackupOperations(context.Background(), b)
				runtime.ReadMemStats(&after)
				g.Expect(err).To(MatchError(store.ErrMalformed))
				g.Expect(err.Error()).To(ContainSubstring(key + " is not a gzip JSON list"))
				allocated := after.TotalAlloc - before.TotalAlloc
				GinkgoWriter.Printf("MEASURED %s (%d bytes stored): refused having allocated %d KiB in all\n", tc.name, stored, allocated>>10)
				g.Expect(allocated).To(BeNumerically("<", 8<<20), "all the reader allocated, with the object store plugin's session")
			})
		}
	})

	Describe("location problems", Ordered, func() {
		ctx := context.Background()
		// A Secret a location could name, but in another namespace: never read.
		const elsewhere = "credentials-in-another-namespace"
		// dead is an address nothing listens on.
		var dead string
		BeforeAll(func() {
			for _, obj := range []client.Object{
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "not-velero"}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: elsewhere, Namespace: "not-velero"}, Data: map[string][]byte{secretKey: s3.Credentials()}},
			} {
				Expect(env.Client.Create(ctx, obj)).To(Succeed())
			}
			var err error
			dead, err = s3.FreeAddress()
			Expect(err).NotTo(HaveOccurred())
		})
		for _, tc := range []struct {
			name   string
			mutate func(*velerov1api.BackupStorageLocation)
			check  func(g Gomega, err error)
		}{
			{"the Secret is missing", func(l *velerov1api.BackupStorageLocation) { l.Spec.Credential.Name = "no-such-secret" },
				func(g Gomega, err error) {
					g.Expect(err).To(MatchError(ContainSubstring("Secret velero/no-such-secret")))
					g.Expect(errors.Is(err, store.ErrMalformed) || errors.Is(err, store.ErrNoLocation)).To(BeFalse(), "worth retrying")
				}},
			{"the Secret exists only in another namespace", func(l *velerov1api.BackupStorageLocation) { l.Spec.Credential.Name = elsewhere },
				func(g Gomega, err error) {
					g.Expect(err).To(MatchError(ContainSubstring("reading Secret velero/"+elsewhere)), "read from Velero's namespace only")
				}},
			{"the Secret has no such key", func(l *velerov1api.BackupStorageLocation) { l.Spec.Credential.Key = "other" },
				func(g Gomega, err error) { g.Expect(err).To(MatchError(ContainSubstring(`has no key "other"`))) }},
			{"the object store is down", func(l *velerov1api.BackupStorageLocation) { l.Spec.Config["s3Url"] = "http://" + dead },
				func(g Gomega, err error) {
					g.Expect(err).To(HaveOccurred())
					g.Expect(errors.Is(err, store.ErrMalformed)).To(BeFalse(), "an outage is not a bad file")
				}},
		} {
			It(tc.name, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				bsl := location(t, tc.mutate)
				start := time.Now()
				_, err := newStore(t).BackupOperations(ctx, backupIn(bsl.Name))
				tc.check(g, err)
				g.Expect(err.Error()).NotTo(ContainSubstring(s3.SecretKey), "no secret in errors")
				g.Expect(time.Since(start)).To(BeNumerically("<", 30*time.Second), "bounded by the call deadline")
			})
		}
		It("the location does not exist", func() {
			t := GinkgoTB()
			_, err := newStore(t).BackupOperations(ctx, backupIn("no-such-location"))
			NewWithT(t).Expect(err).To(MatchError(store.ErrNoLocation))
		})
		It("the Secret cannot be read", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			s := newStore(t)
			s.Secrets = forbidden{}
			_, err := s.BackupOperations(ctx, backupIn(location(t).Name))
			g.Expect(err).To(MatchError(And(ContainSubstring("reading Secret velero/"+secretName), ContainSubstring("forbidden"))))
			g.Expect(errors.Is(err, store.ErrMalformed) || errors.Is(err, store.ErrNoLocation)).To(BeFalse(), "worth retrying once RBAC is fixed")
		})
	})

	It("read only location refuses writes", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		s := newStore(t)
		bsl := location(t, func(l *velerov1api.BackupStorageLocation) {
			l.Spec.AccessMode = velerov1api.BackupStorageLocationAccessModeReadOnly
		})
		b := backupIn(bsl.Name)
		g.Expect(s.CheckWritable(ctx, b)).To(MatchError(store.ErrReadOnly))
		g.Expect(replaceBackup(ctx, s, b, records(b, 1))).To(MatchError(store.ErrReadOnly))
		_, err := os.Stat(filepath.Join(server.Root, bsl.Spec.ObjectStorage.Bucket, "backups"))
		g.Expect(os.IsNotExist(err)).To(BeTrue(), "nothing was written")
		got, err := s.BackupOperations(ctx, b)
		g.Expect(err).NotTo(HaveOccurred(), "reading a read-only location works")
		g.Expect(got).To(BeEmpty())
		g.Expect(s.CheckWritable(ctx, backupIn(location(t).Name))).To(Succeed())
	})

	// A plugin process holds one configured store per name: sessions of
	// locations with different credentials must not borrow each other's.
	It("locations used at once never mix", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		s := newStore(t)
		g.Expect(env.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "wrong-credentials", Namespace: envtest.VeleroNamespace},
			Data:       map[string][]byte{secretKey: []byte("[default]\naws_access_key_id=nobody\naws_secret_access_key=wrong\n")},
		})).To(Succeed())
		good := []*velerov1api.BackupStorageLocation{location(t), location(t)}
		bad := location(t, func(l *velerov1api.BackupStorageLocation) { l.Spec.Credential.Name = "wrong-credentials" })
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 20 {
			for j, bsl := range append(good, bad) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b := backupIn(bsl.Name)
					b.Name = fmt.Sprintf("same-name-%d", i)
					ops := records(b, j+1)
					err := replaceBackup(ctx, s, b, ops)
					switch {
					case bsl == bad && err == nil:
						errs <- fmt.Errorf("a write with wrong credentials succeeded (iteration %d)", i)
					case bsl != bad && err != nil:
						errs <- fmt.Errorf("location %s: %w", bsl.Name, err)
					case bsl != bad:
						got, err := s.BackupOperations(ctx, b)
						if err != nil {
							errs <- err
						} else if len(got) != j+1 {
							errs <- fmt.Errorf("location %s: %d records, want %d", bsl.Name, len(got), j+1)
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			g.Expect(err).NotTo(HaveOccurred())
		}
		for j, bsl := range good {
			entries, err := os.ReadDir(filepath.Join(server.Root, bsl.Spec.ObjectStorage.Bucket, "backups"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(entries).To(HaveLen(20), "location %d holds its own files only", j)
		}
		_, err := os.Stat(filepath.Join(server.Root, bad.Spec.ObjectStorage.Bucket, "backups"))
		g.Expect(os.IsNotExist(err)).To(BeTrue(), "nothing was written with wrong credentials")
	})

	It("credential files are private", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		s := newStore(t)
		_, err := s.BackupOperations(context.Background(), backupIn(location(t).Name))
		g.Expect(err).NotTo(HaveOccurred())
		path := filepath.Join(s.CredentialsDir, envtest.VeleroNamespace, secretName+"-"+secretKey)
		info, err := os.Stat(path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
		content, err := os.ReadFile(path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(content).To(Equal(s3.Credentials()))
	})

	It("VolumeSnapshots are read in Velero's layout", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		s := newStore(t)
		bsl := location(t)
		b := backupIn(bsl.Name)

		got, err := s.BackupVolumeSnapshots(ctx, b)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(BeEmpty(), "no file: no native snapshots")

		// As Velero's backup controller writes it (internal/volume.Snapshot).
		file := `[{"spec":{"backupName":"` + b.Name + `","backupUID":"` + string(b.UID) + `","location":"ebs","persistentVolumeName":"pv-1",` +
			`"providerVolumeID":"vol-1","volumeType":"gp3","volumeAZ":"us-east-1a"},"status":{"providerSnapshotID":"snap-1","phase":"Completed"}},` +
			`{"spec":{"backupName":"` + b.Name + `","backupUID":"` + string(b.UID) + `","location":"ebs","persistentVolumeName":"pv-2",` +
			`"providerVolumeID":"vol-2","volumeType":"gp3"},"status":{"phase":"Failed"}}]`
		putRaw(t, bsl, "backups/"+b.Name+"/"+b.Name+"-volumesnapshots.json.gz", gzipped([]byte(file)))
		got, err = s.BackupVolumeSnapshots(ctx, b)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal([]store.VolumeSnapshot{
			{BackupUID: string(b.UID), Location: "ebs", PersistentVolumeName: "pv-1", ProviderVolumeID: "vol-1", SnapshotID: "snap-1", Phase: "Completed"},
			{BackupUID: string(b.UID), Location: "ebs", PersistentVolumeName: "pv-2", ProviderVolumeID: "vol-2", Phase: "Failed"},
		}))

		putRaw(t, bsl, "backups/"+b.Name+"/"+b.Name+"-volumesnapshots.json.gz", []byte("not gzip"))
		_, err = s.BackupVolumeSnapshots(ctx, b)
		g.Expect(errors.Is(err, store.ErrMalformed)).To(BeTrue(), "got %v", err)
	})

	It("snapshot location gives plugin and config as Velero does", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		s := newStore(t)
		name := fmt.Sprintf("vsl-%d", next())
		vsl := &velerov1api.VolumeSnapshotLocation{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace},
			Spec: velerov1api.VolumeSnapshotLocationSpec{Provider: "aws", Config: map[string]string{"region": "us-east-1"},
				Credential: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: secretKey}},
		}
		g.Expect(env.Client.Create(ctx, vsl)).To(Succeed())

		got, err := s.SnapshotLocation(ctx, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Plugin).To(Equal("velero.io/aws"))
		g.Expect(got.Config).To(HaveKeyWithValue("region", "us-east-1"))
		g.Expect(got.Config).To(HaveKey("credentialsFile"))
		content, err := os.ReadFile(got.Config["credentialsFile"])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(content).To(Equal(s3.Credentials()))
		g.Expect(vsl.Spec.Config).NotTo(HaveKey("credentialsFile"), "the location itself is not changed")

		_, err = s.SnapshotLocation(ctx, "no-such-location")
		g.Expect(errors.Is(err, store.ErrNoSnapshotLocation)).To(BeTrue(), "got %v", err)
	})
})
