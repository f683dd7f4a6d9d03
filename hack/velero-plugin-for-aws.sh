#!/usr/bin/env bash
# Builds the unmodified velero-plugin-for-aws binary from the Go module proxy
# into a per-machine cache and prints its path. Tests use it as a third-party
# Velero plugin that nobody here wrote. Progress goes to stderr.
#
# ITEMOPS_AWS_PLUGIN, when set to an executable, wins and nothing is built.
set -euo pipefail

VERSION="${VELERO_PLUGIN_FOR_AWS_VERSION:-1.14.3}"

if [[ -n "${ITEMOPS_AWS_PLUGIN:-}" ]]; then
  if [[ -x "${ITEMOPS_AWS_PLUGIN}" ]]; then
    echo "${ITEMOPS_AWS_PLUGIN}"
    exit 0
  fi
  echo "ITEMOPS_AWS_PLUGIN=${ITEMOPS_AWS_PLUGIN} is not an executable" >&2
  exit 1
fi

cache_root="${XDG_CACHE_HOME:-${HOME}/.cache}/itemops/plugins"
dest="${cache_root}/velero-plugin-for-aws-v${VERSION}/velero-plugin-for-aws"
if [[ -x "${dest}" ]]; then
  echo "${dest}"
  exit 0
fi

mkdir -p "${cache_root}"
if command -v flock >/dev/null 2>&1; then
  exec 9>"${cache_root}/.lock"
  flock 9
  if [[ -x "${dest}" ]]; then
    echo "${dest}"
    exit 0
  fi
fi

work="$(mktemp -d "${cache_root}/build.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
export GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=local

echo "building velero-plugin-for-aws v${VERSION} into ${dest}; this runs once per machine" >&2
(
  cd "${work}"
  go mod init build/velero-plugin-for-aws >/dev/null 2>&1
  echo "require github.com/vmware-tanzu/velero-plugin-for-aws v${VERSION}" >> go.mod
  echo 'package tools; import _ "github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws"' > tools.go
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "${work}/velero-plugin-for-aws" github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws
) >&2
mkdir -p "$(dirname "${dest}")"
mv "${work}/velero-plugin-for-aws" "${dest}"
echo "${dest}"
