#!/usr/bin/env bash
# Run in the module of a build of another project's programs (after `go mod
# tidy`): when that build uses the Kubernetes client libraries of itemops's
# minor release, it also requires itemops's module versions, and Go picks the
# newer of the two for each module both use (k8s.io/client-go v0.37.0 or
# v0.37.2, golang.org/x/net, grpc, ...: patch and minor releases apart). The
# packages the build shares with itemops (client-go, apimachinery, the API
# types) are then one package each, and with one set of build flags
# (`make test`'s: static, -trimpath, no debug information) Go's build cache
# compiles each once for the Kubernetes binaries, helm and itemops's test
# binaries and images. A build of another minor release keeps its own
# module graph.
set -euo pipefail

itemops_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
client_go() { # dir: the version of k8s.io/client-go the module in dir builds with, if any
  go -C "$1" list -m -f '{{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' k8s.io/client-go 2>/dev/null || true
}
minor() { cut -d. -f1,2 <<<"$1"; }

ours="$(GOFLAGS=-mod=readonly client_go "${itemops_root}")"
theirs="$(client_go .)"
if [[ -z "${ours}" || -z "${theirs}" || "$(minor "${ours}")" != "$(minor "${theirs}")" ]]; then
  exit 0
fi
mapfile -t requires < <(GOFLAGS=-mod=readonly go -C "${itemops_root}" list -m -f '{{if not .Main}}-require={{.Path}}@{{.Version}}{{end}}' all | sed '/^$/d')
go mod edit "${requires[@]}"
go mod tidy
