#!/usr/bin/env bash
# Builds the manager image without a Docker engine: the static binaries of
# every platform, built as the Dockerfile builds them, then assembled by
# hack/tools/image (go-containerregistry) into an OCI image layout and a
# tarball that `docker load` / `podman load` read. test/image checks that the
# binaries in it are built with the Dockerfile's flags.
#
#   OUT        where to write (default: bin/image): oci/ and itemops.tar
#   IMG        the image's name (default: ghcr.io/itemops/itemops:<VERSION>)
#   VERSION    the image's version label (default: dev)
#   PLATFORMS  comma-separated (default: linux/amd64,linux/arm64)
#   TARBALL_PLATFORM  the platform of itemops.tar (default: linux/amd64)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
OUT="${OUT:-$root/bin/image}"
VERSION="${VERSION:-dev}"
IMG="${IMG:-ghcr.io/itemops/itemops:${VERSION}}"
PLATFORMS="${PLATFORMS:-linux/amd64,linux/arm64}"
TARBALL_PLATFORM="${TARBALL_PLATFORM:-linux/amd64}"

# The commit and its time label the image and date every file in it, so one
# commit gives one digest; a checkout without git history is dated 1970.
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
created="$(git log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)"
if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  revision="${revision}-dirty"
fi

mkdir -p "$OUT"
IFS=, read -r -a platforms <<<"$PLATFORMS"
for platform in "${platforms[@]}"; do
  os="${platform%%/*}" arch="${platform#*/}"
  dir="$OUT/bin/$os-$arch"
  echo "building the static binaries for $platform" >&2
  # The Dockerfile's flags (test/image compares the binaries' build settings),
  # which make test builds everything with: what they share compiles once.
  CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" -o "$dir/itemops" .
  CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" -o "$dir/cp-plugin" ./cmd/cp-plugin
done

echo "assembling $IMG ($PLATFORMS) into $OUT" >&2
go -C hack/tools/image run . -binaries "$OUT/bin" -platforms "$PLATFORMS" \
  -oci "$OUT/oci" -tarball "$OUT/itemops.tar" -tarball-platform "$TARBALL_PLATFORM" \
  -tag "$IMG" -version "$VERSION" -revision "$revision" -created "$created"
echo "$OUT"
