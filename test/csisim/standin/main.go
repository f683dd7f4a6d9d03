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

// Command standin runs one part of package csisim inside a cluster, with
// the pod's ServiceAccount: the CSI snapshot controller (a Deployment) or
// node-agent's data path (in place of Velero's node-agent DaemonSet's
// container).
//
//	standin --role=snapshot-controller|node-agent [--namespace=velero] [--driver=…] [--rate=1Gi]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov2alpha1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"

	"github.com/itemops/itemops/test/csisim"
)

func main() {
	role := flag.String("role", "", "the part to play: snapshot-controller or node-agent")
	namespace := flag.String("namespace", os.Getenv("VELERO_NAMESPACE"), "Velero's namespace, where DataUploads and DataDownloads live")
	driver := flag.String("driver", "csi.itemops.io", "the CSI driver whose snapshots are taken")
	rate := flag.String("rate", "1Gi", "bytes a transfer moves per second (a quantity)")
	node := flag.String("node", os.Getenv("NODE_NAME"), "the node transfers run on")
	flag.Parse()
	if err := run(csisim.Role(*role), *namespace, *driver, *rate, *node); err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
}

func run(role csisim.Role, namespace, driver, rate, node string) error {
	if role != csisim.RoleSnapshotController && role != csisim.RoleNodeAgent {
		return fmt.Errorf("--role must be %s or %s", csisim.RoleSnapshotController, csisim.RoleNodeAgent)
	}
	if namespace == "" {
		return fmt.Errorf("--namespace (or VELERO_NAMESPACE) is required")
	}
	q, err := resource.ParseQuantity(rate)
	if err != nil {
		return fmt.Errorf("--rate: %w", err)
	}
	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(snapshotv1.AddToScheme(scheme))
	utilruntime.Must(velerov2alpha1.AddToScheme(scheme))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cluster := &csisim.Cluster{Client: c, Namespace: namespace, Driver: driver, Rate: q.Value(),
		Roles: []csisim.Role{role}, NodeName: node}
	if err := cluster.Start(ctx); err != nil {
		return err
	}
	fmt.Printf("standin: playing %s for namespace %s\n", role, namespace)
	<-ctx.Done()
	cluster.Stop()
	return nil
}
