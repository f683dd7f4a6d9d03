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

// Package kube holds the Kubernetes helpers itemops' controllers share,
// none of them about Velero: reads straight from the cache's stores
// (Stores), status patches that encode the status alone and writes that
// decode no answer (StatusPatch, Patcher), optimistic-lock conflicts taken
// quietly (QuietConflicts), Events whose reasons the code fixes (Emit), and
// what is put around controller-runtime's REST mapper and logger so that a
// reconcile per operation every sync interval stays cheap: at 30,000
// operations the mapper's lookups, which every read of a namespaced cache
// makes, and the logger's eager key/value encoding, which every reconcile
// makes, were half of the allocations.
package kube
