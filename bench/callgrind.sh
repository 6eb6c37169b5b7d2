#!/usr/bin/env bash
# Instruction count of the decode → route path (examples/decode_route.rs), per event,
# measured with callgrind: counts instructions, not seconds, so it is repeatable on a
# shared, noisy machine. The per-event figure is the difference of two runs
# (10,000 and 110,000 events) divided by 100,000, so process start and setup cancel.
#
#   bench/callgrind.sh           print the figure
#   bench/callgrind.sh --check   also fail if it exceeds bench/callgrind-baseline.txt by > 10 %
#
# The baseline was recorded with the toolchain in use when it was written; after a
# deliberate change (or a compiler upgrade) re-record it with:
#   bench/callgrind.sh > /dev/null && cp "$CARGO_TARGET_DIR/callgrind-per-event" bench/callgrind-baseline.txt
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pgoutbox/target}
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }
cargo build --release --quiet --example decode_route
bin="$CARGO_TARGET_DIR/release/examples/decode_route"
count() {
  local out; out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "$1" 10 >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out"
  rm -f "$out"
}
small=$(count 10000)
large=$(count 110000)
per_event=$(( (large - small) / 100000 ))
echo "$per_event" > "$CARGO_TARGET_DIR/callgrind-per-event"
echo "decode → route: $per_event instructions/event (callgrind; 110k − 10k events, transactions of 10)"
if [ "${1:-}" = --check ]; then
  baseline=$(tr -dc '0-9' < bench/callgrind-baseline.txt)
  limit=$(( baseline * 110 / 100 ))
  if [ "$per_event" -gt "$limit" ]; then
    echo "regression: $per_event instructions/event > $limit (baseline $baseline + 10 %)" >&2
    exit 1
  fi
  echo "within 10 % of the recorded baseline ($baseline)"
fi
