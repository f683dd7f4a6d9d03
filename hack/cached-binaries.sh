#!/usr/bin/env bash
# Builds, or waits for (through hack/cached-binary.sh's locks, when make test
# builds them beside), the programs of other projects that test/cluster runs:
# versitygw, the AWS plugin, velero, the CSI snapshot controller and its
# sidecar, the external-provisioner and helm. hack/test.sh's velero and other
# Ginkgo lanes run it before their suites, so that on a new machine those
# builds, which the longest suite waits for, have the CPU first. A program
# not built yet is built here, one after another, the AWS plugin right
# before velero (they share most of their modules: one finds in Go's build
# cache what the other compiled).
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
