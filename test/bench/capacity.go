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
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
)

// capacity is how many ItemOperation status writes a second the API server
// of this machine takes when nothing else runs: the ceiling under every
// figure of the runs, which share the same cores with it.
type capacity struct {
	writers         int
	statusPerSecond float64
}

func measureCapacity(ctx context.Context, writers int, d time.Duration) (*capacity, error) {
	env, err := envtest.Start()
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Stop() }()
	fast := rest.CopyConfig(env.Config)
	fast.QPS, fast.Burst = -1, 0 // no client-side limit
	c, err := client.New(fast, client.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, err
	}
	ops := make([]*itemopsv1alpha1.ItemOperation, 500)
	for i := range ops {
		ops[i] = &itemopsv1alpha1.ItemOperation{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("capacity-%03d", i), Namespace: envtest.VeleroNamespace},
			Spec: itemopsv1alpha1.ItemOperationSpec{
				Parent:      itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindBackup, Name: "capacity", UID: "capacity"},
				Plugin:      itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: datamover},
				OperationID: fmt.Sprintf("capacity-%03d", i),
				Resource:    itemopsv1alpha1.ResourceIdentifier{Resource: "persistentvolumeclaims", Namespace: "bench", Name: "capacity"},
			},
		}
		if err := c.Create(ctx, ops[i]); err != nil {
			return nil, err
		}
	}
	var writes atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(deadline); i += writers {
				op := ops[i%len(ops)]
				// A progress write as itemops makes it: a merge patch of the status.
				patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil,
					`{"status":{"phase":"InProgress","nCompleted":%d,"nTotal":1000000,"progress":"%d/1000000","lastPolled":%q}}`,
					i, i, time.Now().UTC().Format(time.RFC3339)))
				if err := c.Status().Patch(ctx, op, patch); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				writes.Add(1)
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return nil, fmt.Errorf("measuring the API server: %w", err)
	}
	return &capacity{writers: writers, statusPerSecond: float64(writes.Load()) / time.Since(start).Seconds()}, nil
}
