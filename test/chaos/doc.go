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

// Package chaos is the chaos suite: two itemops replicas (leader election,
// manage mode) follow the operations of many Backups, read from their
// operations files on a real S3 server (versitygw, velero-plugin-for-aws),
// against a real kube-apiserver and etcd and the sample plugin, while faults
// are injected one after another: replicas and the leader killed (SIGKILL,
// at any moment, status writes included), plugin processes killed, the
// plugin failing or hanging for a while, the kube-apiserver stopped and
// started again; and while operations are cancelled and a Backup deleted.
//
// At the end it checks, and prints as figures: no operation lost or
// duplicated, none in a wrong terminal phase (Canceled exactly when the
// plugin recorded a Cancel before its own end: Cancel is best effort, and
// an end seen before any Cancel reached the plugin is the truth), no parent
// phase regression (every transition is watched), Cancel called for every
// operation that had to be cancelled and for none already finished, the
// time from spec.cancel to the plugin's Cancel (bounded for the cancels
// asked in a quiet window, outside any fault), the operations files
// written back, no plugin process left after shutdown, and no Secret in
// any log.
//
// `make test` runs a bounded run (ITEMOPS_CHAOS_DURATION, 40s of faults);
// `make test-chaos` a longer one, whose figures it writes to
// test/chaos/results (ITEMOPS_CHAOS_RESULTS).
package chaos
