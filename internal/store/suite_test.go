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

package store_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/itemops/itemops/internal/plugin"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/s3"
)

// The suite's locations: two buckets of one server, one location whose
// server is gone, and one that is read-only.
const (
	secretName = "cloud-credentials"
	secretKey  = "cloud"
)

var (
	env     *envtest.Environment
	server  *s3.Server
	plugins *plugin.Manager
	seq     int
	seqMu   sync.Mutex
)

func TestStore(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Object storage", Label("envtest", "s3"))
}

// BeforeSuite starts an API server, a real S3 server and Velero's AWS
// object-store plugin, which the store reaches the buckets through.
var _ = BeforeSuite(func() {
	var err error
	env, err = envtest.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	work := GinkgoT().TempDir()
	server, err = s3.Start(env.RepoRoot, work)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(server.Stop)

	cmd := filepath.Join(env.RepoRoot, "hack", "cached-binary.sh")
	out, err := execOutput(cmd, "velero-plugin-for-aws")
	Expect(err).NotTo(HaveOccurred())
	pluginDir := filepath.Join(work, "plugins")
	Expect(os.MkdirAll(pluginDir, 0o755)).To(Succeed())
	Expect(os.Symlink(out, filepath.Join(pluginDir, "velero-plugin-for-aws"))).To(Succeed())
	plugins = plugin.NewManager(plugin.Options{Dir: pluginDir, CallTimeout: 5 * time.Second})
	plugins.Discover(context.Background())
	DeferCleanup(plugins.Close)
	Expect(env.Client.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: envtest.VeleroNamespace},
		Data:       map[string][]byte{secretKey: s3.Credentials()},
	})).To(Succeed())
})

func execOutput(name string, args ...string) (string, error) {
	var stdout bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(stdout.String()), nil
}
