#!/usr/bin/env bash
# Installs the Debian packages that the lab, the demo and the tests use, when they are missing.
# Needs root (apt-get). Safe to run again: it installs only what is absent.
set -euo pipefail

# command -> package
declare -A PKG=(
  [ip]=iproute2 [ss]=iproute2 [nginx]=nginx [curl]=curl [wrk]=wrk [iptables]=iptables
  [ip6tables]=iptables [tcpdump]=tcpdump [ethtool]=ethtool [ping]=iputils-ping [pkill]=procps
  [redis-server]=redis-server [redis-benchmark]=redis-tools [redis-cli]=redis-tools
  [prometheus]=prometheus [setpriv]=util-linux [systemd-analyze]=systemd [dpkg-deb]=dpkg
  [chromium]=chromium [h2load]=nghttp2-client
)
missing=()
for cmd in "${!PKG[@]}"; do
  if ! PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1; then
    missing+=("${PKG[$cmd]}")
  fi
done
# scripts/check-deploy.sh makes a virtualenv for the Kubernetes schema validator
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
# tests/tests/copy_grpc.rs and copy_ws.rs run a gRPC and a WebSocket server and client under
# Debian's python3 (tests/assets/*.py)
for mod in grpc:python3-grpcio websockets:python3-websockets; do
  if ! /usr/bin/python3 -c "import ${mod%%:*}" >/dev/null 2>&1; then
    missing+=("${mod#*:}")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
# shellcheck disable=SC2207
missing=($(printf '%s\n' "${missing[@]}" | sort -u))
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages ${missing[*]}; run as root to install them" >&2
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# (chromium: tests/tests/compare_report.rs renders the comparison report headless; h2load:
# tests/tests/copy_h2.rs and bench_copier drive HTTP/2 with it)
# the Debian nginx package starts a system nginx on port 80 of the host; the lab runs its own
# nginx inside namespaces and does not need it
if command -v systemctl >/dev/null 2>&1; then systemctl stop nginx >/dev/null 2>&1 || true; fi
pkill -f 'nginx: master process /usr/sbin/nginx' >/dev/null 2>&1 || true
# the same for the Debian prometheus package (the lab runs its own, in a namespace)
if command -v systemctl >/dev/null 2>&1; then systemctl stop prometheus >/dev/null 2>&1 || true; fi
