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

package chart

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/itemops/itemops/test/envtest"
)

const crdName = "itemoperations.itemops.io"

func getCRD(g Gomega) *unstructured.Unstructured {
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Name: crdName}, crd)).To(Succeed())
	return crd
}

// podOf returns the pod the rendered Deployment would run.
func podOf(g Gomega, objects []*unstructured.Unstructured, namespace string) *corev1.Pod {
	deployments := find(objects, "Deployment")
	g.Expect(deployments).To(HaveLen(1))
	d := &appsv1.Deployment{}
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(deployments[0].Object, d)).To(Succeed())
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "itemops-pss", Namespace: namespace, Labels: d.Spec.Template.Labels},
		Spec:       d.Spec.Template.Spec,
	}
}

// rules returns the rules of the rendered Roles and ClusterRoles.
func rules(g Gomega, objects []*unstructured.Unstructured, kind string) map[string][]rbacv1.PolicyRule {
	out := map[string][]rbacv1.PolicyRule{}
	for _, obj := range find(objects, kind) {
		role := &rbacv1.Role{}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, role)).To(Succeed())
		out[obj.GetName()] = role.Rules
	}
	return out
}

// verbsOn returns the verbs the rules grant on a resource of a group.
func verbsOn(rules []rbacv1.PolicyRule, group, resource string) []string {
	var verbs []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				if g == group && res == resource {
					verbs = append(verbs, r.Verbs...)
				}
			}
		}
	}
	return verbs
}

// podSpecOf is the pod spec of the one rendered Deployment.
func podSpecOf(g Gomega, objects []*unstructured.Unstructured) *corev1.PodSpec {
	deployments := find(objects, "Deployment")
	g.Expect(deployments).To(HaveLen(1))
	d := &appsv1.Deployment{}
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(deployments[0].Object, d)).To(Succeed())
	return &d.Spec.Template.Spec
}

// ruleOn is the rule on a resource of a group; it fails without one.
func ruleOn(rules []rbacv1.PolicyRule, group, resource string) rbacv1.PolicyRule {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
			return r
		}
	}
	Fail(fmt.Sprintf("no rule on %s.%s", resource, group))
	return rbacv1.PolicyRule{}
}

func merge(maps ...map[string][]rbacv1.PolicyRule) map[string][]rbacv1.PolicyRule {
	out := map[string][]rbacv1.PolicyRule{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// Ordered: the first spec installs the CRD the later ones apply objects of.
var _ = Describe("The chart", Ordered, func() {
	// Helm installs, upgrades and uninstalls the chart. Helm never upgrades CRDs in crds/, so the chart
	// ships its CRD as a template; this proves an upgrade changes it and an
	// uninstall keeps it.
	It("installs, upgrades its CRD and uninstalls keeping the CRD", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()

		_, err := helm("install", "itemops", chartDir, "--namespace", envtest.VeleroNamespace)
		g.Expect(err).NotTo(HaveOccurred())
		crd := getCRD(g)
		g.Expect(crd.GetAnnotations()).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
		g.Expect(crd.GetLabels()).To(HaveKeyWithValue("app.kubernetes.io/managed-by", "Helm"))
		deployment := &appsv1.Deployment{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: "itemops"}, deployment)).To(Succeed())

		// The next release of the chart changes the CRD (here: one more
		// printer column); helm upgrade must carry the change to the cluster.
		next := filepath.Join(t.TempDir(), "itemops")
		g.Expect(exec.Command("cp", "-r", chartDir, next).Run()).To(Succeed())
		crdFile := filepath.Join(next, "files", "crds", "itemops.io_itemoperations.yaml")
		raw, err := os.ReadFile(crdFile)
		g.Expect(err).NotTo(HaveOccurred())
		changed := strings.Replace(string(raw), "additionalPrinterColumns:\n", "additionalPrinterColumns:\n    - jsonPath: .spec.snapshotLocation\n      name: Upgraded\n      priority: 1\n      type: string\n", 1)
		g.Expect(changed).NotTo(Equal(string(raw)))
		g.Expect(os.WriteFile(crdFile, []byte(changed), 0o644)).To(Succeed())
		_, err = helm("upgrade", "itemops", next, "--namespace", envtest.VeleroNamespace)
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func(g Gomega) string {
			columns, _, _ := unstructured.NestedSlice(getCRD(g).Object, "spec", "versions")
			out, _ := yaml.Marshal(columns)
			return string(out)
		}, 10*time.Second, 100*time.Millisecond).Should(ContainSubstring("Upgraded"))

		// Back to this chart, then uninstall: the CRD, and so every
		// ItemOperation, stays.
		_, err = helm("upgrade", "itemops", chartDir, "--namespace", envtest.VeleroNamespace)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = helm("uninstall", "itemops", "--namespace", envtest.VeleroNamespace, "--wait")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(getCRD(g).GetDeletionTimestamp()).To(BeNil())
		err = env.Client.Get(ctx, client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: "itemops"}, &appsv1.Deployment{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Deployment is removed: %v", err)
	})

	Describe("lint", func() {
		for name, args := range valuesFiles() {
			It(name, func() {
				t := GinkgoTB()
				out, err := helm(append([]string{"lint", "--strict", chartDir}, args...)...)
				if err != nil {
					t.Fatal(err)
				}
				NewWithT(t).Expect(out).To(ContainSubstring("0 chart(s) failed"))
			})
		}
	})

	It("refuses a Kubernetes older than its kubeVersion, with helm's message", func() {
		g := NewWithT(GinkgoT())
		raw, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		var chart struct {
			KubeVersion string `json:"kubeVersion"`
		}
		g.Expect(yaml.Unmarshal(raw, &chart)).To(Succeed())
		var oldest int
		_, err = fmt.Sscanf(chart.KubeVersion, ">=1.%d.0-0", &oldest)
		g.Expect(err).NotTo(HaveOccurred(), "kubeVersion %q", chart.KubeVersion)

		older := fmt.Sprintf("v1.%d.14", oldest-1)
		out, err := helm("template", "itemops", chartDir, "--kube-version", older)
		g.Expect(err).To(HaveOccurred(), "rendered for Kubernetes %s", older)
		g.Expect(out).To(ContainSubstring("chart requires kubeVersion: " + chart.KubeVersion + " which is incompatible with Kubernetes " + older))
		_, err = helm("template", "itemops", chartDir, "--kube-version", fmt.Sprintf("v1.%d.0", oldest))
		g.Expect(err).NotTo(HaveOccurred())
	})

	Describe("values schema rejects bad values", func() {
		cases := []struct {
			name string
			set  []string
			want string
		}{
			{"unknown mode", []string{"mode=bogus"}, "/mode"},
			{"replicas without leader election", []string{"replicas=2", "leaderElection.enabled=false"}, "/leaderElection/enabled"},
			{"duration that is not one", []string{"syncFrequency=ten seconds"}, "/syncFrequency"},
			{"extra argument that is not a flag", []string{"extraArgs[0]=debug"}, "/extraArgs/0"},
			{"misspelt value", []string{"leaderElections.enabled=true"}, "leaderElections"},
			{"pull policy", []string{"image.pullPolicy=Sometimes"}, "/image/pullPolicy"},
			{"metrics port", []string{"metrics.port=0"}, "/metrics/port"},
			{"namespace", []string{"veleroNamespace=Velero_NS"}, "/veleroNamespace"},
			{"init container without image", []string{"initContainers[0].name=aws"}, "/initContainers/0"},
			{"wildcard verb for plugins", []string{"rbac.pluginRules[0].apiGroups[0]=example.io", "rbac.pluginRules[0].resources[0]=jobs", "rbac.pluginRules[0].verbs[0]=*"}, "/rbac/pluginRules/0/verbs/0"},
			{"wildcard resource for plugins", []string{"rbac.pluginClusterRules[0].apiGroups[0]=example.io", "rbac.pluginClusterRules[0].resources[0]=*", "rbac.pluginClusterRules[0].verbs[0]=get"}, "/rbac/pluginClusterRules/0/resources/0"},
			{"wildcard group for plugins", []string{"rbac.pluginRules[0].apiGroups[0]=*", "rbac.pluginRules[0].resources[0]=jobs", "rbac.pluginRules[0].verbs[0]=get"}, "/rbac/pluginRules/0/apiGroups/0"},
			{"Secret name", []string{"rbac.secretNames[0]=Cloud Credentials"}, "/rbac/secretNames/0"},
			{"no file may be read", []string{"maxOperationsFileRecords=0"}, "/maxOperationsFileRecords"},
		}
		for _, tc := range cases {
			It(tc.name, func() {
				g := NewWithT(GinkgoT())
				args := []string{"template", "itemops", chartDir}
				for _, s := range tc.set {
					args = append(args, "--set", s)
				}
				out, err := helm(args...)
				g.Expect(err).To(HaveOccurred(), "accepted: %s", tc.set)
				g.Expect(out).To(ContainSubstring("values don't meet the specifications of the schema"))
				g.Expect(out).To(ContainSubstring(tc.want))
			})
		}
	})

	// It sends every rendered object to the API server as
	// a server-side dry run, so any schema mistake fails here, not at install.
	Describe("rendered objects apply", func() {
		BeforeEach(func() {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "backup-system"}}
			if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
				Expect(err).NotTo(HaveOccurred())
			}
		})
		for name, args := range valuesFiles() {
			It(name, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				objects := render(t, args...)
				g.Expect(find(objects, "Deployment")).To(HaveLen(1))
				for _, obj := range objects {
					err := env.Client.Patch(context.Background(), obj, client.Apply, client.DryRunAll,
						client.FieldOwner("itemops-chart-test"), client.ForceOwnership)
					g.Expect(err).NotTo(HaveOccurred(), "applying %s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
				}
			})
		}
		It("everything optional is rendered", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			objects := render(t, "--values", filepath.Join(chartDir, "ci", "manage-values.yaml"))
			for _, kind := range []string{"ServiceMonitor", "PrometheusRule", "PodDisruptionBudget", "ConfigMap", "Service"} {
				g.Expect(find(objects, kind)).To(HaveLen(1), kind)
			}
			dashboard := find(objects, "ConfigMap")[0]
			g.Expect(dashboard.GetLabels()).To(HaveKeyWithValue("grafana_dashboard", "1"))
			data, _, _ := unstructured.NestedString(dashboard.Object, "data", "itemops.json")
			g.Expect(data).To(ContainSubstring(`"uid": "itemops"`))
		})
	})

	// It has the API server's own
	// PodSecurity admission judge the pod, in a namespace that enforces restricted.
	Describe("pod passes the restricted pod security standard", func() {
		ctx := context.Background()
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "restricted",
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
		BeforeEach(func() {
			if err := env.Client.Create(ctx, ns.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
				Expect(err).NotTo(HaveOccurred())
			}
		})
		for name, args := range valuesFiles() {
			It(name, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				pod := podOf(g, render(t, args...), ns.Name)
				g.Expect(env.Client.Create(ctx, pod, client.DryRunAll)).To(Succeed())
			})
		}
		It("the check can fail", func() {
			t := GinkgoTB()
			g := NewWithT(t)
			pod := podOf(g, render(t, "--set", "securityContext.allowPrivilegeEscalation=true"), ns.Name)
			err := env.Client.Create(ctx, pod, client.DryRunAll)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring(`violates PodSecurity "restricted:latest"`))
		})
	})

	// The chart's CRD is config/crd/bases, byte
	// for byte in files/, and as rendered apart from helm's metadata.
	It("installs the generated CRDs", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		root := filepath.Dir(filepath.Dir(chartDir))
		bases, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(bases).NotTo(BeEmpty())
		rendered := find(render(t), "CustomResourceDefinition")
		g.Expect(rendered).To(HaveLen(len(bases)))
		for _, base := range bases {
			want, err := os.ReadFile(base)
			g.Expect(err).NotTo(HaveOccurred())
			got, err := os.ReadFile(filepath.Join(chartDir, "files", "crds", filepath.Base(base)))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got)).To(Equal(string(want)), "files/crds/%s", filepath.Base(base))

			wantCRD := &apiextensionsv1.CustomResourceDefinition{}
			g.Expect(yaml.Unmarshal(want, wantCRD)).To(Succeed())
			gotCRD := &apiextensionsv1.CustomResourceDefinition{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(rendered[0].Object, gotCRD)).To(Succeed())
			g.Expect(gotCRD.Spec).To(Equal(wantCRD.Spec))
			g.Expect(gotCRD.Name).To(Equal(wantCRD.Name))
		}
		g.Expect(find(render(t, "--set", "crds.install=false"), "CustomResourceDefinition")).To(BeEmpty())
	})

	Describe("RBAC is least privilege", func() {
		for _, mode := range []string{"observe", "manage"} {
			It(mode, func() {
				t := GinkgoTB()
				g := NewWithT(t)
				objects := render(t, "--set", "mode="+mode)
				roles := rules(g, objects, "Role")
				clusterRoles := rules(g, objects, "ClusterRole")
				g.Expect(roles).To(HaveKey("itemops-manager"))
				for _, obj := range find(objects, "Role") {
					g.Expect(obj.GetNamespace()).To(Equal(envtest.VeleroNamespace), "every Role is in Velero's namespace")
				}
				// Authenticated metrics: the manager may only ask the API
				// server who a scraper is and whether it may read /metrics;
				// readers may get /metrics and nothing else.
				g.Expect(clusterRoles["itemops-metrics-auth"]).To(ConsistOf(
					rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
					rbacv1.PolicyRule{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
				))
				g.Expect(clusterRoles["itemops-metrics-reader"]).To(ConsistOf(
					rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
				))
				delete(clusterRoles, "itemops-metrics-auth")
				delete(clusterRoles, "itemops-metrics-reader")
				// The labels node-agent's per-node rules match, and nothing else.
				g.Expect(clusterRoles["itemops-nodes"]).To(ConsistOf(rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}))
				delete(clusterRoles, "itemops-nodes")
				for name, rs := range merge(roles, clusterRoles) {
					for _, r := range rs {
						for _, field := range [][]string{r.Verbs, r.Resources, r.APIGroups} {
							g.Expect(field).NotTo(ContainElement("*"), "wildcard in %s: %+v", name, r)
						}
						g.Expect(r.NonResourceURLs).To(BeEmpty(), name)
					}
					g.Expect(verbsOn(rs, "", "secrets")).To(Or(BeEmpty(), Equal([]string{"get"})), "Secrets are only ever read, one by one: %s", name)
				}
				for name, rs := range clusterRoles {
					for _, r := range rs {
						if name == "itemops-plugins" {
							g.Expect(r.Verbs).To(Equal([]string{"get"}), "plugins only read outside Velero's namespace")
							continue
						}
						if slices.Equal(r.APIGroups, []string{"velero.io"}) {
							// For kubectl itemops: people who may read operations may read their parents.
							g.Expect(r.Resources).To(ConsistOf("backups", "restores"), name)
							g.Expect(r.Verbs).To(ConsistOf("get", "list", "watch"), "people's ClusterRoles only read Velero's objects: %s", name)
							continue
						}
						g.Expect(r.APIGroups).To(Equal([]string{"itemops.io"}), "a ClusterRole grants only ItemOperations and reading their parents: %s", name)
					}
				}
				// What Velero's built-in plugins do when itemops calls them.
				g.Expect(verbsOn(roles["itemops-plugins"], "velero.io", "datauploads")).To(ConsistOf("list", "patch"))
				g.Expect(verbsOn(roles["itemops-plugins"], "velero.io", "datadownloads")).To(ConsistOf("list", "patch"))
				g.Expect(verbsOn(clusterRoles["itemops-plugins"], "snapshot.storage.k8s.io", "volumesnapshots")).To(ConsistOf("get"))
				g.Expect(verbsOn(clusterRoles["itemops-plugins"], "snapshot.storage.k8s.io", "volumesnapshotcontents")).To(ConsistOf("get"))
				manager := roles["itemops-manager"]
				g.Expect(verbsOn(manager, "", "secrets")).To(Equal([]string{"get"}))
				// Only the Secrets locations name, and only Velero's Deployment.
				g.Expect(ruleOn(manager, "", "secrets").ResourceNames).To(Equal([]string{"cloud-credentials"}))
				g.Expect(ruleOn(manager, "apps", "deployments").ResourceNames).To(Equal([]string{"velero"}))
				g.Expect(verbsOn(manager, "velero.io", "backupstoragelocations")).To(ConsistOf("get", "list", "watch"))
				g.Expect(verbsOn(manager, "velero.io", "volumesnapshotlocations")).To(ConsistOf("get", "list", "watch"))
				g.Expect(verbsOn(manager, "velero.io", "deletebackuprequests")).To(ConsistOf("get", "list", "watch"))
				for _, parent := range []string{"backups", "restores"} {
					if mode == "manage" {
						g.Expect(verbsOn(manager, "velero.io", parent)).To(ConsistOf("get", "list", "watch", "patch"))
					} else {
						g.Expect(verbsOn(manager, "velero.io", parent)).To(ConsistOf("get", "list", "watch"), "observe mode never writes to Velero's objects")
					}
					g.Expect(verbsOn(manager, "velero.io", parent)).NotTo(ContainElements("create", "update", "delete"))
				}
				g.Expect(verbsOn(roles["itemops-leader-election"], "coordination.k8s.io", "leases")).NotTo(BeEmpty())
			})
		}
	})

	// It keeps config/prometheus/rules.yaml
	// equal to the chart's PrometheusRule with its default thresholds.
	It("kustomize alerts are the chart's alerts", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		root := filepath.Dir(filepath.Dir(chartDir))
		raw, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "rules.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		kustomize := map[string]any{}
		g.Expect(yaml.Unmarshal(raw, &kustomize)).To(Succeed())
		rules := find(render(t, "--set", "metrics.prometheusRule.enabled=true"), "PrometheusRule")
		g.Expect(rules).To(HaveLen(1))
		g.Expect(kustomize["spec"]).To(Equal(rules[0].Object["spec"]))
	})

	// By default the velero
	// binary is copied into the plugin directory from Velero's image (which has
	// no cp, so with itemops' cp-plugin) and its plugins' permissions granted;
	// both go away together, and third-party plugins' rules and the velero
	// server's arguments have their own values.
	It("Velero's builtin plugins come with a plain install", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		initContainers := func(objects []*unstructured.Unstructured) map[string]corev1.Container {
			deployments := find(objects, "Deployment")
			g.Expect(deployments).To(HaveLen(1))
			d := &appsv1.Deployment{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(deployments[0].Object, d)).To(Succeed())
			out := map[string]corev1.Container{}
			for _, c := range d.Spec.Template.Spec.InitContainers {
				out[c.Name] = c
			}
			out["manager"] = d.Spec.Template.Spec.Containers[0]
			return out
		}

		plain := render(t)
		containers := initContainers(plain)
		g.Expect(containers).To(HaveKey("velero-builtin-plugins"))
		velero := containers["velero-builtin-plugins"]
		g.Expect(velero.Image).To(Equal("velero/velero:v1.18.3"))
		g.Expect(velero.Command).To(Equal([]string{"/tools/cp-plugin", "/velero", "/target/velero"}))
		g.Expect(velero.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "plugins", MountPath: "/target"}))
		g.Expect(containers["cp-plugin"].Image).To(Equal(containers["manager"].Image), "cp-plugin comes from itemops' own image")
		g.Expect(rules(g, plain, "Role")).To(HaveKey("itemops-plugins"))
		g.Expect(rules(g, plain, "ClusterRole")).To(HaveKey("itemops-plugins"))
		g.Expect(containers["manager"].Args).NotTo(ContainElement(HavePrefix("--plugin-args")))

		off := render(t, "--set", "builtinPlugins.enabled=false")
		g.Expect(initContainers(off)).To(HaveLen(1), "only the manager")
		g.Expect(rules(g, off, "Role")).NotTo(HaveKey("itemops-plugins"))
		g.Expect(rules(g, off, "ClusterRole")).NotTo(HaveKey("itemops-plugins"))

		custom := render(t, "--set", "builtinPlugins.enabled=false", "--set", "builtinPlugins.image.tag=v1.17.1",
			"--set", "pluginArgs={--features=EnableCSI,--client-qps=100}",
			"--set", "rbac.pluginRules[0].apiGroups[0]=example.io", "--set", "rbac.pluginRules[0].resources[0]=copyjobs",
			"--set", "rbac.pluginRules[0].verbs[0]=get", "--set", "rbac.pluginClusterRules[0].apiGroups[0]=example.io",
			"--set", "rbac.pluginClusterRules[0].resources[0]=regions", "--set", "rbac.pluginClusterRules[0].verbs[0]=list")
		g.Expect(verbsOn(rules(g, custom, "Role")["itemops-plugins"], "example.io", "copyjobs")).To(Equal([]string{"get"}))
		g.Expect(verbsOn(rules(g, custom, "Role")["itemops-plugins"], "velero.io", "datauploads")).To(BeEmpty())
		g.Expect(verbsOn(rules(g, custom, "ClusterRole")["itemops-plugins"], "example.io", "regions")).To(Equal([]string{"list"}))
		g.Expect(initContainers(custom)["manager"].Args).To(ContainElements("--plugin-args=--features=EnableCSI", "--plugin-args=--client-qps=100"))
		// An argument YAML would read otherwise (a colon and a space, a
		// comment, a quote, braces) is one argument, as given.
		odd := `--restore-resource-priorities=a: b #c "d" {{e}}`
		quoted := render(t, "--set-json", `pluginArgs=["`+strings.ReplaceAll(odd, `"`, `\"`)+`"]`)
		g.Expect(initContainers(quoted)["manager"].Args).To(ContainElement("--plugin-args=" + odd))

		older := render(t, "--set", "builtinPlugins.image.tag=v1.17.1")
		g.Expect(initContainers(older)["velero-builtin-plugins"].Image).To(Equal("velero/velero:v1.17.1"))
		digest := "sha256:" + strings.Repeat("ab", 32)
		pinned := render(t, "--set", "builtinPlugins.image.repository=registry.example.com/oadp/velero", "--set", "builtinPlugins.image.digest="+digest)
		g.Expect(initContainers(pinned)["velero-builtin-plugins"].Image).To(Equal("registry.example.com/oadp/velero@"+digest), "the digest wins over the tag")
		// Velero before v1.18 looks for an operation's DataUpload in every
		// namespace (docs/velero.md, "Velero releases").
		g.Expect(verbsOn(rules(g, older, "ClusterRole")["itemops-plugins"], "velero.io", "datauploads")).To(Equal([]string{"list"}))
		g.Expect(verbsOn(rules(g, plain, "ClusterRole")["itemops-plugins"], "velero.io", "datauploads")).To(BeEmpty(), "v1.18 looks in Velero's namespace only")
		for _, tag := range []string{"v1.15.2", "v1.16.0-rc.1", "main"} {
			g.Expect(verbsOn(rules(g, render(t, "--set", "builtinPlugins.image.tag="+tag), "ClusterRole")["itemops-plugins"], "velero.io", "datauploads")).
				To(Equal([]string{"list"}), tag)
		}
		g.Expect(verbsOn(rules(g, render(t, "--set", "builtinPlugins.image.tag=v1.19.0"), "ClusterRole")["itemops-plugins"], "velero.io", "datauploads")).To(BeEmpty())
	})

	// The ServiceAccount's token is the manager's alone: init containers,
	// third-party plugin images among them, get none; the manager cannot
	// change a plugin binary; the Secrets it may read are those named.
	It("the token only in the manager, the plugins read-only, Secrets by name, reads from the bucket bounded", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		podSpec := func(objects []*unstructured.Unstructured) *corev1.PodSpec { return podSpecOf(g, objects) }
		const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
		for name, args := range valuesFiles() {
			spec := podSpec(render(t, args...))
			g.Expect(spec.AutomountServiceAccountToken).To(Equal(ptr.To(false)), name)
			g.Expect(spec.InitContainers).NotTo(BeEmpty(), name)
			for _, c := range spec.InitContainers {
				g.Expect(c.VolumeMounts).NotTo(ContainElement(HaveField("MountPath", tokenDir)), "%s: init container %s", name, c.Name)
				g.Expect(c.VolumeMounts).NotTo(ContainElement(HaveField("Name", "api-token")), "%s: init container %s", name, c.Name)
			}
			manager := spec.Containers[0]
			g.Expect(manager.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "api-token", MountPath: tokenDir, ReadOnly: true}), name)
			g.Expect(manager.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "plugins", MountPath: "/plugins", ReadOnly: true}), name)
			var token *corev1.Volume
			for i := range spec.Volumes {
				if spec.Volumes[i].Name == "api-token" {
					token = &spec.Volumes[i]
				}
			}
			g.Expect(token).NotTo(BeNil(), name)
			g.Expect(token.Projected.Sources).To(ContainElement(HaveField("ServiceAccountToken.Path", "token")), name)
			g.Expect(token.Projected.Sources).To(ContainElement(HaveField("ConfigMap.Name", "kube-root-ca.crt")), name)
		}

		secrets := func(args ...string) []string {
			return ruleOn(rules(g, render(t, args...), "Role")["itemops-manager"], "", "secrets").ResourceNames
		}
		g.Expect(secrets("--set", "credentials.existingSecret=velero-credentials", "--set", "rbac.secretNames={bsl-east,cloud-credentials}")).
			To(Equal([]string{"bsl-east", "cloud-credentials", "velero-credentials"}))
		g.Expect(verbsOn(rules(g, render(t, "--set", "rbac.secretNames=null"), "Role")["itemops-manager"], "", "secrets")).
			To(BeEmpty(), "no Secret named, none readable")

		// Reads from the bucket are bounded, by default and as set.
		g.Expect(podSpec(render(t)).Containers[0].Args).To(ContainElements("--max-operations-file-bytes=8388608",
			"--max-operations-file-inflated-bytes=33554432", "--max-operations-file-records=20000", "--max-operations-file-items=100000"))
		g.Expect(podSpec(render(t, "--set", "maxOperationsFileInflatedBytes=1073741824")).Containers[0].Args).
			To(ContainElement("--max-operations-file-inflated-bytes=1073741824"))
	})

	// Metrics are served over HTTPS to readers the API server vouches for,
	// unless the user turns it off; a certificate of one's own is mounted,
	// cert-manager may issue it, and a NetworkPolicy is opt-in.
	It("the manager may get nodes, to read node-agent's per-node rules, unless it finds no causes", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		g.Expect(verbsOn(rules(g, render(t), "ClusterRole")["itemops-nodes"], "", "nodes")).To(Equal([]string{"get"}))
		g.Expect(rules(g, render(t, "--set", "findCauses=false"), "ClusterRole")).NotTo(HaveKey("itemops-nodes"))
	})

	It("the viewer and editor roles are aggregated into the built-in ones unless turned off", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		labelsOf := func(objs []*unstructured.Unstructured, name string) map[string]string {
			for _, o := range objs {
				if o.GetKind() == "ClusterRole" && o.GetName() == name {
					return o.GetLabels()
				}
			}
			g.Expect(name).To(BeEmpty(), "no ClusterRole %s rendered", name)
			return nil
		}
		aggregated := render(t)
		g.Expect(labelsOf(aggregated, "itemops-itemoperation-viewer")).To(HaveKeyWithValue("rbac.authorization.k8s.io/aggregate-to-view", "true"))
		g.Expect(labelsOf(aggregated, "itemops-itemoperation-editor")).To(And(
			HaveKeyWithValue("rbac.authorization.k8s.io/aggregate-to-edit", "true"), HaveKeyWithValue("rbac.authorization.k8s.io/aggregate-to-admin", "true")))
		apart := render(t, "--set", "rbac.aggregateToBuiltinRoles=false")
		for _, name := range []string{"itemops-itemoperation-viewer", "itemops-itemoperation-editor"} {
			for key := range labelsOf(apart, name) {
				g.Expect(key).NotTo(HavePrefix("rbac.authorization.k8s.io/aggregate-to-"), "%s still aggregated", name)
			}
		}
	})

	It("metrics are authenticated unless turned off", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		podSpec := func(objects []*unstructured.Unstructured) *corev1.PodSpec { return podSpecOf(g, objects) }
		endpoint := func(objects []*unstructured.Unstructured) map[string]any {
			monitors := find(objects, "ServiceMonitor")
			g.Expect(monitors).To(HaveLen(1))
			endpoints, _, _ := unstructured.NestedSlice(monitors[0].Object, "spec", "endpoints")
			g.Expect(endpoints).To(HaveLen(1))
			return endpoints[0].(map[string]any)
		}

		secure := render(t, "--set", "metrics.serviceMonitor.enabled=true")
		g.Expect(podSpec(secure).Containers[0].Args).To(ContainElements("--metrics-bind-address=:8443", "--metrics-secure=true"))
		g.Expect(podSpec(secure).Containers[0].Args).NotTo(ContainElement(HavePrefix("--metrics-cert-dir")), "self-signed")
		g.Expect(endpoint(secure)).To(And(HaveKeyWithValue("scheme", "https"),
			HaveKeyWithValue("bearerTokenFile", "/var/run/secrets/kubernetes.io/serviceaccount/token"),
			HaveKeyWithValue("tlsConfig", map[string]any{"insecureSkipVerify": true})))
		g.Expect(rules(g, secure, "ClusterRole")).To(HaveKey("itemops-metrics-auth"))
		for _, binding := range find(secure, "ClusterRoleBinding") {
			g.Expect(binding.GetName()).NotTo(Equal("itemops-metrics-reader"), "nobody reads the metrics until the user says who")
		}
		g.Expect(find(secure, "NetworkPolicy")).To(BeEmpty())

		plain := render(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.secure=false")
		g.Expect(podSpec(plain).Containers[0].Args).To(ContainElement("--metrics-secure=false"))
		g.Expect(endpoint(plain)).NotTo(HaveKey("scheme"))
		g.Expect(rules(g, plain, "ClusterRole")).NotTo(HaveKey("itemops-metrics-auth"))
		g.Expect(rules(g, plain, "ClusterRole")).NotTo(HaveKey("itemops-metrics-reader"))

		own := podSpec(render(t, "--set", "metrics.tls.secretName=metrics-tls"))
		g.Expect(own.Containers[0].Args).To(ContainElement("--metrics-cert-dir=/metrics-certs"))
		g.Expect(own.Containers[0].VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "metrics-certs", MountPath: "/metrics-certs", ReadOnly: true}))
		g.Expect(own.Volumes).To(ContainElement(And(HaveField("Name", "metrics-certs"), HaveField("Secret.SecretName", "metrics-tls"))))

		issued := render(t, "--set", "metrics.tls.certManager.enabled=true", "--set", "metrics.tls.certManager.issuerRef.name=ca")
		certificates := find(issued, "Certificate")
		g.Expect(certificates).To(HaveLen(1))
		secretName, _, _ := unstructured.NestedString(certificates[0].Object, "spec", "secretName")
		g.Expect(secretName).To(Equal("itemops-metrics-tls"))
		g.Expect(podSpec(issued).Volumes).To(ContainElement(And(HaveField("Name", "metrics-certs"), HaveField("Secret.SecretName", "itemops-metrics-tls"))))
		out, err := helm("template", "itemops", chartDir, "--set", "metrics.tls.certManager.enabled=true")
		g.Expect(err).To(HaveOccurred())
		g.Expect(out).To(ContainSubstring("metrics.tls.certManager.issuerRef.name names the cert-manager Issuer"))

		readers := render(t, "--set", "metrics.readers[0].kind=ServiceAccount", "--set", "metrics.readers[0].name=prometheus-k8s",
			"--set", "metrics.readers[0].namespace=monitoring")
		bindings := find(readers, "ClusterRoleBinding")
		var reader *rbacv1.ClusterRoleBinding
		for _, b := range bindings {
			if b.GetName() == "itemops-metrics-reader" {
				reader = &rbacv1.ClusterRoleBinding{}
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(b.Object, reader)).To(Succeed())
			}
		}
		g.Expect(reader).NotTo(BeNil())
		g.Expect(reader.RoleRef.Name).To(Equal("itemops-metrics-reader"))
		g.Expect(reader.Subjects).To(Equal([]rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus-k8s", Namespace: "monitoring"}}))

		policies := find(render(t, "--set", "networkPolicy.enabled=true", "--set", "networkPolicy.metricsNamespaces={monitoring}"), "NetworkPolicy")
		g.Expect(policies).To(HaveLen(1))
		policy := &networkingv1.NetworkPolicy{}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(policies[0].Object, policy)).To(Succeed())
		g.Expect(policy.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}))
		g.Expect(policy.Spec.Ingress).To(HaveLen(2))
		g.Expect(policy.Spec.Ingress[0].From).To(BeEmpty(), "the kubelet's probes")
		g.Expect(policy.Spec.Ingress[0].Ports[0].Port.String()).To(Equal("health"))
		g.Expect(policy.Spec.Ingress[1].Ports[0].Port.String()).To(Equal("metrics"))
		g.Expect(policy.Spec.Ingress[1].From[0].NamespaceSelector.MatchExpressions[0].Values).To(Equal([]string{"monitoring"}))
		closed := find(render(t, "--set", "networkPolicy.enabled=true"), "NetworkPolicy")
		g.Expect(closed).To(HaveLen(1))
		ingress, _, _ := unstructured.NestedSlice(closed[0].Object, "spec", "ingress")
		g.Expect(ingress).To(HaveLen(1), "no namespace named: nobody reaches the metrics")
	})

	// A location whose spec.credential names none is reached with Velero's
	// default credentials, which Velero's pod finds through variables
	// pointing at its mounted Secret; itemops' plugin processes need the
	// same, or the location's plugin looks for a cloud role and fails.
	It("Velero's default credentials are mounted and named as Velero's pod has them", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		manager := func(objects []*unstructured.Unstructured) *corev1.PodSpec {
			deployments := find(objects, "Deployment")
			g.Expect(deployments).To(HaveLen(1))
			d := &appsv1.Deployment{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(deployments[0].Object, d)).To(Succeed())
			return &d.Spec.Template.Spec
		}
		plain := manager(render(t))
		g.Expect(plain.Containers[0].Env).To(BeEmpty())
		g.Expect(plain.Volumes).NotTo(ContainElement(HaveField("Name", "cloud-credentials")))

		with := manager(render(t, "--set", "credentials.existingSecret=cloud-credentials",
			"--set", "extraEnv[0].name=EXTRA", "--set-string", "extraEnv[0].value=1"))
		var env []string
		for _, e := range with.Containers[0].Env {
			env = append(env, e.Name+"="+e.Value)
		}
		g.Expect(env).To(Equal([]string{
			"GOOGLE_APPLICATION_CREDENTIALS=/credentials/cloud", "AWS_SHARED_CREDENTIALS_FILE=/credentials/cloud",
			"AZURE_CREDENTIALS_FILE=/credentials/cloud", "ALIBABA_CLOUD_CREDENTIALS_FILE=/credentials/cloud", "EXTRA=1",
		}))
		g.Expect(with.Containers[0].VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "cloud-credentials", MountPath: "/credentials", ReadOnly: true}))
		g.Expect(with.Volumes).To(ContainElement(And(HaveField("Name", "cloud-credentials"),
			HaveField("VolumeSource.Secret.SecretName", "cloud-credentials"))))

		key := manager(render(t, "--set", "credentials.existingSecret=velero", "--set", "credentials.key=aws"))
		g.Expect(key.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "AWS_SHARED_CREDENTIALS_FILE", Value: "/credentials/aws"}))
	})
})
