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

package kube

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// MemoizedMapper remembers the mappings a RESTMapper found. A cache
// restricted to namespaces asks on every Get and List whether the kind is
// namespaced, and the discovery mapper answers by walking every group and
// version it knows, allocating errors as it goes. The kinds itemops reads
// never change scope, so the first answer stands; what was not found is
// asked again, so a CRD installed later is still found.
type MemoizedMapper struct {
	meta.RESTMapper
	mappings sync.Map // mappingKey → *meta.RESTMapping
}

var _ meta.RESTMapper = (*MemoizedMapper)(nil)

// NewMemoizedMapper memoizes mapper.
func NewMemoizedMapper(mapper meta.RESTMapper) *MemoizedMapper {
	return &MemoizedMapper{RESTMapper: mapper}
}

// NewDynamicMemoizedMapper is a manager's MapperProvider: controller-runtime's
// lazy discovery mapper, memoized.
func NewDynamicMemoizedMapper(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return NewMemoizedMapper(mapper), nil
}

type mappingKey struct {
	gk       schema.GroupKind
	versions string
}

// RESTMapping implements meta.RESTMapper.
func (m *MemoizedMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	key := mappingKey{gk: gk, versions: strings.Join(versions, ",")}
	if found, ok := m.mappings.Load(key); ok {
		return found.(*meta.RESTMapping), nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	m.mappings.Store(key, mapping)
	return mapping, nil
}
