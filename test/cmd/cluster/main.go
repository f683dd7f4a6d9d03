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

// Command cluster is `make cluster`: a real one-node Kubernetes on this
// machine (test/localcluster) with Velero and itemops installed by the
// README's commands (test/stack), until Ctrl-C, which tears it all down and
// leaves the machine as it was.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/itemops/itemops/hack/foreground"
	"github.com/itemops/itemops/test/stack"
)

func main() {
	bare := flag.Bool("bare", false, "bring up the cluster only, without Velero and itemops")
	flag.Parse()
	restore := foreground.Take()
	err := run(*bare)
	restore()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(bare bool) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	fmt.Println("cluster: building what it runs (the first time on a machine: about 30 minutes)")
	started := time.Now()
	s, err := stack.Launch{Root: root, ItemopsTag: "dev", Bare: bare, Log: os.Stdout}.Start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("cluster: tearing it all down")
		if stopErr := s.Stop(context.Background(), false); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
	}()
	fmt.Printf("cluster: the node is Ready (%.1fs)\n", time.Since(started).Seconds())
	if !bare {
		if err := s.Install(ctx, "dev"); err != nil {
			return err
		}
	}
	if bare {
		fmt.Printf("\ncluster: ready in %.0fs. In another terminal:\n\n  export KUBECONFIG=%s PATH=%s:$PATH\n  kubectl get nodes\n\nCtrl-C tears it all down.\n",
			time.Since(started).Seconds(), s.Cluster.Kubeconfig, s.Bin)
		<-ctx.Done()
		return nil
	}
	fmt.Printf(`
cluster: ready in %.0fs. In another terminal:

  cd %s
  export KUBECONFIG=%s PATH=%s:$PATH
  kubectl -n velero get pods,itemoperations

Velero's bucket is %s; the README's helm commands run there as written.
Ctrl-C tears it all down.
`, time.Since(started).Seconds(), s.Work, s.Cluster.Kubeconfig, s.Bin, stack.S3URL)
	<-ctx.Done()
	return nil
}
