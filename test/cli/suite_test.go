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

// Package cli proves kubectl-itemops against a real kube-apiserver: the
// tables of get, the lines and exit codes of watch fed a scripted sequence of
// status updates (written as itemops writes them), the live view in a
// pseudo-terminal, cancel, shell completion, and what the aggregated view
// and edit roles let a person do.
package cli

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/cli"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/proc"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var (
	env *envtest.Environment
	// kubeconfig is an administrator's; binary is kubectl-itemops, built.
	kubeconfig, binary string
)

func TestCLI(t *testing.T) {
	klog.SetLogger(logr.Discard())
	ctrllog.SetLogger(logr.Discard())
	RegisterFailHandler(Fail)
	RunSpecs(t, "kubectl itemops", Label("envtest", "e2e", "cli"))
}

// BeforeSuite starts an API server and builds kubectl-itemops, which the
// specs run as kubectl would.
var _ = BeforeSuite(func() {
	work := GinkgoT().TempDir()
	var err error
	env, err = envtest.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	config, err := env.Kubeconfig()
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = filepath.Join(work, "kubeconfig")
	Expect(os.WriteFile(kubeconfig, config, 0o600)).To(Succeed())
	binary = filepath.Join(work, "kubectl-itemops")
	build := exec.Command("go", "build", "-o", binary, "./cmd/kubectl-itemops")
	build.Dir, build.Stdout, build.Stderr = env.RepoRoot, GinkgoWriter, os.Stderr
	Expect(build.Run()).To(Succeed(), "building kubectl-itemops")
})

// result is what one command line printed and its exit code.
type result struct {
	out, err string
	code     int
}

// kubectlItemops runs a command line in this process with the
// administrator's kubeconfig unless args name another, its clock at now.
func kubectlItemops(ctx context.Context, now clock.PassiveClock, args ...string) result {
	return kubectlItemopsAs(ctx, kubeconfig, now, args...)
}

func kubectlItemopsAs(ctx context.Context, config string, now clock.PassiveClock, args ...string) result {
	out, errOut := &proc.Buffer{}, &proc.Buffer{}
	code := cli.Execute(ctx, genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut}, now,
		append([]string{"--kubeconfig", config}, args...))
	return result{out: out.String(), err: errOut.String(), code: code}
}

// running is a command line running in this process, whose output can be
// read while it runs.
type running struct {
	out  *proc.Buffer
	errs *proc.Buffer
	code chan int
}

// start runs a command line as the administrator until it ends or the test does.
func start(t testing.TB, now clock.PassiveClock, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &running{out: &proc.Buffer{}, errs: &proc.Buffer{}, code: make(chan int, 1)}
	go func() {
		r.code <- cli.Execute(ctx, genericiooptions.IOStreams{In: strings.NewReader(""), Out: r.out, ErrOut: r.errs},
			now, append([]string{"--kubeconfig", kubeconfig}, args...))
	}()
	return r
}

// lines are the lines printed so far.
func (r *running) lines() []string {
	return strings.Split(strings.TrimSuffix(r.out.String(), "\n"), "\n")
}

// exitCode waits for the command to end.
func (r *running) exitCode(g Gomega) int {
	var code int
	g.Eventually(r.code, 30*time.Second).Should(Receive(&code), r.errs.String())
	return code
}

// backupIn creates a Backup in phase with Velero's count of attempted
// operations, as Velero leaves it.
func backupIn(t testing.TB, namespace, name string, phase velerov1api.BackupPhase, attempted int) *velerov1api.Backup {
	t.Helper()
	b := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Status:     velerov1api.BackupStatus{Phase: phase, BackupItemOperationsAttempted: attempted},
	}
	if err := env.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

func restoreIn(t testing.TB, namespace, name string, phase velerov1api.RestorePhase, attempted int) *velerov1api.Restore {
	t.Helper()
	r := &velerov1api.Restore{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       velerov1api.RestoreSpec{BackupName: "any"},
		Status:     velerov1api.RestoreStatus{Phase: phase, RestoreItemOperationsAttempted: attempted},
	}
	if err := env.Client.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return r
}

// operation creates the ItemOperation of parent for the item namespace/name,
// labelled as itemops labels those it ingests.
func operation(t testing.TB, parent client.Object, item, plugin, id string, mutate ...func(*itemopsv1alpha1.ItemOperation)) *itemopsv1alpha1.ItemOperation {
	t.Helper()
	kind, pluginKind := itemopsv1alpha1.ParentKindBackup, itemopsv1alpha1.PluginKindBackupItemAction
	if _, ok := parent.(*velerov1api.Restore); ok {
		kind, pluginKind = itemopsv1alpha1.ParentKindRestore, itemopsv1alpha1.PluginKindRestoreItemAction
	}
	op := &itemopsv1alpha1.ItemOperation{
		ObjectMeta: metav1.ObjectMeta{
			Name: parent.GetName() + "-" + id, Namespace: parent.GetNamespace(),
			Labels: map[string]string{
				itemopsv1alpha1.LabelParentKind: string(kind),
				itemopsv1alpha1.LabelParentName: itemopsv1alpha1.ParentNameLabelValue(parent.GetName()),
				itemopsv1alpha1.LabelParentUID:  string(parent.GetUID()),
			},
		},
		Spec: itemopsv1alpha1.ItemOperationSpec{
			Parent:      itemopsv1alpha1.ParentReference{Kind: kind, Name: parent.GetName(), UID: string(parent.GetUID())},
			Plugin:      itemopsv1alpha1.PluginReference{Kind: pluginKind, Name: plugin},
			OperationID: id,
			Resource:    itemopsv1alpha1.ResourceIdentifier{Resource: "persistentvolumeclaims", Namespace: "shop", Name: item},
		},
	}
	for _, m := range mutate {
		m(op)
	}
	if err := env.Client.Create(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	return op
}

// setStatus writes an operation's status as itemops does, after change.
func setStatus(t testing.TB, op *itemopsv1alpha1.ItemOperation, change func(*itemopsv1alpha1.ItemOperationStatus)) {
	t.Helper()
	original := op.DeepCopy()
	change(&op.Status)
	if err := env.Client.Status().Patch(context.Background(), op, client.MergeFrom(original)); err != nil {
		t.Fatal(err)
	}
}

// setBackupPhase moves a Backup as itemops and Velero's finalizer do.
func setBackupPhase(t testing.TB, b *velerov1api.Backup, phase velerov1api.BackupPhase) {
	t.Helper()
	original := b.DeepCopy()
	b.Status.Phase = phase
	if err := env.Client.Patch(context.Background(), b, client.MergeFrom(original)); err != nil {
		t.Fatal(err)
	}
}

// progressAt is a running operation's status: done of total bytes, started
// a minute before at and measured at at, with an estimate.
func progressAt(at time.Time, done, total int64, eta time.Duration) func(*itemopsv1alpha1.ItemOperationStatus) {
	return func(s *itemopsv1alpha1.ItemOperationStatus) {
		s.Phase = itemopsv1alpha1.OperationPhaseInProgress
		s.NCompleted, s.NTotal, s.OperationUnits = done, total, "bytes"
		s.Started = &metav1.Time{Time: at.Add(-time.Minute)}
		s.Updated = &metav1.Time{Time: at}
		s.LastPolled = &metav1.Time{Time: at}
		s.EstimatedCompletion = &metav1.Time{Time: at.Add(eta)}
	}
}

// ended is the status of a finished operation.
func ended(phase itemopsv1alpha1.OperationPhase, done, total int64, message string) func(*itemopsv1alpha1.ItemOperationStatus) {
	return func(s *itemopsv1alpha1.ItemOperationStatus) {
		s.Phase, s.NCompleted, s.NTotal, s.OperationUnits, s.Error = phase, done, total, "bytes", message
		s.EstimatedCompletion = nil
		s.CompletionTimestamp = &metav1.Time{Time: time.Now()}
	}
}

// stalledNow marks an operation Stalled, as itemops does after its stall period.
func stalledNow(s *itemopsv1alpha1.ItemOperationStatus) {
	s.Conditions = append(s.Conditions, metav1.Condition{Type: itemopsv1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: itemopsv1alpha1.ReasonNoProgress, Message: "no progress", LastTransitionTime: metav1.Now()})
}

// namespace creates a namespace named prefix-<random> for one test's
// Backups and Restores, so that what it lists is its own, run after run.
func namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// namespaced is a ServiceAccount in namespace bound there to the
// ClusterRole role, and a kubeconfig with its token.
func namespaced(t testing.TB, namespace, name, role string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if err := env.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
	}
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	config, err := env.ServiceAccountKubeconfig(ctx, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, config, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
