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

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/time/rate"
)

// The proxy passes every byte both ways, and no faster than its rate: a
// lower bound that holds on any machine.
func TestPassesEveryByteAtMostAtItsRate(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The far side echoes what it reads, then closes.
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = backend.Close() }()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	listen := free.Addr().String()
	g.Expect(free.Close()).To(Succeed())
	const perSecond = 512 << 10
	go func() {
		_ = serve(ctx, listen, backend.Addr().String(), &link{limiter: rate.NewLimiter(perSecond, chunk)})
	}()

	var conn net.Conn
	g.Eventually(func() error {
		conn, err = net.Dial("tcp", listen)
		return err
	}).Should(Succeed())
	defer func() { _ = conn.Close() }()
	sent := make([]byte, 512<<10)
	_, _ = rand.Read(sent)
	start := time.Now()
	go func() {
		_, _ = conn.Write(sent)
		_ = conn.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(conn)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Equal(got, sent)).To(BeTrue(), "the echo came back whole through the half-closed connection (%d of %d bytes)", len(got), len(sent))
	// 1 MiB passed in all (there and back), at 512 KiB/s after a burst.
	g.Expect(time.Since(start)).To(BeNumerically(">=", 1900*time.Millisecond))
}

// While the pause file exists nothing passes, the connection stays open,
// and once it is gone the bytes held back pass.
func TestPauseFileHoldsEveryByte(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = backend.Close() }()
	received := make(chan []byte, 1)
	go func() {
		c, err := backend.Accept()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		data, _ := io.ReadAll(c)
		received <- data
	}()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	listen := free.Addr().String()
	g.Expect(free.Close()).To(Succeed())
	pause := filepath.Join(t.TempDir(), "paused")
	g.Expect(os.WriteFile(pause, nil, 0o644)).To(Succeed())
	go func() {
		_ = serve(ctx, listen, backend.Addr().String(), &link{limiter: rate.NewLimiter(rate.Inf, chunk), pauseFile: pause})
	}()
	var conn net.Conn
	g.Eventually(func() error {
		conn, err = net.Dial("tcp", listen)
		return err
	}).Should(Succeed())
	defer func() { _ = conn.Close() }()
	_, err = conn.Write([]byte("held back"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(conn.(*net.TCPConn).CloseWrite()).To(Succeed())
	g.Consistently(received).WithTimeout(3*pausePoll).ShouldNot(Receive(), "nothing passes while paused")
	g.Expect(os.Remove(pause)).To(Succeed())
	g.Eventually(received).WithTimeout(5 * time.Second).Should(Receive(Equal([]byte("held back"))))
}
