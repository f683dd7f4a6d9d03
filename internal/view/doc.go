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

// Package view is how people see a Backup's or Restore's operations: the
// summary rows of `kubectl itemops get`, the plain lines and the live
// progress bars of `kubectl itemops watch`, and the exit code a watch ends
// with. kubectl-itemops and the demo both draw with it.
//
// It reads ItemOperations and their parents only through the API server,
// from a watch: it never talks to itemops or to plugins. Between two status
// writes (itemops writes progress only every --progress-update-interval) the
// live view advances each running operation by its own measured rate and
// marks the figure as extrapolated; it never passes the total nor shows an
// operation done before its status does.
package view
