#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver and etcd) from the Go module
# proxy into a per-machine cache and prints the directory that holds them, for
# use as KUBEBUILDER_ASSETS. Prebuilt envtest archives cannot be downloaded in
# every environment; the module proxy can always be reached.
#
# KUBEBUILDER_ASSETS, when already set to a directory holding both binaries,
# wins and nothing is built. Progress goes to stderr; stdout is the directory.
set -euo pipefail

KUBE_VERSION="${ENVTEST_KUBE_VERSION:-1.34.4}"
ETCD_VERSION="${ENVTEST_ETCD_VERSION:-3.6.16}"

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  if [[ -x "${KUBEBUILDER_ASSETS}/kube-apiserver" && -x "${KUBEBUILDER_ASSETS}/etcd" ]]; then
    echo "${KUBEBUILDER_ASSETS}"
    exit 0
  fi
  echo "KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS} does not hold kube-apiserver and etcd" >&2
  exit 1
fi

cache_root="${XDG_CACHE_HOME:-${HOME}/.cache}/itemops/envtest"
dest="${cache_root}/${KUBE_VERSION}-etcd${ETCD_VERSION}"
if [[ -x "${dest}/kube-apiserver" && -x "${dest}/etcd" ]]; then
  echo "${dest}"
  exit 0
fi

mkdir -p "${cache_root}"
# Test packages may ask at the same time: build once, the others wait for it.
if command -v flock >/dev/null 2>&1; then
  exec 9>"${cache_root}/.lock"
  flock 9
  if [[ -x "${dest}/kube-apiserver" && -x "${dest}/etcd" ]]; then
    echo "${dest}"
    exit 0
  fi
fi
work="$(mktemp -d "${cache_root}/build.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
stage="${work}/bin"
mkdir -p "${stage}"

# Pinned module graph only; never consult or edit a parent go.work.
export GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=local

build_apiserver() {
  local dir="${work}/kube-apiserver"
  mkdir -p "${dir}"
  (
    cd "${dir}"
    go mod init envtest/kube-apiserver >/dev/null 2>&1
    # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
    # with local paths, which a dependent module cannot see: pin each one to the
    # matching published release instead.
    local staging
    staging="$(go mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" \
      | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' \
      | xargs sed -n 's/^[[:space:]]*\(k8s\.io\/[^[:space:]]*\) v0\.0\.0$/\1/p')"
    if [[ -z "${staging}" ]]; then
      echo "could not read the staging modules of k8s.io/kubernetes v${KUBE_VERSION}" >&2
      exit 1
    fi
    local minor="${KUBE_VERSION#*.}"
    {
      echo "require k8s.io/kubernetes v${KUBE_VERSION}"
      echo "replace ("
      for m in ${staging}; do echo "  ${m} => ${m} v0.${minor}"; done
      echo ")"
    } >> go.mod
    echo 'package tools; import _ "k8s.io/kubernetes/cmd/kube-apiserver"' > tools.go
    go mod tidy
    local pkg=k8s.io/component-base/version
    go build -trimpath -o "${stage}/kube-apiserver" -ldflags "-s -w \
      -X ${pkg}.gitVersion=v${KUBE_VERSION} \
      -X ${pkg}.gitMajor=${KUBE_VERSION%%.*} \
      -X ${pkg}.gitMinor=${minor%%.*} \
      -X ${pkg}.gitTreeState=clean" \
      k8s.io/kubernetes/cmd/kube-apiserver
  )
}

build_etcd() {
  local dir="${work}/etcd"
  mkdir -p "${dir}"
  (
    cd "${dir}"
    go mod init envtest/etcd >/dev/null 2>&1
    cat >> go.mod <<MOD
require (
  go.etcd.io/etcd/server/v3 v${ETCD_VERSION}
  go.etcd.io/etcd/api/v3 v${ETCD_VERSION}
  go.etcd.io/etcd/client/pkg/v3 v${ETCD_VERSION}
  go.etcd.io/etcd/client/v3 v${ETCD_VERSION}
  go.etcd.io/etcd/pkg/v3 v${ETCD_VERSION}
)
MOD
    echo 'package tools; import _ "go.etcd.io/etcd/server/v3"' > tools.go
    go mod tidy
    go build -trimpath -o "${stage}/etcd" -ldflags "-s -w" go.etcd.io/etcd/server/v3
  )
}

echo "building envtest assets (kube-apiserver v${KUBE_VERSION}, etcd v${ETCD_VERSION}) into ${dest}; this runs once per machine" >&2
start=$(date +%s)
build_apiserver >&2
build_etcd >&2
mkdir -p "${dest}"
mv "${stage}/kube-apiserver" "${stage}/etcd" "${dest}/"
echo "envtest assets built in $(( $(date +%s) - start ))s" >&2
echo "${dest}"
