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

package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// countingMapper answers from a fixed table and counts the questions.
type countingMapper struct {
	meta.RESTMapper
	known map[schema.GroupKind]*meta.RESTMapping
	asked int
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.asked++
	if mapping, ok := m.known[gk]; ok {
		return mapping, nil
	}
	return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
}

func TestMemoizedMapperAsksOnceForAFoundKind(t *testing.T) {
	g := NewWithT(t)
	backup := schema.GroupKind{Group: "velero.io", Kind: "Backup"}
	operation := schema.GroupKind{Group: "itemops.io", Kind: "ItemOperation"}
	inner := &countingMapper{known: map[schema.GroupKind]*meta.RESTMapping{
		backup: {Resource: schema.GroupVersionResource{Group: "velero.io", Version: "v1", Resource: "backups"}, Scope: meta.RESTScopeNamespace},
	}}
	m := NewMemoizedMapper(inner)

	for range 3 {
		mapping, err := m.RESTMapping(backup, "v1")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(mapping.Resource.Resource).To(Equal("backups"))
		g.Expect(mapping.Scope.Name()).To(Equal(meta.RESTScopeNameNamespace))
	}
	g.Expect(inner.asked).To(Equal(1), "a found mapping is remembered")

	_, err := m.RESTMapping(backup, "v2")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inner.asked).To(Equal(2), "another version is another question")

	// A kind not found yet (its CRD not installed) is asked again each time,
	// and found once it exists.
	for range 2 {
		_, err := m.RESTMapping(operation, "v1alpha1")
		g.Expect(meta.IsNoMatchError(err)).To(BeTrue())
	}
	g.Expect(inner.asked).To(Equal(4))
	inner.known[operation] = &meta.RESTMapping{Resource: schema.GroupVersionResource{Resource: "itemoperations"}, Scope: meta.RESTScopeNamespace}
	mapping, err := m.RESTMapping(operation, "v1alpha1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mapping.Resource.Resource).To(Equal("itemoperations"))
}

// logLine writes one line through logger made from a zap logger on a
// buffer, and decodes it.
func logLine(t *testing.T, deferred bool, write func(logr.Logger)) map[string]any {
	t.Helper()
	var out bytes.Buffer
	log := zap.New(zap.WriteTo(&out), zap.UseDevMode(false), zap.Level(zapcore.Level(-1)), zap.RawZapOpts(uberzap.AddCaller()))
	if deferred {
		log = DeferValues(log)
	}
	write(log)
	line := map[string]any{}
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("decoding %q: %v", out.String(), err)
	}
	delete(line, "ts")
	// The stack's first frame is the line's; the frames below differ by
	// which call of logLine made it.
	if stack, ok := line["stacktrace"].(string); ok {
		line["stacktrace"] = strings.SplitN(stack, "\n", 3)[:2]
	}
	return line
}

func TestDeferValuesWritesWhatZapWrites(t *testing.T) {
	cases := map[string]func(logr.Logger){
		"values, names and V levels": func(log logr.Logger) {
			log = log.WithName("controller").WithValues("controller", "itemoperation", "reconcileID", "r1")
			log = log.WithName("poll").WithValues("itemoperation", map[string]string{"name": "op-1", "namespace": "velero"})
			log.V(1).Info("polled", "phase", "InProgress")
		},
		"an error": func(log logr.Logger) {
			log.WithValues("backup", "b-1").Error(errors.New("bucket unreachable"), "writing back", "attempt", 2)
		},
	}
	for name, write := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			want := logLine(t, false, write)
			got := logLine(t, true, write)
			g.Expect(got).To(Equal(want))
			g.Expect(got).To(HaveKeyWithValue("caller", ContainSubstring("kube_test.go")), "the caller is the line's, not the sink's")
		})
	}
}

func TestDeferValuesKeepsSiblingsApart(t *testing.T) {
	g := NewWithT(t)
	var lines []map[string]any
	var out bytes.Buffer
	parent := DeferValues(zap.New(zap.WriteTo(&out), zap.UseDevMode(false))).WithValues("controller", "backup")
	parent.WithValues("backup", "a").Info("one")
	parent.WithValues("backup", "b").Info("two")
	parent.Info("three")
	for _, raw := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		line := map[string]any{}
		g.Expect(json.Unmarshal(raw, &line)).To(Succeed())
		lines = append(lines, line)
	}
	g.Expect(lines).To(HaveLen(3))
	g.Expect(lines[0]).To(HaveKeyWithValue("backup", "a"))
	g.Expect(lines[1]).To(HaveKeyWithValue("backup", "b"))
	g.Expect(lines[2]).NotTo(HaveKey("backup"))
	for _, line := range lines {
		g.Expect(line).To(HaveKeyWithValue("controller", "backup"))
	}
}

func TestDeferValuesDerivesWithoutCopyingTheParents(t *testing.T) {
	g := NewWithT(t)
	var out bytes.Buffer
	log := DeferValues(zap.New(zap.WriteTo(&out), zap.UseDevMode(false)))
	for i := range 20 {
		log = log.WithValues(fmt.Sprintf("k%d", i), i)
	}
	// A reconcile's logger: derived from one with many pairs, never written.
	var before, after runtime.MemStats
	const rounds = 1000
	runtime.ReadMemStats(&before)
	for range rounds {
		log.WithValues("reconcileID", "r").WithValues("itemoperation", "op").V(1).Info("polled")
	}
	runtime.ReadMemStats(&after)
	perRound := (after.TotalAlloc - before.TotalAlloc) / rounds
	// Copying the 40 values of the parents twice would be well over a kilobyte.
	g.Expect(perRound).To(BeNumerically("<", 400), "bytes allocated per derived logger")

	log.WithName("n").WithValues("last", true).Info("written")
	line := map[string]any{}
	g.Expect(json.Unmarshal(bytes.TrimSpace(out.Bytes()), &line)).To(Succeed())
	for i := range 20 {
		g.Expect(line).To(HaveKeyWithValue(fmt.Sprintf("k%d", i), BeNumerically("==", i)))
	}
	g.Expect(line).To(HaveKeyWithValue("last", true))
}
