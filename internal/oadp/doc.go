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

// Package oadp reads itemops' chart values from what the OADP operator
// makes of a DataProtectionApplication: the DPA says the mode (its
// disabled-controllers), Velero's Deployment, which the operator builds
// from the DPA and its own images, says the rest (plugin images, Velero's
// image and server arguments, the credentials Secret). OADP's Go module
// is not imported (it replaces Velero with its own fork): the DPA is read
// as unstructured, by the fields of OADP's API.
package oadp
