#!/usr/bin/env bash
# Writes every artifact of a release into dist/<VERSION>/ (or $DIST):
#
#   install.yaml                      config/default in one file, the image pinned to the release
#   itemops-<semver>.tgz              the helm chart (helm package), version and appVersion <semver>
#   kubectl-itemops_<VERSION>_<os>_<arch>.tar.gz  the kubectl plugin, linux and darwin, amd64 and arm64
#   itemops.yaml                      the krew manifest naming those archives and their checksums
#   itemops-image-<VERSION>.oci.tar   the manager image, linux/amd64 and linux/arm64, as an OCI image layout
#   itemops-image-<VERSION>-linux-amd64.tar   the same for linux/amd64, for docker load / podman load
#   itemops-bundle-<VERSION>.tar.gz   the OLM bundle (make bundle, config/olm/values.yaml, the image pinned)
#   itemops-bundle-image-<VERSION>.oci.tar  its bundle image ghcr.io/itemops/itemops-bundle:<semver>, an OCI image layout
#   itemops-catalog-<VERSION>.tar.gz  a file-based catalog (opm) naming that bundle image by its digest, and
#                                     catalog.Dockerfile (opm generate dockerfile) to build its image
#   RELEASE-NOTES.md                  the commits since the previous release tag
#   itemops-<VERSION>.cdx.json        CycloneDX SBOM of the manager: the modules linked into it
#   kubectl-itemops-<VERSION>.cdx.json  the same for kubectl-itemops
#   SHA256SUMS                        the checksum of every file above
#   SHA256SUMS.sig                    a cosign signature of SHA256SUMS with the key COSIGN_KEY
#
# Usage: COSIGN_KEY=cosign.key hack/release.sh v0.1.0   (make release VERSION=v0.1.0)
# COSIGN_KEY is the maintainers' cosign private key (COSIGN_PASSWORD its
# password); the signature is checked offline against their public key
# (docs/security.md). UNSIGNED=1 writes a release without it, for trying.
# IMG names the image (default: ghcr.io/itemops/itemops:<semver>, the tag the
# chart deploys by default).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
VERSION="${1:-}"
if [[ ! "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "usage: make release VERSION=v<major>.<minor>.<patch>, for example VERSION=v0.1.0 (got '${VERSION}')" >&2
  exit 2
fi
semver="${VERSION#v}"
if [[ -z "${COSIGN_KEY:-}" && "${UNSIGNED:-}" != 1 ]]; then
  echo "set COSIGN_KEY to the maintainers' cosign private key (cosign generate-key-pair makes one), or UNSIGNED=1 for a release without a signature" >&2
  exit 2
fi
IMG="${IMG:-ghcr.io/itemops/itemops:${semver}}"
out="${DIST:-$root/dist/$VERSION}"
rm -rf "$out"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
step() { echo "==> $*" >&2; }

step "install.yaml with $IMG"
hack/build-installer.sh "$IMG" "$semver" > "$out/install.yaml"

step "the helm chart $semver"
helm="$(hack/cached-binary.sh helm)"
"$helm" package charts/itemops --version "$semver" --app-version "$semver" --destination "$out" >&2

step "kubectl-itemops for linux and darwin, amd64 and arm64, and its krew manifest"
go run ./hack/krew -version "$VERSION" -out "$out" -manifest "$out/itemops.yaml" >&2

step "the manager image $IMG"
OUT="$work/image" IMG="$IMG" VERSION="$VERSION" PLATFORMS=linux/amd64,linux/arm64 TARBALL_PLATFORM=linux/amd64 hack/image.sh >&2
tar -C "$work/image/oci" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$out/itemops-image-$VERSION.oci.tar" .
cp "$work/image/itemops.tar" "$out/itemops-image-$VERSION-linux-amd64.tar"

BUNDLE_IMG="${BUNDLE_IMG:-ghcr.io/itemops/itemops-bundle:${semver}}"
step "the OLM bundle, its image $BUNDLE_IMG, and a catalog of it"
hack/bundle.sh "$IMG" "$semver" config/olm/values.yaml "$work/olm/bundle" >&2
tar -C "$work/olm" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -czf "$out/itemops-bundle-$VERSION.tar.gz" bundle
hack/olm-image.sh bundle "$work/olm/bundle" "$BUNDLE_IMG" "$work/olm/bundle-image" > /dev/null
tar -C "$work/olm/bundle-image/oci" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$out/itemops-bundle-image-$VERSION.oci.tar" .
hack/catalog.sh "$work/olm/catalog" stable "$work/olm/bundle=$(cat "$work/olm/bundle-image/ref")" >&2
opm="$(hack/cached-binary.sh opm)"
(cd "$work/olm" && "$opm" generate dockerfile catalog >&2)
tar -C "$work/olm" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -czf "$out/itemops-catalog-$VERSION.tar.gz" catalog catalog.Dockerfile

step "release notes from the commit log"
previous="$(git describe --tags --abbrev=0 --match 'v*' HEAD^ 2>/dev/null || true)"
{
  echo "# itemops $VERSION"
  echo
  echo "Image: \`$IMG\` (linux/amd64, linux/arm64). Install with \`kubectl apply --server-side -f install.yaml\`"
  echo "or \`helm install itemops itemops-$semver.tgz --namespace velero\`; check the files with \`sha256sum -c SHA256SUMS\`."
  echo
  if [[ -n "$previous" ]]; then
    echo "## Changes since $previous"
    range="$previous..HEAD"
  else
    echo "## Changes"
    range="HEAD"
  fi
  echo
  git log --no-merges --format='- %s (%h)' "$range" 2>/dev/null || echo "- (built outside a git checkout: no commit log)"
} > "$out/RELEASE-NOTES.md"

step "SBOMs of the manager and kubectl-itemops"
# The modules linked into each binary, as built for linux/amd64 (the other
# platforms link the same modules). The main module's version comes from
# git: run it in a clone (git worktrees are not read).
sbom="$(hack/cached-binary.sh cyclonedx-gomod)"
for main in . cmd/kubectl-itemops; do
  name=itemops
  [[ "$main" == . ]] || name="$(basename "$main")"
  GOOS=linux GOARCH=amd64 CGO_ENABLED=0 "$sbom" app -json -licenses -output "$out/$name-$VERSION.cdx.json" -main "$main" "$root" >&2
done

step "checksums"
(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)

if [[ -n "${COSIGN_KEY:-}" ]]; then
  step "signature of SHA256SUMS with $COSIGN_KEY"
  cosign="$(hack/cached-binary.sh cosign)"
  # Not uploaded to sigstore's transparency log: checked offline with the key.
  "$cosign" sign-blob --yes --key "$COSIGN_KEY" --tlog-upload=false \
    --output-signature "$out/SHA256SUMS.sig" "$out/SHA256SUMS" >&2
fi
echo "$out"
