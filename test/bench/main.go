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

// Command bench measures itemops at scale (make bench): it starts a real
// kube-apiserver and etcd, the itemops binary in manage mode and the sample
// plugin in its fast mode, hands itemops many operations over 100 Backups,
// and reports how well it keeps up: Progress calls per second, the share of
// running operations polled within each sync interval, how late a finished
// operation is seen (detection latency) and how late its Backup moves on
// (parent latency), API writes per operation, the operator's CPU and peak
// memory, and plugin process launches. Results go to test/bench/results.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
)

func main() {
	sizes := flag.String("ops", "1000,10000", "numbers of operations to run, one run each")
	parents := flag.Int("parents", 0, "Backups the operations are spread over (default: 100 operations each, at least 100 Backups)")
	sync := flag.Duration("sync", 10*time.Second, "itemops --sync-frequency")
	update := flag.Duration("update", 30*time.Second, "itemops --progress-update-interval")
	minDuration := flag.Duration("min-duration", 20*time.Second, "shortest operation")
	maxDuration := flag.Duration("max-duration", 80*time.Second, "longest operation")
	eta := flag.Bool("eta", true, "run sizes up to -eta-ops twice: with regular and with ETA-aware polling")
	etaOps := flag.Int("eta-ops", 10000, "the largest size run with ETA-aware polling too")
	side := flag.Bool("side-by-side", true, "also run real Velero Backups with Velero's controller, then with itemops")
	sideBackups := flag.Int("side-backups", 100, "Backups of the side-by-side run")
	sideOps := flag.Int("side-ops", 100, "operations per Backup of the side-by-side run")
	sideFollow := flag.String("side-follow", byVelero+","+byItemops, "the side-by-side runs to make: velero, itemops or both")
	sideKeep := flag.Bool("side-keep", false, "keep the side-by-side runs' work directories (logs at info level, every Progress call of itemops in polls.log, each Backup's times in backups.tsv)")
	measure := flag.Bool("capacity", true, "first measure the status writes per second the API server takes alone")
	out := flag.String("out", "", "results directory (default test/bench/results in the checkout)")
	profiled := flag.Bool("profile", false, "take CPU and allocation profiles of itemops over each size's polling into <out>/profiles, and break them down in results.md")
	extra := flag.String("itemops-args", "", "more itemops flags, space separated")
	restart := flag.Bool("restart", true, "also measure, for every size, how long after a kill -9 with every operation in flight each one is polled again")
	shape := flag.String("shape", sim.ShapeReal, `the sample plugin's progress: "real" wandering ±50%, with pauses of 5-30 s and a final burst; "" at a constant rate`)
	dataMover := flag.Int("datamover", 1000, "operations of Velero's CSI data mover (the velero binary's csi-pvc-backupper, node-agent played by a stand-in), run with regular and ETA-aware polling; 0 skips it")
	dataMoverShape := flag.String("datamover-shape", sim.ShapeReal, "the shape of the data mover's uploads, as -shape")
	dataMoverKept := flag.Int("datamover-kept", 10000, "then run the data mover's operations, regular polling, with this many finished DataUploads of earlier Backups kept in Velero's namespace, once without finding why operations wait (--find-causes=false) and once with; 0 skips them")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	ctrl.SetLogger(logr.Discard())

	root, err := envtest.RepoRoot()
	if err != nil {
		fail(err)
	}
	if *out == "" {
		*out = filepath.Join(root, "test", "bench", "results")
	}
	var capa *capacity
	if *measure {
		fmt.Fprintln(os.Stderr, "bench: the API server's capacity, alone")
		if capa, err = measureCapacity(context.Background(), 10, 15*time.Second); err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "bench: %.0f ItemOperation status writes/s (%d writers)\n", capa.statusPerSecond, capa.writers)
	}
	variants := []variant{regularPolling}
	if *eta {
		variants = append(variants, etaPolling)
	}
	var results []*result
	var restarts []*restartResult
	for _, s := range strings.Split(*sizes, ",") {
		if strings.TrimSpace(s) == "" {
			continue // -ops= runs none
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		backups := backupsFor(n, *parents)
		if err != nil || n < backups {
			fail(fmt.Errorf("-ops: %q is not a number of operations of at least -parents (%d)", s, backups))
		}
		short, long := durations(n, *minDuration, *maxDuration, set["min-duration"] || set["max-duration"])
		for _, v := range variants {
			if v == etaPolling && n > *etaOps {
				continue
			}
			cfg := config{ops: n, parents: backups, sync: *sync, update: *update, polling: v, shape: *shape,
				minDuration: short, maxDuration: long, extraArgs: append(v.args(), strings.Fields(*extra)...)}
			if *profiled {
				cfg.profileDir = filepath.Join(*out, "profiles")
			}
			cfg.logDir = *out
			fmt.Fprintf(os.Stderr, "bench: %d operations over %d Backups, sync %s, %s polling\n", n, backups, *sync, v)
			r, err := run(context.Background(), root, cfg)
			if err != nil {
				fail(err)
			}
			results = append(results, r)
			fmt.Fprintln(os.Stderr, r.summary())
		}
		if *restart {
			cfg := config{ops: n, parents: backups, sync: *sync, update: *update, polling: regularPolling,
				extraArgs: append(regularPolling.args(), strings.Fields(*extra)...)}
			fmt.Fprintf(os.Stderr, "bench: %d operations over %d Backups, kill -9 and restart\n", n, backups)
			r, err := restartRun(context.Background(), root, cfg)
			if err != nil {
				fail(err)
			}
			restarts = append(restarts, r)
			fmt.Fprintln(os.Stderr, r.summary())
		}
	}
	var movers []*dataMoverResult
	if *dataMover > 0 {
		n := *dataMover
		backups := backupsFor(n, *parents)
		for _, v := range variants {
			cfg := config{ops: n, parents: backups, sync: *sync, update: *update, polling: v, shape: *dataMoverShape,
				minDuration: *minDuration, maxDuration: *maxDuration,
				extraArgs: append(append(v.args(), dataMoverPluginArgs(n, *sync)), strings.Fields(*extra)...)}
			fmt.Fprintf(os.Stderr, "bench: %d data-mover operations over %d Backups, sync %s, %s polling\n", n, backups, *sync, v)
			r, err := dataMoverRun(context.Background(), root, cfg)
			if err != nil {
				fail(err)
			}
			movers = append(movers, r)
			fmt.Fprintln(os.Stderr, r.summary())
		}
		for _, noCauses := range []bool{true, false} {
			if *dataMoverKept <= 0 {
				break
			}
			cfg := config{ops: n, parents: backups, sync: *sync, update: *update, polling: regularPolling, shape: *dataMoverShape,
				minDuration: *minDuration, maxDuration: *maxDuration, kept: *dataMoverKept, noCauses: noCauses,
				extraArgs: append(append(regularPolling.args(), dataMoverPluginArgs(n, *sync), fmt.Sprintf("--find-causes=%t", !noCauses)), strings.Fields(*extra)...)}
			// What finding causes costs is read from a profile of each.
			cfg.profileDir = filepath.Join(*out, "profiles")
			fmt.Fprintf(os.Stderr, "bench: %d data-mover operations over %d Backups, %d finished DataUploads kept, finding causes %t\n", n, backups, cfg.kept, !noCauses)
			r, err := dataMoverRun(context.Background(), root, cfg)
			if err != nil {
				fail(err)
			}
			movers = append(movers, r)
			fmt.Fprintln(os.Stderr, r.summary())
		}
	}
	var sides []*sideRun
	if *side {
		sides, err = sideBySide(context.Background(), root, sideConfig{backups: *sideBackups, perBackup: *sideOps, sync: *sync,
			minDuration: *minDuration, maxDuration: *maxDuration, follow: strings.Split(*sideFollow, ","), keep: *sideKeep, extraArgs: strings.Fields(*extra)})
		if err != nil {
			fail(err)
		}
	}
	if err := write(*out, capa, results, restarts, movers, sides); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "bench: results in %s\n", *out)
}

// backupsFor is the number of Backups n operations are spread over: given,
// or 100 operations each and at least 100 Backups, as a schedule backing up
// many namespaces makes them.
func backupsFor(n, given int) int {
	if given > 0 {
		return given
	}
	return max(100, n/100)
}

// durations are the shortest and longest operation of a run of n
// operations. Unless they were given, they grow with the size beyond 10,000
// operations (20 s to 80 s for every 10,000), so that every operation is
// still running once the first round of polls has reached them all.
func durations(n int, short, long time.Duration, given bool) (time.Duration, time.Duration) {
	if given || n <= 10000 {
		return short, long
	}
	scale := float64(n) / 10000
	return time.Duration(float64(short) * scale), time.Duration(float64(long) * scale)
}

// variant is how itemops polls in a run.
type variant string

const (
	regularPolling variant = "regular"
	etaPolling     variant = "ETA-aware"
)

func (v variant) args() []string {
	if v == etaPolling {
		return []string{"--eta-polling=true"}
	}
	return []string{"--eta-polling=false"}
}

// dataMoverPluginArgs raises the API client limits of the velero plugin
// process as an administrator with n data-mover operations raises velero
// server's (--client-qps, --client-burst; itemops passes them on as
// --plugin-args): each Progress call of the data mover is one list of
// DataUploads, and Velero's default of 20 a second would let one process
// poll 200 operations every 10 s.
func dataMoverPluginArgs(n int, sync time.Duration) string {
	qps := max(20, 2*int(float64(n)/sync.Seconds()))
	return fmt.Sprintf("--plugin-args=--client-qps=%d --client-burst=%d", qps, 2*qps)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
