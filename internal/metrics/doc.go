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

// Package metrics holds itemops' Prometheus metrics, served by
// controller-runtime's metrics endpoint. Events of the reconcilers (polls,
// cancels, finished operations, plugin restarts) are counted as they happen;
// the state of all ItemOperations (how many per phase, stalled, bytes moved)
// is computed from the informer cache at each scrape, so it is never stale
// and never drifts after a restart.
package metrics
