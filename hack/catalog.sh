#!/usr/bin/env bash
# Writes an OLM file-based catalog of itemops with operator-registry's opm:
# the package (its icon and description), one olm.bundle per bundle
# directory (`make bundle`'s output) rendered by `opm render`, with the
# bundle image that holds it, and one channel in which each bundle
# replaces the one before it; then `opm validate` checks it.
#
#   usage: hack/catalog.sh OUT CHANNEL BUNDLE_DIR=BUNDLE_IMAGE...
#
# The bundles come oldest first. BUNDLE_IMAGE is how OLM pulls the bundle,
# best by digest (name@sha256:…, as `opm render` of a pushed image writes
# it): a catalog's entries are pinned, and a pod pulls a digest only when
# the node lacks it. The catalog is written to OUT/itemops/index.yaml.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: $0 OUT CHANNEL BUNDLE_DIR=BUNDLE_IMAGE...}"
channel="${2:?channel}"
shift 2
(($#)) || {
  echo "usage: $0 OUT CHANNEL BUNDLE_DIR=BUNDLE_IMAGE..." >&2
  exit 2
}
opm="$("${root}/hack/cached-binary.sh" opm)"

package=itemops
index="${out}/${package}/index.yaml"
mkdir -p "$(dirname "${index}")"
"${opm}" init "${package}" --default-channel "${channel}" \
  --icon "${root}/config/olm/icon.svg" --description "${root}/config/olm/description.md" -o yaml > "${index}"

entries=""
previous=""
for arg in "$@"; do
  dir="${arg%%=*}"
  image="${arg#*=}"
  if [[ "${arg}" != *=* || -z "${image}" ]]; then
    echo "catalog: ${arg}: want BUNDLE_DIR=BUNDLE_IMAGE" >&2
    exit 2
  fi
  rendered="$("${opm}" render "${dir}" -o yaml)"
  # opm renders a bundle directory with no image (it knows none): the one
  # given takes its place.
  name="$(sed -n 's/^name: //p' <<<"${rendered}")"
  if [[ -z "${name}" ]] || ! grep -q '^image: ""$' <<<"${rendered}"; then
    echo "catalog: opm render ${dir} gave no bundle with an empty image:" >&2
    echo "${rendered}" >&2
    exit 1
  fi
  sed "s|^image: \"\"\$|image: ${image}|" <<<"${rendered}" >> "${index}"
  entries+="- name: ${name}"$'\n'
  if [[ -n "${previous}" ]]; then
    entries+="  replaces: ${previous}"$'\n'
  fi
  previous="${name}"
done

cat >> "${index}" <<EOF
---
schema: olm.channel
package: ${package}
name: ${channel}
entries:
${entries%$'\n'}
EOF
"${opm}" validate "${out}"
echo "catalog of ${previous} (${#} bundles) written to ${out}" >&2
