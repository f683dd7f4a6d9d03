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

// Command demo runs itemops end to end on this machine with nothing but Go:
// a local kube-apiserver and etcd, Velero's CRDs and ours, the sample
// plugins, and the itemops manager in manage mode.
//
// By default (-flow=real, `make demo`) it runs the real Velero too, building
// it first on a machine that has not yet (velero server, velero-plugin-for-aws
// and versitygw, into the machine's cache that `make test` shares), side by
// side with everything else it needs and showing how long each takes. It
// backs up a namespace whose items the sample data mover uploads
// asynchronously (one upload fails) and whose PVCs Velero's own CSI data
// mover moves (velero.io/csi-pvc-backupper, served by the velero binary in
// itemops' plugin directory; the CSI snapshot controller and node-agent are
// played by package csisim): Velero starts the uploads, itemops reads them
// from the bucket, polls them and writes them back, and Velero's finalizer
// ends the Backup PartiallyFailed. With -flow=synthetic (`make demo
// DEMO=synthetic`) it creates a Backup as Velero would leave it, with its
// ItemOperations, and a stand-in for Velero's finalizer ends it once itemops
// has moved it to FinalizingPartiallyFailed. Either way the progress is drawn
// live by the view of `kubectl itemops watch` (package view), and
// everything keeps running for you to inspect until Ctrl-C, which stops it
// all, removes its files and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/hack/foreground"
	"github.com/itemops/itemops/internal/view"
	"github.com/itemops/itemops/test/csisim"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/veleroenv"
)

// volumes are the demo namespace's PVCs, moved by Velero's CSI data mover
// at the given rate.
var volumes = []struct {
	name, size, rate string
}{
	{"orders-db", "10Gi", "350Mi"},
	{"product-images", "24Gi", "800Mi"},
}

// uploads are the demo backup's operations: name, size, speed, fail-at.
var uploads = []struct {
	item, size, speed, failAt string
}{
	{"postgres-data", "8Gi", "400Mi", ""},
	{"redis-data", "2Gi", "300Mi", ""},
	{"media-library", "12Gi", "600Mi", ""},
	{"search-index", "4Gi", "250Mi", "60"},
	{"config-snapshot", "512Mi", "128Mi", ""},
}

func main() {
	// Library logs would tear the live view; the demo says what matters.
	klog.SetLogger(logr.Discard())
	ctrllog.SetLogger(logr.Discard())
	flow := flag.String("flow", "real", "real: the real velero server backs up a namespace, building Velero, its AWS plugin and versitygw first if this machine has not; synthetic: a Backup as Velero leaves it, without Velero")
	exitWhenDone := flag.Bool("exit-when-done", false, "stop once the Backup reaches Finalizing*, instead of waiting for Ctrl-C")
	flag.Parse()
	if *flow != "real" && *flow != "synthetic" {
		fmt.Fprintf(os.Stderr, "demo: unknown flow %q: real or synthetic (make demo DEMO=synthetic)\n", *flow)
		os.Exit(2)
	}
	restore := foreground.Take()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *flow == "real", *exitWhenDone)
	interrupted := ctx.Err() != nil || errors.Is(err, errStopped) || errors.Is(err, context.Canceled)
	stop()
	restore()
	switch {
	case interrupted:
		// Whatever failed, failed because it was stopped.
		fmt.Println("demo: stopped; everything it started has ended and its files are removed")
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// errStopped: the live view was left with Ctrl-C or q.
var errStopped = errors.New("stopped")

func run(ctx context.Context, real, exitWhenDone bool) error {
	work, err := os.MkdirTemp("", "itemops-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()

	root, err := envtest.RepoRoot()
	if err != nil {
		return err
	}
	pluginDir, stateDir := filepath.Join(work, "plugins"), filepath.Join(work, "plugin-state")
	binary := filepath.Join(work, "itemops")
	kubectlItemops := filepath.Join(work, "bin", "kubectl-itemops")
	builds := []*build{
		{what: "itemops", cmd: []string{"go", "build", "-o", binary, "."}},
		{what: "kubectl-itemops", cmd: []string{"go", "build", "-o", kubectlItemops, "./cmd/kubectl-itemops"}},
		{what: "the sample plugins", cmd: []string{"go", "build", "-o", pluginDir + string(os.PathSeparator), "./test/plugins/sample"}},
		{what: "kube-apiserver and etcd", cmd: []string{"hack/envtest-assets.sh", "control-plane"}, env: "KUBEBUILDER_ASSETS"},
	}
	if real {
		say("building what the demo runs, side by side: Velero v1.18.3, its AWS plugin, versitygw, kube-apiserver and etcd come from the Go module proxy the first time on a machine (minutes; kept in ~/.cache/itemops, ready at once after)")
		builds = append(builds,
			&build{what: "velero v1.18.3", cmd: []string{"hack/cached-binary.sh", "velero"}},
			&build{what: "velero-plugin-for-aws", cmd: []string{"hack/cached-binary.sh", "velero-plugin-for-aws"}},
			&build{what: "versitygw (S3)", cmd: []string{"hack/cached-binary.sh", "versitygw"}})
	} else {
		say("building what the demo runs, side by side: kube-apiserver and etcd come from the Go module proxy the first time on a machine (minutes; kept in ~/.cache/itemops, ready at once after)")
	}
	if err := buildAll(ctx, os.Stdout, root, work, builds); err != nil {
		if real && ctx.Err() == nil {
			err = fmt.Errorf("%w\n`make demo DEMO=synthetic` shows itemops without the real Velero", err)
		}
		return err
	}
	if err := os.Setenv(sim.EnvStateDir, stateDir); err != nil {
		return err
	}

	say("starting a local kube-apiserver and etcd with Velero's, itemops' and the CSI snapshot CRDs")
	snapshotCRDs, err := csisim.CRDs(root)
	if err != nil {
		return err
	}
	env, err := envtest.StartWith(envtest.Options{ExtraCRDPaths: snapshotCRDs})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	kubeconfig, err := env.Kubeconfig()
	if err != nil {
		return err
	}
	kubeconfigPath := filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return err
	}

	// itemops' plugin directory is its own: Velero's plugins and the velero
	// binary, which serves Velero's built-in ones (Velero's own directory
	// must not hold it).
	itemopsPluginDir := pluginDir
	var velero *veleroenv.Env
	if real {
		say("starting versitygw with Velero's bucket, and Velero's objects")
		var stopVelero func()
		velero, stopVelero, err = veleroenv.Setup(env, work, pluginDir, true)
		defer stopVelero()
		if err != nil {
			return err
		}
		kubeconfigPath = velero.Kubeconfig
		if itemopsPluginDir, err = ownPluginDir(work, pluginDir, velero.Velero); err != nil {
			return err
		}
		say("starting the CSI snapshot controller and node-agent stand-ins")
		cluster := &csisim.Cluster{Client: env.Client, Namespace: envtest.VeleroNamespace, Driver: "csi.demo.itemops.io", Rate: 1 << 30}
		if err := cluster.StorageClasses(ctx); err != nil {
			return err
		}
		if err := cluster.Start(ctx); err != nil {
			return err
		}
		defer cluster.Stop()
		if err := createVolumes(ctx, env.Client, cluster); err != nil {
			return err
		}
		unlock, err := veleroenv.LockServer()
		if err != nil {
			return err
		}
		defer unlock()
		say("starting velero server v1.18.3 with CSI, versitygw and velero-plugin-for-aws, its operations controllers disabled")
		veleroLog := filepath.Join(work, "velero.log")
		stopServer, err := startLogged(veleroLog, func() (*exec.Cmd, error) {
			return velero.ServerCommand(append([]string{"--features=EnableCSI"}, veleroenv.ManageFlags...)...)
		})
		if err != nil {
			return err
		}
		defer stopServer()
		if err := veleroenv.WaitForLocation(ctx, env.Client); err != nil {
			return fmt.Errorf("%w (velero log: %s)", err, veleroLog)
		}
	}

	say("starting itemops in manage mode")
	logPath := filepath.Join(work, "itemops.log")
	stopManager, err := startLogged(logPath, func() (*exec.Cmd, error) {
		return exec.Command(binary, "--kubeconfig="+kubeconfigPath, "--mode=manage",
			"--velero-namespace="+envtest.VeleroNamespace, "--plugin-dir="+itemopsPluginDir, "--plugin-args=--features=EnableCSI",
			"--credentials-dir="+filepath.Join(work, "credentials"),
			"--sync-frequency=1s", "--progress-update-interval=2s", "--stall-after=1m",
			"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0"), nil
	})
	if err != nil {
		return err
	}
	defer stopManager()

	var backup *velerov1api.Backup
	if real {
		backup, err = backUpNamespace(ctx, env.Client)
	} else {
		backup, err = createBackup(ctx, env.Client)
		if err == nil {
			go finalizeLikeVelero(ctx, env.Client, backup)
		}
	}
	if err != nil {
		return err
	}
	fmt.Printf("\nkubeconfig: %s\n  KUBECONFIG=%s kubectl -n velero get itemoperations -o wide\n", kubeconfigPath, kubeconfigPath)
	fmt.Printf("  KUBECONFIG=%s PATH=%s:$PATH kubectl itemops watch backup %s\n", kubeconfigPath, filepath.Dir(kubectlItemops), backup.Name)
	fmt.Printf("  (or without kubectl: %s watch backup %s --kubeconfig %s)\nitemops log: %s\n", kubectlItemops, backup.Name, kubeconfigPath, logPath)
	if real {
		fmt.Printf("  %s backup describe %s --details --kubeconfig %s\nvelero log: %s\n",
			velero.Velero, backup.Name, kubeconfigPath, filepath.Join(work, "velero.log"))
	}
	fmt.Println()

	// The story ends where the Backup ends: Velero's finalizer (or, without
	// Velero, its stand-in) takes it from itemops' Finalizing* to its outcome.
	code, err := view.Run(ctx, view.Options{Config: env.Config,
		Parent: view.Parent{Kind: itemopsv1alpha1.ParentKindBackup, Namespace: backup.Namespace, Name: backup.Name},
		Out:    os.Stdout})
	if err != nil {
		return err
	}
	if code == view.ExitInterrupted {
		// Ctrl-C or q in the live view, which reads keys itself.
		fmt.Println()
		return errStopped
	}
	b := &velerov1api.Backup{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(backup), b); err != nil {
		return err
	}
	fmt.Printf("\nBackup %s reached %s. ", backup.Name, b.Status.Phase)
	if exitWhenDone {
		fmt.Println()
		return nil
	}
	fmt.Printf("Everything keeps running; press Ctrl-C to stop and clean up.\nkubeconfig: %s\n", kubeconfigPath)
	<-ctx.Done()
	fmt.Println()
	return nil
}

// startLogged starts a program with its output in a log file; stop ends it.
func startLogged(logPath string, command func() (*exec.Cmd, error)) (stop func(), err error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return func() {}, err
	}
	cmd, err := command()
	if err != nil {
		_ = logFile.Close()
		return func() {}, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return func() {}, err
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		_ = logFile.Close()
	}, nil
}

func say(msg string) { fmt.Println("==> " + msg) }

// ownPluginDir makes itemops' plugin directory: links to what Velero's holds,
// and to the velero binary.
func ownPluginDir(work, veleroPluginDir, veleroBinary string) (string, error) {
	dir := filepath.Join(work, "itemops-plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(veleroPluginDir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(veleroPluginDir, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return "", err
		}
	}
	return dir, os.Symlink(veleroBinary, filepath.Join(dir, "velero"))
}

// createVolumes creates namespace shop with its bound CSI PVCs.
func createVolumes(ctx context.Context, c client.Client, cluster *csisim.Cluster) error {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}); err != nil {
		return err
	}
	for _, v := range volumes {
		if err := cluster.BoundPVC(ctx, "shop", v.name, v.size, map[string]string{csisim.AnnotationRate: v.rate}); err != nil {
			return fmt.Errorf("creating PVC %s: %w", v.name, err)
		}
	}
	return nil
}

// backUpNamespace fills namespace shop (its PVCs already made) with one
// ConfigMap per upload, each marked for the sample data mover, and asks
// Velero to back it up with its PVCs' data moved.
func backUpNamespace(ctx context.Context, c client.Client) (*velerov1api.Backup, error) {
	for _, u := range uploads {
		annotations := map[string]string{sim.AnnotationSize: u.size, sim.AnnotationSpeed: u.speed}
		if u.failAt != "" {
			annotations[sim.AnnotationFailAt] = u.failAt
		}
		if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: u.item, Namespace: "shop",
			Labels: map[string]string{sim.LabelSelect: "yes"}, Annotations: annotations}}); err != nil {
			return nil, err
		}
	}
	backup := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly-demo", Namespace: envtest.VeleroNamespace},
		Spec: velerov1api.BackupSpec{IncludedNamespaces: []string{"shop"}, StorageLocation: veleroenv.Location,
			SnapshotMoveData: ptr.To(true), ItemOperationTimeout: metav1.Duration{Duration: time.Hour}},
	}
	if err := c.Create(ctx, backup); err != nil {
		return nil, fmt.Errorf("creating the backup: %w", err)
	}
	return backup, nil
}

// createBackup makes a Backup as Velero leaves it after its item actions
// started asynchronous uploads, and one ItemOperation per upload.
func createBackup(ctx context.Context, c client.Client) (*velerov1api.Backup, error) {
	store, err := sim.NewStore()
	if err != nil {
		return nil, err
	}
	backup := &velerov1api.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly-demo", Namespace: envtest.VeleroNamespace},
		Spec:       velerov1api.BackupSpec{IncludedNamespaces: []string{"shop"}},
		Status: velerov1api.BackupStatus{
			Phase:                         velerov1api.BackupPhaseWaitingForPluginOperations,
			BackupItemOperationsAttempted: len(uploads),
		},
	}
	if err := c.Create(ctx, backup); err != nil {
		return nil, fmt.Errorf("creating the backup: %w", err)
	}
	for _, u := range uploads {
		annotations := map[string]string{sim.AnnotationSize: u.size, sim.AnnotationSpeed: u.speed}
		if u.failAt != "" {
			annotations[sim.AnnotationFailAt] = u.failAt
		}
		id, err := store.Start("upload", "shop/"+u.item, annotations)
		if err != nil {
			return nil, err
		}
		op := &itemopsv1alpha1.ItemOperation{
			ObjectMeta: metav1.ObjectMeta{
				Name: backup.Name + "-" + u.item, Namespace: backup.Namespace,
				Labels: map[string]string{
					itemopsv1alpha1.LabelParentKind: string(itemopsv1alpha1.ParentKindBackup),
					itemopsv1alpha1.LabelParentName: backup.Name,
					itemopsv1alpha1.LabelParentUID:  string(backup.UID),
				},
			},
			Spec: itemopsv1alpha1.ItemOperationSpec{
				Parent:      itemopsv1alpha1.ParentReference{Kind: itemopsv1alpha1.ParentKindBackup, Name: backup.Name, UID: string(backup.UID)},
				Plugin:      itemopsv1alpha1.PluginReference{Kind: itemopsv1alpha1.PluginKindBackupItemAction, Name: "itemops.io/sample-datamover"},
				OperationID: id,
				Resource:    itemopsv1alpha1.ResourceIdentifier{Resource: "persistentvolumeclaims", Namespace: "shop", Name: u.item},
			},
		}
		if err := c.Create(ctx, op); err != nil {
			return nil, fmt.Errorf("creating operation %s: %w", op.Name, err)
		}
	}
	return backup, nil
}

// finalizeLikeVelero plays Velero's backup finalizer when Velero is not
// running: once itemops has moved the Backup to Finalizing*, it ends it
// Completed or PartiallyFailed, as Velero would after its last upload.
func finalizeLikeVelero(ctx context.Context, c client.Client, backup *velerov1api.Backup) {
	final := map[velerov1api.BackupPhase]velerov1api.BackupPhase{
		velerov1api.BackupPhaseFinalizing:                velerov1api.BackupPhaseCompleted,
		velerov1api.BackupPhaseFinalizingPartiallyFailed: velerov1api.BackupPhasePartiallyFailed,
	}
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		b := &velerov1api.Backup{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(backup), b); err != nil {
			return false, nil
		}
		next, ok := final[b.Status.Phase]
		if !ok {
			return false, nil
		}
		original := b.DeepCopy()
		b.Status.Phase = next
		b.Status.CompletionTimestamp = &metav1.Time{Time: time.Now()}
		return c.Patch(ctx, b, client.MergeFrom(original)) == nil, nil
	})
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "demo: finalizing the backup:", err)
	}
}
