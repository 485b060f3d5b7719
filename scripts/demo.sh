#!/usr/bin/env bash
# The demo: installs what it needs, builds, brings up a throwaway lab of network namespaces,
# copies live traffic from `online` to `test`, prints a short table, and removes the lab.
# Run as root. DEMO_SECONDS=N changes how long traffic runs (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
scripts/install-deps.sh
cargo build --release -q -p copier -p intercept -p lab --bins
exec target/release/demo
