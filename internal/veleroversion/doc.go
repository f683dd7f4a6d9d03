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

// Package veleroversion tells which Velero releases itemops works with, and
// what a release found in a cluster means for it: the pure half of the check
// itemops makes at start (controllers/veleroversion.go), from the image of
// Velero's Deployment and the version of the velero binary that serves the
// built-in plugins from itemops' plugin directory.
package veleroversion
