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
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
)

// An informer of ItemOperations made through Stores.NewInformer,
// fed from a list and a watch the spec controls.
func indexedInformer(stores *kube.Stores, listed ...itemopsv1alpha1.ItemOperation) (toolscache.SharedIndexInformer, *watch.FakeWatcher, chan struct{}) {
	events := watch.NewFake()
	release := make(chan struct{})
	lw := &toolscache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			<-release // the informer has not synced until the spec lets it
			return &itemopsv1alpha1.ItemOperationList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: listed}, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return events, nil },
	}
	return stores.NewInformer(listThenWatch{lw}, &itemopsv1alpha1.ItemOperation{}, 0, toolscache.Indexers{}), events, release
}

// listThenWatch is a ListWatch that lists, then watches: its watch sends
// no initial events, so the informer must not stream its list from it.
type listThenWatch struct{ *toolscache.ListWatch }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

func operationOf(name, parentUID string, kind itemopsv1alpha1.PluginKind) itemopsv1alpha1.ItemOperation {
	return itemopsv1alpha1.ItemOperation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "velero", ResourceVersion: "1"},
		Spec: itemopsv1alpha1.ItemOperationSpec{
			Parent: itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindBackup, Name: "b-" + parentUID, UID: parentUID},
			Plugin: itemopsv1alpha1.PluginReference{Kind: kind, Name: "example.io/p"},
		},
	}
}

func names(ops []*itemopsv1alpha1.ItemOperation) []string {
	out := make([]string, 0, len(ops))
	for _, op := range ops {
		out = append(out, op.Name)
	}
	slices.Sort(out)
	return out
}

var _ = Describe("Reading from the cache's stores", Label("unit"), func() {
	It("answers from the synced informer's index, with the store's own objects", func(ctx context.Context) {
		stores := NewStores()
		informer, events, release := indexedInformer(stores,
			operationOf("a1", "uid-a", itemopsv1alpha1.PluginKindBackupItemAction),
			operationOf("a2", "uid-a", itemopsv1alpha1.PluginKindVolumeSnapshotter),
			operationOf("b1", "uid-b", itemopsv1alpha1.PluginKindBackupItemAction))
		// Informers of other kinds are made as before and not read.
		other := stores.NewInformer(&toolscache.ListWatch{}, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
		Expect(other.GetIndexer().GetIndexers()).To(BeEmpty())

		runCtx, stop := context.WithCancel(ctx)
		DeferCleanup(stop)
		go informer.RunWithContext(runCtx)

		_, ok, err := kube.StoredByIndex[*itemopsv1alpha1.ItemOperation](stores, storeIndexParentUID, "uid-a")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "an informer that has not synced is not read")
		_, _, usable, err := kube.Stored[*itemopsv1alpha1.ItemOperation](stores, types.NamespacedName{Namespace: "velero", Name: "a1"})
		Expect(err).NotTo(HaveOccurred())
		Expect(usable).To(BeFalse(), "an informer that has not synced is not read")

		close(release)
		Eventually(informer.HasSynced).Should(BeTrue())
		ops, ok, err := kube.StoredByIndex[*itemopsv1alpha1.ItemOperation](stores, storeIndexParentUID, "uid-a")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		Expect(names(ops)).To(Equal([]string{"a1", "a2"}))
		stored, _, err := informer.GetIndexer().GetByKey("velero/a1")
		Expect(err).NotTo(HaveOccurred())
		Expect(slices.Contains(ops, stored.(*itemopsv1alpha1.ItemOperation))).To(BeTrue(), "the store's object, not a copy")
		got, found, usable, err := kube.Stored[*itemopsv1alpha1.ItemOperation](stores, types.NamespacedName{Namespace: "velero", Name: "a1"})
		Expect(err).NotTo(HaveOccurred())
		Expect(found && usable).To(BeTrue())
		Expect(got).To(BeIdenticalTo(stored.(*itemopsv1alpha1.ItemOperation)))
		_, found, usable, err = kube.Stored[*itemopsv1alpha1.ItemOperation](stores, types.NamespacedName{Namespace: "velero", Name: "gone"})
		Expect(err).NotTo(HaveOccurred())
		Expect(usable && !found).To(BeTrue(), "a synced store answers that it has no such operation")

		// A watch event is in the next read.
		added := operationOf("a3", "uid-a", itemopsv1alpha1.PluginKindBackupItemAction)
		added.ResourceVersion = "2"
		events.Add(&added)
		Eventually(func() []string {
			ops, _, _ := kube.StoredByIndex[*itemopsv1alpha1.ItemOperation](stores, storeIndexParentUID, "uid-a")
			return names(ops)
		}).Should(Equal([]string{"a1", "a2", "a3"}))

		// listOperations leaves out the volume snapshots, listAllOperations
		// and the namespace filter keep to what was asked.
		c := fake.NewClientBuilder().WithScheme(unitScheme(GinkgoTB())).Build()
		items, err := listOperations(ctx, c, stores, "velero", "uid-a")
		Expect(err).NotTo(HaveOccurred())
		Expect(names(items)).To(Equal([]string{"a1", "a3"}))
		items, err = listAllOperations(ctx, c, stores, "elsewhere", "uid-a")
		Expect(err).NotTo(HaveOccurred())
		Expect(items).To(BeEmpty())
	})

	It("reads through the client without an index", func(ctx context.Context) {
		var objects []client.Object
		for i := range 3 {
			op := operationOf(fmt.Sprintf("op-%d", i), "uid-a", itemopsv1alpha1.PluginKindBackupItemAction)
			op.ResourceVersion = ""
			objects = append(objects, &op)
		}
		c := fake.NewClientBuilder().WithScheme(unitScheme(GinkgoTB())).WithObjects(objects...).
			WithIndex(&itemopsv1alpha1.ItemOperation{}, IndexParentUID, parentUID).Build()
		ops, err := listAllOperations(ctx, c, nil, "velero", "uid-a")
		Expect(err).NotTo(HaveOccurred())
		Expect(names(ops)).To(Equal([]string{"op-0", "op-1", "op-2"}))
	}, SpecTimeout(10*time.Second))

	It("wakes the volume snapshot controller only for volume snapshots", func() {
		p := snapshotOperation()
		for kind, want := range map[itemopsv1alpha1.PluginKind]bool{
			itemopsv1alpha1.PluginKindVolumeSnapshotter: true,
			itemopsv1alpha1.PluginKindBackupItemAction:  false,
			itemopsv1alpha1.PluginKindRestoreItemAction: false,
		} {
			op := operationOf("op", "uid-a", kind)
			Expect(p.Update(event.UpdateEvent{ObjectOld: &op, ObjectNew: &op})).To(Equal(want), string(kind))
			Expect(p.Create(event.CreateEvent{Object: &op})).To(Equal(want), string(kind))
		}
	})
})
