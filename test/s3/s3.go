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

// Package s3 runs versitygw, an S3-compatible server written in Go, on
// 127.0.0.1 over a posix directory, for the suites that store Velero's files
// through velero-plugin-for-aws. The binary is built once per machine by
// hack/cached-binary.sh.
package s3

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
)

// The root user of every server started here.
const (
	AccessKey = "itemops-test-access"
	SecretKey = "itemops-test-secret-do-not-log"
)

// Server is a running versitygw.
type Server struct {
	// Address is host:port of the S3 endpoint.
	Address string
	// Root is the directory the buckets are directories of.
	Root string

	binary, log string
	mu          sync.Mutex
	cmd         *exec.Cmd
}

// Start builds (once per machine) and runs versitygw over a new directory
// under dir, logging to dir/versitygw.log. repoRoot is the itemops checkout.
func Start(repoRoot, dir string) (*Server, error) {
	build := exec.Command(filepath.Join(repoRoot, "hack", "cached-binary.sh"), "versitygw")
	build.Stderr = os.Stderr
	out, err := build.Output()
	if err != nil {
		return nil, fmt.Errorf("building versitygw: %w", err)
	}
	root := filepath.Join(dir, "s3")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	address, err := FreeAddress()
	if err != nil {
		return nil, err
	}
	s := &Server{Address: address, Root: root, binary: strings.TrimSpace(string(out)), log: filepath.Join(dir, "versitygw.log")}
	if err := s.run(); err != nil {
		return nil, err
	}
	return s, nil
}

// run starts the server on its address and waits until it listens.
func (s *Server) run() error {
	cmd := exec.Command(s.binary, "--port", s.Address, "--access", AccessKey, "--secret", SecretKey, "posix", s.Root)
	// Its access log is one line per request: kept out of the way, in dir.
	logFile, err := os.OpenFile(s.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting versitygw: %w", err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	if err := waitForPort(s.Address, 30*time.Second); err != nil {
		s.Stop()
		return fmt.Errorf("versitygw: %w", err)
	}
	return nil
}

// Stop ends the server.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// Outage stops the server, as a bucket that cannot be reached, for down,
// then starts it again on the same address over the same files.
func (s *Server) Outage(down time.Duration) error {
	s.Stop()
	time.Sleep(down)
	return s.run()
}

// Bucket creates a bucket and returns its directory.
func (s *Server) Bucket(name string) (string, error) {
	dir := filepath.Join(s.Root, name)
	return dir, os.MkdirAll(dir, 0o755)
}

// Credentials is the root user in the AWS shared credentials file format,
// as the Secret of a BackupStorageLocation holds it.
func Credentials() []byte {
	return fmt.Appendf(nil, "[default]\naws_access_key_id=%s\naws_secret_access_key=%s\n", AccessKey, SecretKey)
}

// Location is a BackupStorageLocation of provider aws on bucket of this
// server, whose credentials are key of the Secret secret.
func (s *Server) Location(namespace, name, bucket, secret, key string) *velerov1api.BackupStorageLocation {
	return &velerov1api.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: velerov1api.BackupStorageLocationSpec{
			Provider:    "aws",
			StorageType: velerov1api.StorageType{ObjectStorage: &velerov1api.ObjectStorageLocation{Bucket: bucket}},
			// versitygw accepts only its own region.
			Config:     map[string]string{"region": "us-east-1", "s3ForcePathStyle": "true", "s3Url": "http://" + s.Address},
			Credential: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key},
		},
	}
}

// FreeAddress returns a 127.0.0.1 address nothing listens on, for a
// program to listen on later. It is drawn below the kernel's ephemeral port
// range (net.ipv4.ip_local_port_range): a port the kernel handed out for
// ":0" could be handed out again, as the source port of any outgoing
// connection on the machine, before the program binds it, and a busy
// machine (test/cluster beside the other suites) makes that happen.
func FreeAddress() (string, error) {
	low := 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if fields := strings.Fields(string(data)); len(fields) == 2 {
			if n, err := strconv.Atoi(fields[0]); err == nil && n > 12000 {
				low = n
			}
		}
	}
	const first = 10000
	for range 200 {
		port := first + rand.IntN(low-first)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		l.Close()
		return addr, nil
	}
	return "", fmt.Errorf("no free port found on 127.0.0.1 between %d and %d", first, low)
}

func waitForPort(address string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", address, time.Second)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after %s: %w", address, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
