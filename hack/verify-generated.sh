#!/usr/bin/env bash
# Fails when a generated file (CRDs, RBAC, deepcopy, the chart's CRDs and RBAC, the
# plugin protocol's Go code) differs
# from what `make manifests generate` makes of the markers in the working tree.
# The files are regenerated into a scratch copy of the tree, so nothing here
# changes the checkout.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT

# Copy the tree without .git and build outputs; keep the module files so the
# scratch copy builds exactly like the checkout.
tar -C "${root}" --exclude=./.git --exclude=./bin --exclude=./dist -cf - . | tar -C "${scratch}" -xf -
mkdir -p "${scratch}/dist"
make -C "${scratch}" --no-print-directory -s manifests generate build-installer GO_TOOL="go tool -modfile=${root}/hack/tools/go.mod" >/dev/null

generated=(config/crd/bases config/rbac/role.yaml api/v1alpha1/zz_generated.deepcopy.go charts/itemops/files/crds charts/itemops/files/rbac pkg/plugin/generated dist/install.yaml)
stale=0
for path in "${generated[@]}"; do
  if ! diff -ruN "${root}/${path}" "${scratch}/${path}" >&2; then
    stale=1
  fi
done
if (( stale )); then
  echo "generated files are stale: run 'make manifests generate build-installer' and commit the result" >&2
  exit 1
fi
