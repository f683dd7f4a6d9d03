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

// Package replicas runs itemops replicas as a Deployment with leader
// election does, for the chaos suites: each with its own metrics and probe
// ports and its log appended to a file, started again a second after it
// exits on its own (as the kubelet restarts a container), and killable at
// any moment.
package replicas

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/itemops/itemops/test/s3"
	"github.com/itemops/itemops/test/scrape"
)

// Cluster is the replicas of one itemops Deployment.
type Cluster struct {
	// Binary is the itemops binary; Args its flags, the same for every
	// replica (ports and the credentials directory are added per replica);
	// Env more environment for it.
	Binary string
	Args   []string
	Env    []string
	// MetricsToken reads the replicas' metrics (scrape.ReaderToken).
	MetricsToken string
	// Work holds the replicas' logs (itemops-<i>.log) and credentials.
	Work string

	startMu  sync.Mutex
	mu       sync.Mutex
	replicas []*replica
	// stopping: the run is over, exits are not restarted.
	stopping  bool
	selfExits int
}

type replica struct {
	cmd     *exec.Cmd
	metrics string
	done    chan struct{}
}

// Start runs replica i, unless it runs already.
func (c *Cluster) Start(i int) error {
	c.startMu.Lock()
	defer c.startMu.Unlock()
	c.mu.Lock()
	for len(c.replicas) <= i {
		c.replicas = append(c.replicas, nil)
	}
	running := c.replicas[i] != nil || c.stopping
	c.mu.Unlock()
	if running {
		return nil
	}
	metrics, err := s3.FreeAddress()
	if err != nil {
		return err
	}
	probes, err := s3.FreeAddress()
	if err != nil {
		return err
	}
	args := append([]string{"--leader-elect", "--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probes,
		"--credentials-dir=" + filepath.Join(c.Work, fmt.Sprintf("credentials-%d", i))}, c.Args...)
	cmd := exec.Command(c.Binary, args...)
	cmd.Env = append(os.Environ(), c.Env...)
	log, err := os.OpenFile(c.Log(i), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	r := &replica{cmd: cmd, metrics: metrics, done: make(chan struct{})}
	c.mu.Lock()
	c.replicas[i] = r
	c.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(r.done)
		c.mu.Lock()
		again := i < len(c.replicas) && c.replicas[i] == r && !c.stopping
		if again {
			c.replicas[i] = nil
			c.selfExits++
		}
		c.mu.Unlock()
		if again {
			time.Sleep(time.Second) // the kubelet's restart delay
			_ = c.Start(i)
		}
	}()
	return nil
}

// Log is the file replica i logs to.
func (c *Cluster) Log(i int) string {
	return filepath.Join(c.Work, fmt.Sprintf("itemops-%d.log", i))
}

// Kill sends SIGKILL to replica i and waits for it to be gone.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	var r *replica
	if i < len(c.replicas) {
		r = c.replicas[i]
		c.replicas[i] = nil
	}
	c.mu.Unlock()
	if r == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
}

// Leader is the replica holding the Lease, by its
// leader_election_master_status metric; -1 when none does this moment.
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.replicas {
		if r != nil && c.metric(r, "leader_election_master_status") == 1 {
			return i
		}
	}
	return -1
}

// PIDs are the running replicas' process IDs.
func (c *Cluster) PIDs() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pids []int
	for _, r := range c.replicas {
		if r != nil {
			pids = append(pids, r.cmd.Process.Pid)
		}
	}
	return pids
}

// SelfExits counts the replicas that exited on their own (a Lease lost
// while the API server was down) and were started again.
func (c *Cluster) SelfExits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.selfExits
}

// StopAll stops every replica as Kubernetes does (SIGTERM, SIGKILL 30 s
// later), and returns how many goroutines each ran, idle, just before.
func (c *Cluster) StopAll() []string {
	c.mu.Lock()
	replicas := c.replicas
	c.replicas = nil
	c.stopping = true
	c.mu.Unlock()
	var goroutines []string
	for i, r := range replicas {
		if r == nil {
			continue
		}
		goroutines = append(goroutines, fmt.Sprintf("replica %d: %.0f", i, c.metric(r, "go_goroutines")))
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	}
	return goroutines
}

// metric reads a metric of a replica, -1 when it cannot: a replica that
// does not answer in 2 s is taken as not answering.
func (c *Cluster) metric(r *replica, name string) float64 {
	quick := scrape.Client(c.MetricsToken)
	quick.Timeout = 2 * time.Second
	families, err := scrape.Get(quick, "https://"+r.metrics+"/metrics")
	if err != nil {
		return -1
	}
	return families.Sum(name, nil)
}
