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

package compat

import (
	"context"
	"regexp"
	"strings"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/compat"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
)

func (w *world) backupNow(g Gomega, b *velerov1api.Backup) *velerov1api.Backup {
	got := &velerov1api.Backup{}
	g.Expect(w.env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), got)).To(Succeed())
	return got
}

func (w *world) backupPhase(b *velerov1api.Backup) func(g Gomega) velerov1api.BackupPhase {
	return func(g Gomega) velerov1api.BackupPhase { return w.backupNow(g, b).Status.Phase }
}

// operationsOf lists the ItemOperations of a parent by the name of the item
// each acts on (data-N for a PVC, sample-N for a ConfigMap).
func (w *world) operationsOf(g Gomega, uid string) map[string]itemopsv1alpha1.ItemOperation {
	list := &itemopsv1alpha1.ItemOperationList{}
	g.Expect(w.env.Client.List(context.Background(), list, client.InNamespace(envtest.VeleroNamespace),
		client.MatchingLabels{itemopsv1alpha1.LabelParentUID: uid})).To(Succeed())
	out := map[string]itemopsv1alpha1.ItemOperation{}
	for _, op := range list.Items {
		out[op.Spec.Resource.Name] = op
	}
	return out
}

func phases(ops map[string]itemopsv1alpha1.ItemOperation) map[string]itemopsv1alpha1.OperationPhase {
	out := map[string]itemopsv1alpha1.OperationPhase{}
	for name, op := range ops {
		out[name] = op.Status.Phase
	}
	return out
}

func byOperationID(ops map[string]itemopsv1alpha1.ItemOperation, id string) *itemopsv1alpha1.ItemOperation {
	for _, op := range ops {
		if op.Spec.OperationID == id {
			return &op
		}
	}
	return nil
}

// pluginState is what the sample plugins keep of an operation.
func pluginState(g Gomega, id string) *sim.State {
	store, err := sim.NewStore()
	g.Expect(err).NotTo(HaveOccurred())
	st, err := store.Load(id)
	g.Expect(err).NotTo(HaveOccurred())
	return st
}

// dataUploads lists a Backup's DataUploads by source PVC.
func (w *world) dataUploads(g Gomega, b *velerov1api.Backup) map[string]velerov2alpha1.DataUpload {
	list := &velerov2alpha1.DataUploadList{}
	g.Expect(w.env.Client.List(context.Background(), list, client.InNamespace(envtest.VeleroNamespace),
		client.MatchingLabels{velerov1api.BackupNameLabel: b.Name})).To(Succeed())
	out := map[string]velerov2alpha1.DataUpload{}
	for _, du := range list.Items {
		out[du.Spec.SourcePVC] = du
	}
	return out
}

// describe runs the release's `velero backup|restore describe --details`.
func (w *world) describe(g Gomega, kind, name string) string {
	out, err := w.velero.Describe(kind, name)
	g.Expect(err).NotTo(HaveOccurred(), out)
	return out
}

var (
	describedID    = regexp.MustCompile(`Operation ID:\s+(\S+)`)
	describedPhase = regexp.MustCompile(`\n\s*Phase:\s+(\S+)`)
)

// describedPhases reads the phase of each operation, by ID, from what
// `velero … describe --details` prints under "… Item Operations:".
func describedPhases(out string) map[string]string {
	phases := map[string]string{}
	for _, chunk := range strings.Split(out, "Operation for ")[1:] {
		id, phase := describedID.FindStringSubmatch(chunk), describedPhase.FindStringSubmatch(chunk)
		if id != nil && phase != nil {
			phases[id[1]] = phase[1]
		}
	}
	return phases
}

// warnings are the Warning Events on Velero's Deployment, message by reason.
func (w *world) warnings(g Gomega) map[string]string {
	list := &corev1.EventList{}
	g.Expect(w.env.Client.List(context.Background(), list, client.InNamespace(envtest.VeleroNamespace))).To(Succeed())
	out := map[string]string{}
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning && e.InvolvedObject.Kind == "Deployment" && e.InvolvedObject.Name == compat.VeleroDeployment {
			out[e.Reason] = e.Message
		}
	}
	return out
}
