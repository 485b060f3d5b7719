#!/usr/bin/env bash
# Builds the Debian packages trafficcopy-copier and trafficcopy-intercept into target/debian/:
# release binaries, their man pages and shell completions (generated from the clap definitions
# by the binaries themselves: TRAFFICCOPY_GEN_DOCS, see common/src/docs.rs), then cargo-deb.
# Installs cargo-deb from crates.io the first time (kept in ~/.cargo/bin afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
  echo "build-debs: installing cargo-deb $CARGO_DEB_VERSION"
  cargo install cargo-deb --locked --version "$CARGO_DEB_VERSION" -q
fi
cargo build --release -q -p copier -p intercept --bins
for bin in copier intercept; do
  rm -rf "target/packaging/$bin"
  TRAFFICCOPY_GEN_DOCS="target/packaging/$bin" "target/release/$bin"
  cargo deb -q -p "$bin" --no-build --strip --fast
done
ls -1 target/debian/*.deb
