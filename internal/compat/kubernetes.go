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
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The minors of Kubernetes 1 that make test-kube passes on, oldest and
// newest; test/kube checks them against its results. The chart's
// kubeVersion refuses the older ones; kustomize and dist/install.yaml have
// no such gate, so itemops says it at start.
const (
	OldestKubernetesMinor = 31
	NewestKubernetesMinor = 37
)

// AssessKubernetes says what the API server's gitVersion (v1.37.2,
// v1.33.5-eks-…) means for itemops, and why.
func AssessKubernetes(gitVersion string) (Support, string) {
	tested := fmt.Sprintf("1.%d to 1.%d", OldestKubernetesMinor, NewestKubernetesMinor)
	v, err := version.ParseGeneric(gitVersion)
	if err != nil {
		return Unknown, fmt.Sprintf("the API server's version %q could not be read: %v; itemops is tested on Kubernetes %s", gitVersion, err, tested)
	}
	switch {
	case v.Major() != 1:
		return Untested, fmt.Sprintf("Kubernetes %s is not a 1.x release; itemops is tested on Kubernetes %s", gitVersion, tested)
	case v.Minor() < OldestKubernetesMinor:
		return Unsupported, fmt.Sprintf("Kubernetes %s is older than the releases itemops is tested on (%s); the chart refuses it, and nothing has checked that itemops works there", gitVersion, tested)
	case v.Minor() > NewestKubernetesMinor:
		return Untested, fmt.Sprintf("Kubernetes %s is newer than the releases itemops is tested on (%s)", gitVersion, tested)
	}
	return Supported, fmt.Sprintf("Kubernetes %s is a release itemops is tested on", gitVersion)
}

// KubernetesCheck says at start which Kubernetes the API server runs and
// whether itemops is tested there: the one gate kustomize and
// dist/install.yaml users see (the chart's kubeVersion is helm's). An
// Unsupported release is logged as an error.
type KubernetesCheck struct {
	Config     *rest.Config
	HTTPClient *http.Client
}

// NeedLeaderElection: every replica says what it runs on; it only logs.
func (c *KubernetesCheck) NeedLeaderElection() bool { return false }

// Start runs the check once; it never fails the manager.
func (c *KubernetesCheck) Start(ctx context.Context) error {
	c.Check(ctx)
	return nil
}

// Check reads the API server's release and reports it.
func (c *KubernetesCheck) Check(ctx context.Context) Support {
	log := ctrl.LoggerFrom(ctx).WithName("kubernetes-version")
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(c.Config, c.HTTPClient)
	if err != nil {
		log.Error(err, "reading the API server's version")
		return Unknown
	}
	info, err := dc.ServerVersion()
	if err != nil {
		log.Error(err, "reading the API server's version")
		return Unknown
	}
	support, why := AssessKubernetes(info.GitVersion)
	if support == Unsupported {
		log.Error(nil, why, "version", info.GitVersion, "support", support)
		return support
	}
	log.Info("Kubernetes' release", "version", info.GitVersion, "support", support, "why", why)
	return support
}
