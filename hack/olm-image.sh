#!/usr/bin/env bash
# Writes an OLM image with hack/tools/image, without a Docker engine: the
# bundle image of a bundle directory (`make bundle`'s), or the image of a
# file-based catalog (`make catalog`'s) as `opm generate dockerfile`
# describes it, with operator-registry's opm and grpc_health_probe built
# here for this machine's platform. Then it prints the image's digest.
#
#   usage: hack/olm-image.sh bundle|catalog DIR IMAGE OUT
#
# OUT receives oci/ (an OCI image layout: `crane push OUT/oci IMAGE` pushes
# it), image.tar (for `docker load` / `podman load`) and ref: IMAGE's
# repository by the digest, by which a catalog names a bundle and a
# CatalogSource a catalog. The commit's time dates the files, so one
# commit's bundle gives one digest.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kind="${1:?usage: $0 bundle|catalog DIR IMAGE OUT}"
dir="$(realpath "${2:?dir}")"
image="${3:?image}"
out="$(realpath -m "${4:?out}")"
revision="$(git -C "${root}" rev-parse HEAD 2>/dev/null || echo unknown)"
created="$(git -C "${root}" log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)"
case "${kind}" in
  bundle)
    version="$(sed -n 's/^  version: //p' "${dir}"/manifests/*.clusterserviceversion.yaml | head -1)"
    args=(-bundle "${dir}")
    ;;
  catalog)
    version="$(sed -n 's/^name: itemops\.v//p' "${dir}"/*/index.yaml | tail -1)"
    args=(-catalog "${dir}" -opm "$("${root}/hack/cached-binary.sh" opm)"
      -grpc-health-probe "$("${root}/hack/cached-binary.sh" grpc-health-probe)")
    ;;
  *)
    echo "usage: $0 bundle|catalog DIR IMAGE OUT" >&2
    exit 2
    ;;
esac
repository="${image%@*}"
if [[ "${repository##*/}" == *:* ]]; then
  repository="${repository%:*}"
fi
mkdir -p "${out}"
digest="$(go -C "${root}/hack/tools/image" run . "${args[@]}" -oci "${out}/oci" -tarball "${out}/image.tar" \
  -tag "${image}" -version "${version:-dev}" -revision "${revision}" -created "${created}")"
echo "${repository}@${digest}" > "${out}/ref"
echo "${digest}"
