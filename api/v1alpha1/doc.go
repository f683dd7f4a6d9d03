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

// Package v1alpha1 holds the itemops.io/v1alpha1 API: the ItemOperation kind,
// one object per asynchronous operation that a Velero BackupItemAction v2,
// RestoreItemAction v2 or VolumeSnapshotter v2 plugin started.
//
// The package imports only apimachinery so that any client can vendor it.
//
// +kubebuilder:object:generate=true
// +groupName=itemops.io
package v1alpha1
