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
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
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

func main() {
	opts, zapOpts := options.New(), zap.Options{}
	opts.BindFlags(flag.CommandLine)
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	metricsOpts, err := checkFlags(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctrl.SetLogger(kube.DeferValues(zap.New(zap.UseFlagOptions(&zapOpts))))
	if err := run(ctrl.SetupSignalHandler(), opts, metricsOpts); err != nil {
		ctrl.Log.WithName("setup").Error(err, "itemops stopped")
		os.Exit(1)
	}
}

// checkFlags says everything wrong with the command line at once, and how
// metrics are served.
func checkFlags(opts options.Options) (metricsserver.Options, error) {
	if flag.NArg() > 0 {
		return metricsserver.Options{}, fmt.Errorf("itemops takes no arguments, got %q", flag.Args())
	}
	metricsOpts, metricsErr := metricsServer(opts)
	if err := errors.Join(opts.Validate(), metricsErr); err != nil {
		return metricsserver.Options{}, fmt.Errorf("invalid flags:\n%w", err)
	}
	return metricsOpts, nil
}

// run starts itemops and returns when ctx ends or itemops cannot go on.
func run(ctx context.Context, opts options.Options, metricsOpts metricsserver.Options) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no Kubernetes API server to talk to: set --kubeconfig or KUBECONFIG, or run in a cluster: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(opts.KubeAPIQPS), opts.KubeAPIBurst
	w := &wiring{opts: opts, stores: controllers.NewStores()}
	if w.mgr, err = newManager(cfg, opts, metricsOpts, w.stores); err != nil {
		return err
	}
	w.recorder = w.mgr.GetEventRecorderFor("itemops")
	if err := controllers.SetupIndexes(ctx, w.mgr); err != nil {
		return fmt.Errorf("setting up the cache indexes: %w", err)
	}
	if w.plugins, err = setupPlugins(ctx, w.mgr, opts); err != nil {
		return err
	}
	// Velero's object storage and locations, read through the plugins: the
	// operations files, the volume snapshot records, and the configuration
	// VolumeSnapshotters are initialised with.
	w.objectStorage = &store.Store{
		Client: w.mgr.GetClient(), Secrets: w.mgr.GetAPIReader(), Plugins: w.plugins,
		Namespace: opts.VeleroNamespace, CredentialsDir: opts.CredentialsDir,
		Limits: store.Limits{Compressed: opts.MaxFileBytes, Inflated: opts.MaxFileInflatedBytes, Records: opts.MaxFileRecords, Items: opts.MaxFileItems},
	}
	if err := w.setupReconcilers(); err != nil {
		return err
	}
	if err := w.setupChecks(cfg); err != nil {
		return err
	}
	metrics.Register(w.mgr.GetClient(), opts.VeleroNamespace)
	ctrl.Log.WithName("setup").Info("starting manager", "mode", opts.Mode, "veleroNamespace", opts.VeleroNamespace,
		"pluginDir", opts.PluginDir, "syncFrequency", opts.SyncFrequency.String(),
		"maxConcurrentReconciles", opts.MaxConcurrentReconciles, "leaderElect", opts.LeaderElect)
	if err := w.mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// wiring is what the reconcilers and checks are made of: the options, the
// manager, and the parts they share.
type wiring struct {
	opts          options.Options
	mgr           ctrl.Manager
	recorder      record.EventRecorder
	stores        *kube.Stores
	plugins       *plugin.Manager
	objectStorage *store.Store
}

// newScheme holds the kinds itemops reads and writes.
func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(velerov1api.AddToScheme(scheme))
	utilruntime.Must(itemopsv1alpha1.AddToScheme(scheme))
	// DataUploads, DataDownloads and VolumeSnapshots: what explains why a
	// data movement waits.
	utilruntime.Must(why.AddToScheme(scheme))
	return scheme
}

// newManager is the manager, its cache limited to Velero's namespace.
// Operations and parents are read from the cache's stores, not copied out
// of them on every poll (kube.Stores).
func newManager(cfg *rest.Config, opts options.Options, metricsOpts metricsserver.Options, stores *kube.Stores) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: newScheme(),
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
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	return mgr, nil
}

// setupPlugins finds the plugins before anything can ask for one (what
// cannot be used is logged and skipped, never fatal), reports them, and
// keeps their processes running with the manager.
func setupPlugins(ctx context.Context, mgr ctrl.Manager, opts options.Options) (*plugin.Manager, error) {
	log := ctrl.Log.WithName("plugins")
	plugins := plugin.NewManager(plugin.Options{
		Dir:         opts.PluginDir,
		CallTimeout: opts.PluginCallTimeout,
		Log:         log,
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
	discovered := plugins.Discover(ctrl.LoggerInto(ctx, ctrl.Log.WithName("setup")))
	for _, p := range discovered.OperationPlugins() {
		metrics.Plugin(p.Kind, p.Name)
	}
	for _, binary := range discovered.Binaries() {
		metrics.PluginBinary(binary)
	}
	if err := mgr.Add(plugins); err != nil {
		return nil, fmt.Errorf("adding the plugin manager: %w", err)
	}
	return plugins, nil
}

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

// setupReconcilers adds the reconcilers. The Backup and Restore reconcilers
// create ItemOperations from Velero's operations files in both modes; only
// in manage mode do they, and the DownloadRequest reconciler, write to
// Velero's Backups, Restores and object storage. Native volume snapshots are
// followed in both modes and never move a Backup's phase: Velero does not
// wait for them.
func (w *wiring) setupReconcilers() error {
	manage := w.opts.Mode == options.ModeManage
	operations, err := w.itemOperationReconciler()
	if err != nil {
		return err
	}
	parentOpts := controllers.ParentOptions{
		Store: w.objectStorage, Manage: manage, Stores: w.stores,
		// A parent's completed count is progress: written at most once per
		// progress interval (see docs/controllers.md).
		CounterInterval:         w.opts.ProgressUpdateInterval,
		MaxConcurrentReconciles: w.opts.MaxConcurrentReconciles,
	}
	c := w.mgr.GetClient()
	backups := controllers.NewBackupReconciler(c, w.recorder, parentOpts)
	restores := controllers.NewRestoreReconciler(c, w.recorder, parentOpts)
	type named struct {
		name       string
		reconciler interface{ SetupWithManager(ctrl.Manager) error }
	}
	reconcilers := []named{
		{"ItemOperation", operations},
		{"Backup", backups},
		{"Restore", restores},
		{"volume snapshot", &controllers.VolumeSnapshotReconciler{Client: c, Recorder: w.recorder, Store: w.objectStorage,
			Stores: w.stores, Manage: manage, NonDurable: controllers.NonDurableSnapshots(w.opts.NonDurableSnapshots)}},
		{"restore snapshot", &controllers.RestoreSnapshotReconciler{Client: c, Recorder: w.recorder, Stores: w.stores}},
		{"PodVolumeBackup", &controllers.PodVolumeReconciler{Client: c, APIReader: w.mgr.GetAPIReader(), Recorder: w.recorder, Kind: itemopsv1alpha1.MirrorKindPodVolumeBackup,
			Namespace: w.opts.VeleroNamespace}},
		{"PodVolumeRestore", &controllers.PodVolumeReconciler{Client: c, APIReader: w.mgr.GetAPIReader(), Recorder: w.recorder, Kind: itemopsv1alpha1.MirrorKindPodVolumeRestore,
			Namespace: w.opts.VeleroNamespace}},
	}
	if manage {
		reconcilers = append(reconcilers, named{"DownloadRequest",
			&controllers.DownloadRequestReconciler{Client: c, Recorder: w.recorder, Backups: backups, Restores: restores}})
	}
	for _, r := range reconcilers {
		if err := r.reconciler.SetupWithManager(w.mgr); err != nil {
			return fmt.Errorf("setting up the %s controller: %w", r.name, err)
		}
	}
	return nil
}

// itemOperationReconciler is the reconciler that polls and cancels each
// operation, configured from the options.
func (w *wiring) itemOperationReconciler() (*controllers.ItemOperationReconciler, error) {
	opts, mgr := w.opts, w.mgr
	patcher, err := kube.NewPatcher(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme(), mgr.GetRESTMapper(), &itemopsv1alpha1.ItemOperation{})
	if err != nil {
		return nil, fmt.Errorf("setting up the ItemOperation writes: %w", err)
	}
	r := &controllers.ItemOperationReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Stores: w.stores, Patcher: patcher,
		Recorder: w.recorder, Plugins: w.plugins, SnapshotLocations: w.objectStorage,
		NotMovingAfter:          opts.NotMovingAfter,
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
	}
	// Why an operation waits: the data mover's objects through the cache,
	// node-agent and velero server's state once per sync interval for all
	// operations; unless --find-causes=false.
	if opts.FindCauses {
		watch := &why.ServerWatch{Reader: mgr.GetAPIReader(), Namespace: opts.VeleroNamespace, Name: opts.VeleroDeployment,
			Every: opts.SyncFrequency}
		r.Causes = &why.Gatherer{Reader: mgr.GetClient(), Direct: mgr.GetAPIReader(), Server: watch, Every: opts.SyncFrequency}
		r.VeleroServer = watch
	}
	return r, nil
}

// setupChecks adds the health checks and the reports of which Kubernetes
// and which Velero run (docs/velero.md, "Velero releases").
func (w *wiring) setupChecks(cfg *rest.Config) error {
	builtinPlugins := filepath.Join(w.opts.PluginDir, "velero")
	if _, err := os.Stat(builtinPlugins); err != nil {
		builtinPlugins = ""
	}
	if err := w.mgr.Add(&compat.KubernetesCheck{Config: cfg, HTTPClient: w.mgr.GetHTTPClient()}); err != nil {
		return fmt.Errorf("adding the Kubernetes version check: %w", err)
	}
	if err := w.mgr.Add(&compat.VeleroCheck{
		Reader: w.mgr.GetAPIReader(), Recorder: w.recorder, Namespace: w.opts.VeleroNamespace, Deployment: w.opts.VeleroDeployment,
		BuiltinPlugins: builtinPlugins, Binaries: w.plugins, Timeout: w.opts.PluginCallTimeout,
	}); err != nil {
		return fmt.Errorf("adding the Velero version check: %w", err)
	}
	if err := w.mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := w.mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	return nil
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
