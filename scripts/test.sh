#!/usr/bin/env bash
# Runs every test of the workspace, the namespace (lab) tests included, after installing what
# they need. Run as root: the lab tests need network namespaces, raw sockets and NFQUEUE.
# Without root they skip with a loud message; under CI=true a skip is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
scripts/install-deps.sh
echo "== build"
cargo build --workspace --bins --all-targets
echo "== tests"
cargo test --workspace --no-fail-fast
if [ -d fuzz ]; then
  echo "== fuzz targets compile"
  (cd fuzz && cargo check -q)
fi
