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

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/proc"
	"github.com/itemops/itemops/test/s3"
	"github.com/itemops/itemops/test/scrape"
)

// chartToken is the bearer token of a kubeconfig ServiceAccountKubeconfig wrote.
func chartToken(g Gomega, kubeconfig []byte) string {
	config, err := clientcmd.Load(kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	auth := config.AuthInfos[config.Contexts[config.CurrentContext].AuthInfo]
	g.Expect(auth.Token).NotTo(BeEmpty())
	return auth.Token
}

func freeAddress(t testing.TB) string {
	t.Helper()
	addr, err := s3.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func get(url string) (int, string, error) {
	return getWith(http.DefaultClient, url)
}

// metricsReader is a client that scrapes itemops' metrics as Prometheus
// does, with the token of a ServiceAccount allowed to get /metrics.
func metricsReader(t testing.TB) *http.Client {
	t.Helper()
	token, err := scrape.ReaderToken(context.Background(), env.Config, envtest.VeleroNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return scrape.Client(token)
}

func getWith(c *http.Client, url string) (int, string, error) {
	resp, err := c.Get(url) //nolint:noctx // local endpoint
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

var _ = Describe("The manager binary", func() {
	Describe("bad flags stop the manager with a message", func() {
		cases := []struct {
			name string
			args []string
			want []string
		}{
			{"unknown mode", []string{"--mode=takeover"}, []string{`unknown mode "takeover": must be one of observe, manage`}},
			{"unknown flag", []string{"--poll-harder"}, []string{"flag provided but not defined: -poll-harder"}},
			{"bad values", []string{"--sync-frequency=0s", "--velero-namespace=Velero"},
				[]string{"invalid flags:", "--sync-frequency must be a positive duration", `--velero-namespace "Velero" is not a namespace name`}},
			{"stray argument", []string{"manage"}, []string{`itemops takes no arguments, got ["manage"]`}},
			{"metrics certificate missing", []string{"--metrics-cert-dir=/nonexistent"},
				[]string{"invalid flags:", "--metrics-cert-dir /nonexistent: no certificate and key to serve metrics with", "no such file or directory"}},
		}
		for _, tc := range cases {
			It(tc.name, func() {
				g := NewWithT(GinkgoT())
				var stderr bytes.Buffer
				cmd := exec.Command(binary, tc.args...)
				cmd.Stderr = &stderr
				err := cmd.Run()
				var exit *exec.ExitError
				g.Expect(errors.As(err, &exit)).To(BeTrue(), "want a non-zero exit, got %v", err)
				g.Expect(exit.ExitCode()).To(Equal(2))
				for _, want := range tc.want {
					g.Expect(stderr.String()).To(ContainSubstring(want))
				}
			})
		}
	})

	// It runs as the chart's ServiceAccount: what the chart grants is
	// enough to serve metrics to readers the API server vouches for.
	It("manager serves probes and metrics and stops cleanly", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		ctx := context.Background()

		kubeconfig, err := env.ChartIdentity(ctx, "itemops")
		g.Expect(err).NotTo(HaveOccurred())
		path := filepath.Join(t.TempDir(), "kubeconfig")
		g.Expect(os.WriteFile(path, kubeconfig, 0o600)).To(Succeed())

		health, metrics := freeAddress(t), freeAddress(t)
		var output proc.Buffer
		cmd := exec.Command(binary,
			"--kubeconfig="+path,
			"--velero-namespace="+envtest.VeleroNamespace,
			"--health-probe-bind-address="+health,
			"--metrics-bind-address="+metrics,
			"--leader-elect",
		)
		cmd.Stdout, cmd.Stderr = &output, &output
		g.Expect(cmd.Start()).To(Succeed())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		defer func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
			}
		}()

		g.Eventually(func() (int, error) {
			code, _, err := get("http://" + health + "/readyz")
			return code, err
		}, 30*time.Second, 100*time.Millisecond).Should(Equal(http.StatusOK), "manager output:\n%s", output.String())
		code, _, err := get("http://" + health + "/healthz")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK))
		// It says at start which Kubernetes it runs on: envtest's, a
		// release it is tested on.
		g.Eventually(output.String, 30*time.Second, 100*time.Millisecond).Should(
			MatchRegexp(`Kubernetes' release.*"version":\s*"v1\.\d+\.\d+".*"support":\s*"Supported"`))

		// The replica that holds the Lease is the active one.
		lease := &coordinationv1.Lease{}
		key := client.ObjectKey{Namespace: envtest.VeleroNamespace, Name: "itemops.itemops.io"}
		g.Eventually(func() (string, error) {
			if err := env.Client.Get(ctx, key, lease); err != nil {
				return "", err
			}
			if lease.Spec.HolderIdentity == nil {
				return "", nil
			}
			return *lease.Spec.HolderIdentity, nil
		}, 30*time.Second, 100*time.Millisecond).ShouldNot(BeEmpty(), "manager output:\n%s", output.String())

		// Metrics are HTTPS, and only for readers: no token, or one that
		// is not a token, is 401, a token of someone who may not get
		// /metrics 403.
		url := "https://" + metrics + "/metrics"
		g.Eventually(func() (string, error) {
			_, body, err := getWith(metricsReader(t), url)
			return body, err
		}, 10*time.Second, 100*time.Millisecond).Should(ContainSubstring("leader_election_master_status"))
		code, body, err := getWith(scrape.Client(""), url)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusUnauthorized), body)
		g.Expect(body).NotTo(ContainSubstring("itemops_"))
		code, body, err = getWith(scrape.Client("not-a-token"), url)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusUnauthorized), "a bearer token that is not a token: %s", body)
		code, body, err = getWith(scrape.Client(chartToken(g, kubeconfig)), url)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusForbidden), "itemops itself may not read its metrics: %s", body)
		g.Expect(body).NotTo(ContainSubstring("itemops_"))
		if code, body, err = get("http://" + metrics + "/metrics"); err == nil {
			g.Expect(code).To(Equal(http.StatusBadRequest), "no plain HTTP: %s", body)
			g.Expect(body).NotTo(ContainSubstring("itemops_"))
		}
		// HTTP/2 is off.
		conn, err := tls.Dial("tcp", metrics, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) //nolint:gosec // self-signed, loopback
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(conn.ConnectionState().NegotiatedProtocol).NotTo(Equal("h2"))
		_ = conn.Close()

		g.Expect(cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
		select {
		case err := <-exited:
			g.Expect(err).NotTo(HaveOccurred(), "manager output:\n%s", output.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("manager did not stop within 30s of SIGTERM; output:\n%s", output.String())
		}

		// Leadership is given up on shutdown so that another replica takes over at once.
		g.Expect(env.Client.Get(ctx, key, lease)).To(Succeed())
		g.Expect(lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "").To(BeTrue(),
			"lease still held by %v", lease.Spec.HolderIdentity)
	})

	// cert-manager's Secret, or one's own, mounted at --metrics-cert-dir.
	It("manager serves metrics with a mounted certificate", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		kubeconfig, err := env.ChartIdentity(context.Background(), "itemops")
		g.Expect(err).NotTo(HaveOccurred())
		dir := t.TempDir()
		g.Expect(os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600)).To(Succeed())
		certs := filepath.Join(dir, "certs")
		g.Expect(os.Mkdir(certs, 0o700)).To(Succeed())
		crt, key, err := certutil.GenerateSelfSignedCertKey("itemops-metrics.velero.svc", nil, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(certs, "tls.crt"), crt, 0o600)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(certs, "tls.key"), key, 0o600)).To(Succeed())

		health, metrics := freeAddress(t), freeAddress(t)
		var output proc.Buffer
		cmd := exec.Command(binary, "--kubeconfig="+filepath.Join(dir, "kubeconfig"), "--velero-namespace="+envtest.VeleroNamespace,
			"--health-probe-bind-address="+health, "--metrics-bind-address="+metrics, "--metrics-cert-dir="+certs)
		cmd.Stdout, cmd.Stderr = &output, &output
		g.Expect(cmd.Start()).To(Succeed())
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

		reader := metricsReader(t)
		g.Eventually(func() (string, error) {
			_, body, err := getWith(reader, "https://"+metrics+"/metrics")
			return body, err
		}, 30*time.Second, 100*time.Millisecond).Should(ContainSubstring("itemops_"), "manager output:\n%s", output.String())
		block, _ := pem.Decode(crt)
		g.Expect(block).NotTo(BeNil())
		conn, err := tls.Dial("tcp", metrics, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // compared below
		g.Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		g.Expect(conn.ConnectionState().PeerCertificates[0].Raw).To(Equal(block.Bytes), "the mounted certificate, not a self-signed one")
	})

	It("manager without an API server says so", func() {
		t := GinkgoTB()
		g := NewWithT(t)
		var stderr bytes.Buffer
		cmd := exec.Command(binary, "--kubeconfig="+filepath.Join(t.TempDir(), "missing"))
		cmd.Env = append(os.Environ(), "KUBECONFIG=")
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		g.Expect(errors.As(err, &exit)).To(BeTrue(), "want a non-zero exit, got %v", err)
		g.Expect(stderr.String()).To(ContainSubstring("no Kubernetes API server to talk to"))
	})
})
