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

package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The credentials a location's ObjectStore plugin is given: the Secret keys
// its spec names, as files (Velero's credentials.FileStore) or values
// (credentials.SecretStore), read from Velero's namespace around the cache.

// credentialFiles writes the Secret key a location names into a file the
// plugin can read, as Velero's credential file store does.
type credentialFiles struct {
	ctx   context.Context
	store *Store
}

// Path implements Velero's credentials.FileStore.
func (c *credentialFiles) Path(selector *corev1.SecretKeySelector) (string, error) {
	value, err := c.store.secretKey(c.ctx, selector)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(c.store.CredentialsDir, c.store.Namespace)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating the credentials directory: %w", err)
	}
	path := filepath.Join(dir, selector.Name+"-"+selector.Key)
	// Written beside and renamed, so a plugin never reads half a file.
	tmp, err := os.CreateTemp(dir, ".creds-*")
	if err != nil {
		return "", fmt.Errorf("writing credentials file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(value); err != nil {
		tmp.Close()
		return "", fmt.Errorf("writing credentials file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("writing credentials file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("writing credentials file: %w", err)
	}
	return path, nil
}

// secretValues reads the Secret key a location names (its CA certificate).
type secretValues struct {
	ctx   context.Context
	store *Store
}

// Get implements Velero's credentials.SecretStore.
func (v *secretValues) Get(selector *corev1.SecretKeySelector) (string, error) {
	value, err := v.store.secretKey(v.ctx, selector)
	return string(value), err
}

// secretKey reads one key of a Secret in Velero's namespace. The error never
// contains the Secret's data.
func (s *Store) secretKey(ctx context.Context, selector *corev1.SecretKeySelector) ([]byte, error) {
	secret := &corev1.Secret{}
	if err := s.Secrets.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: selector.Name}, secret); err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", s.Namespace, selector.Name, err)
	}
	value, ok := secret.Data[selector.Key]
	if !ok {
		return nil, fmt.Errorf("Secret %s/%s has no key %q", s.Namespace, selector.Name, selector.Key)
	}
	return value, nil
}
