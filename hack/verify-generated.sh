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

# Copy the source tree: the files git sees (tracked or not, but not ignored,
# so no build output, test binary or report that the suites write while this
# runs beside them in make test), or, outside a git checkout, the tree
# without .git and those outputs. The module files come too, so the scratch
# copy builds exactly like the checkout.
if git -C "${root}" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # A tracked file deleted in the working tree is listed but not there:
  # --ignore-failed-read leaves it out, as the tree has it.
  git -C "${root}" ls-files -z --cached --others --exclude-standard \
    | tar -C "${root}" --null --files-from=- --ignore-failed-read -cf - 2>/dev/null | tar -C "${scratch}" -xf -
else
  tar -C "${root}" --exclude=./.git --exclude=./bin --exclude=./dist --exclude=./_artifacts --exclude='*.test' -cf - . | tar -C "${scratch}" -xf -
fi
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
