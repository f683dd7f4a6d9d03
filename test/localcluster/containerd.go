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

package localcluster

import (
	"context"
	"os/exec"
	"path/filepath"
	"time"
)

func (c *Cluster) startContainerd(ctx context.Context) error {
	if err := c.start("containerd", "containerd", "--config", c.path("containerd", "config.toml")); err != nil {
		return err
	}
	return c.waitFor(ctx, "containerd", 30*time.Second, func(ctx context.Context) (bool, error) {
		err := exec.CommandContext(ctx, "ctr", "--address", c.containerdSocket(), "version").Run()
		return err == nil, nil
	})
}

// importSandbox builds the sandbox image from ./test/localcluster/pause and
// imports it under the name containerd was given.
func (c *Cluster) importSandbox(ctx context.Context) error {
	dir := c.path("images")
	bins, err := BuildStatic(ctx, dir, "./test/localcluster/pause")
	if err != nil {
		return err
	}
	bin := bins[0]
	tarball := filepath.Join(dir, "pause.tar")
	img := Image{Ref: SandboxImage, Files: map[string]string{"/pause": bin}, Entrypoint: []string{"/pause"}, User: "65535:65535"}
	if err := img.Write(tarball); err != nil {
		return err
	}
	return c.ImportImage(ctx, tarball)
}
