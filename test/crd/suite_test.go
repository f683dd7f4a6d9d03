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

// Package crd proves, against a real kube-apiserver, that the ItemOperation
// CRD accepts what it should, rejects what it should with a message that names
// the problem, and prints the columns that kubectl shows.
package crd

import (
	"fmt"
	"os"
	"testing"

	"github.com/itemops/itemops/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	var err error
	env, err = envtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	os.Exit(code)
}
