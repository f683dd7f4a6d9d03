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
	"fmt"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/itemops/itemops/internal/oadp"
	"github.com/itemops/itemops/internal/view"
)

func newValuesFromDPACommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "values-from-dpa NAME",
		Short: "Print itemops' chart values for the Velero that OADP runs from a DataProtectionApplication",
		Long: `values-from-dpa prints the values of itemops' chart that match the Velero the
OADP operator runs for a DataProtectionApplication (DPA), in Velero's
namespace: the mode from the DPA's spec.configuration.velero.args
disabled-controllers (backup-operations and restore-operations both: manage;
neither: observe), and from Velero's Deployment that OADP made of the DPA the
plugin images (initContainers), Velero's image (builtinPlugins.image), its
server arguments (pluginArgs), its item-operation-sync-frequency
(syncFrequency) and the credentials Secret of its cloud provider
(credentials). It refuses a DPA that disables only one of the two
controllers, and one OADP has not applied to Velero's Deployment yet.
Warnings go to standard error. See docs/openshift.md.`,
		Example: `  # itemops beside OADP, configured as Velero is
  kubectl itemops values-from-dpa velero-sample -n openshift-adp > itemops-values.yaml
  helm install itemops oci://ghcr.io/itemops/charts/itemops -n openshift-adp -f itemops-values.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			ns := o.namespace()
			dpa := &unstructured.Unstructured{}
			dpa.SetGroupVersionKind(oadp.GroupVersionKind)
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, dpa); err != nil {
				if meta.IsNoMatchError(err) {
					return fmt.Errorf("this cluster has no %s kind: is the OADP operator installed?", oadp.GroupVersionKind.GroupKind())
				}
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("DataProtectionApplication %q not found in namespace %s (-n names OADP's namespace)", args[0], ns)
				}
				return err
			}
			velero := &appsv1.Deployment{}
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: oadp.VeleroDeployment}, velero); err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("Velero's Deployment %s/%s not found: the OADP operator makes it once it has reconciled the DPA (see the DPA's status)",
						ns, oadp.VeleroDeployment)
				}
				return err
			}
			values, warnings, err := oadp.FromDPA(dpa, velero)
			if err != nil {
				// Its words quote the cluster's strings: printed safe.
				return printableError{err}
			}
			out, err := yaml.Marshal(values)
			if err != nil {
				return err
			}
			for _, w := range warnings {
				fmt.Fprintln(o.streams.ErrOut, "warning:", view.Printable(w))
			}
			fmt.Fprintf(o.streams.Out, "# itemops' values for the Velero that OADP runs from DataProtectionApplication %s/%s\n"+
				"# (kubectl itemops values-from-dpa); install in the same namespace:\n"+
				"#   helm install itemops <chart> -n %s -f <this file>\n%s", ns, dpa.GetName(), ns, out)
			return nil
		},
	}
}

// printableError prints an error whose words quote what the cluster holds
// (a DPA's or a Deployment's strings) without its control characters or
// terminal sequences.
type printableError struct{ err error }

func (e printableError) Error() string { return view.Printable(e.err.Error()) }
func (e printableError) Unwrap() error { return e.err }
