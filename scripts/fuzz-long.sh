#!/usr/bin/env bash
# A long fuzzing run of one target, measured in CPU time rather than wall time (the machine may
# be busy): runs fuzz/TARGET until the fuzzer process has used CPU_MINUTES of CPU (default 20),
# then stops it and prints the executions, the CPU time and the coverage it reached. For
# BENCHMARKS.md ("Fuzzing"). Built with debug assertions (overflow checks), as scripts/fuzz.sh.
# Usage: scripts/fuzz-long.sh TARGET [CPU_MINUTES]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export PATH="$HOME/.cargo/bin:$PATH"
export RUSTC_BOOTSTRAP=1
t=$1
mins=${2:-20}
cargo fuzz build -O --debug-assertions "$t" >/dev/null
bin=target/x86_64-unknown-linux-gnu/release/$t
mkdir -p "corpus/$t" "artifacts/$t"
log=$(mktemp)
"$bin" "corpus/$t" -artifact_prefix="artifacts/$t/" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  -max_total_time=86400 >"$log" 2>&1 &
pid=$!
tick=$(getconf CLK_TCK)
while kill -0 "$pid" 2>/dev/null; do
  read -r -a st < "/proc/$pid/stat" || break
  cpu=$(( (st[13] + st[14]) / tick ))
  if [ "$cpu" -ge $((mins * 60)) ]; then
    kill -INT "$pid"
    break
  fi
  sleep 5
done
wait "$pid" || true
echo "target $t: $cpu CPU-seconds"
grep -E "^#[0-9]+" "$log" | tail -1
grep -E "^stat::|SUMMARY|deadly|panicked" "$log" || true
ls -A "artifacts/$t" | sed 's/^/failing input: /'
