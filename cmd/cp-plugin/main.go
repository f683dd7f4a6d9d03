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

// Command cp-plugin copies one plugin binary into itemops' plugin directory.
// It is static, so an init container can run it inside an image that has no
// cp of its own, such as Velero's (whose /velero binary serves Velero's
// built-in plugins): the itemops image first copies cp-plugin into a shared
// emptyDir, then Velero's image runs it from there.
//
//	cp-plugin SOURCE TARGET
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: cp-plugin SOURCE TARGET")
		os.Exit(2)
	}
	if err := copyExecutable(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "cp-plugin:", err)
		os.Exit(1)
	}
}

// copyExecutable writes source to target with mode 0755, through a
// temporary file renamed into place, so that a half-copied binary is never
// found in the plugin directory.
func copyExecutable(source, target string) error {
	in, err := os.Open(source)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("copying %s: %w", source, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), target)
}
