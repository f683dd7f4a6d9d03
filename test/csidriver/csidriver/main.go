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

// Command csidriver runs the tests' CSI driver (package csidriver) on a
// node: its CSI socket for the kubelet and the CSI sidecars, and its
// registration with the kubelet through the plugins_registry directory.
//
//	csidriver [--name=csi.itemops.io] [--node-id=$NODE_NAME] [--root=/var/lib/itemops-csi]
//	          [--endpoint=/csi/csi.sock] [--kubelet-endpoint=/var/lib/kubelet/plugins/csi.itemops.io/csi.sock]
//	          [--registration-dir=/registration]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/itemops/itemops/test/csidriver"
)

func main() {
	name := flag.String("name", "csi.itemops.io", "the driver's name")
	node := flag.String("node-id", os.Getenv("NODE_NAME"), "the node's ID, its name")
	root := flag.String("root", "/var/lib/itemops-csi", "where volumes and snapshots live (a host path)")
	endpoint := flag.String("endpoint", "/csi/csi.sock", "the CSI socket, as this process sees it")
	kubeletEndpoint := flag.String("kubelet-endpoint", "", "the CSI socket as the kubelet sees it (/var/lib/kubelet/plugins/NAME/csi.sock when empty)")
	registration := flag.String("registration-dir", "", "the kubelet's plugins_registry directory, as this process sees it; no registration when empty")
	flag.Parse()
	if *kubeletEndpoint == "" {
		*kubeletEndpoint = "/var/lib/kubelet/plugins/" + *name + "/csi.sock"
	}
	if err := run(*name, *node, *root, *endpoint, *kubeletEndpoint, *registration); err != nil {
		fmt.Fprintln(os.Stderr, "csidriver:", err)
		os.Exit(1)
	}
}

func run(name, node, root, endpoint, kubeletEndpoint, registration string) error {
	if node == "" {
		return fmt.Errorf("--node-id (or NODE_NAME) is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := zap.New()
	driver := &csidriver.Driver{Name: name, NodeID: node, Root: root, Log: log}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return driver.Serve(ctx, endpoint) })
	if registration != "" {
		registrar := &csidriver.Registrar{Name: name, Endpoint: kubeletEndpoint}
		g.Go(func() error { return registrar.Serve(ctx, csidriver.Socket(registration, name)) })
	}
	log.Info("serving", "driver", name, "node", node, "endpoint", endpoint, "registration", registration)
	return g.Wait()
}
