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
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeConfig writes the certificates, one kubeconfig per identity, and the
// configuration of containerd, CNI, kubelet and kube-proxy.
func (c *Cluster) writeConfig(context.Context) error {
	pki := c.path("pki")
	ca, err := newAuthority(pki, "ca")
	if err != nil {
		return err
	}
	frontProxy, err := newAuthority(pki, "front-proxy-ca")
	if err != nil {
		return err
	}
	nodeIP := net.ParseIP(NodeIP)
	certs := []struct {
		issuer *authority
		name   string
		spec   certSpec
	}{
		{ca, "apiserver", certSpec{commonName: "kube-apiserver", server: true,
			dnsNames: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
			ips:      []net.IP{nodeIP, net.ParseIP(KubernetesServiceIP), net.ParseIP("127.0.0.1")}}},
		{ca, "apiserver-kubelet-client", certSpec{commonName: "kube-apiserver-kubelet-client", organizations: []string{"system:masters"}, client: true}},
		{ca, "admin", certSpec{commonName: "kubernetes-admin", organizations: []string{"system:masters"}, client: true}},
		{ca, "controller-manager", certSpec{commonName: "system:kube-controller-manager", client: true}},
		{ca, "scheduler", certSpec{commonName: "system:kube-scheduler", client: true}},
		{ca, "kubelet", certSpec{commonName: "system:node:" + NodeName, organizations: []string{"system:nodes"}, client: true}},
		{ca, "kubelet-serving", certSpec{commonName: NodeName, server: true, dnsNames: []string{NodeName}, ips: []net.IP{nodeIP}}},
		{ca, "kube-proxy", certSpec{commonName: "system:kube-proxy", client: true}},
		{frontProxy, "front-proxy-client", certSpec{commonName: "front-proxy-client", client: true}},
	}
	for _, cert := range certs {
		if err := cert.issuer.issue(pki, cert.name, cert.spec); err != nil {
			return err
		}
	}
	if err := writeServiceAccountKey(pki); err != nil {
		return err
	}
	c.Kubeconfig = c.path("admin.kubeconfig")
	for file, identity := range map[string]string{
		"admin.kubeconfig": "admin", "controller-manager.kubeconfig": "controller-manager",
		"scheduler.kubeconfig": "scheduler", "kubelet.kubeconfig": "kubelet", "kube-proxy.kubeconfig": "kube-proxy",
	} {
		if err := writeKubeconfig(c.path(file), pki, identity); err != nil {
			return err
		}
	}
	files := map[string]string{
		"containerd/config.toml":        c.containerdConfig(),
		"cni/net.d/10-itemops.conflist": c.cniConfig(),
		"kubelet.yaml":                  c.kubeletConfig(),
		"kube-proxy.yaml":               c.kubeProxyConfig(),
	}
	for name, content := range files {
		p := c.path(name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return createCgroupRoot()
}

func writeKubeconfig(path, pki, identity string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{
		Server:               fmt.Sprintf("https://%s:%d", NodeIP, apiPort),
		CertificateAuthority: filepath.Join(pki, "ca.crt"),
	}
	cfg.AuthInfos[identity] = &clientcmdapi.AuthInfo{
		ClientCertificate: filepath.Join(pki, identity+".crt"),
		ClientKey:         filepath.Join(pki, identity+".key"),
	}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: identity, Namespace: "default"}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}

func (c *Cluster) containerdConfig() string {
	d := c.path("containerd")
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  disable_apparmor = true
  # The sandbox's oom_score_adj of -998 is refused without CAP_SYS_RESOURCE:
  # without this no sandbox starts here.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    max_conf_num = 1
  # Registries' hosts.toml (PlainHTTPRegistry), read at each pull.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[9]q
`, filepath.Join(d, "root"), filepath.Join(d, "state"), c.containerdSocket(), filepath.Join(d, "opt"),
		SandboxImage, filepath.Join(d, "runc"), CNIBinDir, c.path("cni", "net.d"), c.registryConfigDir())
}

func (c *Cluster) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "itemops",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, bridge, PodCIDR, c.path("cni", "ipam"))
}

func (c *Cluster) kubeletConfig() string {
	pki := c.path("pki")
	clusterDNS := ""
	if c.cfg.ClusterDNS != "" {
		clusterDNS = fmt.Sprintf("clusterDNS: [%q]\n", c.cfg.ClusterDNS)
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: %[2]s/kubelet-serving.crt
tlsPrivateKeyFile: %[2]s/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[2]s/ca.crt
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: /%[3]s
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://%[4]s
podLogsDir: %[5]s
volumePluginDir: %[6]s
# No DNS but the cluster's (ClusterDNS): nothing in a pod may look a name
# up off this machine.
resolvConf: ""
clusterDomain: cluster.local
%[7]sserializeImagePulls: false
# A small disk must not evict the test's pods nor their images.
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, NodeIP, pki, cgroupRoot, c.containerdSocket(), c.path("pod-logs"), c.path("plugins", "volume"), clusterDNS)
}

func (c *Cluster) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
mode: iptables
clusterCIDR: %[3]s
bindAddress: %[4]s
healthzBindAddress: %[4]s:10256
metricsBindAddress: %[4]s:10249
nodePortAddresses: ["%[4]s/32"]
iptables:
  localhostNodePorts: false
# Zero: leave the kernel's conntrack settings as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, c.path("kube-proxy.kubeconfig"), NodeName, PodCIDR, NodeIP)
}

// createCgroupRoot makes kubelet's cgroup root in every hierarchy, with the
// cpuset hierarchy's CPUs and memory nodes copied from its root (a new
// cpuset cgroup has none).
func createCgroupRoot() error {
	hierarchies, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue
		}
		dir := filepath.Join(h, cgroupRoot)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), []byte(strings.TrimSpace(string(v))), 0o644); err != nil {
					return fmt.Errorf("setting %s of %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}
