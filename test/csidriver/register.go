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

package csidriver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Registrar registers a CSI driver with the kubelet, as
// node-driver-registrar does: it serves the kubelet's plugin-registration
// API on a socket in the kubelet's plugins_registry directory, and the
// kubelet, which watches that directory, asks it for the driver's name and
// endpoint and says whether it registered the driver.
type Registrar struct {
	registerapi.UnimplementedRegistrationServer

	// Name is the driver's; Endpoint its CSI socket as the kubelet sees it.
	Name, Endpoint string

	mu         sync.Mutex
	registered bool
	lastError  string
}

// Socket is the registration socket of driver in the kubelet's
// plugins_registry directory.
func Socket(registryDir, driver string) string {
	return filepath.Join(registryDir, driver+"-reg.sock")
}

// Serve serves the registration API on the Unix socket at path until ctx ends.
func (r *Registrar) Serve(ctx context.Context, path string) error {
	l, err := listenUnix(path)
	if err != nil {
		return err
	}
	server := grpc.NewServer()
	registerapi.RegisterRegistrationServer(server, r)
	go func() {
		<-ctx.Done()
		server.GracefulStop()
		// The kubelet unregisters a driver whose socket is gone.
		_ = os.Remove(path)
	}()
	return server.Serve(l)
}

// GetInfo implements the kubelet's registration API.
func (r *Registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.Name, Endpoint: r.Endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

// NotifyRegistrationStatus implements the kubelet's registration API.
func (r *Registrar) NotifyRegistrationStatus(_ context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.registered, r.lastError = status.GetPluginRegistered(), status.GetError()
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Registered reports whether the kubelet registered the driver, and its
// error when it refused.
func (r *Registrar) Registered() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastError != "" {
		return false, fmt.Errorf("the kubelet refused driver %s: %s", r.Name, r.lastError)
	}
	return r.registered, nil
}
