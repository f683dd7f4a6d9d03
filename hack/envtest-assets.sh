#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests run from the Go module proxy into a
# per-machine cache and prints the directory that holds them, for use as
# KUBEBUILDER_ASSETS: envtest's control plane (kube-apiserver and etcd) and the
# rest of a one-node cluster (kube-controller-manager, kube-scheduler, kubelet
# and kube-proxy) and kubectl, which test/cluster runs. The Kubernetes commands
# missing from the cache come from one module and one `go build`, and Go's
# build cache keeps what a first build compiled for a later one, so their
# shared packages compile once. Prebuilt archives cannot be downloaded in every
# environment; the module proxy can always be reached.
#
# `hack/envtest-assets.sh control-plane` builds only kube-apiserver and etcd,
# all envtest needs, into the same directory: make test starts the envtest
# suites on them while the rest builds beside (a later call for everything
# waits for that build, through the lock below, and builds what is missing).
#
# KUBEBUILDER_ASSETS, when already set to another directory holding
# kube-apiserver and etcd, wins and nothing is built (test/cluster then needs
# the node's binaries there too). Progress goes to stderr; stdout is the
# directory.
set -euo pipefail

KUBE_VERSION="${ENVTEST_KUBE_VERSION:-1.37.2}"
ETCD_VERSION="${ENVTEST_ETCD_VERSION:-3.6.16}"

case "${1:-all}" in
  all) kube_commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl) ;;
  control-plane) kube_commands=(kube-apiserver) ;;
  *)
    echo "usage: $0 [all|control-plane]" >&2
    exit 2
    ;;
esac
cache_root="${XDG_CACHE_HOME:-${HOME}/.cache}/itemops/envtest"
dest="${cache_root}/${KUBE_VERSION}-etcd${ETCD_VERSION}"

if [[ -n "${KUBEBUILDER_ASSETS:-}" && "${KUBEBUILDER_ASSETS%/}" != "${dest}" ]]; then
  if [[ -x "${KUBEBUILDER_ASSETS}/kube-apiserver" && -x "${KUBEBUILDER_ASSETS}/etcd" ]]; then
    echo "${KUBEBUILDER_ASSETS}"
    exit 0
  fi
  echo "KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS} does not hold kube-apiserver and etcd" >&2
  exit 1
fi

built() {
  local b
  for b in "${kube_commands[@]}" etcd; do
    [[ -x "${dest}/${b}" ]] || return 1
  done
}
if built; then
  echo "${dest}"
  exit 0
fi

mkdir -p "${cache_root}"
# Test packages may ask at the same time: build once, the others wait for it.
if command -v flock >/dev/null 2>&1; then
  exec 9>"${cache_root}/.lock"
  flock 9
  if built; then
    echo "${dest}"
    exit 0
  fi
fi
work="$(mktemp -d "${cache_root}/build.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
stage="${work}/bin"
mkdir -p "${stage}"

# Go's standard library, compiled once for the builds side by side.
go_std="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/go-std.sh"

# Pinned module graph only; never consult or edit a parent go.work.
export GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=local

# Kubernetes' and itemops's shared packages compile once (hack/go-align.sh).
go_align="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/go-align.sh"

# staging_version prints the release of a staging module to build with: the
# one of the same number as Kubernetes, or, when the module proxy does not
# serve that one (k8s.io/dynamic-resource-allocation v0.31.12), the nearest
# patch release of the same minor it serves, the older one first.
staging_version() { # module version
  local module="$1" want="$2"
  if go mod download "${module}@${want}" >/dev/null 2>&1; then
    echo "${want}"
    return
  fi
  local prefix="${want%.*}" patch="${want##*.}" v best="" dist bestdist=1000000
  for v in $(go list -m -versions "${module}" | tr ' ' '\n' | grep -E "^${prefix//./\\.}\\.[0-9]+$"); do
    dist=$((${v##*.} - patch))
    ((dist < 0)) && dist=$((-2 * dist)) || dist=$((2 * dist + 1))
    if ((dist < bestdist)) && go mod download "${module}@${v}" >/dev/null 2>&1; then
      best="${v}" bestdist="${dist}"
    fi
  done
  if [[ -z "${best}" ]]; then
    # No source of that minor at all (k8s.io/sample-apiserver v0.31): its
    # go.mod is enough for a module no command imports.
    if go list -m "${module}@${want}" >/dev/null 2>&1; then
      echo "${module} ${want} has no source served; only its go.mod is used" >&2
      echo "${want}"
      return
    fi
    echo "the module proxy serves no ${prefix}.x of ${module}" >&2
    exit 1
  fi
  echo "${module} ${want} is not served; building with ${best}" >&2
  echo "${best}"
}

build_kubernetes() {
  local dir="${work}/kubernetes"
  mkdir -p "${dir}"
  (
    cd "${dir}"
    go mod init envtest/kubernetes >/dev/null 2>&1
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
    local minor="${KUBE_VERSION#*.}" m replaces=()
    for m in ${staging}; do replaces+=("  ${m} => ${m} $(staging_version "${m}" "v0.${minor}")"); done
    {
      echo "require k8s.io/kubernetes v${KUBE_VERSION}"
      echo "replace ("
      printf '%s\n' "${replaces[@]}"
      echo ")"
    } >> go.mod
    local c pkgs=()
    {
      echo 'package tools'
      for c in "${missing[@]}"; do
        pkgs+=("k8s.io/kubernetes/cmd/${c}")
        echo "import _ \"k8s.io/kubernetes/cmd/${c}\""
      done
    } > tools.go
    go mod tidy
    "${go_align}"
    "${go_std}"
    local pkg=k8s.io/component-base/version
    # Static, as Kubernetes' own release builds them (CGO_ENABLED=0). The
    # linker drops the debug information (-s -w), so the compiler does not
    # write it either (-dwarf=false): a new machine's build then takes about
    # a tenth less CPU.
    CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -o "${stage}/" -ldflags "-s -w \
      -X ${pkg}.gitVersion=v${KUBE_VERSION} \
      -X ${pkg}.gitMajor=${KUBE_VERSION%%.*} \
      -X ${pkg}.gitMinor=${minor%%.*} \
      -X ${pkg}.gitTreeState=clean" \
      "${pkgs[@]}"
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
    "${go_std}"
    # Static, as etcd's own release builds it.
    CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -o "${stage}/etcd" -ldflags "-s -w" go.etcd.io/etcd/server/v3
  )
}

missing=()
for b in "${kube_commands[@]}"; do
  [[ -x "${dest}/${b}" ]] || missing+=("${b}")
done
echo "building the Kubernetes binaries (${missing[*]} v${KUBE_VERSION}, etcd v${ETCD_VERSION}) into ${dest}; this runs once per machine" >&2
start=$(date +%s)
((${#missing[@]} == 0)) || build_kubernetes >&2
[[ -x "${dest}/etcd" ]] || build_etcd >&2
mkdir -p "${dest}"
shopt -s nullglob
for b in "${stage}"/*; do
  mv "${b}" "${dest}/"
done
echo "envtest assets built in $(( $(date +%s) - start ))s" >&2
echo "${dest}"
