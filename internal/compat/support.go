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

package compat

// Support is what a release of Kubernetes or Velero means for itemops.
type Support string

const (
	// Supported: a release the tests run against.
	Supported Support = "Supported"
	// Untested: a release beside the tested ones (newer, or, for Velero,
	// older but with the same protocol and records): nothing known breaks,
	// but nothing here has run it.
	Untested Support = "Untested"
	// Unsupported: a Kubernetes older than the oldest tested (the chart
	// refuses it), or a Velero with no asynchronous plugin operations.
	Unsupported Support = "Unsupported"
	// Unknown: the release could not be read.
	Unknown Support = "Unknown"
)
