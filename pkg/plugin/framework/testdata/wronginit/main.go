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

// Command wronginit registers an initializer that returns something other
// than a VolumeSnapshotter v2 through framework.VolumeSnapshotterV2: it
// must not compile (TestWrongInitializerDoesNotCompile).
package main

import (
	"github.com/sirupsen/logrus"

	"github.com/itemops/itemops/pkg/plugin/framework"
)

type notASnapshotter struct{}

func newWrong(logrus.FieldLogger) (*notASnapshotter, error) { return &notASnapshotter{}, nil }

func main() {
	framework.NewServer().RegisterVolumeSnapshotterV2("example.io/wrong", framework.VolumeSnapshotterV2(newWrong)).Serve()
}
