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
	"encoding/json"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
)

var _ = Describe("The parent sent to plugins", Label("unit"), func() {
	backup := func(uid, version, phase string) *velerov1api.Backup {
		return &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "velero", UID: types.UID(uid), ResourceVersion: version},
			Status: velerov1api.BackupStatus{Phase: velerov1api.BackupPhase(phase)}}
	}
	decode := func(b []byte) *velerov1api.Backup {
		GinkgoHelper()
		out := &velerov1api.Backup{}
		Expect(json.Unmarshal(b, out)).To(Succeed())
		return out
	}

	It("is encoded again when its version moves, and not before", func() {
		cache := &encodedParents{}
		first, err := parentJSON(cache, backup("1", "10", "WaitingForPluginOperations"))
		Expect(err).NotTo(HaveOccurred())
		Expect(decode(first).Status.Phase).To(BeEquivalentTo("WaitingForPluginOperations"))

		// The same version is the same object: its encoding is reused,
		// even were the copy in hand to differ (it cannot, from the API server).
		again, err := parentJSON(cache, backup("1", "10", "Finalizing"))
		Expect(err).NotTo(HaveOccurred())
		Expect(&again[0]).To(BeIdenticalTo(&first[0]))

		moved, err := parentJSON(cache, backup("1", "11", "Finalizing"))
		Expect(err).NotTo(HaveOccurred())
		Expect(decode(moved).Status.Phase).To(BeEquivalentTo("Finalizing"))

		other, err := parentJSON(cache, backup("2", "10", "InProgress"))
		Expect(err).NotTo(HaveOccurred())
		Expect(decode(other).UID).To(BeEquivalentTo("2"))
	})

	It("is never kept without a UID and version, nor when there is none", func() {
		cache := &encodedParents{}
		_, err := parentJSON(cache, backup("", "", "InProgress"))
		Expect(err).NotTo(HaveOccurred())
		unversioned, err := parentJSON(cache, backup("", "", "Completed"))
		Expect(err).NotTo(HaveOccurred())
		Expect(decode(unversioned).Status.Phase).To(BeEquivalentTo("Completed"))

		var none *velerov1api.Backup
		empty, err := parentJSON(cache, none)
		Expect(err).NotTo(HaveOccurred())
		Expect(decode(empty).Name).To(BeEmpty())
		Expect(cache.m).To(BeEmpty())
	})

	It("starts again empty past its bound", func() {
		cache := &encodedParents{}
		for i := range maxEncodedParents + 1 {
			cache.put(types.UID(strconv.Itoa(i)), "1", []byte("{}"))
		}
		Expect(cache.m).To(HaveLen(1))
	})
})
