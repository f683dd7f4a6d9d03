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

// Command volumefiles fills a volume with files of pseudo-random bytes, or
// sums a volume's files, in a pod of the real-node suite: what a Backup
// moves and what its restore must give back.
//
//	volumefiles write --dir=/data --mib=24 --seed=shop/data-0 [--result=/dev/termination-log]
//	volumefiles sum --dir=/data [--result=/dev/termination-log]
//
// Both print the tree's digest (Sum) and write it to --result, where the
// test reads it as the container's termination message.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/itemops/itemops/test/volumefiles/files"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: volumefiles write|sum --dir=DIR [--mib=N --seed=S] [--skip=DIR] [--result=FILE]")
		os.Exit(2)
	}
	flags := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := flags.String("dir", "/data", "the volume's directory")
	mib := flags.Int("mib", 16, "how many MiB to write (write)")
	seed := flags.String("seed", "", "what the bytes derive from (write)")
	result := flags.String("result", "", "a file to write the digest to (the termination log)")
	skip := flags.String("skip", "", "a top-level directory to leave out of the sum (sum)")
	_ = flags.Parse(os.Args[2:])
	var (
		digest string
		err    error
	)
	switch os.Args[1] {
	case "write":
		err = files.Write(*dir, *seed, *mib)
		if err == nil {
			digest, err = files.Sum(*dir)
		}
	case "sum":
		var skipped []string
		if *skip != "" {
			skipped = append(skipped, *skip)
		}
		digest, err = files.Sum(*dir, skipped...)
	default:
		err = fmt.Errorf("unknown command %q: write or sum", os.Args[1])
	}
	if err == nil && *result != "" {
		err = os.WriteFile(*result, []byte(digest), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "volumefiles:", err)
		os.Exit(1)
	}
	fmt.Println(digest)
}
