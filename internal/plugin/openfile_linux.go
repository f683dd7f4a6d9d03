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

package plugin

import (
	"fmt"
	"os"
	"os/exec"
)

// runOpenFile makes cmd run the open file f, whose contents were checked,
// rather than whatever is at its path when it starts: the child gets f as
// one of its descriptors and the kernel executes /proc/self/fd/N, so a file
// renamed over the path meanwhile is not what runs. The descriptor stays
// open in the process, read-only, so that an interpreter can read a script
// through the same name. The program still sees its path as its name
// (cmd.Args[0]).
func runOpenFile(cmd *exec.Cmd, f *os.File) {
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	cmd.Path = fmt.Sprintf("/proc/self/fd/%d", 2+len(cmd.ExtraFiles))
}
