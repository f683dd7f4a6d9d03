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

// Package kubeversion says what the Kubernetes release of the API server
// means for itemops: the releases make test-kube passes on
// (test/kube/results.md) are supported, and the chart's kubeVersion refuses
// the older ones; kustomize and dist/install.yaml have no such gate, so
// itemops says it at start.
package kubeversion

import (
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// The minors of Kubernetes 1 that make test-kube passes on, oldest and
// newest; test/kube checks them against its results.
const (
	OldestMinor = 31
	NewestMinor = 37
)

// Support is what a release means for itemops.
type Support string

const (
	// Supported: a minor make test-kube passes on.
	Supported Support = "Supported"
	// Untested: newer than the newest tested; nothing known breaks.
	Untested Support = "Untested"
	// Unsupported: older than the oldest tested; the chart refuses it.
	Unsupported Support = "Unsupported"
	// Unknown: the API server's version could not be read.
	Unknown Support = "Unknown"
)

// Assess says what the API server's gitVersion (v1.37.2, v1.33.5-eks-…)
// means for itemops, and why.
func Assess(gitVersion string) (Support, string) {
	tested := fmt.Sprintf("1.%d to 1.%d", OldestMinor, NewestMinor)
	v, err := version.ParseGeneric(gitVersion)
	if err != nil {
		return Unknown, fmt.Sprintf("the API server's version %q could not be read: %v; itemops is tested on Kubernetes %s", gitVersion, err, tested)
	}
	switch {
	case v.Major() != 1:
		return Untested, fmt.Sprintf("Kubernetes %s is not a 1.x release; itemops is tested on Kubernetes %s", gitVersion, tested)
	case v.Minor() < OldestMinor:
		return Unsupported, fmt.Sprintf("Kubernetes %s is older than the releases itemops is tested on (%s); the chart refuses it, and nothing has checked that itemops works there", gitVersion, tested)
	case v.Minor() > NewestMinor:
		return Untested, fmt.Sprintf("Kubernetes %s is newer than the releases itemops is tested on (%s)", gitVersion, tested)
	}
	return Supported, fmt.Sprintf("Kubernetes %s is a release itemops is tested on", gitVersion)
}

// Report says at start which Kubernetes the API server runs and whether
// itemops is tested there: the one gate kustomize and dist/install.yaml
// users see (the chart's kubeVersion is helm's). An Unsupported release is
// logged as an error; nothing here stops itemops.
func Report(cfg *rest.Config, httpClient *http.Client, log logr.Logger) Support {
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		log.Error(err, "reading the API server's version")
		return Unknown
	}
	info, err := dc.ServerVersion()
	if err != nil {
		log.Error(err, "reading the API server's version")
		return Unknown
	}
	support, why := Assess(info.GitVersion)
	if support == Unsupported {
		log.Error(nil, why, "version", info.GitVersion, "support", support)
		return support
	}
	log.Info("Kubernetes' release", "version", info.GitVersion, "support", support, "why", why)
	return support
}
