#!/usr/bin/env bash
# Compiles Go's standard library into Go's build cache as hack/cached-binary.sh
# and hack/envtest-assets.sh build the other projects' programs: static
# (CGO_ENABLED=0), -trimpath, without debug information. On a new machine
# make test starts those builds side by side, and each compiled the standard
# library itself until one of them had cached it; after this, each finds it
# there. The first caller compiles, the others wait for it (a lock); once
# cached this takes a second.
set -euo pipefail

lock_dir="${XDG_CACHE_HOME:-${HOME}/.cache}/itemops"
mkdir -p "${lock_dir}"
if command -v flock >/dev/null 2>&1; then
  exec 8>"${lock_dir}/.go-std.lock"
  flock 8
fi
cd /
CGO_ENABLED=0 GOWORK=off GOFLAGS= GOTOOLCHAIN=local go build -trimpath -gcflags=all=-dwarf=false std
