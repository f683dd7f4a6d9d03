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

package why

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServerWatch reads Velero's Deployment at most once per Every, however
// many operations ask: what velero server's state is costs one GET per
// interval, not one per poll.
type ServerWatch struct {
	// Reader gets the Deployment (a GET the chart grants by its name).
	Reader          client.Reader
	Namespace, Name string
	Every           time.Duration
	Clock           clock.PassiveClock

	mu   sync.Mutex
	at   time.Time
	last *Server
}

// Server is what the Deployment said at the last read, read again when
// that is older than Every. A Deployment that cannot be read (not granted)
// says nothing: Found false.
func (w *ServerWatch) Server(ctx context.Context) (*Server, error) {
	c := w.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := c.Now()
	if w.last != nil && now.Sub(w.at) < w.Every {
		return w.last, nil
	}
	s := &Server{Namespace: w.Namespace, Name: w.Name}
	d := &appsv1.Deployment{}
	switch err := w.Reader.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: w.Name}, d); {
	case err == nil:
		s.Found = true
		s.Observed = d.Status.ObservedGeneration > 0
		s.Replicas, s.Ready = 1, d.Status.ReadyReplicas
		if d.Spec.Replicas != nil {
			s.Replicas = *d.Spec.Replicas
		}
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
	default:
		return nil, fmt.Errorf("reading Velero's Deployment %s/%s: %w", w.Namespace, w.Name, err)
	}
	w.last, w.at = s, now
	return s, nil
}
