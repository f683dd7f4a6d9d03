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
	"flag"
	"io"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func parse(args ...string) (Options, error) {
	o := New()
	fs := flag.NewFlagSet("itemops", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.Validate()
}

func TestDefaultsAreValid(t *testing.T) {
	g := NewWithT(t)
	o, err := parse()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.Mode).To(Equal(ModeObserve))
	g.Expect(o.VeleroNamespace).To(Equal("velero"))
	g.Expect(o.PluginDir).To(Equal("/plugins"))
	g.Expect(o.SyncFrequency).To(Equal(10 * time.Second))
	g.Expect(o.PluginCallTimeout).To(Equal(30 * time.Second))
	g.Expect(o.ProgressUpdateInterval).To(Equal(30 * time.Second))
	g.Expect(o.MaxProgressFailures).To(Equal(5))
	g.Expect(o.StallAfter).To(Equal(15 * time.Minute))
	g.Expect(o.NotMovingAfter).To(Equal(2 * time.Minute))
	g.Expect(o.VeleroDeployment).To(Equal("velero"))
	g.Expect(o.FindCauses).To(BeTrue())
	g.Expect(o.LeaderElect).To(BeFalse())
	g.Expect(o.PprofBindAddress).To(Equal("0"))
	g.Expect(o.MetricsBindAddress).To(Equal(":8443"))
	g.Expect(o.MetricsSecure).To(BeTrue(), "metrics are authenticated unless turned off")
	g.Expect(o.MetricsCertDir).To(BeEmpty())
	g.Expect(o.MaxFileBytes).To(Equal(int64(8 << 20)))
	g.Expect(o.MaxFileInflatedBytes).To(Equal(int64(32 << 20)))
	g.Expect(o.MaxFileRecords).To(Equal(20000))
	g.Expect(o.MaxFileItems).To(Equal(100000))
}

func TestFlagsAreParsed(t *testing.T) {
	g := NewWithT(t)
	o, err := parse("--mode=manage", "--non-durable-snapshots=Warn", "--velero-namespace=backup-system", "--plugin-dir=/opt/plugins",
		"--sync-frequency=2s", "--max-concurrent-reconciles=32", "--plugin-call-timeout=5s",
		"--progress-update-interval=1m", "--max-progress-failures=3", "--stall-after=30m",
		"--not-moving-after=90s", "--velero-deployment=velero-server", "--find-causes=false", "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:9440", "--pprof-bind-address=127.0.0.1:6060", "--leader-elect",
		"--credentials-dir=/run/itemops/credentials", "--kube-api-qps=500", "--kube-api-burst=1000",
		"--eta-polling", "--min-poll-interval=500ms", "--status-write-qps=20", "--metrics-cert-dir=/certs",
		"--max-operations-file-bytes=1048576", "--max-operations-file-inflated-bytes=4194304", "--max-operations-file-records=500", "--max-operations-file-items=2000",
		"--plugin-args=--features=EnableCSI,EnableAPIGroupVersions --log-level=debug", "--plugin-args", "--client-qps=50")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o).To(Equal(Options{
		Mode:                    ModeManage,
		NonDurableSnapshots:     NonDurableWarn,
		VeleroNamespace:         "backup-system",
		PluginDir:               "/opt/plugins",
		SyncFrequency:           2 * time.Second,
		MaxConcurrentReconciles: 32,
		PluginCallTimeout:       5 * time.Second,
		ProgressUpdateInterval:  time.Minute,
		MaxProgressFailures:     3,
		StallAfter:              30 * time.Minute,
		NotMovingAfter:          90 * time.Second,
		VeleroDeployment:        "velero-server",
		FindCauses:              false,
		CredentialsDir:          "/run/itemops/credentials",
		MetricsBindAddress:      "0",
		MetricsSecure:           true,
		MetricsCertDir:          "/certs",
		HealthProbeBindAddress:  "127.0.0.1:9440",
		PprofBindAddress:        "127.0.0.1:6060",
		LeaderElect:             true,
		KubeAPIQPS:              500,
		KubeAPIBurst:            1000,
		ETAPolling:              true,
		MinPollInterval:         500 * time.Millisecond,
		StatusWriteQPS:          20,
		MaxFileBytes:            1 << 20,
		MaxFileInflatedBytes:    4 << 20,
		MaxFileRecords:          500,
		MaxFileItems:            2000,
		PluginArgs:              Args{"--features=EnableCSI,EnableAPIGroupVersions", "--log-level=debug", "--client-qps=50"},
	}))
}

func TestBadValuesAreRejectedWithTheirFlag(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown mode", []string{"--mode=takeover"}, []string{`unknown mode "takeover": must be one of observe, manage`}},
		{"mode in capitals", []string{"--mode=Manage"}, []string{`unknown mode "Manage"`}},
		{"unknown non-durable policy", []string{"--non-durable-snapshots=Fail"}, []string{`--non-durable-snapshots: "Fail" must be PartiallyFail or Warn`}},
		{"unknown flag", []string{"--poll-everything"}, []string{"flag provided but not defined: -poll-everything"}},
		{"namespace not a DNS label", []string{"--velero-namespace=Velero_NS"}, []string{`--velero-namespace "Velero_NS" is not a namespace name`}},
		{"empty namespace", []string{"--velero-namespace="}, []string{`--velero-namespace "" is not a namespace name`}},
		{"empty plugin dir", []string{"--plugin-dir="}, []string{"--plugin-dir must name a directory"}},
		{"zero sync frequency", []string{"--sync-frequency=0s"}, []string{"--sync-frequency must be a positive duration, got 0s"}},
		{"negative call timeout", []string{"--plugin-call-timeout=-1s"}, []string{"--plugin-call-timeout must be a positive duration, got -1s"}},
		{"zero progress interval", []string{"--progress-update-interval=0"}, []string{"--progress-update-interval must be a positive duration"}},
		{"zero stall", []string{"--stall-after=0"}, []string{"--stall-after must be a positive duration"}},
		{"negative not-moving window", []string{"--not-moving-after=-1m"}, []string{"--not-moving-after must not be negative, got -1m0s"}},
		{"Deployment name with a slash", []string{"--velero-deployment=velero/velero"}, []string{`--velero-deployment "velero/velero" is not a Deployment name`}},
		{"not a duration", []string{"--sync-frequency=often"}, []string{`invalid value "often" for flag -sync-frequency`}},
		{"zero concurrency", []string{"--max-concurrent-reconciles=0"}, []string{"--max-concurrent-reconciles must be at least 1, got 0"}},
		{"zero failure budget", []string{"--max-progress-failures=0"}, []string{"--max-progress-failures must be at least 1, got 0"}},
		{"no probe address", []string{"--health-probe-bind-address="}, []string{"--health-probe-bind-address must be set"}},
		{"certificate for plain HTTP", []string{"--metrics-secure=false", "--metrics-cert-dir=/certs"}, []string{"--metrics-cert-dir needs --metrics-secure"}},
		{"no file at all", []string{"--max-operations-file-bytes=0", "--max-operations-file-records=0", "--max-operations-file-items=0"},
			[]string{"--max-operations-file-bytes must be at least 1, got 0", "--max-operations-file-records must be at least 1, got 0", "--max-operations-file-items must be at least 1, got 0"}},
		{"zero API rate", []string{"--kube-api-qps=0"}, []string{"--kube-api-qps must be at least 1, got 0"}},
		{"plugin argument not a flag", []string{"--plugin-args=server --features=EnableCSI"}, []string{`--plugin-args: "server" is not a flag`}},
		{
			"every problem at once",
			[]string{"--sync-frequency=0s", "--max-concurrent-reconciles=0", "--velero-namespace=A"},
			[]string{"--sync-frequency must be", "--max-concurrent-reconciles must be", "--velero-namespace \"A\""},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := parse(tc.args...)
			g.Expect(err).To(HaveOccurred())
			for _, want := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(want))
			}
		})
	}
}
