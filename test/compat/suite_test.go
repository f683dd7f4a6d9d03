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

// Package compat runs itemops beside each Velero release it supports: the
// real `velero server` of that release, built from the module proxy, with
// that release's own CRDs, the velero binary of the same release serving the
// built-in plugins from itemops' plugin directory, and itemops run as the
// ServiceAccount the chart renders for that release. Per release: in manage
// mode a Backup with the sample plugins' and the CSI data mover's
// operations, one of them cancelled, then its Restore; in observe mode a
// Backup beside Velero's own operations controllers; and the release check
// itemops makes at start.
//
// ITEMOPS_VELERO_VERSIONS (make test-compat's VELERO_VERSIONS) names the
// releases, separated by spaces or commas; unset, the default release runs
// alone, as in make test. With ITEMOPS_COMPAT_RESULTS set, the suite writes
// its results table there (test/compat/results.md).
package compat

import (
	"os"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/itemops/itemops/test/veleroenv"
)

func TestCompat(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "itemops beside each Velero release", Label("velero", "compat", "e2e", "envtest", "s3", "slow"))
}

// versions are the releases to run, such as 1.15.2.
func versions() []string {
	list := strings.FieldsFunc(os.Getenv("ITEMOPS_VELERO_VERSIONS"), func(r rune) bool { return r == ' ' || r == ',' })
	if len(list) == 0 {
		return []string{veleroenv.DefaultVersion}
	}
	for i, v := range list {
		list[i] = strings.TrimPrefix(v, "v")
	}
	return list
}

var _ = Describe("itemops beside Velero", func() {
	for _, version := range versions() {
		Describe("v"+version, Ordered, func() { releaseSpecs(version) })
	}
})
