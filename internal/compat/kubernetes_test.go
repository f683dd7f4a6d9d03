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

package compat

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
)

func TestAssessKubernetes(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    Support
		says    string
	}{
		{fmt.Sprintf("v1.%d.0", OldestKubernetesMinor), Supported, "tested on"},
		{fmt.Sprintf("v1.%d.2", NewestKubernetesMinor), Supported, "tested on"},
		{fmt.Sprintf("v1.%d.5-eks-4f4795d", OldestKubernetesMinor+1), Supported, "tested on"},
		{fmt.Sprintf("v1.%d.14", OldestKubernetesMinor-1), Unsupported, "the chart refuses it"},
		{fmt.Sprintf("v1.%d.0", NewestKubernetesMinor+1), Untested, "newer than"},
		{"v2.0.0", Untested, "not a 1.x release"},
		{"", Unknown, "could not be read"},
	} {
		got, why := AssessKubernetes(tc.version)
		if got != tc.want || !strings.Contains(why, tc.says) {
			t.Errorf("AssessKubernetes(%q) = %s, %q; want %s saying %q", tc.version, got, why, tc.want, tc.says)
		}
	}
}

func TestKubernetesCheck(t *testing.T) {
	for _, tc := range []struct {
		gitVersion string
		want       Support
		logged     string
	}{
		{fmt.Sprintf("v1.%d.2", NewestKubernetesMinor), Supported, `"level"=0 "msg"="Kubernetes' release"`},
		{fmt.Sprintf("v1.%d.14", OldestKubernetesMinor-1), Unsupported, fmt.Sprintf(`"msg"="Kubernetes v1.%d.14 is older than the releases itemops is tested on (1.%d to 1.%d); the chart refuses it, and nothing has checked that itemops works there" "error"=null`, OldestKubernetesMinor-1, OldestKubernetesMinor, NewestKubernetesMinor)},
	} {
		server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/version" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(apimachineryversion.Info{GitVersion: tc.gitVersion})
		}))
		var lines []string
		log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
		got := (&KubernetesCheck{Config: &rest.Config{Host: server.URL}, HTTPClient: server.Client()}).Check(logr.NewContext(context.Background(), log))
		server.Close()
		if got != tc.want || len(lines) != 1 || !strings.Contains(lines[0], tc.logged) {
			t.Errorf("Check at %s = %s, logged %q; want %s logging %q", tc.gitVersion, got, lines, tc.want, tc.logged)
		}
	}

	unreachable := httptest.NewServer(http.NotFoundHandler())
	unreachable.Close()
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	if got := (&KubernetesCheck{Config: &rest.Config{Host: unreachable.URL}, HTTPClient: unreachable.Client()}).Check(logr.NewContext(context.Background(), log)); got != Unknown ||
		len(lines) != 1 || !strings.Contains(lines[0], "reading the API server's version") {
		t.Errorf("Check with no API server = %s, logged %q; want Unknown and the error", got, lines)
	}
}
