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

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// The cache and the API server are two fake clients here: what one holds
// and the other not is the lag of the cache behind the API server.
var _ = Describe("A PodVolumeBackup's parent", Label("unit"), func() {
	backup := func(uid types.UID) *velerov1api.Backup {
		return &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "nightly", UID: uid},
			Status: velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseInProgress}}
	}
	pvb := &velerov1api.PodVolumeBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "nightly-x7k2p", UID: "pvb-uid",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "velero.io/v1", Kind: "Backup", Name: "nightly", UID: "backup-uid",
				Controller: ptr.To(true)}}},
		Spec:   velerov1api.PodVolumeBackupSpec{Node: "node-1", Volume: "data", Pod: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web"}},
		Status: velerov1api.PodVolumeBackupStatus{Phase: velerov1api.PodVolumeBackupPhaseInProgress},
	}
	mirror := types.NamespacedName{Namespace: "velero",
		Name: mirrorName("nightly", "backup-uid", itemopsv1alpha1.MirrorKindPodVolumeBackup, pvb.Name)}

	DescribeTable("is read from the API server when the cache does not hold it",
		func(inCache, inAPIServer *velerov1api.Backup, withAPIReader, mirrored bool) {
			t := GinkgoTB()
			scheme := unitScheme(t)
			cached := []client.Object{pvb.DeepCopy()}
			if inCache != nil {
				cached = append(cached, inCache)
			}
			cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cached...).Build()
			r := &PodVolumeReconciler{Client: cache, Recorder: record.NewFakeRecorder(10), Kind: itemopsv1alpha1.MirrorKindPodVolumeBackup, Namespace: "velero"}
			if withAPIReader {
				server := []client.Object{pvb.DeepCopy()}
				if inAPIServer != nil {
					server = append(server, inAPIServer)
				}
				r.APIReader = fake.NewClientBuilder().WithScheme(scheme).WithObjects(server...).Build()
			}
			_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pvb)})
			Expect(err).NotTo(HaveOccurred())
			err = cache.Get(context.Background(), mirror, &itemopsv1alpha1.ItemOperation{})
			if mirrored {
				Expect(err).NotTo(HaveOccurred())
			} else {
				Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
			}
		},
		Entry("in the cache: mirrored", backup("backup-uid"), nil, true, true),
		Entry("created a moment ago, only in the API server: mirrored", nil, backup("backup-uid"), true, true),
		Entry("the cache holds an earlier Backup of that name, the API server this one: mirrored", backup("earlier-uid"), backup("backup-uid"), true, true),
		Entry("in neither (deleted): not mirrored, no error", nil, nil, true, false),
		Entry("only the earlier Backup anywhere: not mirrored", backup("earlier-uid"), backup("earlier-uid"), true, false),
		Entry("without a reader around the cache, only the cache counts", nil, backup("backup-uid"), false, false),
	)
})
