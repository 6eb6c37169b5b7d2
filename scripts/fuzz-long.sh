#!/usr/bin/env bash
# Long (scheduled) fuzzing of every cargo-fuzz target, in parallel, at low priority.
#
#   scripts/fuzz-long.sh [seconds-per-target]     (default 1800)
#
# Each target runs for the given wall-clock time from its corpus (fuzz/corpus/<target>,
# seeded by `cargo test --test main capture_seeds -- --ignored`), at `nice 19` so it only
# takes idle CPU. At the end one line per target reports what a report needs: CPU
# seconds actually spent (user+sys of the fuzzer process), executions, corpus size
# and crashes (files under fuzz/artifacts/<target>/). Exits non-zero if any target
# found a crash. Logs: $FUZZ_LOG_DIR (default /tmp/pgoutbox-fuzz).
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`); runs on stable through
# RUSTC_BOOTSTRAP=1, as .ci/run does for the build.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-1800}
logs=${FUZZ_LOG_DIR:-/tmp/pgoutbox-fuzz}
mkdir -p "$logs"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pgoutbox/target}/fuzz
targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^pgoutbox')
RUSTC_BOOTSTRAP=1 cargo fuzz build -O
for t in $targets; do
  mkdir -p "corpus/$t" "artifacts/$t"
  /usr/bin/time -f '%U %S' -o "$logs/$t.time" \
    nice -n 19 env RUSTC_BOOTSTRAP=1 cargo fuzz run -O "$t" "corpus/$t" -- \
    -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 >"$logs/$t.log" 2>&1 &
done
status=0
wait || status=1
printf '%-20s %10s %12s %8s %8s\n' target cpu_s execs corpus crashes
for t in $targets; do
  cpu=$(awk '{printf "%.0f", $1 + $2}' "$logs/$t.time")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -1)
  corpus=$(find "corpus/$t" -type f | wc -l)
  crashes=$(find "artifacts/$t" -type f | wc -l)
  [ "$crashes" -eq 0 ] || status=1
  printf '%-20s %10s %12s %8s %8s\n' "$t" "$cpu" "${execs:-?}" "$corpus" "$crashes"
done
exit $status
