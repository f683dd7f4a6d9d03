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

package view

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
)

// Scheme holds the kinds the commands read: Velero's Backups and Restores,
// ItemOperations, and Deployments (Velero's, for values-from-dpa).
func Scheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(velerov1api.AddToScheme(scheme))
	utilruntime.Must(itemopsv1alpha1.AddToScheme(scheme))
	utilruntime.Must(appsv1.AddToScheme(scheme)) // Velero's Deployment (values-from-dpa)
	return scheme
}

// newParent is an empty Backup or Restore.
func newParent(kind itemopsv1alpha1.ParentKind) (client.Object, error) {
	switch kind {
	case itemopsv1alpha1.ParentKindBackup:
		return &velerov1api.Backup{}, nil
	case itemopsv1alpha1.ParentKindRestore:
		return &velerov1api.Restore{}, nil
	}
	return nil, fmt.Errorf("unknown parent kind %q: Backup or Restore", kind)
}

// Read is a snapshot of the parent and its operations, read with c.
func Read(ctx context.Context, c client.Reader, p Parent) (Snapshot, error) {
	obj, err := newParent(p.Kind)
	if err != nil {
		return Snapshot{}, err
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return Snapshot{Parent: p}, nil
		}
		return Snapshot{}, err
	}
	ops := &itemopsv1alpha1.ItemOperationList{}
	if err := c.List(ctx, ops, client.InNamespace(p.Namespace),
		client.MatchingLabels{itemopsv1alpha1.LabelParentName: itemopsv1alpha1.ParentNameLabelValue(p.Name)}); err != nil {
		return Snapshot{}, err
	}
	switch parent := obj.(type) {
	case *velerov1api.Backup:
		return BackupSnapshot(parent, ops.Items), nil
	case *velerov1api.Restore:
		return RestoreSnapshot(parent, ops.Items), nil
	}
	return Snapshot{}, fmt.Errorf("unexpected parent %T", obj)
}

// Watch sends a snapshot of the parent and its operations to snapshots at
// the start and after every change the API server reports, until ctx ends
// or the watch fails (for example when the identity may not watch them).
// Changes that come faster than snapshots are read are merged.
//
// The parent and its operations arrive on two watches that keep no order
// between them, so the change that ends the parent can arrive before the
// last changes of its operations. A snapshot whose parent has ended is
// therefore read again from the API server itself: the last snapshot holds
// every operation change written before the parent ended.
func Watch(ctx context.Context, cfg *rest.Config, p Parent, snapshots chan<- Snapshot) error {
	parent, err := newParent(p.Kind)
	if err != nil {
		return err
	}
	live, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c, err := cache.New(cfg, cache.Options{
		Scheme:            Scheme(),
		DefaultNamespaces: map[string]cache.Config{p.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&itemopsv1alpha1.ItemOperation{}: {Label: labels.SelectorFromSet(labels.Set{
				itemopsv1alpha1.LabelParentName: itemopsv1alpha1.ParentNameLabelValue(p.Name)})},
			parent: {Field: fields.OneTermEqualSelector("metadata.name", p.Name)},
		},
		// A watch the API server refuses is not retried for ever: the
		// person asking must hear why.
		DefaultWatchErrorHandler: func(_ context.Context, _ *toolscache.Reflector, err error) {
			if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
				cancel(err)
			}
		},
	})
	if err != nil {
		return err
	}
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	for _, obj := range []client.Object{&itemopsv1alpha1.ItemOperation{}, parent} {
		informer, err := c.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := informer.AddEventHandler(handler); err != nil {
			return err
		}
	}
	go func() {
		if err := c.Start(ctx); err != nil {
			cancel(err)
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		return watchEnd(ctx)
	}
	notify()
	for {
		select {
		case <-ctx.Done():
			return watchEnd(ctx)
		case <-changed:
		}
		s, err := readSettled(ctx, c, live, p)
		if err != nil {
			return err
		}
		select {
		case snapshots <- s:
		case <-ctx.Done():
			return watchEnd(ctx)
		}
	}
}

// readSettled is a snapshot read from cached, or from live when the cached
// parent has ended, so that an ending snapshot misses no operation change.
func readSettled(ctx context.Context, cached, live client.Reader, p Parent) (Snapshot, error) {
	s, err := Read(ctx, cached, p)
	if err != nil {
		return Snapshot{}, err
	}
	if _, ended := Ended(s); !ended {
		return s, nil
	}
	return Read(ctx, live, p)
}

// watchEnd is why the watch stopped: nil when its caller ended it.
func watchEnd(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil && err != context.Canceled {
		return fmt.Errorf("watching: %w", err)
	}
	return nil
}
