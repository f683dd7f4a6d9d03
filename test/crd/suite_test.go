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
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/itemops/itemops/test/envtest"
)

var env *envtest.Environment

func TestCRD(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ItemOperation CRD", Label("envtest"))
}

var _ = BeforeSuite(func() {
	var err error
	env, err = envtest.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
})
