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

package v1alpha1

// IsMirror reports whether the ItemOperation mirrors a Velero object
// (spec.mirror) rather than follow a plugin's operation.
func (o *ItemOperation) IsMirror() bool {
	return o.Spec.Mirror != nil
}

// MoverKind is what moves the operation's data, for people and metrics:
// the plugin's kind, or the kind of the Velero object a mirror follows.
func (o *ItemOperation) MoverKind() string {
	if o.Spec.Mirror != nil {
		return string(o.Spec.Mirror.Kind)
	}
	return string(o.Spec.Plugin.Kind)
}

// Mover is what moves the operation's data, where operations are grouped
// by it: the plugin's registered name, or the kind a mirror follows.
func (o *ItemOperation) Mover() string {
	if o.Spec.Mirror != nil {
		return string(o.Spec.Mirror.Kind)
	}
	return o.Spec.Plugin.Name
}

// MoverName names what moves the operation's data, for people: the
// plugin's registered name, or the kind and name of the Velero object a
// mirror follows (PodVolumeBackup/NAME).
func (o *ItemOperation) MoverName() string {
	if o.Spec.Mirror != nil {
		return string(o.Spec.Mirror.Kind) + "/" + o.Spec.Mirror.Name
	}
	return o.Spec.Plugin.Name
}
