#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ for FUZZ_SECONDS seconds each (default 30), on the stable
# toolchain (RUSTC_BOOTSTRAP=1, as cargo-fuzz needs nightly flags). Installs cargo-fuzz when it
# is missing. A crash, a leak or a timeout in any target fails the script (libFuzzer saves the
# input under fuzz/artifacts/TARGET/). FUZZ_TARGETS="a b" runs only those.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export PATH="$HOME/.cargo/bin:$PATH"
export RUSTC_BOOTSTRAP=1
secs=${FUZZ_SECONDS:-30}
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi
targets=${FUZZ_TARGETS:-$(cargo fuzz list)}
echo "== fuzz: building ($(echo $targets | wc -w) targets)"
cargo fuzz build -O
for t in $targets; do
  echo "== fuzz: $t for ${secs}s"
  mkdir -p "corpus/$t"
  cargo fuzz run -O "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 2>&1 | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|INFO: seed|.*(ERROR|panicked|Crash|deadly))" || true
  # grep swallowed the exit status: ask the fuzzer's own report
  if [ -n "$(ls -A "artifacts/$t" 2>/dev/null)" ]; then
    echo "fuzz: $t found a failing input: $(ls "artifacts/$t")" >&2
    exit 1
  fi
done
echo "== fuzz: every target ran ${secs}s without a failure"
