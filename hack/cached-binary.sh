#!/usr/bin/env bash
# Builds one Go command from the module proxy into a per-machine cache and
# prints the binary's path. Progress goes to stderr. The tests use it for
# programs nobody here wrote: the real `velero server`, the S3-compatible
# server and an unmodified third-party Velero plugin.
#
#   hack/cached-binary.sh velero                 # Velero's cmd/velero (with Velero's kopia fork)
#   hack/cached-binary.sh versitygw              # versitygw, an S3-compatible server
#   hack/cached-binary.sh velero-plugin-for-aws  # the AWS ObjectStore/VolumeSnapshotter plugin
#   hack/cached-binary.sh helm                   # the helm CLI (HELM_VERSION: 3.x or 4.x), to lint, render and install the chart
#   hack/cached-binary.sh cyclonedx-gomod        # CycloneDX's SBOM generator for Go modules, for a release's SBOM
#   hack/cached-binary.sh cosign                 # sigstore's cosign, to sign a release's checksums with a key
#   hack/cached-binary.sh snapshot-controller    # the CSI snapshot controller, and the csi-snapshotter sidecar beside it
#   hack/cached-binary.sh csi-provisioner        # the CSI external-provisioner sidecar
#   hack/cached-binary.sh opm                    # operator-registry's opm, to make and serve an OLM catalog
#   hack/cached-binary.sh olm                    # OLM's olm and catalog operators, packageserver, the bundle unpack tools (copy-content, cpb) and OLM's helm chart (chart/)
#   hack/cached-binary.sh cp                     # u-root's cp, the /bin/cp OLM's bundle unpack Jobs run in OLM's image
#   hack/cached-binary.sh grpc-health-probe      # the probe of an OLM catalog's pod, in the opm image
#   hack/cached-binary.sh registry               # distribution's registry (CNCF Distribution), an image registry in the cluster
#   hack/cached-binary.sh crane                  # go-containerregistry's crane, to push an OCI image layout to a registry
#   hack/cached-binary.sh coredns                # CoreDNS, a cluster's DNS (OLM reaches its catalogs by Service name)
#
# Every binary is static (CGO_ENABLED=0), as the projects' own images build
# them: the same file runs on this machine and in the images test/cluster
# builds.
#
# ITEMOPS_VELERO_BIN, ITEMOPS_VERSITYGW_BIN, ITEMOPS_AWS_PLUGIN, ITEMOPS_HELM_BIN,
# ITEMOPS_CYCLONEDX_GOMOD_BIN, ITEMOPS_COSIGN_BIN, ITEMOPS_SNAPSHOT_CONTROLLER_BIN,
# ITEMOPS_CSI_PROVISIONER_BIN, ITEMOPS_OPM_BIN, ITEMOPS_OLM_BIN, ITEMOPS_CP_BIN,
# ITEMOPS_GRPC_HEALTH_PROBE_BIN, ITEMOPS_REGISTRY_BIN, ITEMOPS_CRANE_BIN and
# ITEMOPS_COREDNS_BIN, when set
# to an executable, win and nothing is built. With ITEMOPS_CACHED_ONLY=1 a
# binary that is not built yet is not built either: the script exits 3.
# ITEMOPS_BUILD_NICE compiles at that nice level (make test: 19, for what
# test/cluster does not run); the modules download at the caller's.
set -euo pipefail

name="${1:?usage: $0 velero|versitygw|velero-plugin-for-aws|helm|cyclonedx-gomod|cosign|snapshot-controller|csi-provisioner|opm|olm|cp|grpc-health-probe|registry|crane|coredns}"
cache_root="${XDG_CACHE_HOME:-${HOME}/.cache}/itemops/bin"
override_var="ITEMOPS_$(tr '[:lower:]-' '[:upper:]_' <<<"${name}")_BIN"
# Further commands of the same module, built into the same directory.
extra=()
# Build tags, as the project's own build sets them.
tags=""
# "always": build on itemops's module versions even on another Kubernetes
# minor (hack/go-align.sh).
align=""
# Modules the checksum database does not answer for (their go.sum and the
# module proxy's hash vouch for them).
nosumdb=""
case "${name}" in
  velero)
    version="${VELERO_VERSION:-1.18.3}"
    module="github.com/vmware-tanzu/velero"
    pkg="github.com/vmware-tanzu/velero/cmd/velero"
    # Velero builds against its own fork of kopia, a different commit in
    # each minor; its go.mod says so with replaces that a requiring module
    # does not inherit: they are read from that version's go.mod (below).
    # The module proxy refuses k8s.io/cli-runtime v0.33.12, which v1.18.3
    # requires: the nearest served patch is pinned.
    replaces=()
    if [[ "${version}" == 1.18.3 ]]; then
      replaces+=("k8s.io/cli-runtime=k8s.io/cli-runtime@v0.33.10")
    fi
    ldflags="-X github.com/vmware-tanzu/velero/pkg/buildinfo.Version=v${version}"
    ;;
  versitygw)
    version="${VERSITYGW_VERSION:-1.8.0}"
    module="github.com/versity/versitygw"
    pkg="github.com/versity/versitygw/cmd/versitygw"
    replaces=()
    ldflags=""
    ;;
  velero-plugin-for-aws)
    version="${VELERO_PLUGIN_FOR_AWS_VERSION:-1.14.3}"
    module="github.com/vmware-tanzu/velero-plugin-for-aws"
    pkg="github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws"
    # The copier its image runs as an init container, built beside it.
    extra=("github.com/vmware-tanzu/velero-plugin-for-aws/hack/cp-plugin")
    replaces=()
    ldflags=""
    override_var=ITEMOPS_AWS_PLUGIN
    cache_root="${XDG_CACHE_HOME:-${HOME}/.cache}/itemops/plugins"
    ;;
  helm)
    # HELM_VERSION picks helm 3 or helm 4 by its major.
    version="${HELM_VERSION:-3.22.0}"
    major="${version%%.*}"
    module="helm.sh/helm/v${major}"
    pkg="${module}/cmd/helm"
    replaces=()
    ldflags="-X ${module}/internal/version.version=v${version}"
    if [[ "${major}" == 3 ]]; then
      # As helm 3's own Makefile does: the Kubernetes version it assumes
      # when it is not talking to a cluster (template, lint) is that of the
      # client-go its go.mod requires. Helm 4 reads it from its build.
      helm_gomod="$(GOWORK=off GOFLAGS=-mod=mod go mod download -json "${module}@v${version}" \
        | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
      kube_minor="$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "${helm_gomod}")"
      for pkg_var in ${module}/pkg/lint/rules ${module}/pkg/chartutil; do
        ldflags+=" -X ${pkg_var}.k8sVersionMajor=1 -X ${pkg_var}.k8sVersionMinor=${kube_minor}"
      done
    fi
    ;;
  cyclonedx-gomod)
    version="${CYCLONEDX_GOMOD_VERSION:-1.10.0}"
    module="github.com/CycloneDX/cyclonedx-gomod"
    pkg="${module}/cmd/cyclonedx-gomod"
    replaces=()
    ldflags=""
    ;;
  cosign)
    version="${COSIGN_VERSION:-2.6.5}"
    module="github.com/sigstore/cosign/v2"
    pkg="${module}/cmd/cosign"
    replaces=()
    # On itemops's module versions (client-go v0.37, not v0.34): half of
    # its source is then compiled already (hack/go-align.sh).
    align=always
    ldflags="-X sigs.k8s.io/release-utils/version.gitVersion=v${version}"
    ;;
  snapshot-controller)
    version="${EXTERNAL_SNAPSHOTTER_VERSION:-8.7.0}"
    module="github.com/kubernetes-csi/external-snapshotter/v8"
    pkg="${module}/cmd/snapshot-controller"
    extra=("${module}/cmd/csi-snapshotter")
    replaces=()
    ldflags="-X main.version=v${version}"
    ;;
  csi-provisioner)
    version="${EXTERNAL_PROVISIONER_VERSION:-5.3.0}"
    module="github.com/kubernetes-csi/external-provisioner/v5"
    pkg="${module}/cmd/csi-provisioner"
    replaces=()
    ldflags="-X main.version=v${version}"
    ;;
  opm)
    version="${OPM_VERSION:-1.55.0}"
    module="github.com/operator-framework/operator-registry"
    pkg="${module}/cmd/opm"
    # Its Makefile's: pure Go signature checks (no gpgme).
    tags="json1,containers_image_openpgp"
    replaces=()
    # On itemops's module versions (client-go v0.37, not v0.32; its pin of
    # cel-go to v0.22 gives way): four fifths of its source is then
    # compiled already (hack/go-align.sh).
    align=always
    ldflags="-X ${module}/cmd/opm/version.gitCommit=v${version} -X ${module}/cmd/opm/version.opmVersion=v${version}"
    ;;
  olm)
    version="${OLM_VERSION:-0.36.0}"
    module="github.com/operator-framework/operator-lifecycle-manager"
    pkg="${module}/cmd/olm"
    extra=("${module}/cmd/catalog" "${module}/cmd/package-server" "${module}/cmd/copy-content" "${module}/util/cpb")
    tags="json1"
    nosumdb="${module}"
    replaces=()
    ldflags="-X ${module}/pkg/version.OLMVersion=v${version}"
    ;;
  cp)
    version="${U_ROOT_VERSION:-0.16.0}"
    module="github.com/u-root/u-root"
    pkg="${module}/cmds/core/cp"
    replaces=()
    ldflags=""
    ;;
  grpc-health-probe)
    version="${GRPC_HEALTH_PROBE_VERSION:-0.4.63}"
    module="github.com/grpc-ecosystem/grpc-health-probe"
    pkg="${module}"
    replaces=()
    ldflags="-X main.versionTag=v${version}"
    ;;
  registry)
    version="${DISTRIBUTION_VERSION:-3.1.2}"
    module="github.com/distribution/distribution/v3"
    pkg="${module}/cmd/registry"
    replaces=()
    ldflags="-X ${module}/version.version=v${version}"
    ;;
  crane)
    version="${CRANE_VERSION:-0.22.1}"
    module="github.com/google/go-containerregistry"
    pkg="${module}/cmd/crane"
    replaces=()
    ldflags="-X ${module}/cmd/crane/cmd.Version=v${version}"
    ;;
  coredns)
    version="${COREDNS_VERSION:-1.15.0}"
    module="github.com/coredns/coredns"
    pkg="${module}"
    replaces=()
    ldflags="-X ${module}/coremain.GitCommit=v${version}"
    ;;
  *)
    echo "unknown binary ${name}; known: velero, versitygw, velero-plugin-for-aws, helm, cyclonedx-gomod, cosign, snapshot-controller, csi-provisioner, opm, olm, cp, grpc-health-probe, registry, crane, coredns" >&2
    exit 2
    ;;
esac

if [[ -n "${!override_var:-}" ]]; then
  if [[ -x "${!override_var}" ]]; then
    echo "${!override_var}"
    exit 0
  fi
  echo "${override_var}=${!override_var} is not an executable" >&2
  exit 1
fi

dest="${cache_root}/${name}-v${version}-static/${name}"
if [[ -x "${dest}" ]]; then
  echo "${dest}"
  exit 0
fi

if [[ "${ITEMOPS_CACHED_ONLY:-}" == 1 ]]; then
  echo "${name} v${version} is not built yet (${dest})" >&2
  exit 3
fi

mkdir -p "${cache_root}"
if command -v flock >/dev/null 2>&1; then
  exec 9>"${cache_root}/.${name}.lock"
  flock 9
  if [[ -x "${dest}" ]]; then
    echo "${dest}"
    exit 0
  fi
fi

work="$(mktemp -d "${cache_root}/build.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
export GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
if [[ -n "${nosumdb}" ]]; then
  export GONOSUMDB="${nosumdb}${GONOSUMDB:+,${GONOSUMDB}}"
fi

echo "building ${name} v${version} into ${dest}; this runs once per machine" >&2
go_std="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/go-std.sh"
go_align="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/go-align.sh"
(
  cd "${work}"
  go mod init "build/${name}" >/dev/null 2>&1
  echo "require ${module} v${version}" >> go.mod
  if [[ "${name}" == velero || "${name}" == snapshot-controller || "${name}" == csi-provisioner || "${name}" == opm || "${name}" == olm ]]; then
    # The replaces of the module's own go.mod, as "old=new@version": a
    # requiring module does not inherit them, and without them other
    # versions of Kubernetes' modules (or of Velero's kopia fork) are
    # chosen. Its go.sum vouches for forks the checksum database does not
    # know. A replace by a directory of the module's own repository
    # (external-snapshotter's ./client) becomes that module at this version.
    download="$(go mod download -json "${module}@v${version}")"
    gomod="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"${download}")"
    cat "$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"${download}")/go.sum" >> go.sum
    mapfile -t -O "${#replaces[@]}" replaces < <(awk '
      /^replace \($/ { block = 1; next }
      block && /^\)/ { block = 0; next }
      /^replace / { sub(/^replace /, ""); block_line = 1 }
      (block || block_line) && /=>/ {
        split($0, side, "=>"); n = split(side[1], old, " "); m = split(side[2], new, " ")
        print old[1] (n > 1 ? "@" old[2] : "") "=" new[1] (m > 1 ? "@" new[2] : "")
      }
      { block_line = 0 }' "${gomod}")
    for i in "${!replaces[@]}"; do
      if [[ "${replaces[$i]}" == *=./* ]]; then
        replaced="${replaces[$i]%%=*}"
        replaces[$i]="${replaced}=${replaced}@v${version}"
      fi
    done
  fi
  for r in "${replaces[@]}"; do
    go mod edit -replace "${r}"
  done
  echo "package tools; import _ \"${pkg}\"" > tools.go
  go mod tidy
  ITEMOPS_ALIGN="${align}" "${go_align}"
  "${go_std}"
  # No debug information: the linker drops it (-s -w), so the compiler does
  # not write it either (-dwarf=false), which saves about a tenth of the CPU
  # of a new machine's builds.
  nice -n "${ITEMOPS_BUILD_NICE:-0}" go build -trimpath -gcflags=all=-dwarf=false -tags "${tags}" -ldflags "-s -w ${ldflags}" -o "${work}/${name}" "${pkg}"
  for e in "${extra[@]}"; do
    nice -n "${ITEMOPS_BUILD_NICE:-0}" go build -trimpath -gcflags=all=-dwarf=false -tags "${tags}" -ldflags "-s -w ${ldflags}" -o "${work}/$(basename "${e}")" "${e}"
  done
) >&2
mkdir -p "$(dirname "${dest}")"
if [[ "${name}" == olm ]]; then
  # OLM's helm chart and its upstream values, which its releases render
  # into their install manifests (the module's deploy/upstream/quickstart
  # is older than its binaries: no OLMConfig CRD, single-dash flags).
  moddir="$(cd "${work}" && go mod download -json "${module}@v${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  rm -rf "$(dirname "${dest}")/chart" "$(dirname "${dest}")/quickstart"
  cp -r "${moddir}/deploy/chart" "$(dirname "${dest}")/chart"
  cp "${moddir}/deploy/upstream/values.yaml" "$(dirname "${dest}")/chart/upstream-values.yaml"
  chmod -R u+w "$(dirname "${dest}")/chart"
fi
for e in "${extra[@]}"; do
  mv "${work}/$(basename "${e}")" "$(dirname "${dest}")/"
done
mv "${work}/${name}" "${dest}"
echo "${dest}"
