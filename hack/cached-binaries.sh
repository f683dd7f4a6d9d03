#!/usr/bin/env bash
# Builds, one after another, the programs of other projects that make test's
# suites run (hack/cached-binary.sh, once per machine): versitygw first, which
# the chaos suite runs as soon as envtest's control plane is built (and it
# runs before test/cluster, in its lane), then the AWS plugin and velero,
# which share most of their modules (Kubernetes' v0.33, the AWS SDK, gRPC),
# then the CSI snapshot controller and its sidecar, the external-provisioner
# and helm. One at a time, each build finds in Go's build cache what the ones
# before it compiled (Go's standard library, the modules of the same
# versions); side by side, on a new machine, each compiled all of it again,
# at the same moment, on the same two cores. Each go build still uses every
# core, and a suite that needs a program not built yet builds it beside.
#
# It goes on past a failure, and exits 1 naming what failed (above it, the
# build's own output); each suite that runs a program says so too. What is
# already built is not built again.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

failed=()
for name in versitygw velero-plugin-for-aws velero snapshot-controller csi-provisioner helm; do
  hack/cached-binary.sh "${name}" > /dev/null || failed+=("${name}")
done
if ((${#failed[@]})); then
  echo "building ${failed[*]} failed (hack/cached-binary.sh)" >&2
  exit 1
fi
