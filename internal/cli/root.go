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
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	veleroclient "github.com/vmware-tanzu/velero/pkg/client"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/view"
)

// Exit codes other than a watch's outcomes.
const (
	// ExitError: the command could not do what it was asked (the error is printed).
	ExitError = 1
	// ExitWatchError: a watch could not run; 1 to 3 are outcomes of a parent.
	ExitWatchError = 4
)

// exitCode carries a command's exit code out of cobra.
type exitCode struct {
	code int
	err  error
}

func (e *exitCode) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *exitCode) Unwrap() error { return e.err }

// options are what every command shares: kubectl's connection flags and
// the namespace, which defaults to Velero's.
type options struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	clock   clock.PassiveClock
	// located is the namespace of Velero's Deployment, found by client
	// when nothing names Velero's namespace.
	located string
}

// namespace is -n when given, else Velero's namespace as the velero CLI
// finds it: its client config's namespace, else $VELERO_NAMESPACE; else
// the namespace of the one Deployment named velero (OADP's
// openshift-adp, say), else velero. The kubeconfig context's namespace is
// not used: the operations live in Velero's namespace, wherever the
// context points.
func (o *options) namespace() string {
	if o.flags.Namespace != nil && *o.flags.Namespace != "" {
		return *o.flags.Namespace
	}
	if ns := veleroConfigNamespace(); ns != "" {
		return ns
	}
	if o.located != "" {
		return o.located
	}
	return defaultVeleroNamespace
}

// defaultVeleroNamespace is where velero install puts Velero.
const defaultVeleroNamespace = "velero"

// VeleroNamespace is the namespace the velero CLI would use without -n.
func VeleroNamespace() string {
	if ns := veleroConfigNamespace(); ns != "" {
		return ns
	}
	return defaultVeleroNamespace
}

// veleroConfigNamespace is the namespace the velero CLI's client config
// names, else $VELERO_NAMESPACE, else "".
func veleroConfigNamespace() string {
	if config, err := veleroclient.LoadConfig(); err == nil && config.Namespace() != "" {
		return config.Namespace()
	}
	return os.Getenv("VELERO_NAMESPACE")
}

// locateVelero is the namespace of the one Deployment named velero, the
// name Velero's server runs under however it was installed (velero
// install, its helm chart, OADP), or "" when there is none, several, or
// they cannot be listed.
func locateVelero(ctx context.Context, c client.Reader) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("DeploymentList"))
	if err := c.List(ctx, list, client.MatchingFields{"metadata.name": defaultVeleroNamespace}); err != nil || len(list.Items) != 1 {
		return ""
	}
	return list.Items[0].Namespace
}

func (o *options) config() (*rest.Config, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "kubectl-itemops"
	return cfg, nil
}

func (o *options) client() (client.Client, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	return o.clientFor(cfg)
}

// parent is the Backup or Restore a command's two arguments name (kind and
// name), in Velero's namespace, with the configuration and the client to
// read it.
func (o *options) parent(args []string) (view.Parent, *rest.Config, client.Client, error) {
	kind, err := parentKind(args[0])
	if err != nil {
		return view.Parent{}, nil, nil, err
	}
	cfg, err := o.config()
	if err != nil {
		return view.Parent{}, nil, nil, err
	}
	c, err := o.clientFor(cfg)
	if err != nil {
		return view.Parent{}, nil, nil, err
	}
	// After the client: it finds Velero's namespace when nothing names it.
	return view.Parent{Kind: kind, Namespace: o.namespace(), Name: args[1]}, cfg, c, nil
}

// clientFor is a client with cfg, and finds Velero's namespace when
// nothing names it.
func (o *options) clientFor(cfg *rest.Config) (client.Client, error) {
	c, err := client.New(cfg, client.Options{Scheme: view.Scheme()})
	if err != nil {
		return nil, err
	}
	if (o.flags.Namespace == nil || *o.flags.Namespace == "") && veleroConfigNamespace() == "" && o.located == "" {
		o.located = locateVelero(context.Background(), c)
	}
	return c, nil
}

// NewCommand is `kubectl itemops` with its subcommands, telling ages,
// ETAs and the times of plain lines by clock.
func NewCommand(streams genericiooptions.IOStreams, clock clock.PassiveClock) *cobra.Command {
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: streams, clock: clock}
	cmd := &cobra.Command{
		Use:   "kubectl-itemops",
		Short: "See, wait for and cancel the asynchronous plugin operations of Velero Backups and Restores",
		Long: `kubectl itemops shows the operations that Velero plugins run after a Backup or
Restore has taken its items (data-mover uploads, snapshots still copying), as
itemops follows them: a summary per Backup and Restore, a live view with one
progress bar per operation that ends with the outcome as its exit code, and
cancel.

It reads ItemOperations, Backups and Restores through the API server, in
Velero's namespace (-n; without it, the velero CLI's namespace: its client
config or $VELERO_NAMESPACE; else where the one Deployment named velero runs,
else velero).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// kubectl runs plugins as kubectl-itemops; say so in usage lines.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl itemops"},
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	o.flags.AddFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().Lookup("namespace").Usage = "Velero's namespace (default: the velero CLI's, from its client config or $VELERO_NAMESPACE; else where the one Deployment named velero runs, else velero)"
	cmd.AddCommand(newGetCommand(o), newWatchCommand(o), newWhyCommand(o), newCancelCommand(o), newValuesFromDPACommand(o))
	return cmd
}

// Execute runs the command line args and returns the process' exit code,
// having printed any error.
func Execute(ctx context.Context, streams genericiooptions.IOStreams, clock clock.PassiveClock, args []string) int {
	cmd := NewCommand(streams, clock)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	var exit *exitCode
	if errors.As(err, &exit) {
		if exit.err != nil {
			fmt.Fprintln(streams.ErrOut, "error:", exit.err)
		}
		return exit.code
	}
	if err != nil {
		fmt.Fprintln(streams.ErrOut, "error:", err)
		return ExitError
	}
	return 0
}

// parentKind reads a kind argument: backup(s) or restore(s).
func parentKind(arg string) (itemopsv1alpha1.ParentKind, error) {
	switch strings.ToLower(arg) {
	case "backup", "backups", "backup.velero.io", "backups.velero.io":
		return itemopsv1alpha1.ParentKindBackup, nil
	case "restore", "restores", "restore.velero.io", "restores.velero.io":
		return itemopsv1alpha1.ParentKindRestore, nil
	}
	return "", fmt.Errorf("unknown kind %q: backup or restore", arg)
}

// groupResource is the API resource of a parent kind: backups.velero.io.
func groupResource(kind itemopsv1alpha1.ParentKind) schema.GroupResource {
	return schema.GroupResource{Group: velerov1api.SchemeGroupVersion.Group, Resource: strings.ToLower(string(kind)) + "s"}
}
