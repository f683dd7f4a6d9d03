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
	"net"
	"os"
	"os/exec"
	"strings"
)

// createNetwork makes the node's network namespace: loopback up (etcd and
// the components' own ports), the veth whose namespace end holds the node's
// IP, forwarding on inside it (pod to Service to pod), and on the host the
// routes to the pod and Service ranges through it. The namespace has no
// default route: nothing in it can reach any other address.
func (c *Cluster) createNetwork(context.Context) error {
	for _, cidr := range []string{PodCIDR, ServiceCIDR, HostIP + linkPrefix} {
		if routed, err := routedElsewhere(cidr); err != nil {
			return err
		} else if routed != "" {
			return fmt.Errorf("the cluster's range %s is already in use on this machine (%s)", cidr, routed)
		}
	}
	if err := ipCommand("netns", "add", netnsName); err != nil {
		return err
	}
	c.state.Network = true
	if err := c.state.save(); err != nil {
		return err
	}
	steps := [][]string{
		{"link", "add", hostLink, "type", "veth", "peer", "name", nodeLink, "netns", netnsName},
		{"addr", "add", HostIP + linkPrefix, "dev", hostLink},
		{"link", "set", hostLink, "up"},
		{"-n", netnsName, "link", "set", "lo", "up"},
		{"-n", netnsName, "addr", "add", NodeIP + linkPrefix, "dev", nodeLink},
		{"-n", netnsName, "link", "set", nodeLink, "up"},
		{"route", "add", PodCIDR, "via", NodeIP, "dev", hostLink},
		{"route", "add", ServiceCIDR, "via", NodeIP, "dev", hostLink},
		// The node's own processes reach ClusterIPs (kube-apiserver an
		// aggregated API's Service, as packageserver's): kube-proxy
		// rewrites the address once the kernel has a route for it, which
		// a node's default route gives elsewhere.
		{"-n", netnsName, "route", "add", ServiceCIDR, "dev", nodeLink},
	}
	for _, s := range steps {
		if err := ipCommand(s...); err != nil {
			return err
		}
	}
	// Per namespace: the host's own settings stay as they are.
	for _, set := range []string{"net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"} {
		if out, err := inNode("sysctl", "-w", set).CombinedOutput(); err != nil && !strings.HasPrefix(set, "net.bridge") {
			return fmt.Errorf("sysctl %s in the node's namespace: %w: %s", set, err, out)
		}
	}
	return nil
}

// routedElsewhere returns the host's route that already covers cidr, if
// any besides the default route.
func routedElsewhere(cidr string) (string, error) {
	_, want, err := net.ParseCIDR(cidr)
	if err != nil {
		return "", err
	}
	out, err := exec.Command("ip", "-4", "route", "show").Output()
	if err != nil {
		return "", fmt.Errorf("ip route show: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] == "default" {
			continue
		}
		dst := fields[0]
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		_, have, err := net.ParseCIDR(dst)
		if err != nil {
			continue
		}
		if have.Contains(want.IP) || want.Contains(have.IP) {
			return line, nil
		}
	}
	return "", nil
}

// deleteNetwork deletes the node's network namespace, with it the veth
// pair (and so the host's routes through it), the CNI bridge, every chain
// kube-proxy and kubelet made and the pods' veths.
func deleteNetwork() error {
	var errs []error
	if _, err := os.Stat(netnsPath()); err == nil {
		if err := ipCommand("netns", "delete", netnsName); err != nil {
			errs = append(errs, err)
		}
	}
	// The host end goes with its peer (the kernel may take a moment); a
	// half-made pair may remain.
	if _, err := net.InterfaceByName(hostLink); err == nil {
		if err := ipCommand("link", "delete", hostLink); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
