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
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	proto "github.com/vmware-tanzu/velero/pkg/plugin/generated"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/pkg/plugin/framework"
	vsv2 "github.com/itemops/itemops/pkg/plugin/velero/volumesnapshotter/v2"
)

// ID is a plugin as a binary registers it: a Velero plugin kind (for example
// BackupItemActionV2) and a name (for example velero.io/csi-pvc-backupper).
type ID struct {
	Kind common.PluginKind
	Name string
}

// String implements fmt.Stringer.
func (id ID) String() string { return string(id.Kind) + "/" + id.Name }

// errRefused: a file that is never started.
var errRefused = errors.New("refused")

// Problem is a file in the plugin directory that was skipped, and why.
type Problem struct {
	Path string
	Err  error
}

// Registry is what discovery found: which binary serves each plugin.
type Registry struct {
	dir       string
	commands  map[ID]string
	conflicts map[ID][]string
	problems  []Problem
	// found is what each binary that was started answered; unlisted are
	// the files skipped before any was started (never asked again).
	found    map[string]listing
	unlisted []Problem
}

// listing is one binary's answer to "which plugins do you serve?".
type listing struct {
	ids []ID
	err error
}

// newRegistry resolves names from every binary's listing.
func newRegistry(dir string, unlisted []Problem, found map[string]listing) *Registry {
	reg := &Registry{dir: dir, commands: map[ID]string{}, conflicts: map[ID][]string{},
		problems: slices.Clone(unlisted), found: found, unlisted: unlisted}
	paths := slices.Sorted(maps.Keys(found))
	owners := map[ID][]string{}
	for _, path := range paths {
		l := found[path]
		if l.err != nil {
			reg.problems = append(reg.problems, Problem{Path: path, Err: l.err})
			continue
		}
		for _, id := range l.ids {
			if err := common.ValidatePluginName(id.Name, nil); err != nil {
				reg.problems = append(reg.problems, Problem{Path: path, Err: fmt.Errorf("skipping %s: %w", id, err)})
				continue
			}
			owners[id] = append(owners[id], path)
		}
	}
	for id, paths := range owners {
		if len(paths) == 1 {
			reg.commands[id] = paths[0]
			continue
		}
		// Velero refuses to start when two binaries register one name; we
		// cannot know which one Velero's operation came from, so neither is used.
		reg.conflicts[id] = paths
		reg.problems = append(reg.problems, Problem{Path: paths[1],
			Err: fmt.Errorf("%s is also registered by %s; neither is used", id, strings.Join(paths[:1], ", "))})
	}
	slices.SortFunc(reg.problems, func(a, b Problem) int { return strings.Compare(a.Path, b.Path) })
	return reg
}

// unanswered returns the binaries that were started but did not say what
// they serve: killed while starting, out of memory, too slow. Unlike a
// file that is not a plugin, they may answer when asked again.
func (r *Registry) unanswered() []string {
	var paths []string
	for path, l := range r.found {
		if l.err != nil {
			paths = append(paths, path)
		}
	}
	slices.Sort(paths)
	return paths
}

// IDs returns every plugin that can be called, sorted.
func (r *Registry) IDs() []ID {
	ids := make([]ID, 0, len(r.commands))
	for id := range r.commands {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b ID) int { return strings.Compare(a.String(), b.String()) })
	return ids
}

// servedBy returns, sorted, the plugins the binary at path serves.
func (r *Registry) servedBy(path string) []ID {
	return slices.DeleteFunc(r.IDs(), func(id ID) bool { return r.commands[id] != path })
}

// OperationPlugins returns, sorted, every plugin discovered that can start
// operations an ItemOperation follows: BackupItemActions and
// RestoreItemActions of version 2, and VolumeSnapshotters.
func (r *Registry) OperationPlugins() []OperationPlugin {
	set := map[OperationPlugin]bool{}
	for id := range r.commands {
		switch id.Kind {
		case common.PluginKindBackupItemActionV2:
			set[OperationPlugin{itemopsv1alpha1.PluginKindBackupItemAction, id.Name}] = true
		case common.PluginKindRestoreItemActionV2:
			set[OperationPlugin{itemopsv1alpha1.PluginKindRestoreItemAction, id.Name}] = true
		case common.PluginKindVolumeSnapshotter, vsv2.PluginKind:
			set[OperationPlugin{itemopsv1alpha1.PluginKindVolumeSnapshotter, id.Name}] = true
		}
	}
	plugins := slices.Collect(maps.Keys(set))
	slices.SortFunc(plugins, func(a, b OperationPlugin) int {
		return strings.Compare(string(a.Kind)+"/"+a.Name, string(b.Kind)+"/"+b.Name)
	})
	return plugins
}

// Plugin interfaces, the interface of a Discovered plugin.
const (
	// InterfaceV2 is a plugin whose Progress and Cancel itemops calls.
	InterfaceV2 = "v2"
	// InterfaceV1 is a plugin of a kind's first version: a
	// BackupItemAction or RestoreItemAction that starts no operations, or
	// a VolumeSnapshotter whose snapshots itemops reports durable at once
	// (the v1 adapter); ObjectStores and Velero's other kinds have no other.
	InterfaceV1 = "v1"
)

// Discovered is one plugin discovery found, by the kind an administrator
// names it with (BackupItemAction, not BackupItemActionV2) and the
// interface version itemops calls it through.
type Discovered struct {
	Kind      string
	Name      string
	Interface string
	// Binary is the path of the binary that serves it.
	Binary string
}

// v2Of maps each version-2 kind to the kind that names it.
var v2Of = map[common.PluginKind]common.PluginKind{
	common.PluginKindBackupItemActionV2:  common.PluginKindBackupItemAction,
	common.PluginKindRestoreItemActionV2: common.PluginKindRestoreItemAction,
	vsv2.PluginKind:                      common.PluginKindVolumeSnapshotter,
}

// Plugins returns, sorted by kind and name, every plugin that can be
// called, each once: a name served as v1 and v2 (a VolumeSnapshotter v2 is
// also listed as v1, for Velero) is the v2 plugin itemops calls.
func (r *Registry) Plugins() []Discovered {
	byID := map[ID]Discovered{}
	for id, path := range r.commands {
		d := Discovered{Kind: string(id.Kind), Name: id.Name, Interface: InterfaceV1, Binary: path}
		if base, ok := v2Of[id.Kind]; ok {
			d.Kind, d.Interface = string(base), InterfaceV2
		}
		key := ID{Kind: common.PluginKind(d.Kind), Name: d.Name}
		if have, ok := byID[key]; !ok || have.Interface == InterfaceV1 {
			byID[key] = d
		}
	}
	out := slices.Collect(maps.Values(byID))
	slices.SortFunc(out, func(a, b Discovered) int {
		return strings.Compare(a.Kind+"/"+a.Name, b.Kind+"/"+b.Name)
	})
	return out
}

// OperationPlugin is a plugin as an ItemOperation names it.
type OperationPlugin struct {
	Kind itemopsv1alpha1.PluginKind
	Name string
}

// Binaries returns the file names of the binaries that answered discovery,
// sorted: the names plugin restarts are counted by.
func (r *Registry) Binaries() []string {
	var names []string
	for path, l := range r.found {
		if l.err == nil {
			names = append(names, filepath.Base(path))
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Problems returns the files that were skipped and the names that more than
// one binary registered.
func (r *Registry) Problems() []Problem { return slices.Clone(r.problems) }

// Has reports whether a binary serves id.
func (r *Registry) Has(id ID) bool {
	_, ok := r.commands[id]
	return ok
}

// Command returns the binary that serves id.
func (r *Registry) Command(id ID) (string, error) {
	if path, ok := r.commands[id]; ok {
		return path, nil
	}
	if paths, ok := r.conflicts[id]; ok {
		return "", fmt.Errorf("%s is registered by more than one binary (%s); remove all but one from %s",
			id, strings.Join(paths, ", "), r.dir)
	}
	if len(r.problems) == 0 {
		return "", fmt.Errorf("no binary in %s registers %s", r.dir, id)
	}
	// One of the skipped files may be the one meant to serve it.
	skipped := make([]string, 0, len(r.problems))
	for _, p := range r.problems {
		skipped = append(skipped, fmt.Sprintf("%s: %v", p.Path, p.Err))
	}
	return "", fmt.Errorf("no binary in %s registers %s; skipped there: %s", r.dir, id, strings.Join(skipped, "; "))
}

// discoveryConcurrency bounds the binaries started at once during discovery.
const discoveryConcurrency = 4

// Discover asks every executable in the plugin directory (recursively, as
// Velero does) which plugins it serves, and makes the result the registry
// that calls resolve names against. Files that are not Velero plugins, fail
// the handshake or register invalid or duplicate names are skipped and
// reported in the registry's Problems; nothing here is fatal. A binary that
// started but did not answer is asked again when an operation needs a
// plugin no binary serves (see lookup).
func (m *Manager) Discover(ctx context.Context) *Registry {
	paths, problems := executables(m.opts.Dir)
	reg := newRegistry(m.opts.Dir, problems, m.listAll(ctx, paths))
	for _, p := range reg.problems {
		m.log.Error(p.Err, "skipping in plugin directory", "path", p.Path)
	}
	plugins := reg.Plugins()
	for _, p := range plugins {
		m.log.Info("discovered plugin", "kind", p.Kind, "name", p.Name, "interface", p.Interface, "binary", p.Binary)
	}
	m.log.Info("discovered plugins", "dir", m.opts.Dir, "binaries", len(paths), "plugins", len(plugins), "problems", len(reg.problems))
	m.store(reg)
	return reg
}

// store makes reg the registry calls resolve names against.
func (m *Manager) store(reg *Registry) {
	m.registry.Store(reg)
	if m.opts.OnDiscovered != nil {
		m.opts.OnDiscovered(reg.Plugins())
	}
}

// Binaries that did not answer are asked again no sooner than relistFirst
// after the last time, waiting twice as long after each time none of them
// answers, up to relistMax.
const (
	relistFirst = 10 * time.Second
	relistMax   = 5 * time.Minute
)

// lookup returns the registry to resolve any of ids against. When none of
// them is served and some binary did not answer discovery, those binaries
// are asked again first (see relistFirst): a plugin killed while discovery
// asked it must not stay unknown until itemops restarts.
func (m *Manager) lookup(ctx context.Context, ids ...ID) *Registry {
	reg := m.registry.Load()
	if slices.ContainsFunc(ids, reg.Has) || len(reg.unanswered()) == 0 {
		return reg
	}
	m.relistMu.Lock()
	defer m.relistMu.Unlock()
	reg = m.registry.Load() // another caller may have asked meanwhile
	paths := reg.unanswered()
	if m.relistWait == 0 {
		m.relistWait = relistFirst
	}
	if slices.ContainsFunc(ids, reg.Has) || len(paths) == 0 ||
		(!m.relisted.IsZero() && m.clock.Since(m.relisted) < m.relistWait) {
		return reg
	}
	m.relisted = m.clock.Now()
	answers := m.listAll(ctx, paths)
	found := maps.Clone(reg.found)
	maps.Copy(found, answers)
	m.relistWait = min(2*m.relistWait, relistMax)
	if slices.ContainsFunc(paths, func(path string) bool { return answers[path].err == nil }) {
		m.relistWait = relistFirst
	}
	for _, path := range paths {
		if err := answers[path].err; err != nil {
			m.log.Error(err, "still skipping in plugin directory", "path", path, "askedAgainIn", m.relistWait.String())
			continue
		}
		m.log.Info("plugin binary answered when asked again", "path", path, "plugins", len(answers[path].ids))
	}
	next := newRegistry(reg.dir, reg.unlisted, found)
	for _, p := range next.Plugins() {
		if slices.Contains(paths, p.Binary) {
			m.log.Info("discovered plugin", "kind", p.Kind, "name", p.Name, "interface", p.Interface, "binary", p.Binary)
		}
	}
	m.store(next)
	return next
}

// listAll lists the binaries at paths, a few at a time.
func (m *Manager) listAll(ctx context.Context, paths []string) map[string]listing {
	results := make([]listing, len(paths))
	sem := make(chan struct{}, discoveryConcurrency)
	var wg sync.WaitGroup
	for i, path := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ids, err := m.list(ctx, path)
			results[i] = listing{ids, err}
		}()
	}
	wg.Wait()
	found := make(map[string]listing, len(paths))
	for i, path := range paths {
		found[path] = results[i]
	}
	return found
}

// list starts the binary, asks its PluginLister what it serves, and stops it.
func (m *Manager) list(ctx context.Context, path string) ([]ID, error) {
	r, err := m.start(path)
	if err != nil {
		return nil, fmt.Errorf("not a Velero plugin, or it failed the handshake: %w", err)
	}
	defer r.client.Kill()
	ctx, cancel := context.WithTimeout(ctx, m.opts.CallTimeout)
	defer cancel()
	// Ask for the kinds only itemops knows too; a binary built with
	// itemops' plugin framework lists them only when asked.
	resp, err := proto.NewPluginListerClient(r.conn).ListPlugins(framework.WithKinds(ctx, vsv2.PluginKind), &proto.Empty{})
	if err != nil {
		return nil, fmt.Errorf("listing its plugins: %w", err)
	}
	ids := make([]ID, 0, len(resp.GetPlugins()))
	for _, p := range resp.GetPlugins() {
		ids = append(ids, ID{Kind: common.PluginKind(p.GetKind()), Name: p.GetName()})
	}
	return ids, nil
}

// executables returns the executable regular files below dir, sorted.
func executables(dir string) ([]string, []Problem) {
	var paths []string
	var problems []Problem
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			problems = append(problems, Problem{Path: path, Err: err})
			if d != nil && d.IsDir() && path != dir {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		info, err := os.Stat(path) // follows links, as exec does
		if err != nil {
			problems = append(problems, Problem{Path: path, Err: err})
			return nil
		}
		if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			return nil
		}
		// itemops runs what it finds here: a binary anyone may replace is
		// never started, not even to ask what it serves.
		if info.Mode().Perm()&0o002 != 0 {
			problems = append(problems, Problem{Path: path, Err: fmt.Errorf("%w: writable by every user (mode %#o)", errRefused, info.Mode().Perm())})
			return nil
		}
		paths = append(paths, path)
		return nil
	})
	if err != nil {
		problems = append(problems, Problem{Path: dir, Err: err})
	}
	return paths, problems
}
