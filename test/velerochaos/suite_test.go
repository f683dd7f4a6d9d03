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

// Package velerochaos is the chaos suite with the real Velero: `velero
// server` v1.18.3 (its operations controllers disabled) takes real backups
// and restores of namespaces whose ConfigMaps start operations in the
// sample plugin and whose PVCs Velero's CSI data mover moves (the snapshot
// controller and node-agent played by package csisim), two itemops replicas
// follow them as the chart's ServiceAccount, and faults are injected at the
// seams between the parts: velero server killed mid-backup and
// mid-finalize, the bucket unreachable while operations are ingested,
// while they are written back and while Velero uploads a backup, the
// ObjectStore plugin process killed during a write-back,
// DeleteBackupRequests for waiting and finalizing backups, node-agent
// restarts, and itemops' own replicas and plugin processes killed.
//
// At the end it checks, and prints as figures: every Backup and Restore in
// the phase its operations decide, by Velero's own rules, none still
// waiting; the operations files in the bucket agreeing with the
// ItemOperations; no operation lost, duplicated or cancelled twice; and
// `velero backup describe --details` readable for every backup.
//
// `make test` runs a bounded run (ITEMOPS_CHAOS_DURATION, 40s of faults);
// `make test-chaos` a longer one, whose figures it writes to
// test/chaos/results/velero.md (ITEMOPS_CHAOS_RESULTS).
package velerochaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/itemops/itemops/test/csisim"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/veleroenv"
)

// Driver is the CSI driver of the suite's volumes.
const Driver = "csi.itemops.test"

var (
	env    *envtest.Environment
	velero *veleroenv.Env
	// cluster plays the CSI snapshot controller and node-agent.
	cluster *csisim.Cluster
	work    string
	// veleroPlugins is Velero's plugin directory (the sample plugins and
	// velero-plugin-for-aws); itemopsPlugins is itemops' (the same, and
	// the velero binary for its built-in plugins).
	veleroPlugins, itemopsPlugins string
	stateDir                      string
	binary                        string
	// identity is a kubeconfig of the chart's ServiceAccount in manage mode.
	identity string
)

func TestVeleroChaos(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Chaos with the real Velero", Label("velero", "chaos", "envtest", "s3", "datamover", "slow"))
}

var _ = BeforeSuite(func() {
	root, err := envtest.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	snapshotCRDs, err := csisim.CRDs(root)
	Expect(err).NotTo(HaveOccurred())
	env, err = envtest.StartWith(envtest.Options{ExtraCRDPaths: snapshotCRDs})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	work = GinkgoT().TempDir()

	binary = filepath.Join(work, "itemops")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Dir, build.Stderr = root, os.Stderr
	Expect(build.Run()).To(Succeed(), "building the manager")

	veleroPlugins = filepath.Join(work, "velero-plugins")
	Expect(envtest.BuildSamplePlugins(veleroPlugins, "sample")).To(Succeed())
	var stopVelero func()
	velero, stopVelero, err = veleroenv.Setup(env, work, veleroPlugins, false)
	DeferCleanup(stopVelero)
	Expect(err).NotTo(HaveOccurred())
	itemopsPlugins = filepath.Join(work, "itemops-plugins")
	Expect(os.MkdirAll(itemopsPlugins, 0o755)).To(Succeed())
	for _, name := range []string{"sample", "velero-plugin-for-aws"} {
		target, err := filepath.EvalSymlinks(filepath.Join(veleroPlugins, name))
		Expect(err).NotTo(HaveOccurred())
		Expect(os.Symlink(target, filepath.Join(itemopsPlugins, name))).To(Succeed())
	}
	Expect(os.Symlink(velero.Velero, filepath.Join(itemopsPlugins, "velero"))).To(Succeed())

	// Every plugin process, Velero's and itemops', keeps the sample
	// operations' state here. It exists from the start: a plugin outage
	// (sim.FaultFile) may be the first fault, before any operation began.
	stateDir = filepath.Join(work, "state")
	Expect(os.MkdirAll(stateDir, 0o755)).To(Succeed())
	GinkgoT().Setenv(sim.EnvStateDir, stateDir)

	ctx := context.Background()
	config, err := env.ChartIdentity(ctx, "itemops", "--set", "mode=manage", "--set", "replicas=2")
	Expect(err).NotTo(HaveOccurred())
	identity = filepath.Join(work, "itemops.kubeconfig")
	Expect(os.WriteFile(identity, config, 0o600)).To(Succeed())

	cluster = &csisim.Cluster{Client: env.Client, Namespace: envtest.VeleroNamespace, Driver: Driver, Rate: 64 << 20}
	Expect(cluster.StorageClasses(ctx)).To(Succeed())
	Expect(cluster.Start(ctx)).To(Succeed())
	DeferCleanup(cluster.Stop)
})
