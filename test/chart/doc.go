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

// Package chart tests the helm chart with the helm CLI (built from the Go
// module proxy, as users run it) against a real API server: lint, render,
// the values schema, install, upgrade and uninstall, server-side dry-run of
// every rendered object, the restricted Pod Security Standard, least-privilege
// RBAC, and the CRDs being the generated ones.
package chart
