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

	"github.com/itemops/itemops/test/envtest"
)

func main() {
	sizes := flag.String("ops", "1000,10000", "numbers of operations to run, one run each")
	parents := flag.Int("parents", 100, "Backups the operations are spread over")
	sync := flag.Duration("sync", 10*time.Second, "itemops --sync-frequency")
	update := flag.Duration("update", 30*time.Second, "itemops --progress-update-interval")
	minDuration := flag.Duration("min-duration", 20*time.Second, "shortest operation")
	maxDuration := flag.Duration("max-duration", 80*time.Second, "longest operation")
	out := flag.String("out", "", "results directory (default test/bench/results in the checkout)")
	extra := flag.String("itemops-args", "", "more itemops flags, space separated")
	flag.Parse()

	root, err := envtest.RepoRoot()
	if err != nil {
		fail(err)
	}
	if *out == "" {
		*out = filepath.Join(root, "test", "bench", "results")
	}
	var results []*result
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < *parents {
			fail(fmt.Errorf("-ops: %q is not a number of operations of at least -parents (%d)", s, *parents))
		}
		cfg := config{ops: n, parents: *parents, sync: *sync, update: *update,
			minDuration: *minDuration, maxDuration: *maxDuration, extraArgs: strings.Fields(*extra)}
		fmt.Fprintf(os.Stderr, "bench: %d operations over %d Backups, sync %s\n", n, *parents, *sync)
		r, err := run(context.Background(), root, cfg)
		if err != nil {
			fail(err)
		}
		results = append(results, r)
		fmt.Fprintln(os.Stderr, r.summary())
	}
	if err := write(*out, results); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "bench: results in %s\n", *out)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
