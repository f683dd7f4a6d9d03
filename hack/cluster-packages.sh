#!/usr/bin/env bash
# Installs, with apt-get, the distribution packages a local one-node cluster
# (test/localcluster: make cluster, test/cluster) runs on: containerd, runc,
# the CNI plugins and iptables. Nothing is done when they are all there.
# Without root it installs nothing and says what is missing.
set -euo pipefail

declare -A want=(
  [containerd]=containerd [containerd-shim-runc-v2]=containerd [ctr]=containerd
  [runc]=runc [iptables]=iptables [ip]=iproute2 [nsenter]=util-linux
)
missing=()
for cmd in "${!want[@]}"; do
  command -v "${cmd}" > /dev/null 2>&1 || missing+=("${want[${cmd}]}")
done
for plugin in bridge host-local loopback portmap; do
  [[ -x "/usr/lib/cni/${plugin}" ]] || { missing+=(containernetworking-plugins); break; }
done
((${#missing[@]})) || exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if [[ "$(id -u)" != 0 ]]; then
  echo "a local cluster needs root and the packages ${missing[*]} (apt-get install -y ${missing[*]}); run as root" >&2
  exit 1
fi
echo "installing ${missing[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq "${missing[@]}" >&2
