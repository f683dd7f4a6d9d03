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

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestPollTailKeepsEachOperationsFirstCallAfterATime(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "polls.log")
	t0 := time.Unix(1_800_000_000, 0)
	line := func(id string, at time.Duration) string { return fmt.Sprintf("%s %d 0\n", id, t0.Add(at).UnixNano()) }
	appendLog := func(s string) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = f.WriteString(s)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(f.Close()).To(Succeed())
	}
	tail := &pollTail{path: path, after: t0, first: map[string]time.Time{}}
	g.Expect(tail.read()).To(Succeed(), "no log yet is no call yet")
	g.Expect(tail.first).To(BeEmpty())

	// The second line is cut where the killed plugin stopped writing.
	second := line("op-b", 2*time.Second)
	appendLog(line("op-a", time.Second) + second[:7])
	g.Expect(tail.read()).To(Succeed())
	g.Expect(tail.first).To(Equal(map[string]time.Time{"op-a": t0.Add(time.Second)}))
	appendLog(second[7:] + line("op-a", 3*time.Second))
	g.Expect(tail.read()).To(Succeed())
	g.Expect(tail.first).To(Equal(map[string]time.Time{"op-a": t0.Add(time.Second), "op-b": t0.Add(2 * time.Second)}))

	// After a kill, only the calls made since count; a line left half
	// written is skipped.
	tail.since(t0.Add(10 * time.Second))
	appendLog("op-b 17\n" + line("op-a", 9*time.Second) + line("op-b", 12*time.Second) + line("op-b", 13*time.Second))
	g.Expect(tail.read()).To(Succeed())
	g.Expect(tail.first).To(Equal(map[string]time.Time{"op-b": t0.Add(12 * time.Second)}))
	g.Expect(tail.waitFor(2, time.Now())).To(MatchError(ContainSubstring("1 of 2 operations polled")))
}
