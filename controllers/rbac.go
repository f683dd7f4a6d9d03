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

package controllers

// The permissions of the manager. Everything itemops reads or writes lives in
// Velero's namespace, so these become a namespaced Role there.
//
// +kubebuilder:rbac:groups=itemops.io,namespace=velero,resources=itemoperations,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=itemops.io,namespace=velero,resources=itemoperations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=itemops.io,namespace=velero,resources=itemoperations/finalizers,verbs=update
// +kubebuilder:rbac:groups="",namespace=velero,resources=events,verbs=create;patch;list
// +kubebuilder:rbac:groups=events.k8s.io,namespace=velero,resources=events,verbs=create;patch

// What explains why a data movement of Velero's data mover waits (see
// internal/why): read at every poll through the cache, once per sync for
// all operations (node-agent's DaemonSet and ConfigMap, the labels of a
// node when node-agent's ConfigMap has per-node rules), or by an operation
// held at one step.
// +kubebuilder:rbac:groups=velero.io,namespace=velero,resources=datauploads;datadownloads;backuprepositories,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=velero,resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=velero,resources=persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=velero,resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=apps,namespace=velero,resources=daemonsets,verbs=get,resourceNames=node-agent

// Velero's Deployment, by its name: its image says which Velero runs
// (internal/compat, at start) and its replicas whether velero server runs
// (internal/why).
// +kubebuilder:rbac:groups=apps,namespace=velero,resources=deployments,verbs=get,resourceNames=velero
