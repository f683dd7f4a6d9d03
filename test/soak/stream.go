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
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/itemoperation"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/plugins/sim"
	"github.com/itemops/itemops/test/veleroenv"
)

// plugin starts every operation of the soak.
const plugin = "itemops.io/sample-datamover"

// speed is the sample plugin's mean rate; an operation's size is its
// lifetime at that rate.
const speed = 1 << 20

// stream creates Backups as a schedule does: one every cfg.interval(), each
// ending as Velero leaves a backup whose items started operations: the
// operations file in the bucket, the Backup waiting for its operations.
type stream struct {
	w   *world
	cfg config
	rng *rand.Rand

	mu                  sync.Mutex
	created, operations int
}

func (s *stream) run(ctx context.Context) {
	tick := time.NewTicker(s.cfg.interval())
	defer tick.Stop()
	for i := 0; ; i++ {
		if err := s.backup(ctx, i); err != nil && ctx.Err() == nil {
			// The API server may be restarting (a fault): the schedule
			// skips this one, as Velero's would fail it.
			fmt.Printf("soak: Backup %d not created: %v\n", i, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *stream) counts() (created, operations int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created, s.operations
}

// backup creates Backup i and starts its operations in the sample plugin:
// transfers at a constant rate, so that each runs exactly its lifetime and
// the stream holds the operations in flight it says (real-shaped ones run
// half as long again on average, and the last would still be arriving at
// the steady state), one in twenty failing part way.
func (s *stream) backup(ctx context.Context, i int) error {
	name := fmt.Sprintf("soak-%05d", i)
	b := &velerov1api.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: envtest.VeleroNamespace},
		Spec: velerov1api.BackupSpec{StorageLocation: veleroenv.Location, IncludedNamespaces: []string{name},
			ItemOperationTimeout: metav1.Duration{Duration: 4 * time.Hour}}}
	// The operations file names the Backup's UID: create it first.
	if err := s.w.c.Create(ctx, b); err != nil {
		return err
	}
	lo, hi := s.cfg.lifetimes()
	recs := make([]*itemoperation.BackupOperation, 0, s.cfg.perBackup)
	for j := range s.cfg.perBackup {
		lifetime := lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
		annotations := map[string]string{sim.AnnotationSize: strconv.FormatInt(int64(lifetime.Seconds()*speed), 10),
			sim.AnnotationSpeed: strconv.Itoa(speed)}
		if s.rng.IntN(20) == 0 {
			annotations[sim.AnnotationFailAt] = strconv.Itoa(10 + s.rng.IntN(80))
		}
		item := fmt.Sprintf("data-%02d", j)
		id, err := s.w.store.Start("upload", name+"/"+item, annotations)
		if err != nil {
			return err
		}
		created := metav1.Now()
		recs = append(recs, &itemoperation.BackupOperation{
			Spec: itemoperation.BackupOperationSpec{BackupName: name, BackupUID: string(b.UID), BackupItemAction: plugin,
				ResourceIdentifier: velero.ResourceIdentifier{GroupResource: schema.GroupResource{Resource: "persistentvolumeclaims"},
					Namespace: name, Name: item},
				OperationID: id},
			Status: itemoperation.OperationStatus{Phase: itemoperation.OperationPhaseNew, Created: &created},
		})
	}
	if err := veleroenv.WriteBackupOperations(s.w.velero.BucketDir, name, recs); err != nil {
		return err
	}
	b.Status = velerov1api.BackupStatus{Phase: velerov1api.BackupPhaseWaitingForPluginOperations,
		BackupItemOperationsAttempted: len(recs), StartTimestamp: &metav1.Time{Time: time.Now()}}
	if err := s.w.c.Update(ctx, b); err != nil {
		return err
	}
	s.mu.Lock()
	s.created++
	s.operations += len(recs)
	s.mu.Unlock()
	return nil
}

// player does what Velero and Kubernetes do after itemops: Velero's
// finalizer completes a finalized Backup (it reads the operations file
// itemops wrote back); its garbage collection deletes a Backup once its
// retention is over, with its files; and Kubernetes' garbage collector
// deletes the ItemOperations of a Backup that is gone (envtest runs no
// controller manager).
type player struct {
	w   *world
	cfg config

	mu sync.Mutex
	// completed, deleted: Backups completed and deleted by the player.
	completed, deleted int
	// lost: operations a finalized Backup's file does not hold as ended.
	lost []string
}

func (p *player) run(ctx context.Context) {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := p.pass(ctx); err != nil && ctx.Err() == nil {
			fmt.Printf("soak: playing Velero: %v\n", err)
		}
	}
}

func (p *player) counts() (completed, deleted int, lost []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.completed, p.deleted, p.lost
}

func (p *player) pass(ctx context.Context) error {
	// The ItemOperations first: each one's Backup existed before it, so the
	// Backups listed after them hold it unless it is really gone.
	ops := &metav1.PartialObjectMetadataList{}
	ops.SetGroupVersionKind(itemopsv1alpha1.GroupVersion.WithKind("ItemOperationList"))
	if err := p.w.c.List(ctx, ops, client.InNamespace(envtest.VeleroNamespace)); err != nil {
		return err
	}
	backups := &velerov1api.BackupList{}
	if err := p.w.c.List(ctx, backups, client.InNamespace(envtest.VeleroNamespace)); err != nil {
		return err
	}
	live := map[k8stypes.UID]bool{}
	for i := range backups.Items {
		b := &backups.Items[i]
		live[b.UID] = true
		switch b.Status.Phase {
		case velerov1api.BackupPhaseFinalizing, velerov1api.BackupPhaseFinalizingPartiallyFailed:
			if err := p.complete(ctx, b); err != nil {
				return err
			}
		case velerov1api.BackupPhaseCompleted, velerov1api.BackupPhasePartiallyFailed:
			if b.Status.CompletionTimestamp == nil || time.Since(b.Status.CompletionTimestamp.Time) < p.cfg.retention {
				continue
			}
			if err := client.IgnoreNotFound(p.w.c.Delete(ctx, b)); err != nil {
				return err
			}
			_ = os.RemoveAll(filepath.Dir(veleroenv.BackupOperationsFile(p.w.velero.BucketDir, b.Name)))
			delete(live, b.UID)
			p.mu.Lock()
			p.deleted++
			p.mu.Unlock()
		}
	}
	for i := range ops.Items {
		op := &ops.Items[i]
		if live[k8stypes.UID(op.Labels[itemopsv1alpha1.LabelParentUID])] || op.DeletionTimestamp != nil {
			continue
		}
		if err := client.IgnoreNotFound(p.w.c.Delete(ctx, op, client.PropagationPolicy(metav1.DeletePropagationBackground))); err != nil {
			return err
		}
	}
	return nil
}

// complete does what Velero's finalizer does with a finalized Backup, after
// checking that the operations file itemops wrote back holds the end of
// every operation the Backup attempted.
func (p *player) complete(ctx context.Context, b *velerov1api.Backup) error {
	recs, err := veleroenv.ReadBackupOperations(p.w.velero.BucketDir, b.Name)
	if err != nil {
		return fmt.Errorf("Backup %s is %s but its operations file cannot be read: %w", b.Name, b.Status.Phase, err)
	}
	var lost []string
	if len(recs) != b.Status.BackupItemOperationsAttempted {
		lost = append(lost, fmt.Sprintf("Backup %s: %d operations in its file, %d attempted", b.Name, len(recs), b.Status.BackupItemOperationsAttempted))
	}
	for _, rec := range recs {
		if rec.Status.Phase != itemoperation.OperationPhaseCompleted && rec.Status.Phase != itemoperation.OperationPhaseFailed {
			lost = append(lost, fmt.Sprintf("Backup %s: operation %s is %q in its file", b.Name, rec.Spec.OperationID, rec.Status.Phase))
		}
	}
	b.Status.Phase = velerov1api.BackupPhaseCompleted
	if b.Status.BackupItemOperationsFailed > 0 {
		b.Status.Phase = velerov1api.BackupPhasePartiallyFailed
	}
	b.Status.CompletionTimestamp = &metav1.Time{Time: time.Now()}
	if err := p.w.c.Update(ctx, b); err != nil {
		return client.IgnoreNotFound(err)
	}
	p.mu.Lock()
	p.completed++
	p.lost = append(p.lost, lost...)
	p.mu.Unlock()
	return nil
}
