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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

var _ = Describe("kubectl itemops rbac", func() {
	// It installs the ClusterRoles
	// that itemops aggregates into the built-in roles, from config/ and from
	// the chart, and runs kubectl-itemops as a ServiceAccount bound in Velero's
	// namespace to view, then to edit.
	Describe("the view role may watch and the edit role may cancel", func() {
		ctx := context.Background()
		for _, c := range []struct {
			name  string
			roles func() ([]*unstructured.Unstructured, error)
		}{
			{"config", func() ([]*unstructured.Unstructured, error) {
				return env.ReadManifests("config/rbac/itemoperation_viewer_role.yaml", "config/rbac/itemoperation_editor_role.yaml")
			}},
			{"chart", func() ([]*unstructured.Unstructured, error) {
				objs, err := env.RenderChart("itemops")
				var roles []*unstructured.Unstructured
				for _, o := range objs {
					if o.GetKind() == "ClusterRole" && (o.GetLabels()["rbac.authorization.k8s.io/aggregate-to-view"] == "true" ||
						o.GetLabels()["rbac.authorization.k8s.io/aggregate-to-edit"] == "true") {
						roles = append(roles, o)
					}
				}
				return roles, err
			}},
		} {
			It(c.name, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				roles, err := c.roles()
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(roles).To(HaveLen(2))
				g.Expect(env.Apply(ctx, "itemops-test", roles...)).To(Succeed())
				g.Expect(env.AggregateClusterRoles(ctx)).To(Succeed())
				t.Cleanup(func() {
					for _, r := range roles {
						_ = env.Client.Delete(ctx, r)
					}
					_ = env.AggregateClusterRoles(ctx)
				})

				ns := namespace(t, "rbac")
				b := backupIn(t, ns, "rbac-"+c.name, velerov1api.BackupPhaseWaitingForPluginOperations, 1)
				op := operation(t, b, "orders-db", "velero.io/csi-pvc-backupper", "du-orders")
				setStatus(t, op, progressAt(time.Now(), gi("1Gi"), gi("4Gi"), time.Minute))

				viewer := namespaced(t, ns, "viewer", "view")
				r := kubectlItemopsAs(ctx, viewer, clock.RealClock{}, "get", "backup", b.Name, "-n", ns)
				g.Expect(r.code).To(Equal(0), r.err)
				g.Expect(r.out).To(ContainSubstring(b.Name))
				r = kubectlItemopsAs(ctx, viewer, clock.RealClock{}, "__complete", "-n", ns, "watch", "backup", "rbac-")
				g.Expect(r.out).To(ContainSubstring(b.Name))

				r = kubectlItemopsAs(ctx, viewer, clock.RealClock{}, "cancel", "backup", b.Name, "-n", ns)
				g.Expect(r.code).To(Equal(1))
				g.Expect(r.err).To(And(
					ContainSubstring("not allowed to cancel itemoperation/"+op.Name),
					ContainSubstring("needs patch on itemoperations.itemops.io in namespace "+ns+", which the aggregated edit and admin roles grant"),
				))
				g.Expect(cancelRequested(g, op)).To(BeEmpty())

				// The viewer may watch it to its end.
				watched := make(chan result, 1)
				go func() {
					watched <- kubectlItemopsAs(ctx, viewer, clock.RealClock{}, "watch", "backup", b.Name, "-n", ns, "-o", "plain")
				}()
				editor := namespaced(t, ns, "editor", "edit")
				r = kubectlItemopsAs(ctx, editor, clock.RealClock{}, "cancel", "backup", b.Name, "-n", ns)
				g.Expect(r.code).To(Equal(0), r.err)
				g.Expect(cancelRequested(g, op)).To(ConsistOf(op.Name))
				setStatus(t, op, ended(itemopsv1alpha1.OperationPhaseCanceled, gi("1Gi"), gi("4Gi"), "canceled on request"))
				setBackupPhase(t, b, velerov1api.BackupPhasePartiallyFailed)
				g.Eventually(watched, 20*time.Second).Should(Receive(&r))
				g.Expect(r.code).To(Equal(1), r.err)
				g.Expect(r.out).To(ContainSubstring("Canceled"))
			})
		}
	})

	// It runs watch as a ServiceAccount bound to
	// nothing: it must end with the API server's reason, not wait for ever.
	It("a watch that may not read says so", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ns := namespace(t, "nobody")
		nobody := namespaced(t, ns, "nobody", "system:basic-user")
		r := kubectlItemopsAs(context.Background(), nobody, clock.RealClock{}, "watch", "backup", "anything", "-n", ns, "-o", "plain")
		g.Expect(r.code).To(Equal(4))
		g.Expect(r.err).To(ContainSubstring("forbidden"))
	})
})
