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

package v1alpha1

// The plugins of Velero's CSI data mover, whose operations are DataUploads
// and DataDownloads.
const (
	DataUploadPlugin   = "velero.io/csi-pvc-backupper"
	DataDownloadPlugin = "velero.io/csi-pvc-restorer"
)

// IsDataMover reports whether the operation is a data movement of Velero's
// CSI data mover.
func (o *ItemOperation) IsDataMover() bool {
	return (o.Spec.Plugin.Kind == PluginKindBackupItemAction && o.Spec.Plugin.Name == DataUploadPlugin) ||
		(o.Spec.Plugin.Kind == PluginKindRestoreItemAction && o.Spec.Plugin.Name == DataDownloadPlugin)
}
