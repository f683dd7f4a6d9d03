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

// Package store reads and writes the item operations files that Velero keeps
// beside each backup in its BackupStorageLocation
// (backups/<b>/<b>-itemoperations.json.gz and
// restores/<r>/restore-<r>-itemoperations.json.gz). It reuses Velero's own
// pkg/persistence for the object layout and the gzip JSON record format, and
// talks to the location through its ObjectStore plugin, as Velero does.
package store
