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

// Package compat says what itemops runs beside: which Kubernetes releases
// and which Velero releases it is tested with (test/kube, test/compat), and
// what a release found in a cluster means for it. Each check reads its
// release once, at start, as a Runnable of the manager, and reports it; it
// never stops itemops.
package compat
