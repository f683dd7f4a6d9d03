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

package options

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/itemops/itemops/internal/store"
)

// Mode is how far itemops goes beside Velero.
type Mode string

const (
	// ModeObserve mirrors and polls operations and never writes to Velero's
	// objects or object storage. Safe beside any Velero.
	ModeObserve Mode = "observe"
	// ModeManage takes over the jobs of Velero's backup-operations and
	// restore-operations controllers, which Velero must run disabled.
	ModeManage Mode = "manage"
)

var modes = []Mode{ModeObserve, ModeManage}

// The values of --non-durable-snapshots.
const (
	NonDurablePartiallyFail = "PartiallyFail"
	NonDurableWarn          = "Warn"
)

// String implements flag.Value.
func (m *Mode) String() string { return string(*m) }

// Set implements flag.Value and rejects every value but the known modes.
func (m *Mode) Set(value string) error {
	for _, known := range modes {
		if Mode(value) == known {
			*m = known
			return nil
		}
	}
	names := make([]string, len(modes))
	for i, known := range modes {
		names[i] = string(known)
	}
	return fmt.Errorf("unknown mode %q: must be one of %s", value, strings.Join(names, ", "))
}

// Options are the manager's settings, one per command-line flag.
type Options struct {
	// Mode is observe or manage.
	Mode Mode
	// NonDurableSnapshots is what manage mode does with a Backup whose
	// native snapshot did not become durable: PartiallyFail or Warn.
	NonDurableSnapshots string
	// VeleroNamespace is where Velero, its Backups and Restores, and every
	// ItemOperation live.
	VeleroNamespace string
	// PluginDir holds the Velero plugin binaries itemops may call.
	PluginDir string
	// SyncFrequency is how often an operation in progress is polled.
	SyncFrequency time.Duration
	// MaxConcurrentReconciles bounds the reconciles running at once per controller.
	MaxConcurrentReconciles int
	// PluginCallTimeout is the deadline of every call into a plugin.
	PluginCallTimeout time.Duration
	// ProgressUpdateInterval is the least time between two status writes of
	// one operation when only its progress changed.
	ProgressUpdateInterval time.Duration
	// MaxProgressFailures is how many Progress calls in a row may fail (a
	// transport error, a deadline, an error inside the plugin's call) before
	// the operation fails.
	MaxProgressFailures int
	// StallAfter is how long progress may stand still before the operation
	// gets a Stalled condition.
	StallAfter time.Duration
	// NotMovingAfter is how long progress may stand still before an
	// operation nothing else explains waits on NotMoving; 0 turns it off.
	NotMovingAfter time.Duration
	// VeleroDeployment is the name of Velero's Deployment, whose ready
	// pods tell whether velero server runs.
	VeleroDeployment string
	// FindCauses: read the cluster to say why an operation waits (the
	// data mover's objects, node-agent, locations, repositories, velero
	// server's Deployment); without, only progress tells (NotMoving,
	// NoProgress).
	FindCauses bool
	// CredentialsDir receives the BackupStorageLocation credentials handed to
	// ObjectStore plugins as files; it must be writable.
	CredentialsDir string

	// MetricsBindAddress serves Prometheus metrics; "0" turns them off.
	MetricsBindAddress string
	// MetricsSecure serves metrics over HTTPS (HTTP/2 off) to callers whose
	// token the API server accepts (TokenReview) and who may get /metrics
	// (SubjectAccessReview). Off, they are plain HTTP to anyone who can
	// reach the port.
	MetricsSecure bool
	// MetricsCertDir holds the metrics server's tls.crt and tls.key,
	// reloaded when they change; empty, a self-signed certificate is made
	// at start and kept in memory.
	MetricsCertDir string
	// HealthProbeBindAddress serves /healthz and /readyz.
	HealthProbeBindAddress string
	// PprofBindAddress serves Go's /debug/pprof profiles; "0" (the default)
	// turns them off.
	PprofBindAddress string
	// LeaderElect makes replicas elect one active manager.
	LeaderElect bool
	// ETAPolling polls an operation at its predicted completion when that
	// comes before the next regular poll; once a prediction has passed
	// without the operation ending, no sooner than MinPollInterval.
	ETAPolling      bool
	MinPollInterval time.Duration
	// StatusWriteQPS bounds the status writes that only report progress;
	// ends, errors and conditions are always written.
	StatusWriteQPS int
	// KubeAPIQPS and KubeAPIBurst bound the manager's requests to the API
	// server (client-side rate limit).
	KubeAPIQPS   int
	KubeAPIBurst int
	// MaxFileBytes, MaxFileInflatedBytes, MaxFileRecords and
	// MaxFileItems bound what is read from object storage (an operations
	// file, volume snapshot records): its size as stored, the size it
	// inflates to, its records, and the elements of the lists inside
	// them. A file over one is not read.
	MaxFileBytes         int64
	MaxFileInflatedBytes int64
	MaxFileRecords       int
	MaxFileItems         int
	// PluginArgs are passed to every plugin process, after --namespace: the
	// same as the velero server's arguments, which Velero passes to its
	// plugins (--features, --log-level, --client-qps…).
	PluginArgs Args
}

// Args is a flag that may be given more than once; each value is split at
// white space, so "--features=EnableCSI --log-level=debug" is two arguments.
type Args []string

// String implements flag.Value.
func (a *Args) String() string { return strings.Join(*a, " ") }

// Set implements flag.Value.
func (a *Args) Set(value string) error {
	*a = append(*a, strings.Fields(value)...)
	return nil
}

// New returns the defaults.
func New() Options {
	return Options{
		Mode:                    ModeObserve,
		NonDurableSnapshots:     NonDurablePartiallyFail,
		VeleroNamespace:         "velero",
		PluginDir:               "/plugins",
		SyncFrequency:           10 * time.Second,
		MaxConcurrentReconciles: 10,
		PluginCallTimeout:       30 * time.Second,
		ProgressUpdateInterval:  30 * time.Second,
		MaxProgressFailures:     5,
		StallAfter:              15 * time.Minute,
		NotMovingAfter:          2 * time.Minute,
		VeleroDeployment:        "velero",
		FindCauses:              true,
		CredentialsDir:          filepath.Join(os.TempDir(), "itemops-credentials"),
		MetricsBindAddress:      ":8443",
		MetricsSecure:           true,
		HealthProbeBindAddress:  ":8081",
		PprofBindAddress:        "0",
		ETAPolling:              true,
		MinPollInterval:         time.Second,
		StatusWriteQPS:          50,
		KubeAPIQPS:              500,
		KubeAPIBurst:            1000,
		MaxFileBytes:            store.DefaultCompressedLimit,
		MaxFileInflatedBytes:    store.DefaultInflatedLimit,
		MaxFileRecords:          store.DefaultRecordLimit,
		MaxFileItems:            store.DefaultItemLimit,
	}
}

// BindFlags registers one flag per option on fs, with the current values as defaults.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.Var(&o.Mode, "mode", "observe: mirror and poll operations, never write to Velero; manage: also move Backups and Restores on (run Velero with --disable-controllers=backup-operations,restore-operations)")
	fs.StringVar(&o.NonDurableSnapshots, "non-durable-snapshots", o.NonDurableSnapshots, "manage mode, a Backup whose native volume snapshot did not become durable: PartiallyFail (end it PartiallyFailed, naming the volumes) or Warn (Events only); observe mode only warns")
	fs.StringVar(&o.VeleroNamespace, "velero-namespace", o.VeleroNamespace, "namespace of Velero, its Backups and Restores, and every ItemOperation")
	fs.StringVar(&o.PluginDir, "plugin-dir", o.PluginDir, "directory holding the Velero plugin binaries")
	fs.DurationVar(&o.SyncFrequency, "sync-frequency", o.SyncFrequency, "how often an operation in progress is polled")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", o.MaxConcurrentReconciles, "reconciles running at once per controller")
	fs.DurationVar(&o.PluginCallTimeout, "plugin-call-timeout", o.PluginCallTimeout, "deadline of every call into a plugin")
	fs.DurationVar(&o.ProgressUpdateInterval, "progress-update-interval", o.ProgressUpdateInterval, "least time between two status writes of one operation when only its progress changed")
	fs.IntVar(&o.MaxProgressFailures, "max-progress-failures", o.MaxProgressFailures, "Progress calls in a row that may fail (plugin unreachable, past its deadline, or an error inside the call) before the operation fails")
	fs.DurationVar(&o.StallAfter, "stall-after", o.StallAfter, "how long progress may stand still before an operation is marked Stalled")
	fs.DurationVar(&o.NotMovingAfter, "not-moving-after", o.NotMovingAfter, "how long progress may stand still before an operation that nothing else explains waits on NotMoving (a few polls; 0 turns it off)")
	fs.BoolVar(&o.FindCauses, "find-causes", o.FindCauses, "read the cluster to say why an operation waits (the data mover's DataUploads and DataDownloads, their pods and volumes, node-agent, locations, repositories, velero server's Deployment); false: only progress tells (NotMoving, NoProgress)")
	fs.StringVar(&o.VeleroDeployment, "velero-deployment", o.VeleroDeployment, "name of Velero's Deployment in its namespace: with no ready pod, operations that do not move wait on VeleroNotRunning")
	fs.StringVar(&o.CredentialsDir, "credentials-dir", o.CredentialsDir, "writable directory where BackupStorageLocation credentials are put for the ObjectStore plugins (mode 0600)")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "address of the Prometheus metrics endpoint; 0 turns it off")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "serve metrics over HTTPS only to callers the API server authenticates and allows to get /metrics; false serves plain HTTP to anyone who can reach the port")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", o.MetricsCertDir, "directory with the metrics server's tls.crt and tls.key (reloaded when they change); empty: a self-signed certificate made at start")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "address of the /healthz and /readyz endpoints")
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", o.PprofBindAddress, "address of Go's /debug/pprof profiles; 0 turns them off")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect one active manager among replicas (a Lease in the Velero namespace)")
	fs.BoolVar(&o.ETAPolling, "eta-polling", o.ETAPolling, "poll an operation at its predicted completion when that comes before the next regular poll")
	fs.DurationVar(&o.MinPollInterval, "min-poll-interval", o.MinPollInterval, "with --eta-polling, the least time between two polls of an operation once an estimate has passed without it ending")
	fs.IntVar(&o.StatusWriteQPS, "status-write-qps", o.StatusWriteQPS, "status writes per second that only report progress; beyond it they are skipped until the next poll (ends, errors and conditions are always written); finished operations' finalizers are released at up to half that rate, within the same budget")
	fs.IntVar(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "requests per second the manager may send to the API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "requests the manager may send to the API server at once above --kube-api-qps")
	fs.Int64Var(&o.MaxFileBytes, "max-operations-file-bytes", o.MaxFileBytes, "largest operations file (or other file of a backup) read from object storage, as stored; a larger one is not read and its Backup or Restore gets an OperationsFileTooLarge event")
	fs.Int64Var(&o.MaxFileInflatedBytes, "max-operations-file-inflated-bytes", o.MaxFileInflatedBytes, "largest size such a file may inflate to; files being decoded at once share this much memory")
	fs.IntVar(&o.MaxFileRecords, "max-operations-file-records", o.MaxFileRecords, "most records such a file may hold")
	fs.IntVar(&o.MaxFileItems, "max-operations-file-items", o.MaxFileItems, "most elements the lists inside its records (postOperationItems) may hold, all records together")
	fs.Var(&o.PluginArgs, "plugin-args", "arguments for every plugin process, the same as your velero server's (e.g. \"--features=EnableCSI --log-level=info\"); may be repeated")
}

// Validate returns every problem with the options at once, each naming its flag.
func (o Options) Validate() error {
	var errs []error
	var mode Mode
	if err := mode.Set(string(o.Mode)); err != nil {
		errs = append(errs, fmt.Errorf("--mode: %w", err))
	}
	if o.NonDurableSnapshots != NonDurablePartiallyFail && o.NonDurableSnapshots != NonDurableWarn {
		errs = append(errs, fmt.Errorf("--non-durable-snapshots: %q must be %s or %s", o.NonDurableSnapshots, NonDurablePartiallyFail, NonDurableWarn))
	}
	if problems := validation.IsDNS1123Label(o.VeleroNamespace); len(problems) > 0 {
		errs = append(errs, fmt.Errorf("--velero-namespace %q is not a namespace name: %s", o.VeleroNamespace, strings.Join(problems, "; ")))
	}
	if problems := validation.IsDNS1123Subdomain(o.VeleroDeployment); len(problems) > 0 {
		errs = append(errs, fmt.Errorf("--velero-deployment %q is not a Deployment name: %s", o.VeleroDeployment, strings.Join(problems, "; ")))
	}
	if o.NotMovingAfter < 0 {
		errs = append(errs, fmt.Errorf("--not-moving-after must not be negative, got %s", o.NotMovingAfter))
	}
	if strings.TrimSpace(o.PluginDir) == "" {
		errs = append(errs, errors.New("--plugin-dir must name a directory"))
	}
	if strings.TrimSpace(o.CredentialsDir) == "" {
		errs = append(errs, errors.New("--credentials-dir must name a directory"))
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--sync-frequency", o.SyncFrequency},
		{"--plugin-call-timeout", o.PluginCallTimeout},
		{"--progress-update-interval", o.ProgressUpdateInterval},
		{"--stall-after", o.StallAfter},
		{"--min-poll-interval", o.MinPollInterval},
	} {
		if d.value <= 0 {
			errs = append(errs, fmt.Errorf("%s must be a positive duration, got %s", d.flag, d.value))
		}
	}
	for _, n := range []struct {
		flag  string
		value int64
	}{
		{"--max-concurrent-reconciles", int64(o.MaxConcurrentReconciles)},
		{"--max-progress-failures", int64(o.MaxProgressFailures)},
		{"--kube-api-qps", int64(o.KubeAPIQPS)},
		{"--status-write-qps", int64(o.StatusWriteQPS)},
		{"--kube-api-burst", int64(o.KubeAPIBurst)},
		{"--max-operations-file-records", int64(o.MaxFileRecords)},
		{"--max-operations-file-items", int64(o.MaxFileItems)},
		{"--max-operations-file-bytes", o.MaxFileBytes},
		{"--max-operations-file-inflated-bytes", o.MaxFileInflatedBytes},
	} {
		if n.value < 1 {
			errs = append(errs, fmt.Errorf("%s must be at least 1, got %d", n.flag, n.value))
		}
	}
	for _, arg := range o.PluginArgs {
		if !strings.HasPrefix(arg, "-") {
			errs = append(errs, fmt.Errorf("--plugin-args: %q is not a flag: plugins take only flags, as velero server passes them", arg))
		}
	}
	if o.MetricsCertDir != "" && !o.MetricsSecure {
		errs = append(errs, errors.New("--metrics-cert-dir needs --metrics-secure: plain HTTP uses no certificate"))
	}
	if o.HealthProbeBindAddress == "" {
		errs = append(errs, errors.New("--health-probe-bind-address must be set: the liveness and readiness probes need it"))
	}
	return errors.Join(errs...)
}
