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

// Package localcluster runs a real one-node Kubernetes on this machine, in
// the manner of Kubernetes' own hack/local-up-cluster.sh: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
// kube-proxy as host processes (the binaries of hack/envtest-assets.sh),
// containerd and runc from the distribution's packages, bridge CNI and
// kube-proxy in iptables mode.
//
// Every process of the cluster runs in a network namespace of its own,
// joined to the host by one veth pair whose namespace end holds the node's
// IP. Pods, Services, kube-proxy's and kubelet's iptables chains and the CNI
// bridge all live in that namespace, so no traffic of the cluster reaches
// any address but the node's, its pods' and its Services', and deleting the
// namespace takes every chain, bridge and veth with it. The host reaches the
// API server at the node's IP and pods and Services through two routes via
// the veth.
//
// What lives outside the namespace is recorded in a state file as it is
// made (process IDs, the sysctls kubelet changes, paths created outside the
// cluster's directory) and put back by Stop, or by the next Start after a
// run that was killed.
//
// No image can be pulled: images are built on this machine and imported
// into containerd (ImportImage), the sandbox image included.
package localcluster
