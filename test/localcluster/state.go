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

package localcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// state is what a run changed outside its own processes' memory, written to
// state.json as soon as it changes, so that a run killed at any moment is
// put back by the next.
type state struct {
	file string
	// Owner is the process that started the run; its watchdog tears the
	// run down if it dies without doing so.
	Owner int `json:"owner"`
	// Processes are the components, in the order they started.
	Processes []process `json:"processes"`
	// Sysctls are the values, before the run, of the kernel settings that
	// kubelet changes.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Created are paths outside the cluster's directory that did not exist
	// before the run; they are removed.
	Created []string `json:"created,omitempty"`
	// Network is set once the network namespace and veth exist.
	Network bool `json:"network,omitempty"`
}

type process struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
}

func newState(file string) (*state, error) {
	s := &state{file: file, Owner: os.Getpid()}
	return s, s.save()
}

func loadState(file string) (*state, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	s := &state{file: file}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	return s, nil
}

func (s *state) save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.file + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.file)
}

func (s *state) addProcess(name string, pid int) error {
	s.Processes = append(s.Processes, process{Name: name, PID: pid})
	return s.save()
}

// Paths outside the cluster's directory that kubelet, containerd, CNI or
// ip write to whatever their configuration says; each one that did not
// exist before a run is removed after it.
var hostPaths = []string{
	"/var/lib/kubelet",
	"/var/log/containers",
	"/var/log/pods",
	"/var/lib/cni",
	"/run/containerd",
	"/opt/containerd",
	"/etc/cni",
	"/opt/cni",
	"/etc/kubernetes",
	"/usr/libexec/kubernetes",
	"/run/netns",
}

// Kernel settings kubelet sets at start (its setupKernelTunables and
// kube-proxy's conntrack, which is told to leave them) and that are not
// scoped to the node's network namespace.
var kernelSettings = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// recordHost records which host paths exist and the kernel settings'
// values, before anything is started.
func (c *Cluster) recordHost(context.Context) error {
	c.state.Sysctls = map[string]string{}
	for _, k := range kernelSettings {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err == nil {
			c.state.Sysctls[k] = strings.TrimSpace(string(v))
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			c.state.Created = append(c.state.Created, p)
		}
	}
	return c.state.save()
}

// Cleanup puts back what a run in dir left behind: after a Stop it finds
// nothing to do; after a run that was killed it stops its processes and
// removes what they made.
func Cleanup(dir string, log io.Writer) error {
	s, err := loadState(filepath.Join(dir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		// Nothing recorded; a namespace of ours without a state file is
		// still ours.
		s = &state{Network: true}
	} else if err != nil {
		return err
	} else {
		fmt.Fprintf(log, "cluster: putting back what the run in %s left behind\n", dir)
	}
	if err := teardown(dir, s, log); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// teardown stops every recorded process by PID, then the containers and
// shims they left, unmounts what is mounted under dir, deletes the network
// namespace, the pods' cgroups and the paths the run created, and puts the
// kernel settings back. Each step runs even when an earlier one failed.
func teardown(dir string, s *state, log io.Writer) error {
	var errs []error
	// Reverse order: the node before the control plane, containerd last.
	for i := len(s.Processes) - 1; i >= 0; i-- {
		terminate(s.Processes[i].PID, 10*time.Second)
	}
	socket := filepath.Join(dir, "containerd", "containerd.sock")
	// Shims outlive containerd by design; they and the containers they hold
	// are found by the containerd address they were started with and by
	// the pods' cgroups.
	for _, pid := range processes(func(pid int, cmdline string) bool {
		return strings.Contains(cmdline, socket) || inPodCgroup(pid)
	}) {
		terminate(pid, 2*time.Second)
	}
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	if err := deleteNetwork(); err != nil {
		errs = append(errs, err)
	}
	if err := removePodCgroups(); err != nil {
		errs = append(errs, err)
	}
	for k, v := range s.Sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("putting back %s: %w", k, err))
		}
	}
	for _, p := range s.Created {
		// ip netns mounts /run/netns on itself.
		if err := unmountUnder(p); err != nil {
			errs = append(errs, err)
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("tearing the cluster down: %w", errors.Join(errs...))
	}
	return nil
}

// processes returns the PIDs, other than this process's, that match.
func processes(match func(pid int, cmdline string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if match(pid, strings.ReplaceAll(string(cmdline), "\x00", " ")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cgroupRoot is kubelet's cgroup root (cgroupfs driver): its kubepods
// and every pod are under it, in every hierarchy, apart from anything else
// on the machine.
const cgroupRoot = "itemops-node"

func inPodCgroup(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.HasPrefix(parts[2], "/"+cgroupRoot) {
			return true
		}
	}
	return false
}

// removePodCgroups removes kubelet's cgroup root in every hierarchy,
// deepest first.
func removePodCgroups() error {
	hierarchies, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		return err
	}
	hierarchies = append(hierarchies, "/sys/fs/cgroup")
	var errs []error
	for _, h := range hierarchies {
		root := filepath.Join(h, cgroupRoot)
		if _, err := os.Stat(root); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder unmounts every mount point under dir, deepest first:
// kubelet's bind mount of its root directory, pods' volumes, containers'
// root filesystems, sandboxes' shm and network namespaces.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.SliceStable(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes of spaces and the like.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ipCommand runs ip(8) in the host's namespace.
func ipCommand(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
