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

// Command soak runs itemops for a long time (make soak; SOAK_DURATION, one
// hour by default) the way a cluster with a busy backup schedule runs it,
// and checks that nothing it holds grows. A real kube-apiserver and etcd,
// versitygw with Velero's storage location on it through
// velero-plugin-for-aws, the sample plugin, and itemops in manage mode as the
// chart's ServiceAccount; a stream of Backups, a new one every few seconds,
// each with operations that run for a quarter to five twelfths of the soak,
// so that the operations in flight climb to the peak (10,000) and stay
// there; Velero played where it acts after itemops (a finalized Backup is
// completed, and deleted once its retention is over, its ItemOperations with
// it as the garbage collector would); and a fault every few minutes. Every
// 10 s it samples itemops' resident memory, Go heap, goroutines, open file
// descriptors, plugin processes, the API server's watches and itemops'
// work queue depth; over the last half of the run each must be flat within
// its stated tolerance. Results, samples and plots go to test/soak/results.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/itemops/itemops/test/envtest"
)

// config is what one soak does.
type config struct {
	duration time.Duration
	// peak: operations in flight once the stream is steady.
	peak, perBackup int
	// faultEvery: the mean time between two faults (0: none).
	faultEvery time.Duration
	// retention: how long a completed Backup is kept before it is deleted.
	retention time.Duration
	// sampleEvery: how often the resources are sampled.
	sampleEvery time.Duration
	seed        uint64
	out         string
}

// lifetimes: the shortest and longest an operation runs, a quarter and five
// twelfths of the soak (15 and 25 minutes of an hour), so that the stream
// is steady well before the last half begins.
func (c config) lifetimes() (time.Duration, time.Duration) {
	return c.duration / 4, c.duration * 5 / 12
}

// interval between two Backups: what keeps peak operations in flight, each
// running the mean lifetime.
func (c config) interval() time.Duration {
	lo, hi := c.lifetimes()
	return time.Duration(float64(c.perBackup) * float64((lo+hi)/2) / float64(c.peak))
}

func main() {
	cfg := config{sampleEvery: 10 * time.Second}
	flag.DurationVar(&cfg.duration, "duration", time.Hour, "how long the stream of Backups runs (make soak: SOAK_DURATION)")
	flag.IntVar(&cfg.peak, "peak", 10000, "operations in flight once the stream is steady")
	flag.IntVar(&cfg.perBackup, "per-backup", 20, "operations per Backup")
	flag.DurationVar(&cfg.faultEvery, "fault-every", 3*time.Minute, "mean time between two faults; 0 for none")
	flag.DurationVar(&cfg.retention, "retention", 2*time.Minute, "how long a completed Backup is kept before it is deleted")
	flag.Uint64Var(&cfg.seed, "seed", uint64(time.Now().UnixNano()), "seed of the stream and the faults")
	flag.StringVar(&cfg.out, "out", "", "results directory (default test/soak/results in the checkout)")
	flag.Parse()
	if cfg.duration < 2*time.Minute || cfg.peak < cfg.perBackup || cfg.perBackup < 1 {
		fail(fmt.Errorf("want -duration of at least 2m and -peak of at least -per-backup (%d), got %s and %d", cfg.perBackup, cfg.duration, cfg.peak))
	}
	// controller-runtime's client logs through this; the soak prints its own lines.
	ctrl.SetLogger(logr.Discard())

	root, err := envtest.RepoRoot()
	if err != nil {
		fail(err)
	}
	if cfg.out == "" {
		cfg.out = filepath.Join(root, "test", "soak", "results")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lo, hi := cfg.lifetimes()
	fmt.Printf("soak: %s, a Backup of %d operations every %s, each running %s to %s: %d operations in flight from %s on; seed %d\n",
		cfg.duration, cfg.perBackup, cfg.interval().Round(time.Millisecond), lo, hi, cfg.peak, hi, cfg.seed)
	res, err := soak(ctx, root, cfg)
	if err != nil {
		fail(err)
	}
	if err := res.write(cfg.out); err != nil {
		fail(err)
	}
	fmt.Print(res.summary())
	fmt.Printf("soak: results in %s\n", cfg.out)
	if !res.passed() {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "soak:", err)
	os.Exit(1)
}
