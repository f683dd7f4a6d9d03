#!/usr/bin/env bash
# Runs itemops' suites at each Kubernetes release of KUBE_VERSIONS, oldest
# first, and writes the results into test/kube/results.md (see docs/testing.md).
#
# At every release, with that release's kube-apiserver and etcd: the
# controllers, the CRD's validation, the chart rendered and applied, the
# manifests end to end, the kubectl plugin, and test/compat beside the Velero
# release of that Kubernetes' era. At the oldest and the newest release, also
# itemops installed with helm on a real one-node cluster (test/cluster, needs
# root): helm 3 at the oldest, helm 4 at the newest.
#
#   KUBE_VERSIONS   the Kubernetes releases (default: the newest patch of
#                   every minor from 1.31 to 1.37 the module proxy serves)
#   KUBE_CLUSTER    0 leaves out test/cluster (default: 1)
#   KUBE_HELM       the helm release test/cluster installs with (default:
#                   3.22.0 at the oldest release run, 4.3.1 at the newest)
#   KUBE_RESULTS    where the table goes (default: test/kube/results.md;
#                   empty: nowhere). A run of some releases replaces their
#                   rows and keeps the others', each row with its day.
#   ARTIFACTS       the JUnit reports go into ARTIFACTS/kube-<release>/
#   LABELS, FOCUS   as for make test
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
read -r -a versions <<<"${KUBE_VERSIONS:-1.31.12 1.32.13 1.33.13 1.34.12 1.35.8 1.36.3 1.37.2}"
KUBE_CLUSTER="${KUBE_CLUSTER:-1}"
results="${KUBE_RESULTS-$root/test/kube/results.md}"
ARTIFACTS="${ARTIFACTS:-$root/_artifacts}"

# velero_of prints the Velero release test/compat runs beside a Kubernetes
# minor: the release whose README names that minor among those it was
# tested on (v1.15: 1.28-1.31, v1.16: 1.31-1.33, v1.17: 1.31-1.34, v1.18:
# 1.33-1.35), the newest for those after.
velero_of() {
  local minor="$1"
  if ((minor <= 31)); then echo 1.15.2
  elif ((minor <= 33)); then echo 1.16.2
  elif ((minor == 34)); then echo 1.17.2
  else echo 1.18.3
  fi
}

# The binaries every release shares, and those of each release, built once
# per machine before anything runs.
hack/velero-plugin-for-aws.sh > /dev/null
hack/cached-binary.sh versitygw > /dev/null
HELM_VERSION=3.22.0 hack/cached-binary.sh helm > /dev/null
HELM_VERSION=4.3.1 hack/cached-binary.sh helm > /dev/null
((KUBE_CLUSTER)) && hack/cluster-packages.sh
declare -A assets
for v in "${versions[@]}"; do
  assets[$v]="$(ENVTEST_KUBE_VERSION="$v" hack/envtest-assets.sh)"
  VELERO_VERSION="$(velero_of "$(cut -d. -f2 <<<"$v")")" hack/cached-binary.sh velero > /dev/null
done

# count prints what the JUnit reports of dir say: "passed total failed".
count() {
  local f tests skipped failed passed=0 total=0 failures=0
  for f in "$1"/*_junit.xml; do
    [[ -f "$f" ]] || continue
    read -r tests skipped failed < <(grep -o '<testsuite [^>]*>' "$f" | head -1 |
      sed -E 's/.* tests="([0-9]+)".* skipped="([0-9]+)" errors="([0-9]+)" failures="([0-9]+)".*/\1 \2 \3 \4/' |
      awk '{print $1, $2, $3 + $4}')
    total=$((total + tests - skipped))
    failures=$((failures + failed))
  done
  passed=$((total - failures))
  echo "$passed $total $failures"
}

rows=() status=0
oldest="${versions[0]}" newest="${versions[${#versions[@]} - 1]}"
for v in "${versions[@]}"; do
  minor="$(cut -d. -f2 <<<"$v")"
  velero="$(velero_of "$minor")"
  packages=(./controllers ./test/crd ./test/chart ./test/e2e ./test/cli ./test/compat)
  helm=""
  if ((KUBE_CLUSTER)) && [[ "$v" == "$oldest" || "$v" == "$newest" ]]; then
    packages+=(./test/cluster)
    helm=3.22.0
    [[ "$v" == "$newest" ]] && helm=4.3.1
    helm="${KUBE_HELM:-$helm}"
  fi
  out="$ARTIFACTS/kube-$v"
  mkdir -p "$out"
  echo "=== Kubernetes v$v: ${packages[*]}, Velero v$velero${helm:+, helm v$helm}" >&2
  start="$(date +%s)"
  code=0
  KUBEBUILDER_ASSETS="${assets[$v]}" ITEMOPS_VELERO_VERSIONS="$velero" HELM_VERSION="${helm:-3.22.0}" \
    PACKAGES="${packages[*]}" ARTIFACTS="$out" TIMEOUT=90m hack/test.sh > "$out/test.log" 2>&1 || code=$?
  took="$(($(date +%s) - start))"
  read -r passed total failed < <(count "$out")
  result=passed
  if ((code != 0)); then
    result="**failed**" status=1
    tail -n 80 "$out/test.log" >&2
  fi
  echo "=== Kubernetes v$v: $result, $passed of $total specs, $((took / 60))m$((took % 60))s" >&2
  suites="$(sed 's|\./||g; s|test/||g' <<<"${packages[*]}" | sed 's/ /, /g')"
  rows+=("| v$v | v$velero | ${helm:+helm v$helm; }$suites | $result | $passed of $total | $((took / 60))m$((took % 60))s | $(date -u +%F) |")
done

if [[ -n "$results" ]]; then
  # The rows of the releases not run this time stay, with their day (a
  # row from before rows had one takes the day the table was written).
  if [[ -f "$results" ]]; then
    written="$(sed -nE 's/^Written by .* on ([0-9]{4}-[0-9]{2}-[0-9]{2}).*/\1/p' "$results" | head -1)"
    while IFS= read -r row; do
      v="$(sed -E 's/^\| v([0-9.]+) \|.*/\1/' <<<"$row")"
      [[ " ${versions[*]} " == *" $v "* ]] && continue
      (($(grep -o '|' <<<"$row" | wc -l) == 7)) && row="$row ${written:-?} |"
      rows+=("$row")
    done < <(grep -E '^\| v[0-9]' "$results")
  fi
  mkdir -p "$(dirname "$results")"
  {
    echo "# itemops on each Kubernetes release"
    echo
    echo "Written by \`make test-kube\` (hack/test-kube.sh) on $(date -u +%F): $(go env GOOS)/$(go env GOARCH), $(nproc) cores, $(go env GOVERSION). Each release runs its own kube-apiserver and etcd v${ENVTEST_ETCD_VERSION:-3.6.16}, built from the module proxy; test/compat runs beside the Velero release of that Kubernetes' era, and test/cluster (a real one-node cluster: kubelet, kube-proxy, containerd, itemops installed with helm as the README says) at the oldest and the newest. The time includes starting each suite's control plane; the binaries were built before. A run of some releases (KUBE_VERSIONS) replaces their rows and keeps the others; each row says the day it ran."
    echo
    echo "| Kubernetes | Velero | suites | result | specs passed | time | run on |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}" | sort -t'|' -k2,2V
  } > "$results"
  echo "results: $results" >&2
fi
exit "$status"
