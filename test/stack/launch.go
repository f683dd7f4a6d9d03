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

package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sync/errgroup"

	"github.com/itemops/itemops/test/localcluster"
)

// Launch is how a stack starts on a new one-node cluster: what is built
// for it, the cluster's configuration, and where its logs are kept.
type Launch struct {
	// Root is the itemops checkout.
	Root string
	// ItemopsTag is the tag the itemops image is built with; AlsoTags
	// name the same image too (an "upgrade" to another tag).
	ItemopsTag string
	AlsoTags   []string
	// Bare starts the cluster without building any image.
	Bare bool
	// Cluster configures the cluster; BinDir and an empty Log are filled
	// in.
	Cluster localcluster.Config
	// MoreImages, if set, builds more images as tarballs in dir, beside
	// the node's binaries and the stack's images, and returns them.
	MoreImages func(ctx context.Context, dir string) ([]string, error)
	// KeepLogs, unless empty, is where the cluster's logs are copied when
	// Start fails once the cluster runs, or Stop is asked to keep them.
	KeepLogs string
	// Log gets the steps and the stack's commands.
	Log io.Writer
}

// Start builds (once per machine) what the cluster runs and, while the
// node's Kubernetes binaries build, the images; then it starts the
// cluster, imports the images into it and prepares the stack's working
// directory. Whatever fails once the cluster runs, it is stopped again.
func (l Launch) Start(ctx context.Context) (s *Stack, err error) {
	// The images are built outside the cluster's directory, which its
	// start wipes; once imported they are not needed.
	images, err := os.MkdirTemp("", "itemops-images-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(images)
	var (
		bins     Binaries
		tarballs []string
		more     []string
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		if l.Bare {
			bins, err = FindBinaries(gctx, l.Root)
			return err
		}
		bins, tarballs, err = FindBinariesAndBuildImages(gctx, l.Root, images, l.ItemopsTag)
		return err
	})
	if l.MoreImages != nil {
		dir := filepath.Join(images, "more")
		g.Go(func() (err error) {
			if err := os.Mkdir(dir, 0o755); err != nil {
				return err
			}
			more, err = l.MoreImages(gctx, dir)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("building what the cluster runs, and its images: %w", err)
	}
	if err := localcluster.CheckPrerequisites(bins.KubeDir); err != nil {
		return nil, err
	}

	cfg := l.Cluster
	cfg.BinDir = bins.KubeDir
	if cfg.Log == nil {
		cfg.Log = l.Log
	}
	c, err := localcluster.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bringing the cluster up: %w", err)
	}
	s = &Stack{Cluster: c, keepLogs: l.KeepLogs}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Stop(context.WithoutCancel(ctx), true))
			s = nil
		}
	}()
	started, err := New(ctx, c, l.Root, filepath.Join(c.Dir, "work"), bins, l.Log)
	if err != nil {
		return s, err
	}
	started.keepLogs = l.KeepLogs
	s = started
	for _, t := range append(tarballs, more...) {
		if err := c.ImportImage(ctx, t); err != nil {
			return s, err
		}
	}
	for _, tag := range l.AlsoTags {
		if err := c.TagImage(ctx, ItemopsRepository+":"+l.ItemopsTag, ItemopsRepository+":"+tag); err != nil {
			return s, err
		}
	}
	return s, nil
}

// Stop tears the stack's cluster down, copying its logs first to the
// Launch's KeepLogs if keepLogs (a spec failed) and one was named.
func (s *Stack) Stop(ctx context.Context, keepLogs bool) error {
	var err error
	if keepLogs && s.keepLogs != "" {
		err = os.CopyFS(s.keepLogs, os.DirFS(s.Cluster.LogDir))
	}
	return errors.Join(err, s.Cluster.Stop(ctx))
}
