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
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The cluster's addresses. The node's IP is the namespace end of the veth;
// the host end is the next lower address of the same /30.
const (
	NodeName = "itemops-node"
	NodeIP   = "10.250.0.2"
	// HostIP is the host's end: what the cluster's components reach of a
	// process of the host (such as a test's admission webhook) is there.
	HostIP      = "10.250.0.1"
	linkPrefix  = "/30"
	PodCIDR     = "10.244.0.0/24"
	ServiceCIDR = "10.96.0.0/24"
	// KubernetesServiceIP is the ClusterIP of the default/kubernetes Service.
	KubernetesServiceIP = "10.96.0.1"
	// SandboxImage is the image of every pod's sandbox, as containerd is
	// told; Start imports it.
	SandboxImage = "registry.k8s.io/pause:3.10"

	netnsName = "itemops-node"
	hostLink  = "itemops0"
	nodeLink  = "eth0"
	bridge    = "cni0"
	apiPort   = 6443
)

// DefaultDir is where a cluster keeps its state; one cluster runs at a time.
const DefaultDir = "/var/lib/itemops-localcluster"

// Config says where the binaries are and where the cluster lives.
type Config struct {
	// BinDir holds kube-apiserver, kube-controller-manager, kube-scheduler,
	// kubelet, kube-proxy and etcd (hack/envtest-assets.sh).
	BinDir string
	// Dir is the cluster's directory (DefaultDir when empty); it is wiped at
	// every start.
	Dir string
	// Log receives one line per step; nil discards them.
	Log io.Writer
	// ClusterDNS, an address of ServiceCIDR, is the cluster DNS Service's
	// ClusterIP that kubelet gives pods (their Services' names resolve
	// once a DNS server runs behind it). Empty, pods have no DNS.
	ClusterDNS string
}

// Cluster is a running one-node cluster.
type Cluster struct {
	// Kubeconfig is the path of an administrator's kubeconfig.
	Kubeconfig string
	// RESTConfig is the administrator's client configuration.
	RESTConfig *rest.Config
	// Dir is the cluster's directory; LogDir holds each component's log.
	Dir, LogDir string

	cfg   Config
	state *state
	// lock is held while the cluster runs: one at a time.
	lock *os.File
}

// Start brings a cluster up: it first puts back whatever an earlier run
// left behind, then starts each component and waits until the node is
// Ready and the kubernetes Service answers through kube-proxy's rules. On
// an error everything started so far is stopped again.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Dir == "" {
		cfg.Dir = DefaultDir
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if err := CheckPrerequisites(cfg.BinDir); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(cfg.Dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("another local cluster runs on this machine (%s is locked: make cluster, or a test/cluster run?)", cfg.Dir+".lock")
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	if err := Cleanup(cfg.Dir, cfg.Log); err != nil {
		return nil, fmt.Errorf("putting back an earlier run: %w", err)
	}
	c := &Cluster{
		Dir:    cfg.Dir,
		LogDir: filepath.Join(cfg.Dir, "logs"),
		cfg:    cfg,
		lock:   lock,
	}
	for _, d := range []string{c.LogDir, c.path("pki"), c.path("etcd"), c.path("cni", "net.d"), c.path("cni", "ipam"), c.path("kubelet"), c.path("plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	c.state, err = newState(c.path("state.json"))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(cfg.Log, "cluster: start failed (%v); the logs are in %s; stopping what started\n", err, c.LogDir)
			if stopErr := c.stop(context.WithoutCancel(ctx), false, true); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}
	}()
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"recording what lives outside the cluster's directory", c.recordHost},
		{"starting the watchdog that puts it back if this process is killed", c.startWatchdog},
		{"writing certificates and configuration", c.writeConfig},
		{"creating the node's network namespace", c.createNetwork},
		{"starting containerd", c.startContainerd},
		{"importing the sandbox image", c.importSandbox},
		{"starting etcd and kube-apiserver", c.startControlPlane},
		{"starting kube-controller-manager, kube-scheduler, kubelet and kube-proxy", c.startNode},
	}
	for _, s := range steps {
		t := time.Now()
		if err := s.do(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Fprintf(cfg.Log, "cluster: %s (%.1fs)\n", s.what, time.Since(t).Seconds())
	}
	return c, nil
}

// KubeletDir is the kubelet's root directory (its --root-dir): the pods'
// volumes and the plugins' sockets are under it, where a node's
// /var/lib/kubelet would be.
func (c *Cluster) KubeletDir() string { return c.path("kubelet") }

func (c *Cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.Dir}, elem...)...)
}

// CheckPrerequisites says, in one error, everything this machine lacks to
// run a cluster: root, the distribution's packages, the binaries.
func CheckPrerequisites(binDir string) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (containerd, kubelet and the network namespace need it; run as root)")
	}
	packages := map[string]string{
		"containerd": "containerd", "containerd-shim-runc-v2": "containerd", "ctr": "containerd",
		"runc": "runc", "iptables": "iptables", "ip": "iproute2", "nsenter": "util-linux",
	}
	var pkgs []string
	for cmd, pkg := range packages {
		if _, err := exec.LookPath(cmd); err != nil {
			pkgs = append(pkgs, pkg)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join(CNIBinDir, plugin)); err != nil {
			pkgs = append(pkgs, "containernetworking-plugins")
			break
		}
	}
	if len(pkgs) > 0 {
		missing = append(missing, "the packages "+strings.Join(dedupe(pkgs), " ")+" (apt-get install -y containerd runc containernetworking-plugins iptables; hack/cluster-packages.sh does it)")
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			missing = append(missing, fmt.Sprintf("%s in %s (hack/envtest-assets.sh builds it)", b, binDir))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("a one-node cluster cannot run here; missing: %s", strings.Join(missing, "; "))
	}
	return nil
}

// CNIBinDir is where Debian's containernetworking-plugins are.
const CNIBinDir = "/usr/lib/cni"

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// inNode returns a command that runs in the node's network namespace
// (and only its network namespace: the mounts, cgroups and /sys stay the
// host's, as kubelet needs them).
func inNode(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + netnsPath(), "--", name}, args...)...)
}

func netnsPath() string { return filepath.Join("/run/netns", netnsName) }

// start starts one component in the node's namespace, in a process group
// of its own (a Ctrl-C to the terminal reaches the harness, which stops the
// cluster in order), with its output in LogDir, and records its PID.
func (c *Cluster) start(name string, bin string, args ...string) error {
	logFile, err := os.OpenFile(filepath.Join(c.LogDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := inNode(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	if err := c.state.addProcess(name, cmd.Process.Pid); err != nil {
		return err
	}
	// Reap it when it exits; a component that dies is seen by the waits
	// below and its log names why.
	go func() { _ = cmd.Wait() }()
	return nil
}

// running reports whether a recorded component still runs.
func (c *Cluster) running(name string) bool {
	for _, p := range c.state.Processes {
		if p.Name == name {
			return alive(p.PID)
		}
	}
	return false
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.cfg.BinDir, name) }

func (c *Cluster) startControlPlane(ctx context.Context) error {
	if err := c.start("etcd", c.bin("etcd"),
		"--name=node", "--data-dir="+c.path("etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=node=http://127.0.0.1:2380", "--listen-metrics-urls=http://127.0.0.1:2381",
		"--unsafe-no-fsync", "--quota-backend-bytes=8589934592"); err != nil {
		return err
	}
	pki := c.path("pki")
	if err := c.start("kube-apiserver", c.bin("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0", "--advertise-address="+NodeIP, fmt.Sprintf("--secure-port=%d", apiPort),
		"--tls-cert-file="+pki+"/apiserver.crt", "--tls-private-key-file="+pki+"/apiserver.key",
		"--client-ca-file="+pki+"/ca.crt",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+pki+"/sa.pub", "--service-account-signing-key-file="+pki+"/sa.key",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate="+pki+"/apiserver-kubelet-client.crt", "--kubelet-client-key="+pki+"/apiserver-kubelet-client.key",
		"--kubelet-certificate-authority="+pki+"/ca.crt",
		// The node's name must never be resolved: the host's resolver would
		// send the lookup off the machine.
		"--kubelet-preferred-address-types=InternalIP",
		"--requestheader-client-ca-file="+pki+"/front-proxy-ca.crt",
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+pki+"/front-proxy-client.crt", "--proxy-client-key-file="+pki+"/front-proxy-client.key",
		"--allow-privileged=true",
		"--endpoint-reconciler-type=lease"); err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	c.RESTConfig = rc
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	return c.waitFor(ctx, "kube-apiserver", time.Minute, func(ctx context.Context) (bool, error) {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
}

func (c *Cluster) startNode(ctx context.Context) error {
	pki := c.path("pki")
	if err := c.start("kube-controller-manager", c.bin("kube-controller-manager"),
		"--kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--authentication-kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--authorization-kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--use-service-account-credentials",
		"--service-account-private-key-file="+pki+"/sa.key",
		"--root-ca-file="+pki+"/ca.crt",
		"--cluster-signing-cert-file="+pki+"/ca.crt", "--cluster-signing-key-file="+pki+"/ca.key",
		"--service-cluster-ip-range="+ServiceCIDR,
		// Otherwise it creates /usr/libexec/kubernetes.
		"--flex-volume-plugin-dir="+c.path("plugins", "flexvolume"),
		"--leader-elect=false", "--bind-address=127.0.0.1"); err != nil {
		return err
	}
	if err := c.start("kube-scheduler", c.bin("kube-scheduler"),
		"--kubeconfig="+c.path("scheduler.kubeconfig"),
		"--authentication-kubeconfig="+c.path("scheduler.kubeconfig"),
		"--authorization-kubeconfig="+c.path("scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address=127.0.0.1"); err != nil {
		return err
	}
	if err := c.start("kubelet", c.bin("kubelet"),
		"--config="+c.path("kubelet.yaml"),
		"--kubeconfig="+c.path("kubelet.kubeconfig"),
		"--root-dir="+c.path("kubelet"),
		"--node-ip="+NodeIP, "--hostname-override="+NodeName); err != nil {
		return err
	}
	if err := c.start("kube-proxy", c.bin("kube-proxy"), "--config="+c.path("kube-proxy.yaml")); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, "kubelet (the node Ready)", 2*time.Minute, func(ctx context.Context) (bool, error) {
		node, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	// The kubernetes Service through kube-proxy's rules, from the host.
	viaService := rest.CopyConfig(c.RESTConfig)
	viaService.Host = fmt.Sprintf("https://%s:443", KubernetesServiceIP)
	svc, err := kubernetes.NewForConfig(viaService)
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, "kube-proxy (the kubernetes Service answers)", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := svc.Discovery().ServerVersion()
		return err == nil, nil
	}); err != nil {
		return err
	}
	return c.waitFor(ctx, "kube-controller-manager (the default ServiceAccount)", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// errExited is a component that exited while the cluster came up.
var errExited = errors.New("exited")

// waitFor polls until done, failing early when a component exited.
func (c *Cluster) waitFor(ctx context.Context, what string, timeout time.Duration, done wait.ConditionWithContextFunc) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, p := range c.state.Processes {
			if !alive(p.PID) {
				return false, fmt.Errorf("%s %w (its log: %s)", p.Name, errExited, filepath.Join(c.LogDir, p.Name+".log"))
			}
		}
		return done(ctx)
	})
	if err != nil && !errors.Is(err, errExited) {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return err
}

// Stop deletes every pod and waits for kubelet to tear them down, then
// stops the cluster and puts the machine back as it was found.
func (c *Cluster) Stop(ctx context.Context) error {
	return c.stop(ctx, true, false)
}

// stop tears down; keepLogs keeps the directory (the next Start removes it)
// so that the logs of a start that failed can be read.
func (c *Cluster) stop(ctx context.Context, drain, keepLogs bool) error {
	var errs []error
	if drain && c.RESTConfig != nil && c.running("kubelet") && c.running("kube-apiserver") {
		if err := c.drain(ctx); err != nil {
			fmt.Fprintf(c.cfg.Log, "cluster: deleting the pods: %v; stopping anyway\n", err)
		}
	}
	if c.running("kube-proxy") {
		c.stopProcess("kube-proxy")
		// Its own cleanup of the rules; the namespace's deletion below would
		// take them too.
		if out, err := inNode(c.bin("kube-proxy"), "--cleanup").CombinedOutput(); err != nil {
			fmt.Fprintf(c.cfg.Log, "cluster: kube-proxy --cleanup: %v: %s\n", err, out)
		}
	}
	if err := teardown(c.Dir, c.state, c.cfg.Log); err != nil {
		errs = append(errs, err)
	} else if keepLogs {
		// Nothing is left to put back; the next Start removes the rest.
		errs = append(errs, os.Remove(c.state.file))
	} else if err := os.RemoveAll(c.Dir); err != nil {
		// Everything is put back: the directory goes too (its logs with it;
		// a caller that wants them copies LogDir first).
		errs = append(errs, err)
	}
	if c.lock != nil {
		if len(errs) == 0 {
			_ = os.Remove(c.lock.Name())
		}
		c.lock.Close()
	}
	return errors.Join(errs...)
}

// drain stops the controllers that would make new pods, deletes every pod
// and waits until kubelet has removed them, which removes their network
// namespaces, veths, addresses and volume mounts.
func (c *Cluster) drain(ctx context.Context) error {
	c.stopProcess("kube-controller-manager")
	c.stopProcess("kube-scheduler")
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		grace := int64(5)
		if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			return err
		}
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
}

// stopProcess stops one recorded component: SIGTERM to its process group,
// SIGKILL after ten seconds.
func (c *Cluster) stopProcess(name string) {
	for _, p := range c.state.Processes {
		if p.Name == name {
			terminate(p.PID, 10*time.Second)
		}
	}
}

// terminate ends a process and its group, by PID.
func terminate(pid int, grace time.Duration) {
	if !alive(pid) {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 100 && alive(pid); i++ {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// alive says whether pid runs and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// ImportImage imports an image tarball (docker or OCI archive) into the
// node's containerd, where kubelet finds it without pulling.
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", c.containerdSocket(), "--namespace", "k8s.io",
		"images", "import", "--no-unpack=false", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("importing %s: %w: %s", tarball, err, out)
	}
	return nil
}

func (c *Cluster) containerdSocket() string { return c.path("containerd", "containerd.sock") }

func (c *Cluster) registryConfigDir() string { return c.path("containerd", "certs.d") }

// PlainHTTPRegistry lets the node pull from the registry at host (a
// "host:port" on the node, such as a registry pod's hostPort on NodeIP)
// over plain HTTP, as containerd's hosts.toml says for a registry without
// TLS. containerd reads it at the next pull.
func (c *Cluster) PlainHTTPRegistry(host string) error {
	dir := filepath.Join(c.registryConfigDir(), host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(fmt.Sprintf(`server = "http://%[1]s"

[host."http://%[1]s"]
  capabilities = ["pull", "resolve"]
`, host)), 0o644)
}

// TagImage gives an imported image a second name.
func (c *Cluster) TagImage(ctx context.Context, source, target string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", c.containerdSocket(), "--namespace", "k8s.io",
		"images", "tag", "--force", normalize(source), normalize(target)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tagging %s as %s: %w: %s", source, target, err, out)
	}
	return nil
}

// normalize is an image reference as containerd stores it: docker.io/ for
// a reference without a registry, library/ for an official image.
func normalize(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if !found {
		return "docker.io/library/" + ref
	}
	if !strings.ContainsAny(first, ".:") && first != "localhost" {
		return "docker.io/" + ref
	}
	return ref
}
