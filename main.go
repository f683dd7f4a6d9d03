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

// Command itemops runs the itemops manager beside Velero. It only wires flags,
// the manager and the reconcilers together; the behaviour lives in controllers/
// and internal/.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/controllers"
	"github.com/itemops/itemops/internal/compat"
	"github.com/itemops/itemops/internal/kube"
	"github.com/itemops/itemops/internal/metrics"
	"github.com/itemops/itemops/internal/metricsauth"
	"github.com/itemops/itemops/internal/options"
	"github.com/itemops/itemops/internal/plugin"
	"github.com/itemops/itemops/internal/progress"
	"github.com/itemops/itemops/internal/store"
	"github.com/itemops/itemops/internal/why"
)

// leaderElectionID names the Lease that replicas compete for.
const leaderElectionID = "itemops.itemops.io"

// kubeconfigArg hands itemops' --kubeconfig on to plugin processes, as
// velero server hands on its own: a plugin that reads the API server (the
// CSI data mover does) then acts as itemops does. In a cluster there is none
// and plugins use the pod's ServiceAccount, as itemops does.
func kubeconfigArg() []string {
	if f := flag.Lookup("kubeconfig"); f != nil && f.Value.String() != "" {
		return []string{"--kubeconfig=" + f.Value.String()}
	}
	return nil
}

func main() {
	opts := options.New()
	opts.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "itemops takes no arguments, got %q\n", flag.Args())
		os.Exit(2)
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	metricsOpts, err := metricsServer(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "invalid flags:\n%v\n", err)
		os.Exit(2)
	}

	ctrl.SetLogger(kube.DeferValues(zap.New(zap.UseFlagOptions(&zapOpts))))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(velerov1api.AddToScheme(scheme))
	utilruntime.Must(itemopsv1alpha1.AddToScheme(scheme))
	// DataUploads, DataDownloads and VolumeSnapshots: what explains why a
	// data movement waits.
	utilruntime.Must(why.AddToScheme(scheme))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "no Kubernetes API server to talk to: set --kubeconfig or KUBECONFIG, or run in a cluster")
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = float32(opts.KubeAPIQPS), opts.KubeAPIBurst

	// Operations and parents are read from the cache's stores, not copied
	// out of them on every poll (see kube.Stores).
	stores := controllers.NewStores()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// Velero's objects and ItemOperations all live in Velero's namespace:
		// watch nothing else, so a namespaced Role is enough. Nothing reads
		// managedFields: the cache does not keep them (at 10,000 operations
		// copying them was a tenth of the CPU).
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{opts.VeleroNamespace: {}},
			DefaultTransform:  cache.TransformStripManagedFields(),
			NewInformer:       stores.NewInformer,
		},
		// Every read of the namespaced cache asks whether the kind is
		// namespaced: answered once per kind (docs/controllers.md).
		MapperProvider:          kube.NewDynamicMemoizedMapper,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  opts.HealthProbeBindAddress,
		PprofBindAddress:        opts.PprofBindAddress,
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: opts.VeleroNamespace,
		// Give up leadership on shutdown so a new replica takes over at once.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}

	if err := controllers.SetupIndexes(context.Background(), mgr); err != nil {
		log.Error(err, "setting up the cache indexes")
		os.Exit(1)
	}

	// Plugins are found before anything can ask for one; what cannot be used
	// is logged and skipped, never fatal.
	plugins := plugin.NewManager(plugin.Options{
		Dir:         opts.PluginDir,
		CallTimeout: opts.PluginCallTimeout,
		Log:         ctrl.Log.WithName("plugins"),
		OnRestart:   metrics.PluginRestarted,
		OnDiscovered: func(found []plugin.Discovered) {
			list := make([]metrics.Discovered, 0, len(found))
			for _, p := range found {
				list = append(list, metrics.Discovered{Kind: p.Kind, Name: p.Name, Interface: p.Interface, Binary: filepath.Base(p.Binary)})
			}
			metrics.Plugins(list)
		},
		Namespace: opts.VeleroNamespace,
		Args:      append(kubeconfigArg(), opts.PluginArgs...),
	})
	discovered := plugins.Discover(ctrl.LoggerInto(context.Background(), log))
	for _, p := range discovered.OperationPlugins() {
		metrics.Plugin(p.Kind, p.Name)
	}
	for _, binary := range discovered.Binaries() {
		metrics.PluginBinary(binary)
	}
	if err := mgr.Add(plugins); err != nil {
		log.Error(err, "adding the plugin manager")
		os.Exit(1)
	}

	// Velero's object storage and locations, read through the plugins: the
	// operations files, the volume snapshot records, and the configuration
	// VolumeSnapshotters are initialised with.
	objectStorage := &store.Store{
		Client:         mgr.GetClient(),
		Secrets:        mgr.GetAPIReader(),
		Plugins:        plugins,
		Namespace:      opts.VeleroNamespace,
		CredentialsDir: opts.CredentialsDir,
		Limits:         store.Limits{Compressed: opts.MaxFileBytes, Inflated: opts.MaxFileInflatedBytes, Records: opts.MaxFileRecords, Items: opts.MaxFileItems},
	}

	patcher, err := kube.NewPatcher(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme(), mgr.GetRESTMapper(), &itemopsv1alpha1.ItemOperation{})
	if err != nil {
		log.Error(err, "setting up the ItemOperation writes")
		os.Exit(1)
	}
	// Why an operation waits: the data mover's objects through the cache,
	// node-agent and velero server's state once per poll interval for all
	// operations; unless --find-causes=false.
	var causes controllers.Causes
	var server controllers.VeleroServer
	if opts.FindCauses {
		watch := &why.ServerWatch{Reader: mgr.GetAPIReader(), Namespace: opts.VeleroNamespace, Name: opts.VeleroDeployment,
			Every: opts.SyncFrequency}
		causes = &why.Gatherer{Reader: mgr.GetClient(), Direct: mgr.GetAPIReader(), Server: watch, Every: opts.SyncFrequency}
		server = watch
	}
	if err := (&controllers.ItemOperationReconciler{
		Client:                  mgr.GetClient(),
		Stores:                  stores,
		Patcher:                 patcher,
		APIReader:               mgr.GetAPIReader(),
		Plugins:                 plugins,
		SnapshotLocations:       objectStorage,
		Causes:                  causes,
		VeleroServer:            server,
		NotMovingAfter:          opts.NotMovingAfter,
		Recorder:                mgr.GetEventRecorderFor("itemops"),
		Clock:                   clock.RealClock{},
		VeleroTimesOut:          opts.Mode != options.ModeManage,
		VeleroRecordsEnds:       opts.Mode != options.ModeManage,
		SyncFrequency:           opts.SyncFrequency,
		ProgressUpdateInterval:  opts.ProgressUpdateInterval,
		StallAfter:              opts.StallAfter,
		MaxProgressFailures:     opts.MaxProgressFailures,
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
		ETAPolling:              opts.ETAPolling,
		MinPollInterval:         opts.MinPollInterval,
		Lateness:                &progress.Lateness{Max: opts.SyncFrequency},
		StatusWrites:            rate.NewLimiter(rate.Limit(opts.StatusWriteQPS), 2*opts.StatusWriteQPS),
		// Half the status write budget at most, so that progress writes
		// keep the other half while a wave of ends is released.
		Releases: rate.NewLimiter(rate.Limit(float64(opts.StatusWriteQPS)/2), max(1, opts.StatusWriteQPS)),
	}).SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the ItemOperation controller")
		os.Exit(1)
	}

	// The Backup and Restore reconcilers create ItemOperations from Velero's
	// operations files in both modes; only in manage mode do they write to
	// Velero's Backups, Restores and object storage.
	recorder := mgr.GetEventRecorderFor("itemops")
	parentOpts := controllers.ParentOptions{
		Store:  objectStorage,
		Manage: opts.Mode == options.ModeManage,
		Clock:  clock.RealClock{},
		// A parent's completed count is progress: written at most once per
		// progress interval (see docs/controllers.md).
		CounterInterval:         opts.ProgressUpdateInterval,
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
		Stores:                  stores,
	}
	backups := controllers.NewBackupReconciler(mgr.GetClient(), recorder, parentOpts)
	if err := backups.SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the Backup controller")
		os.Exit(1)
	}
	restores := controllers.NewRestoreReconciler(mgr.GetClient(), recorder, parentOpts)
	if err := restores.SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the Restore controller")
		os.Exit(1)
	}
	// Native volume snapshots are followed in both modes and never move a
	// Backup's phase: Velero does not wait for them.
	if err := (&controllers.VolumeSnapshotReconciler{
		Client: mgr.GetClient(), Recorder: recorder, Store: objectStorage, Clock: clock.RealClock{}, Stores: stores,
		Manage: opts.Mode == options.ModeManage, NonDurable: controllers.NonDurableSnapshots(opts.NonDurableSnapshots),
	}).SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the volume snapshot controller")
		os.Exit(1)
	}
	if err := (&controllers.RestoreSnapshotReconciler{
		Client: mgr.GetClient(), Recorder: recorder, Stores: stores,
	}).SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the restore snapshot controller")
		os.Exit(1)
	}
	if opts.Mode == options.ModeManage {
		if err := (&controllers.DownloadRequestReconciler{
			Client: mgr.GetClient(), Recorder: recorder, Backups: backups, Restores: restores,
		}).SetupWithManager(mgr); err != nil {
			log.Error(err, "setting up the DownloadRequest controller")
			os.Exit(1)
		}
	}

	if err := mgr.Add(&compat.KubernetesCheck{Config: cfg, HTTPClient: mgr.GetHTTPClient()}); err != nil {
		log.Error(err, "adding the Kubernetes version check")
		os.Exit(1)
	}

	// Which Velero runs, and which serves the built-in plugins: reported
	// once by the leader (docs/velero.md, "Velero releases").
	builtinPlugins := filepath.Join(opts.PluginDir, "velero")
	if _, err := os.Stat(builtinPlugins); err != nil {
		builtinPlugins = ""
	}
	if err := mgr.Add(&compat.VeleroCheck{
		Reader: mgr.GetAPIReader(), Recorder: recorder, Namespace: opts.VeleroNamespace, Deployment: opts.VeleroDeployment,
		BuiltinPlugins: builtinPlugins, Binaries: plugins, Timeout: opts.PluginCallTimeout,
	}); err != nil {
		log.Error(err, "adding the Velero version check")
		os.Exit(1)
	}

	metrics.Register(mgr.GetClient(), opts.VeleroNamespace)

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "adding the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "adding the readiness check")
		os.Exit(1)
	}

	log.Info("starting manager", "mode", opts.Mode, "veleroNamespace", opts.VeleroNamespace,
		"pluginDir", opts.PluginDir, "syncFrequency", opts.SyncFrequency.String(),
		"maxConcurrentReconciles", opts.MaxConcurrentReconciles, "leaderElect", opts.LeaderElect)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}

// metricsServer serves metrics, by default over HTTPS with HTTP/2 off (its
// stream resets and rapid resets cost the server, CVE-2023-44487) to callers
// the API server authenticates and allows to get /metrics: every scrape
// walks every ItemOperation, and the output names plugins and binaries. A
// token the API server does not accept is a 401 at once, and a burst of
// bad tokens costs a bounded number of TokenReviews (internal/metricsauth).
func metricsServer(opts options.Options) (metricsserver.Options, error) {
	server := metricsserver.Options{BindAddress: opts.MetricsBindAddress}
	if !opts.MetricsSecure {
		return server, nil
	}
	server.SecureServing = true
	if opts.MetricsCertDir != "" {
		// controller-runtime falls back to a self-signed certificate when
		// the files are missing, and does not start serving when they are
		// not a key pair: either is said at once.
		crt, key := filepath.Join(opts.MetricsCertDir, "tls.crt"), filepath.Join(opts.MetricsCertDir, "tls.key")
		if _, err := tls.LoadX509KeyPair(crt, key); err != nil {
			return server, fmt.Errorf("--metrics-cert-dir %s: no certificate and key to serve metrics with: %w", opts.MetricsCertDir, err)
		}
		server.CertDir = opts.MetricsCertDir
	}
	server.FilterProvider = metricsauth.Filter
	server.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	return server, nil
}
