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

package view

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// world is a reader holding a Backup in phase and one operation of it in
// opPhase.
func world(phase velerov1api.BackupPhase, opPhase itemopsv1alpha1.OperationPhase) client.Reader {
	b := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "nightly", UID: "b-uid"},
		Status: velerov1api.BackupStatus{Phase: phase}}
	op := &itemopsv1alpha1.ItemOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "op",
			Labels: map[string]string{itemopsv1alpha1.LabelParentName: itemopsv1alpha1.ParentNameLabelValue("nightly")}},
		Spec: itemopsv1alpha1.ItemOperationSpec{Parent: itemopsv1alpha1.ParentReference{
			Kind: itemopsv1alpha1.ParentKindBackup, Name: "nightly", UID: "b-uid"}},
		Status: itemopsv1alpha1.ItemOperationStatus{Phase: opPhase},
	}
	return fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(b, op).WithStatusSubresource(b, op).Build()
}

// unreachable is a reader that fails every read.
func unreachable() client.Reader {
	return fake.NewClientBuilder().WithScheme(Scheme()).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("unreachable")
		},
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("unreachable")
		},
	}).Build()
}

func TestReadSettled(t *testing.T) {
	nightly := Parent{Kind: itemopsv1alpha1.ParentKindBackup, Namespace: "velero", Name: "nightly"}
	ctx := context.Background()

	t.Run("an ending parent is read again from the API server", func(t *testing.T) {
		g := NewWithT(t)
		// The cache saw the Backup end before the operation's last change.
		cached := world(velerov1api.BackupPhasePartiallyFailed, itemopsv1alpha1.OperationPhaseInProgress)
		live := world(velerov1api.BackupPhasePartiallyFailed, itemopsv1alpha1.OperationPhaseCanceled)
		s, err := readSettled(ctx, cached, live, nightly)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(s.Operations).To(HaveLen(1))
		g.Expect(s.Operations[0].Status.Phase).To(Equal(itemopsv1alpha1.OperationPhaseCanceled))
	})

	t.Run("a running parent is read from the cache alone", func(t *testing.T) {
		g := NewWithT(t)
		cached := world(velerov1api.BackupPhaseWaitingForPluginOperations, itemopsv1alpha1.OperationPhaseInProgress)
		s, err := readSettled(ctx, cached, unreachable(), nightly)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(s.Phase).To(Equal(string(velerov1api.BackupPhaseWaitingForPluginOperations)))
		g.Expect(s.Operations).To(HaveLen(1))
	})

	t.Run("an ending snapshot the API server cannot confirm is an error", func(t *testing.T) {
		g := NewWithT(t)
		cached := world(velerov1api.BackupPhaseCompleted, itemopsv1alpha1.OperationPhaseCompleted)
		_, err := readSettled(ctx, cached, unreachable(), nightly)
		g.Expect(err).To(MatchError(ContainSubstring("unreachable")))
	})
}
