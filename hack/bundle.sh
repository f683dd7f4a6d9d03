#!/usr/bin/env bash
# Writes the OLM bundle of itemops: the chart rendered with a values file
# (OLM takes no values at install) and the manager's image, made into a
# ClusterServiceVersion, the CRD and the bundle's metadata by
# hack/tools/bundle, which checks the result with operator-framework's
# validators (see docs/openshift.md).
#
#   usage: hack/bundle.sh IMAGE VERSION VALUES OUT [CHANNEL [REPLACES]]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
image="${1:?usage: $0 IMAGE VERSION VALUES OUT [CHANNEL [REPLACES]]}"
version="${2:?version}"
values="${3:?values}"
out="${4:?out}"
channel="${5:-stable}"
replaces="${6:-}"
version="${version#v}"

repository="${image%@*}"
digest=""
if [[ "${repository}" != "${image}" ]]; then
  digest="${image#*@}"
fi
tag=""
if [[ "${repository##*/}" == *:* ]]; then
  tag="${repository##*:}"
  repository="${repository%:*}"
fi

helm="$("${root}/hack/cached-binary.sh" helm)"
# The namespace the chart is rendered in is the tool's placeholder: OLM
# installs into the OperatorGroup's namespace.
"${helm}" template itemops "${root}/charts/itemops" --namespace itemops-bundle-namespace \
  -f "${values}" --set image.repository="${repository}" --set image.tag="${tag}" --set image.digest="${digest}" |
  (cd "${root}" && go -C hack/tools/bundle run . -out "$(realpath -m "${out}")" -version "${version}" \
    -channel "${channel}" -replaces "${replaces}" \
    -icon "${root}/config/olm/icon.svg" -description "${root}/config/olm/description.md")
echo "bundle ${version} written to ${out}"
