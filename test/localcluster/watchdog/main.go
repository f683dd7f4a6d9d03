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

// Command watchdog puts the machine back after a local cluster's owner is
// killed without a chance to (SIGKILL, a crash): started by
// localcluster.Start in a session of its own, it waits for the owner to
// exit and, when the owner left its cluster behind, tears it down.
//
//	watchdog -owner PID -dir DIR
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/itemops/itemops/test/localcluster"
)

func main() {
	owner := flag.Int("owner", 0, "the process that owns the cluster")
	dir := flag.String("dir", localcluster.DefaultDir, "the cluster's directory")
	flag.Parse()
	if err := localcluster.Watch(*owner, *dir, io.Discard); err != nil {
		fmt.Fprintln(os.Stderr, "watchdog:", err)
		os.Exit(1)
	}
}
