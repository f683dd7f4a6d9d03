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
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
)

// ValuesFile is the values file the README's helm commands read, in the
// working directory.
const ValuesFile = "itemops-values.yaml"

// Install brings up the bucket and the CSI parts, then installs Velero
// and itemops (observe mode, the chart's defaults) with the README's
// commands, itemops' image being ItemopsRepository:itemopsTag.
func (s *Stack) Install(ctx context.Context, itemopsTag string) error {
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"the bucket (versitygw)", s.Storage},
		{"the CSI snapshot controller and driver", s.CSI},
		{"Velero's namespace", s.VeleroNamespace},
		{"velero install (README)", func(ctx context.Context) error { return s.RunREADME(ctx, "velero") }},
		{"Velero adjusted to this machine", s.AdjustVelero},
		{"Velero ready, its location Available", s.WaitVelero},
		{"itemops' values (README)", func(context.Context) error { return s.WriteItemopsValues(itemopsTag) }},
		{"helm install itemops (README)", func(ctx context.Context) error { return s.RunREADME(ctx, "itemops") }},
	}
	for _, step := range steps {
		start := time.Now()
		if err := step.do(ctx); err != nil {
			return fmt.Errorf("%s: %w", step.what, err)
		}
		fmt.Fprintf(s.Log, "stack: %s (%.1fs)\n", step.what, time.Since(start).Seconds())
	}
	return nil
}

// WaitVelero waits for Velero's Deployment and node-agent's pod, and for
// the default BackupStorageLocation to be Available.
func (s *Stack) WaitVelero(ctx context.Context) error {
	if err := s.WaitAvailable(ctx, s.Namespace, "velero", 3*time.Minute); err != nil {
		return err
	}
	if err := s.WaitDaemonSet(ctx, s.Namespace, "node-agent", 3*time.Minute); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		bsl := &velerov1api.BackupStorageLocation{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "default"}, bsl); err != nil {
			return false, nil
		}
		return bsl.Status.Phase == velerov1api.BackupStorageLocationPhaseAvailable, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the BackupStorageLocation default to be Available: %w\n%s", err, s.Diagnose(context.WithoutCancel(ctx), s.Namespace))
	}
	return nil
}

// WriteItemopsValues writes ValuesFile: the README's values block as
// written, and what this machine needs besides (MachineValues).
func (s *Stack) WriteItemopsValues(itemopsTag string) error {
	readme, err := os.ReadFile(filepath.Join(s.Root, "README.md"))
	if err != nil {
		return err
	}
	block, err := READMEBlock(readme, "values")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Work, ValuesFile), []byte(block), 0o644); err != nil {
		return err
	}
	return s.MachineValues(itemopsTag, true)
}

// MachineValues adds to ValuesFile, as a user's commands wrote it, what
// this machine needs besides: the image built here (pullPolicy Never:
// there is no registry), and the sample plugins' directory shared with
// Velero's pod; with addSamples, the sample plugins' init container after
// the user's plugins (values read from Velero's Deployment have it).
func (s *Stack) MachineValues(itemopsTag string, addSamples bool) error {
	path := filepath.Join(s.Work, ValuesFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	values := map[string]any{}
	if err := yaml.Unmarshal(data, &values); err != nil {
		return fmt.Errorf("%s: %w", ValuesFile, err)
	}
	values["image"] = map[string]any{"repository": ItemopsRepository, "tag": itemopsTag, "pullPolicy": "Never"}
	builtin, _ := values["builtinPlugins"].(map[string]any)
	if builtin == nil {
		builtin = map[string]any{}
	}
	builtinImage, _ := builtin["image"].(map[string]any)
	if builtinImage == nil {
		builtinImage = map[string]any{}
	}
	builtinImage["pullPolicy"] = "Never"
	builtin["image"] = builtinImage
	values["builtinPlugins"] = builtin
	if addSamples {
		inits, _ := values["initContainers"].([]any)
		values["initContainers"] = append(inits, map[string]any{
			"name": "itemops-sample-plugins", "image": SamplePluginsImage, "imagePullPolicy": "Never",
			"volumeMounts": []any{map[string]any{"name": "plugins", "mountPath": "/target"}},
		})
	}
	volume, mount, env := sampleState()
	values["extraVolumes"] = []any{volume}
	values["extraVolumeMounts"] = []any{mount}
	values["extraEnv"] = []any{env}
	out, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}
