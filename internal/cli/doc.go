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

// Package cli is the kubectl plugin kubectl-itemops: get, watch and cancel
// the operations of Velero Backups and Restores, with kubectl's connection
// flags (k8s.io/cli-runtime), its printers and the __complete protocol of
// cobra that shells and kubectl's plugin completion call.
package cli
