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

package kubeversion

import (
	"fmt"
	"strings"
	"testing"
)

func TestAssess(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    Support
		says    string
	}{
		{fmt.Sprintf("v1.%d.0", OldestMinor), Supported, "tested on"},
		{fmt.Sprintf("v1.%d.2", NewestMinor), Supported, "tested on"},
		{fmt.Sprintf("v1.%d.5-eks-4f4795d", OldestMinor+1), Supported, "tested on"},
		{fmt.Sprintf("v1.%d.14", OldestMinor-1), Unsupported, "the chart refuses it"},
		{fmt.Sprintf("v1.%d.0", NewestMinor+1), Untested, "newer than"},
		{"v2.0.0", Untested, "not a 1.x release"},
		{"", Unknown, "could not be read"},
	} {
		got, why := Assess(tc.version)
		if got != tc.want || !strings.Contains(why, tc.says) {
			t.Errorf("Assess(%q) = %s, %q; want %s saying %q", tc.version, got, why, tc.want, tc.says)
		}
	}
}
