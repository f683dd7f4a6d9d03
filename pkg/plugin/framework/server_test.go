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

package framework_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestWrongInitializerDoesNotCompile: an initializer that returns anything
// but a VolumeSnapshotter v2 is refused by the compiler when wrapped in
// VolumeSnapshotterV2, not by the plugin at its first call.
func TestWrongInitializerDoesNotCompile(t *testing.T) {
	out, err := exec.Command("go", "build", "-o", t.TempDir(), "./testdata/wronginit").CombinedOutput()
	if err == nil {
		t.Fatal("a plugin registering a wrong initializer through framework.VolumeSnapshotterV2 compiled")
	}
	if !strings.Contains(string(out), "cannot use newWrong") {
		t.Fatalf("it failed, but not on the initializer's type:\n%s", out)
	}
}
