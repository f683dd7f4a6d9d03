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

package main

import (
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

func TestPartOf(t *testing.T) {
	for _, tc := range []struct {
		stack []string // leaf first
		want  string
	}{
		{[]string{"encoding/json.(*encodeState).marshal", "sigs.k8s.io/controller-runtime/pkg/client.(*typedClient).Patch",
			"github.com/itemops/itemops/controllers.(*ItemOperationReconciler).Reconcile"}, partJSON},
		{[]string{"syscall.write", "net.(*conn).Write", "golang.org/x/net/http2.(*Framer).WriteData",
			"google.golang.org/grpc/internal/transport.(*http2Client).Write"}, partGRPC},
		{[]string{"syscall.write", "net.(*conn).Write", "crypto/tls.(*Conn).Write", "net/http.(*persistConn).writeLoop"}, partAPI},
		{[]string{"runtime.mallocgc", "github.com/itemops/itemops/api/v1alpha1.(*ItemOperation).DeepCopy"}, partGC},
		{[]string{"github.com/itemops/itemops/api/v1alpha1.(*ItemOperationStatus).DeepCopyInto",
			"sigs.k8s.io/controller-runtime/pkg/cache/internal.(*CacheReader).Get"}, partCache},
		{[]string{"go.uber.org/zap/zapcore.(*jsonEncoder).AppendString", "github.com/go-logr/zapr.(*zapLogger).Info"}, partLogging},
		{[]string{"github.com/itemops/itemops/internal/progress.Format", "github.com/itemops/itemops/controllers.(*ItemOperationReconciler).poll"}, partReconcile},
		{[]string{"k8s.io/client-go/util/workqueue.(*Typed[...]).Get"}, partQueue},
		{[]string{"runtime.futex", "runtime.findRunnable", "runtime.schedule"}, partOther},
	} {
		if got := partOf(tc.stack); got != tc.want {
			t.Errorf("partOf(%v) = %q, want %q", tc.stack, got, tc.want)
		}
	}
}

func TestCPUParts(t *testing.T) {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	reconcile, marshal := fn(1, "github.com/itemops/itemops/controllers.(*ItemOperationReconciler).Reconcile"), fn(2, "encoding/json.Marshal")
	loc := func(id uint64, f ...*profile.Function) *profile.Location {
		l := &profile.Location{ID: id}
		for _, x := range f {
			l.Line = append(l.Line, profile.Line{Function: x})
		}
		return l
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{loc(1, marshal), loc(2, reconcile)}, Value: []int64{3, int64(30 * time.Millisecond)}},
			{Location: []*profile.Location{loc(2, reconcile)}, Value: []int64{1, int64(10 * time.Millisecond)}},
		},
	}
	parts, total := cpuParts(p)
	if total != 40*time.Millisecond || parts[partJSON] != 30*time.Millisecond || parts[partReconcile] != 10*time.Millisecond {
		t.Errorf("parts %v, total %s; want 30 ms JSON, 10 ms reconcile, 40 ms", parts, total)
	}
}

func TestCPUUnderCauseFinding(t *testing.T) {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	loc := func(id uint64, f *profile.Function) *profile.Location {
		return &profile.Location{ID: id, Line: []profile.Line{{Function: f}}}
	}
	deepCopy := loc(1, fn(1, "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1.(*DataUpload).DeepCopy"))
	gather := loc(2, fn(2, "github.com/itemops/itemops/internal/why.(*Gatherer).Cause"))
	server := loc(3, fn(3, "github.com/itemops/itemops/controllers.(*ItemOperationReconciler).veleroServer"))
	poll := loc(4, fn(4, "github.com/itemops/itemops/controllers.(*ItemOperationReconciler).poll"))
	isDataMover := loc(5, fn(5, "github.com/itemops/itemops/api/v1alpha1.(*ItemOperation).IsDataMover"))
	scrape := loc(6, fn(6, "github.com/itemops/itemops/internal/metrics.(*collector).Collect"))
	ms := func(n int) []int64 { return []int64{1, int64(time.Duration(n) * time.Millisecond)} }
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{deepCopy, gather, poll}, Value: ms(7)}, // a copy under the Gatherer
			{Location: []*profile.Location{server, poll}, Value: ms(2)},
			{Location: []*profile.Location{deepCopy, poll}, Value: ms(50)},      // the poll's own
			{Location: []*profile.Location{isDataMover, scrape}, Value: ms(11)}, // metrics telling data movements apart
		},
	}
	if got := cpuUnder(p, causeFrames); got != 9*time.Millisecond {
		t.Errorf("cpuUnder = %s, want 9ms (the Gatherer's copy and the server's state only)", got)
	}
}
