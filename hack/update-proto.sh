#!/usr/bin/env bash
# Generates the Go code of the protocol files under pkg/plugin/proto with the
# buf, protoc-gen-go and protoc-gen-go-grpc pinned in hack/tools/proto/go.mod.
# Velero's own .proto files, which ours import, come from the Velero module
# this repository builds against, so the imports always match the Go code
# they refer to.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-${root}}"
tools="${root}/hack/tools/proto/go.mod"
scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT

velero="$(cd "${root}" && go list -m -f '{{.Dir}}' github.com/vmware-tanzu/velero)"
mkdir -p "${scratch}/proto" "${scratch}/bin"
cp "${velero}/pkg/plugin/proto/Shared.proto" "${velero}/pkg/plugin/proto/VolumeSnapshotter.proto" "${scratch}/proto/"
cp -r "${root}/pkg/plugin/proto/." "${scratch}/proto/"
go build -modfile="${tools}" -o "${scratch}/bin/" \
  github.com/bufbuild/buf/cmd/buf \
  google.golang.org/protobuf/cmd/protoc-gen-go \
  google.golang.org/grpc/cmd/protoc-gen-go-grpc

cat > "${scratch}/buf.yaml" <<'YAML'
version: v2
modules:
  - path: proto
YAML
cat > "${scratch}/buf.gen.yaml" <<YAML
version: v2
plugins:
  - local: ${scratch}/bin/protoc-gen-go
    out: gen
    opt: paths=source_relative
  - local: ${scratch}/bin/protoc-gen-go-grpc
    out: gen
    opt: paths=source_relative
YAML

targets=()
while IFS= read -r file; do
  targets+=(--path "proto/${file}")
done < <(cd "${root}/pkg/plugin/proto" && find . -name '*.proto' -printf '%P\n' | sort)

(cd "${scratch}" && PATH="${scratch}/bin:${PATH}" buf generate "${targets[@]}")
rm -rf "${out}/pkg/plugin/generated"
mkdir -p "${out}/pkg/plugin/generated"
cp -r "${scratch}/gen/." "${out}/pkg/plugin/generated/"
