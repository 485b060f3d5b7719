#!/usr/bin/env bash
# Runs every test of the workspace, the namespace (lab) tests included, after installing what
# they need, checking the deployment files and building the Debian packages (which the package
# test installs); then the demo (which fails unless every request was copied exactly and nothing
# leaked) and every fuzz target briefly (FUZZ_SECONDS, default 30). Run as root: the lab tests
# need network namespaces, raw sockets and NFQUEUE. Without root they skip with a loud message; under CI=true a skip is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
scripts/install-deps.sh
echo "== build"
cargo build --workspace --bins --all-targets
echo "== deployment files (Kubernetes schemas, manifest promises, dashboard metric names)"
scripts/check-deploy.sh
echo "== Debian packages (the package test installs them in the lab machine)"
packaging/build-debs.sh
echo "== tests"
cargo test --workspace --no-fail-fast
echo "== demo (fails when copies per request are off or anything leaked)"
if [ "$(id -u)" -eq 0 ] || [ "${CI:-}" = "true" ]; then
  scripts/demo.sh
else
  echo "!! SKIPPED: the demo needs root (network namespaces); run as root to check it" >&2
fi
echo "== fuzz (every target, ${FUZZ_SECONDS:-30} s each)"
scripts/fuzz.sh
