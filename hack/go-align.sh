#!/usr/bin/env bash
# Run in the module of a build of another project's programs (after `go mod
# tidy`): when that build uses the Kubernetes client libraries of itemops's
# minor release, it also requires itemops's module versions, and Go picks the
# newer of the two for each module both use (k8s.io/client-go v0.37.0 or
# v0.37.2, golang.org/x/net, grpc, ...: patch and minor releases apart). A
# replace in the build that pins a module both use to a release no newer
# than itemops's gives way to itemops's. The packages the build shares with
# itemops (client-go, apimachinery, the API types, grpc, x/net) are then one
# package each, and with one set of build flags (`make test`'s: static,
# -trimpath, no debug information) Go's build cache compiles each once for
# the Kubernetes binaries, helm, the CSI snapshot controller and itemops's
# test binaries and images. A build of another minor release keeps its own
# module graph, unless ITEMOPS_ALIGN=always: hack/cached-binary.sh sets it
# for the release tools test/release runs (cosign, opm), whose builds were
# checked to compile and pass on itemops's versions (docs/testing.md).
set -euo pipefail

itemops_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
client_go() { # dir: the version of k8s.io/client-go the module in dir builds with, if any
  go -C "$1" list -m -f '{{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' k8s.io/client-go 2>/dev/null || true
}
minor() { cut -d. -f1,2 <<<"$1"; }

ours="$(GOFLAGS=-mod=readonly client_go "${itemops_root}")"
theirs="$(client_go .)"
if [[ "${ITEMOPS_ALIGN:-}" != always ]] &&
  [[ -z "${ours}" || -z "${theirs}" || "$(minor "${ours}")" != "$(minor "${theirs}")" ]]; then
  exit 0
fi
declare -A version
while read -r path v; do
  version["${path}"]="${v}"
done < <(GOFLAGS=-mod=readonly go -C "${itemops_root}" list -m -f '{{if not .Main}}{{.Path}} {{.Version}}{{end}}' all | sed '/^$/d')
# Replaces that pin a module at a release (not a fork): dropped where
# itemops's release of that module is the same or newer.
while read -r path newpath v; do
  [[ "${path}" == "${newpath}" && -n "${v}" && -n "${version[${path}]:-}" ]] || continue
  newest="$(printf '%s\n%s\n' "${v#v}" "${version[${path}]#v}" | sort -V | tail -1)"
  if [[ "${newest}" == "${version[${path}]#v}" ]]; then
    go mod edit -dropreplace="${path}"
  fi
done < <(go list -m -f '{{with .Replace}}{{$.Path}} {{.Path}} {{.Version}}{{end}}' all | sed '/^$/d')
requires=()
for path in "${!version[@]}"; do
  requires+=("-require=${path}@${version[${path}]}")
done
go mod edit "${requires[@]}"
go mod tidy
