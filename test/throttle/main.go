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

// Command throttle is a TCP proxy that passes at most a set number of bytes
// per second, both directions together: a slow link to object storage, in
// front of the real-node suite's bucket, through which a Backup's data
// movements take as long as the suite needs to watch them.
//
//	throttle --listen=:7070 --to=10.96.0.70:7070 --rate=1Mi [--pause-file=/control/paused]
//
// While the pause file exists no byte passes, though every connection stays
// open: a transfer that runs and moves nothing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/resource"
)

func main() {
	listen := flag.String("listen", ":7070", "the address to listen on")
	to := flag.String("to", "", "the address to pass connections to")
	perSecond := flag.String("rate", "1Mi", "bytes per second, as a Kubernetes quantity")
	pauseFile := flag.String("pause-file", "", "a file whose existence holds every byte back")
	flag.Parse()
	q, err := resource.ParseQuantity(*perSecond)
	if err != nil || q.Value() <= 0 || *to == "" {
		fmt.Fprintln(os.Stderr, "usage: throttle --listen=ADDR --to=ADDR --rate=QUANTITY")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, *listen, *to, &link{limiter: rate.NewLimiter(rate.Limit(q.Value()), chunk), pauseFile: *pauseFile}); err != nil {
		log.Fatal(err)
	}
}

// chunk is the most one read passes at a time, and the limiter's burst.
const chunk = 32 << 10

// link is what every connection shares: the rate, and the pause.
type link struct {
	limiter *rate.Limiter
	// pauseFile, when set and present, holds every byte back.
	pauseFile string
}

// pausePoll is how often a paused link looks for its pause file again.
const pausePoll = 200 * time.Millisecond

// wait returns once n bytes may pass: the link not paused, and the rate.
func (l *link) wait(ctx context.Context, n int) error {
	for l.pauseFile != "" {
		if _, err := os.Stat(l.pauseFile); errors.Is(err, fs.ErrNotExist) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pausePoll):
		}
	}
	return l.limiter.WaitN(ctx, n)
}

func serve(ctx context.Context, listen, to string, l *link) error {
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", listen)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		_ = listener.Close()
	}()
	log.Printf("passing %s to %s at %.0f bytes/s", listen, to, float64(l.limiter.Limit()))
	for {
		in, err := listener.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go pass(ctx, in, to, l)
	}
}

// pass copies a connection both ways through the limiter; each direction
// half-closes the other side at its end, and an error ends both.
func pass(ctx context.Context, in net.Conn, to string, l *link) {
	defer func() { _ = in.Close() }()
	out, err := (&net.Dialer{}).DialContext(ctx, "tcp", to)
	if err != nil {
		log.Printf("dialling %s: %v", to, err)
		return
	}
	defer func() { _ = out.Close() }()
	done := make(chan struct{}, 2)
	direction := func(dst, src net.Conn) {
		if err := copyLimited(ctx, dst, src, l); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				log.Printf("connection from %s: %v", in.RemoteAddr(), err)
			}
			_ = in.Close()
			_ = out.Close()
		}
		done <- struct{}{}
	}
	go direction(out, in)
	go direction(in, out)
	<-done
	<-done
}

func copyLimited(ctx context.Context, dst, src net.Conn, l *link) error {
	buf := make([]byte, chunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if werr := l.wait(ctx, n); werr != nil {
				return werr
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			// Half-close: the other direction may still have an answer
			// to pass.
			if tcp, ok := dst.(*net.TCPConn); ok {
				_ = tcp.CloseWrite()
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}
