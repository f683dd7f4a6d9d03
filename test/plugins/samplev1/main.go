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

// Command samplev1 is a Velero plugin binary that serves only v1 item actions
// (itemops.io/sample-v1-backupper, itemops.io/sample-v1-restorer), which start
// no asynchronous operations: itemops must report them as not supported.
package main

import (
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	biav1 "github.com/vmware-tanzu/velero/pkg/plugin/velero/backupitemaction/v1"
	riav1 "github.com/vmware-tanzu/velero/pkg/plugin/velero/restoreitemaction/v1"

	"github.com/itemops/itemops/test/plugins/sim"
)

func main() {
	framework.NewServer().
		BindFlags(pflag.CommandLine).
		RegisterBackupItemAction("itemops.io/sample-v1-backupper", func(logrus.FieldLogger) (any, error) { return backupper{}, nil }).
		RegisterRestoreItemAction("itemops.io/sample-v1-restorer", func(logrus.FieldLogger) (any, error) { return restorer{}, nil }).
		Serve()
}

type backupper struct{}

var _ biav1.BackupItemAction = backupper{}

func (backupper) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{LabelSelector: sim.LabelSelect}, nil
}

func (backupper) Execute(item runtime.Unstructured, _ *velerov1api.Backup) (runtime.Unstructured, []velero.ResourceIdentifier, error) {
	return item, nil, nil
}

type restorer struct{}

var _ riav1.RestoreItemAction = restorer{}

func (restorer) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{LabelSelector: sim.LabelSelect}, nil
}

func (restorer) Execute(input *velero.RestoreItemActionExecuteInput) (*velero.RestoreItemActionExecuteOutput, error) {
	return velero.NewRestoreItemActionExecuteOutput(input.Item), nil
}
