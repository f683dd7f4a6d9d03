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

package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	clocktesting "k8s.io/utils/clock/testing"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

func gi(n string) int64 { q := resource.MustParse(n); return q.Value() }

// golden compares got with testdata/name, or writes it there with -update.
func golden(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it)\n--- got\n%s--- want\n%s", name, got, want)
	}
}

var _ = Describe("kubectl itemops get", func() {
	// It checks the tables of get
	// against golden files: newest first, counts, bytes and other units, overall
	// progress, the latest ETA, stalled operations, and parents without
	// operations left out.
	It("get prints one row per parent with operations", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		ns := namespace(t, "get")

		done := backupIn(t, ns, "nightly-1", velerov1api.BackupPhaseCompleted, 2)
		running := backupIn(t, ns, "nightly-2", velerov1api.BackupPhaseWaitingForPluginOperationsPartiallyFailed, 5)
		backupIn(t, ns, "without-operations", velerov1api.BackupPhaseCompleted, 0)
		restore := restoreIn(t, ns, "restore-1", velerov1api.RestorePhaseWaitingForPluginOperations, 1)
		// Ages are days away, so the seconds between creations do not show.
		now := done.CreationTimestamp.Add(10*24*time.Hour + 12*time.Hour)

		for _, id := range []string{"a", "b"} {
			setStatus(t, operation(t, done, "data-"+id, "velero.io/csi-pvc-backupper", "du-"+id),
				ended(itemopsv1alpha1.OperationPhaseCompleted, gi("5Gi"), gi("5Gi"), ""))
		}
		setStatus(t, operation(t, running, "orders-db", "velero.io/csi-pvc-backupper", "du-orders"),
			progressAt(now, gi("4Gi"), gi("10Gi"), 90*time.Second))
		media := operation(t, running, "media", "velero.io/csi-pvc-backupper", "du-media")
		setStatus(t, media, progressAt(now, gi("1Gi"), gi("8Gi"), 10*time.Minute))
		setStatus(t, media, stalledNow)
		setStatus(t, operation(t, running, "search-index", "itemops.io/sample-datamover", "up-search"),
			ended(itemopsv1alpha1.OperationPhaseFailed, gi("2.4Gi"), gi("4Gi"), "upload failed at 60%"))
		setStatus(t, operation(t, running, "catalog", "example.io/exporter", "ex-catalog"),
			func(s *itemopsv1alpha1.ItemOperationStatus) {
				s.Phase, s.NCompleted, s.NTotal, s.OperationUnits = itemopsv1alpha1.OperationPhaseInProgress, 12, 40, "tables"
			})
		setStatus(t, operation(t, restore, "orders-db", "velero.io/csi-pvc-restorer", "dd-orders"),
			progressAt(now, gi("3Gi"), gi("10Gi"), 5*time.Minute))

		clock := clocktesting.NewFakePassiveClock(now)
		for _, c := range []struct {
			golden string
			args   []string
		}{
			{"get.golden", []string{"get", "-n", ns}},
			{"get-wide.golden", []string{"get", "-n", ns, "-o", "wide"}},
			{"get-backups.golden", []string{"get", "backups", "-n", ns}},
			{"get-backup.golden", []string{"get", "backup", "nightly-2", "-n", ns}},
		} {
			r := kubectlItemops(ctx, clock, c.args...)
			g.Expect(r.code).To(Equal(0), r.err)
			golden(t, c.golden, r.out)
		}

		r := kubectlItemops(ctx, clock, "get", "backup", "absent", "-n", ns)
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.err).To(ContainSubstring(`backups.velero.io "absent" not found`))
	})

	// It checks -o json and jsonpath.
	It("get prints summaries for scripts", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()
		ns := namespace(t, "get-json")
		b := backupIn(t, ns, "json-1", velerov1api.BackupPhaseWaitingForPluginOperations, 2)
		now := time.Now()
		setStatus(t, operation(t, b, "a", "velero.io/csi-pvc-backupper", "du-a"), progressAt(now, gi("1Gi"), gi("4Gi"), time.Minute))
		setStatus(t, operation(t, b, "b", "velero.io/csi-pvc-backupper", "du-b"), ended(itemopsv1alpha1.OperationPhaseCompleted, gi("4Gi"), gi("4Gi"), ""))

		r := kubectlItemops(ctx, clocktesting.NewFakePassiveClock(now), "get", "-n", ns, "-o", "json")
		g.Expect(r.code).To(Equal(0), r.err)
		var list struct {
			Kind  string `json:"kind"`
			Items []struct {
				Kind   string `json:"kind"`
				Parent struct {
					Kind, Name, Phase string
				} `json:"parent"`
				Operations struct {
					Total, Completed, Failed, Running int
				} `json:"operations"`
				Amounts []struct {
					Units       string
					Done, Total int64
				} `json:"amounts"`
				Percent int `json:"percent"`
			} `json:"items"`
		}
		g.Expect(json.Unmarshal([]byte(r.out), &list)).To(Succeed(), r.out)
		g.Expect(list.Kind).To(Equal("List"))
		g.Expect(list.Items).To(HaveLen(1))
		item := list.Items[0]
		g.Expect(item.Kind).To(Equal("OperationsSummary"))
		g.Expect(item.Parent.Kind).To(Equal("Backup"))
		g.Expect(item.Parent.Name).To(Equal("json-1"))
		g.Expect(item.Parent.Phase).To(Equal("WaitingForPluginOperations"))
		g.Expect(item.Operations.Total).To(Equal(2))
		g.Expect(item.Operations.Completed).To(Equal(1))
		g.Expect(item.Operations.Running).To(Equal(1))
		g.Expect(item.Amounts).To(HaveLen(1))
		g.Expect(item.Amounts[0].Units).To(Equal("bytes"))
		g.Expect(item.Amounts[0].Done).To(Equal(gi("5Gi")))
		g.Expect(item.Amounts[0].Total).To(Equal(gi("8Gi")))
		g.Expect(item.Percent).To(Equal(62))

		r = kubectlItemops(ctx, clocktesting.NewFakePassiveClock(now), "get", "backup", "json-1", "-n", ns,
			"-o", "jsonpath={.operations.completed}/{.operations.total}")
		g.Expect(r.code).To(Equal(0), r.err)
		g.Expect(r.out).To(Equal("1/2"))
	})
})
