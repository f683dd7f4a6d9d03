#!/usr/bin/env bash
# Writes the OLM bundle image of a bundle directory (`make bundle`'s) with
# hack/tools/image, without a Docker engine: an OCI image layout and a
# tarball that `docker load` / `podman load` read, then prints the image's
# digest, by which a catalog names it (hack/catalog.sh).
#
#   usage: hack/bundle-image.sh BUNDLE_DIR IMAGE OUT
#
# OUT receives oci/, bundle.tar and ref: IMAGE's repository by the digest
# (what `make catalog` names the bundle by). The commit's time dates the
# files, so one commit's bundle gives one digest.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$(realpath "${1:?usage: $0 BUNDLE_DIR IMAGE OUT}")"
image="${2:?image}"
out="$(realpath -m "${3:?out}")"
version="$(sed -n 's/^  version: //p' "${dir}"/manifests/*.clusterserviceversion.yaml | head -1)"
revision="$(git -C "${root}" rev-parse HEAD 2>/dev/null || echo unknown)"
created="$(git -C "${root}" log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)"
repository="${image%@*}"
if [[ "${repository##*/}" == *:* ]]; then
  repository="${repository%:*}"
fi
mkdir -p "${out}"
digest="$(go -C "${root}/hack/tools/image" run . -bundle "${dir}" -oci "${out}/oci" -tarball "${out}/bundle.tar" \
  -tag "${image}" -version "${version:-dev}" -revision "${revision}" -created "${created}")"
echo "${repository}@${digest}" > "${out}/ref"
echo "${digest}"
