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

// Package why finds the cause an unfinished operation waits on, from what
// the cluster says about it: for Velero's CSI data mover, the DataUpload or
// DataDownload, the VolumeSnapshot, PersistentVolumeClaim and pod it
// exposes, node-agent's pods and ConfigMap, and the BackupRepository; for
// every plugin, progress that stands still. Diagnose is a pure function of
// that evidence; Gather reads it. docs/velero.md, "When an operation
// waits", lists every cause with what to do.
package why
