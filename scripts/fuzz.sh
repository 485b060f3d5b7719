#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ for FUZZ_SECONDS seconds each (default 30), on the stable
# toolchain (RUSTC_BOOTSTRAP=1, as cargo-fuzz needs nightly flags). Installs cargo-fuzz when it
# is missing. The targets are built optimised WITH debug assertions, so that an arithmetic
# overflow panics (a wrong length in release) and a debug_assert! holds, as in the tests.
# A crash, an overflow, a leak, a timeout or an out-of-memory in any target fails the script
# (libFuzzer saves the input under fuzz/artifacts/TARGET/); so does a target that does not
# build or run. FUZZ_TARGETS="a b" runs only those.
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
echo "== fuzz: building ($(echo $targets | wc -w) targets, -O --debug-assertions)"
cargo fuzz build -O --debug-assertions
failed=()
for t in $targets; do
  echo "== fuzz: $t for ${secs}s"
  mkdir -p "corpus/$t"
  log=$(mktemp)
  status=0
  cargo fuzz run -O --debug-assertions "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 >"$log" 2>&1 || status=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|INFO: seed|.*(ERROR|panicked|overflow|Crash|deadly))" "$log" || :
  if [ "$status" -ne 0 ] || [ -n "$(ls -A "artifacts/$t" 2>/dev/null)" ]; then
    tail -n 40 "$log" >&2
    echo "fuzz: $t failed (exit $status; inputs: $(ls "artifacts/$t" 2>/dev/null | tr '\n' ' '))" >&2
    failed+=("$t")
  fi
  rm -f "$log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "== fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "== fuzz: every target ran ${secs}s without a failure"
