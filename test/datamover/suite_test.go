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

// Package datamover runs itemops on the operations Velero users run most:
// those of Velero's own CSI data mover (velero.io/csi-pvc-backupper and
// velero.io/csi-pvc-restorer, served by the velero binary in itemops' plugin
// directory), beside the real velero server v1.18.3, versitygw and
// velero-plugin-for-aws. itemops runs as the ServiceAccount, Roles and
// ClusterRoles the helm chart renders, with a token, so that a permission
// the chart does not grant fails the suite. The CSI snapshot controller and
// node-agent are played by package csisim.
package datamover

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/test/csisim"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/veleroenv"
)

// Driver is the CSI driver of the suite's volumes.
const Driver = "csi.itemops.test"

var (
	env *envtest.Environment
	// c is an administrator's client.
	c client.Client
	// velero is Velero's world beside the API server.
	velero *veleroenv.Env
	// itemopsBinary is the program under test.
	itemopsBinary string
	// pluginDir is itemops' own plugin directory: velero-plugin-for-aws
	// and the velero binary, which Velero's must never hold.
	pluginDir string
	// kubeconfigs of the chart's ServiceAccounts, by mode.
	kubeconfigs = map[string]string{}
	// cluster plays the CSI snapshot controller and node-agent.
	cluster *csisim.Cluster
)

func TestDataMover(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Velero's CSI data mover", Label("velero", "e2e", "envtest", "s3", "datamover", "slow"))
}

// BeforeSuite starts an API server, versitygw, the real velero server and
// the CSI and node-agent stand-ins.
var _ = BeforeSuite(func() {
	stop, err := setUp(GinkgoT().TempDir())
	DeferCleanup(stop)
	Expect(err).NotTo(HaveOccurred(), "setting up Velero, the CSI stand-ins and the API server")
})

// setUp starts everything the cases share; stop undoes what was started.
func setUp(work string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	root, err := envtest.RepoRoot()
	if err != nil {
		return stop, err
	}
	snapshotCRDs, err := csisim.CRDs(root)
	if err != nil {
		return stop, err
	}
	env, err = envtest.StartWith(envtest.Options{ExtraCRDPaths: snapshotCRDs})
	if err != nil {
		return stop, err
	}
	stops = append(stops, func() { _ = env.Stop() })
	c = env.Client

	itemopsBinary = filepath.Join(work, "itemops")
	build := exec.Command("go", "build", "-o", itemopsBinary, ".")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return stop, err
	}
	v, stopVelero, err := veleroenv.Setup(env, work, filepath.Join(work, "velero-plugins"), false)
	stops = append(stops, stopVelero)
	if err != nil {
		return stop, err
	}
	velero = v
	pluginDir = filepath.Join(work, "itemops-plugins")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		return stop, err
	}
	aws, err := os.Readlink(filepath.Join(velero.PluginDir, "velero-plugin-for-aws"))
	if err != nil {
		return stop, err
	}
	for name, target := range map[string]string{"velero": velero.Velero, "velero-plugin-for-aws": aws} {
		if err := os.Symlink(target, filepath.Join(pluginDir, name)); err != nil {
			return stop, err
		}
	}

	ctx := context.Background()
	for release, mode := range map[string]string{"itemops": "manage", "itemops-observe": "observe"} {
		config, err := env.ChartIdentity(ctx, release, "--set", "mode="+mode)
		if err != nil {
			return stop, err
		}
		kubeconfigs[mode] = filepath.Join(work, release+".kubeconfig")
		if err := os.WriteFile(kubeconfigs[mode], config, 0o600); err != nil {
			return stop, err
		}
	}
	cluster = &csisim.Cluster{Client: c, Namespace: envtest.VeleroNamespace, Driver: Driver, Rate: 1 << 30}
	if err := cluster.StorageClasses(ctx); err != nil {
		return stop, err
	}
	if err := cluster.Start(ctx); err != nil {
		return stop, err
	}
	stops = append(stops, cluster.Stop)
	return stop, nil
}
