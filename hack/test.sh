#!/usr/bin/env bash
# Runs the test suites: the Ginkgo suites through the pinned Ginkgo CLI, the
# plain `testing` packages through go test. See docs/testing.md.
#
#   LABELS     a Ginkgo label filter, e.g. velero or 'envtest && !slow'
#   FOCUS      a regular expression on the specs' descriptions
#   ARTIFACTS  where the JUnit reports go (default: _artifacts), one per suite
#   RACE       1 to build with the race detector (default: 0; see docs/testing.md)
#   PACKAGES   the packages to look at (default: ./...)
#   TIMEOUT    how long the Ginkgo suites of a lane may take, counted from the
#              lane's start (default: 80m; the chaos suite and test/cluster
#              take about 36m once everything is built, and on a new machine
#              test/cluster's setup first waits for the node's binaries and
#              the other projects' programs: 60m from the control plane on
#              a slow one)
#   OLM        1 to run only the suite of OLM on a real cluster (label olm),
#              which otherwise never runs here (make test-olm)
#   QUICK      1 to run only what needs no real node and no real velero
#              server (make test-quick): the unit, envtest and other Ginkgo
#              suites, and the plain packages but test/release
#   ITEMOPS_TEST_TIMES  a file to add each lane's start and end to, for the
#              time table make test prints at its end; unset, this script
#              keeps its own and prints the table itself
#
# With LABELS or FOCUS set, only Ginkgo suites run: the plain packages have no
# labels. Four lanes run side by side, as go test runs packages side by side:
# the suite on a real one-node cluster (label cluster), the longest, one
# process, first: on a new machine its setup (its images built, the node
# up, Velero and itemops installed) waits for the node's Kubernetes binaries
# and the other projects' programs, and the chaos run once saw a Cancel come
# too late beside the cluster coming up; the suites that start the real
# velero server (label velero), one after the other and one spec at a time,
# taking turns on it, and then the chaos suite (label chaos), one process,
# as the velero suites' own chaos run; the other Ginkgo suites, two
# processes each; and the plain packages (at the lowest priority). When the
# cluster suite runs too, the velero lane and the other Ginkgo suites first
# wait for what the cluster suite waits for and then for its setup, so that
# on a new machine those builds and that setup have the CPU first.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
LABELS="${LABELS:-}"
FOCUS="${FOCUS:-}"
ARTIFACTS="${ARTIFACTS:-$root/_artifacts}"
RACE="${RACE:-0}"
PACKAGES="${PACKAGES:-./...}"
TIMEOUT="${TIMEOUT:-80m}"
QUICK="${QUICK:-0}"
ginkgo=(go tool -modfile="$root/hack/tools/go.mod" ginkgo)

# Every package with tests, as a directory relative to the root.
mapfile -t dirs < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.Dir}}{{end}}' $PACKAGES | sed "s|^$root|.|; s|^\.$|./|" | sed '/^$/d')
velero=() cluster=() serial=() parallel=() plain=() olm=()
for d in "${dirs[@]}"; do
  suite="$d/suite_test.go"
  if [[ -f "$suite" ]] && grep -q 'RunSpecs(' "$suite"; then
    if grep -E 'RunSpecs\(.*Label\(.*"olm"' "$suite" > /dev/null; then
      olm+=("$d")
    elif grep -E 'RunSpecs\(.*Label\(.*"cluster"' "$suite" > /dev/null; then
      cluster+=("$d")
    elif grep -E 'RunSpecs\(.*Label\(.*"velero"' "$suite" > /dev/null; then
      velero+=("$d")
    elif grep -E 'RunSpecs\(.*Label\(.*"chaos"' "$suite" > /dev/null; then
      serial+=("$d")
    else
      parallel+=("$d")
    fi
  else
    plain+=("$d")
  fi
done

# The suite of OLM on a real one-node cluster runs only by itself (make
# test-olm, OLM=1): beside test/cluster it would be a second cluster.
if [[ "${OLM:-0}" == 1 ]]; then
  cluster=("${olm[@]}") velero=() serial=() parallel=() plain=()
elif ((${#olm[@]})); then
  echo "${olm[*]}: not run (make test-olm runs it)" >&2
fi
if [[ "$QUICK" == 1 ]]; then
  # The inner loop: what needs neither the real node nor the real velero
  # server, nor the chaos run beside it; and not test/release, which builds
  # every platform's binaries and the image. make test runs them all.
  echo "QUICK=1: not run: ${cluster[*]} ${velero[*]} ${serial[*]} ./test/release (make test runs them)" >&2
  cluster=() velero=() serial=()
  for i in "${!plain[@]}"; do
    [[ "${plain[$i]}" == ./test/release ]] && unset 'plain[i]'
  done
  plain=("${plain[@]}")
fi

mkdir -p "$ARTIFACTS"
rm -f "$ARTIFACTS"/*_junit.xml "$ARTIFACTS"/*_report.json
flags=(--timeout="$TIMEOUT" --keep-going --keep-separate-reports --output-dir="$ARTIFACTS" --junit-report=junit.xml --json-report=report.json)
# The plain packages' timeout guards against a hang, not a slow machine:
# test/release builds every platform's binaries and the image (and, on a new
# machine, cosign, opm and cyclonedx-gomod), which took 20 minutes on two
# cores with other builds beside it, at the lowest CPU priority (below).
gotest=(go test -count=1 -timeout 60m)
if [[ "$RACE" == 1 ]]; then
  # go-plugin itself is built without race instrumentation: the race runtime
  # reports a race between its Client.Client and the goroutine its Start
  # starts, on memory of neither (see docs/testing.md). Every other package,
  # ours included, is instrumented.
  norace='github.com/hashicorp/go-plugin=-race=false'
  flags+=(--race "--gcflags=$norace")
  gotest+=(-race "-gcflags=$norace")
fi
[[ -n "$LABELS" ]] && flags+=(--label-filter="$LABELS")
[[ -n "$FOCUS" ]] && flags+=(--focus="$FOCUS")
if [[ -n "$LABELS$FOCUS" ]]; then
  echo "LABELS/FOCUS select Ginkgo specs: the plain packages (${#plain[@]}) do not run." >&2
  plain=()
fi

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
times="${ITEMOPS_TEST_TIMES:-$logs/times}"
began="$(date +%s)"
pids=() names=()
# Each lane's start and end go to $times, for the time table.
lane() { # name command...
  local name="$1"
  shift
  {
    echo "lane $name start $(date +%s)" >> "$times"
    status=0
    "$@" > "$logs/$name" 2>&1 || status=$?
    echo "lane $name end $(date +%s)" >> "$times"
    exit "$status"
  } &
  pids+=($!)
  names+=("$name")
}
# What the cluster suite waits for: the node's Kubernetes binaries and the
# other projects' programs it runs (hack/cached-binaries.sh). Built once per
# machine: then this returns at once. A failed build is the cluster suite's
# to report; the suites that wait for it run all the same. Then they wait
# for the cluster suite's setup to end (it builds its images and brings the
# node up; the file ITEMOPS_CLUSTER_SET_UP names, which the suite writes
# then, or its lane when it ends): beside ten suites compiling, that setup
# took 13 minutes on a new machine.
export ITEMOPS_CLUSTER_SET_UP="$logs/cluster-set-up"
# The real node's suite goes on after a failed spec, so that one failure
# does not hide the other specs' results (a spec that needs what the failed
# one was to leave is skipped, naming it); the run still fails.
export ITEMOPS_CLUSTER_CONTINUE="${ITEMOPS_CLUSTER_CONTINUE:-1}"
cluster_parts='hack/envtest-assets.sh > /dev/null 2>&1; hack/cached-binaries.sh > /dev/null 2>&1
while [[ ! -e "$ITEMOPS_CLUSTER_SET_UP" ]]; do sleep 2; done
exec "$@"'
if ((${#cluster[@]})); then
  lane cluster bash -c 'status=0; "$@" || status=$?; : > "$ITEMOPS_CLUSTER_SET_UP"; exit "$status"' cluster \
    "${ginkgo[@]}" "${flags[@]}" "${cluster[@]}"
  ((${#velero[@]} + ${#serial[@]})) && lane velero bash -c "$cluster_parts" velero "${ginkgo[@]}" "${flags[@]}" "${velero[@]}" "${serial[@]}"
else
  ((${#serial[@]})) && lane serial "${ginkgo[@]}" "${flags[@]}" "${serial[@]}"
  ((${#velero[@]})) && lane velero "${ginkgo[@]}" "${flags[@]}" "${velero[@]}"
fi
if ((${#parallel[@]})); then
  if ((${#cluster[@]})); then
    # As the velero lane: on a new machine what the longest suite waits
    # for builds first, and its setup runs before these suites compile.
    lane parallel bash -c "$cluster_parts" parallel "${ginkgo[@]}" "${flags[@]}" --procs=2 "${parallel[@]}"
  else
    lane parallel "${ginkgo[@]}" "${flags[@]}" --procs=2 "${parallel[@]}"
  fi
fi
# The plain packages compile the most (test/release builds every platform's
# binaries) and nothing waits for them: they run at the lowest CPU priority,
# so that on a new machine they take only the CPU that what the real-node
# suite waits for leaves (make test builds it beside).
((${#plain[@]})) && lane plain nice -n 19 "${gotest[@]}" "${plain[@]}"

codes=()
for i in "${!pids[@]}"; do
  code=0
  wait "${pids[$i]}" || code=$?
  codes+=("$code")
done

# The lanes that passed print first, so that the output ends with what failed.
status=0
for want in pass fail; do
  for i in "${!pids[@]}"; do
    code="${codes[$i]}"
    if [[ "$want" == pass && "$code" != 0 ]] || [[ "$want" == fail && "$code" == 0 ]]; then
      continue
    fi
    echo "=== ${names[$i]} lane (exit $code)"
    cat "$logs/${names[$i]}"
    ((code == 0)) || status=1
  done
done

# Each failure once more, without colours, as the last thing printed: a
# Ginkgo spec's failure block, or a go test failure line.
if ((status != 0)); then
  echo "=== failures"
  for i in "${!pids[@]}"; do
    [[ "${codes[$i]}" == 0 ]] && continue
    sed 's/\x1b\[[0-9;]*m//g' "$logs/${names[$i]}" | awk -v lane="${names[$i]}" '
      # A failed spec: its first lines (what failed, where), then its last
      # (the failure message, after the timeline and the logs it holds).
      function flush(   i) {
        for (i = 1; i <= n; i++) {
          if (i <= 12 || i > n - 40) print buf[i]
          else if (i == 13) print "[... " n - 52 " lines of the timeline: see the JUnit report ...]"
        }
        n = 0
      }
      /^• \[(FAILED|PANICKED|TIMEDOUT|INTERRUPTED)\]/ { block = 1; n = 0; print "--- " lane " lane" }
      block && /^------------------------------/ { block = 0; flush(); next }
      block { buf[++n] = $0 }
      /^(--- FAIL|FAIL\t|panic:)/ { print lane ": " $0 }
      END { if (block) flush() }'
  done
fi
# Where the time went; make test prints it itself, its builds included.
if [[ -z "${ITEMOPS_TEST_TIMES:-}" ]]; then
  go run ./test/cmd/testtimes -times "$times" -began "$began" "$ARTIFACTS"/*_report.json || true
fi
echo "JUnit reports: $ARTIFACTS/*_junit.xml"
exit "$status"
