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

// Package rollup is the phase math of a Velero Backup or Restore whose
// asynchronous plugin operations itemops watches: from the parent's phase and
// the counts of its operations, the phase it moves to. It is pure: no clock,
// no client, no I/O.
package rollup
