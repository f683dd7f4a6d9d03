#!/usr/bin/env bash
# Builds the itemops manager as it was at a commit of this repository's
# history, with that commit's chart beside it, into the per-machine cache, and
# prints the directory that holds them: <dir>/itemops and <dir>/chart. The
# upgrade suite (test/upgrade) starts operations under it before the current
# build and chart take over.
#
#   hack/itemops-at.sh <commit>
#
# The commit is checked out with `git worktree` in a temporary directory,
# built there, and the worktree removed. A checkout that does not hold the
# commit (a shallow clone, an archive) exits 4 and says how to fetch it.
set -euo pipefail

commit="${1:?usage: $0 <commit>}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if ! git -C "${root}" rev-parse --git-dir > /dev/null 2>&1; then
  echo "${root} is not a git checkout: itemops at ${commit} is built from its history" >&2
  exit 4
fi
if ! full="$(git -C "${root}" rev-parse --verify --quiet "${commit}^{commit}")"; then
  echo "this checkout does not hold commit ${commit} (a shallow clone?): fetch main's history (git fetch --unshallow) to build itemops at it" >&2
  exit 4
fi

dest="${XDG_CACHE_HOME:-${HOME}/.cache}/itemops/bin/itemops-${full}"
if [[ -x "${dest}/itemops" && -f "${dest}/chart/Chart.yaml" ]]; then
  echo "${dest}"
  exit 0
fi

tmp="$(mktemp -d)"
cleanup() {
  git -C "${root}" worktree remove --force "${tmp}/src" > /dev/null 2>&1 || true
  git -C "${root}" worktree prune > /dev/null 2>&1 || true
  rm -rf "${tmp}"
}
trap cleanup EXIT

echo "building itemops at ${full:0:12} from a git worktree into ${dest}" >&2
git -C "${root}" worktree add --quiet --detach "${tmp}/src" "${full}" >&2
mkdir -p "${tmp}/out"
(cd "${tmp}/src" && CGO_ENABLED=0 go build -trimpath -o "${tmp}/out/itemops" .) >&2
cp -r "${tmp}/src/charts/itemops" "${tmp}/out/chart"
mkdir -p "$(dirname "${dest}")"
rm -rf "${dest}"
mv "${tmp}/out" "${dest}"
echo "${dest}"
