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

package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestVeleroNamespaceIsTheVeleroCLIs checks the namespace used without -n:
// the velero CLI's client config wins over $VELERO_NAMESPACE, which wins
// over velero.
func TestVeleroNamespaceIsTheVeleroCLIs(t *testing.T) {
	for _, c := range []struct {
		name, env, config, want string
	}{
		{"nothing set", "", "", "velero"},
		{"environment", "backup-system", "", "backup-system"},
		{"client config", "backup-system", `{"namespace": "velero-prod"}`, "velero-prod"},
		{"client config without a namespace", "backup-system", `{"features": ""}`, "backup-system"},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			t.Setenv("HOME", home)
			t.Setenv("VELERO_NAMESPACE", c.env)
			if c.config != "" {
				dir := filepath.Join(home, ".config", "velero")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(c.config), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := VeleroNamespace(); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestParentKind(t *testing.T) {
	for _, arg := range []string{"backup", "Backups", "backups.velero.io", "restore", "restores", "restore.velero.io"} {
		if _, err := parentKind(arg); err != nil {
			t.Errorf("%s: %v", arg, err)
		}
	}
	if _, err := parentKind("schedule"); err == nil || err.Error() != `unknown kind "schedule": backup or restore` {
		t.Errorf("schedule: %v", err)
	}
}
