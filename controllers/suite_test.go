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
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"go.uber.org/zap/zapcore"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/kube"
	"github.com/itemops/itemops/internal/plugin"
	"github.com/itemops/itemops/internal/store"
	"github.com/itemops/itemops/internal/why"
	"github.com/itemops/itemops/test/csisim"
	"github.com/itemops/itemops/test/envtest"
)

// Fast settings so that the suite sees polls, throttling, stalls and
// timeouts within seconds.
const (
	testSync           = 200 * time.Millisecond
	testUpdateInterval = 2 * time.Second
	testStallAfter     = 2 * time.Second
	testNotMovingAfter = time.Second
	testMaxFailures    = 3
	// testCallTimeout is long enough for a loaded machine: a sample plugin
	// that exits during a call must be seen exiting (Unavailable, retried)
	// before the call's deadline (DeadlineExceeded, not retried for a
	// Cancel). The hung-plugin specs wait testMaxFailures of it.
	testCallTimeout = 5 * time.Second
	// testStartTimeout is not the suite's to shorten: a loaded machine
	// takes seconds to start a plugin process, and a sample plugin that
	// discovery gave up on is unknown to the specs after it.
	testStartTimeout = time.Minute
)

var (
	env     *envtest.Environment
	plugins *plugin.Manager
	// files are the operations files of the suite's Backups and Restores.
	files = newFakeStore()
	// cached reads as the reconcilers do, through the manager's cache.
	cached client.Reader
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controllers")
}

// The real parts every process of the suite owns: an API server, the sample
// plugins behind a plugin manager, and a manager running every reconciler in
// manage mode. The unit specs use none of them.
var _ = BeforeSuite(func() {
	var err error
	root, err := envtest.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	// The CSI snapshot kinds: what explains why a data movement waits reads them.
	snapshotCRDs, err := csisim.CRDs(root)
	Expect(err).NotTo(HaveOccurred())
	env, err = envtest.StartWith(envtest.Options{ExtraCRDPaths: snapshotCRDs})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)

	dir := GinkgoT().TempDir()
	pluginDir := filepath.Join(dir, "plugins")
	Expect(envtest.BuildSamplePlugins(pluginDir, "sample", "samplev1")).To(Succeed())
	// What else a plugin directory may hold: a file that is not a plugin,
	// and one anyone could replace (see "bad operation input").
	for name, mode := range map[string]os.FileMode{"not-a-plugin.sh": 0o755, "anyone-can-replace.sh": 0o777} {
		path := filepath.Join(pluginDir, name)
		Expect(os.WriteFile(path, []byte("#!/bin/sh\necho 'not a plugin'\n"), mode)).To(Succeed())
		Expect(os.Chmod(path, mode)).To(Succeed())
	}
	Expect(os.Setenv("ITEMOPS_SAMPLE_STATE_DIR", filepath.Join(dir, "state"))).To(Succeed())

	log := zap.New(zap.UseDevMode(true), zap.WriteTo(GinkgoWriter), zap.Level(zapLevel()))
	ctrl.SetLogger(log)
	plugins = plugin.NewManager(plugin.Options{Dir: pluginDir, CallTimeout: testCallTimeout, StartTimeout: testStartTimeout, Log: log.WithName("plugins")})
	plugins.Discover(context.Background())

	// As main.go wires it: parents read their operations from the cache's store.
	stores := NewStores()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{NewInformer: stores.NewInformer},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(SetupIndexes(context.Background(), mgr)).To(Succeed())
	cached = mgr.GetClient()
	Expect(mgr.Add(plugins)).To(Succeed())
	files.locations = &store.Store{Client: mgr.GetClient(), Secrets: mgr.GetAPIReader(),
		Namespace: envtest.VeleroNamespace, CredentialsDir: filepath.Join(dir, "credentials")}
	patcher, err := kube.NewPatcher(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme(), mgr.GetRESTMapper(), &itemopsv1alpha1.ItemOperation{})
	Expect(err).NotTo(HaveOccurred())
	Expect((&ItemOperationReconciler{
		Client:                  mgr.GetClient(),
		Stores:                  stores,
		Patcher:                 patcher,
		APIReader:               mgr.GetAPIReader(),
		Plugins:                 plugins,
		SnapshotLocations:       files.locations,
		Causes:                  &why.Gatherer{Reader: mgr.GetClient(), Direct: mgr.GetAPIReader()},
		Recorder:                mgr.GetEventRecorderFor("itemops"),
		Clock:                   clock.RealClock{},
		SyncFrequency:           testSync,
		ProgressUpdateInterval:  testUpdateInterval,
		StallAfter:              testStallAfter,
		NotMovingAfter:          testNotMovingAfter,
		MaxProgressFailures:     testMaxFailures,
		MaxConcurrentReconciles: 4,
	}).SetupWithManager(mgr)).To(Succeed())
	// The suite runs in manage mode: the parents are moved on too.
	for _, r := range []interface{ SetupWithManager(ctrl.Manager) error }{
		NewBackupReconciler(mgr.GetClient(), mgr.GetEventRecorderFor("itemops"), ParentOptions{Store: files, Manage: true, MaxConcurrentReconciles: 4, Stores: stores}),
		NewRestoreReconciler(mgr.GetClient(), mgr.GetEventRecorderFor("itemops"), ParentOptions{Store: files, Manage: true, MaxConcurrentReconciles: 4, Stores: stores}),
		&VolumeSnapshotReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("itemops"), Store: files, Clock: clock.RealClock{}, Stores: stores},
		&PodVolumeReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("itemops"), Kind: itemopsv1alpha1.MirrorKindPodVolumeBackup, Namespace: envtest.VeleroNamespace},
		&PodVolumeReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("itemops"), Kind: itemopsv1alpha1.MirrorKindPodVolumeRestore, Namespace: envtest.VeleroNamespace},
	} {
		Expect(r.SetupWithManager(mgr)).To(Succeed())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	DeferCleanup(func() {
		cancel()
		Expect(<-done).To(Succeed(), "the manager stops cleanly")
	})
})

// zapLevel keeps the suite quiet unless ITEMOPS_TEST_VERBOSE is set.
func zapLevel() zapcore.Level {
	if os.Getenv("ITEMOPS_TEST_VERBOSE") != "" {
		return -1
	}
	return 2
}
