#!/usr/bin/env bash
# stress-kill9.sh [RUNS] [kafka|tansu] [TEST…] — run the kill -9 tests RUNS times
# (default 50) on one broker and report the failure rate.
#
# Each run is a fresh test process (its own PostgreSQL cluster and broker) running
# the named tests (default: run::kill_9_mid_stream_loses_nothing); every kill -9
# test audits the broker's acks (RUST_LOG=info,pgoutbox::acks=trace on the relays,
# each acked offset read back). To run them under load, start the whole suite
# (scripts/test.sh) beside this script. Logs of failed runs are kept; the summary
# prints runs, failures and every `kill -9:` verdict line.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pgoutbox/target}
runs=${1:-50}
broker=${2:-kafka}
shift 2 2>/dev/null || shift $#
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(run::kill_9_mid_stream_loses_nothing)
case "$broker" in kafka|tansu) ;; *) echo "stress-kill9: broker must be kafka or tansu" >&2; exit 2 ;; esac

# Build once; run the test binary itself (cargo would hold its lock for the run).
bin=$(cargo test --test main --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="main": print(m["executable"])' | tail -1)
[ -x "$bin" ] || { echo "stress-kill9: could not build the test binary" >&2; exit 1; }
logs=$(mktemp -d /tmp/pgoutbox-stress-kill9.XXXXXX)
failed=0
start=$(date +%s)
for i in $(seq 1 "$runs"); do
  log="$logs/run-$i.log"
  if PGOUTBOX_TEST_BROKER=$broker "$bin" --exact "${tests[@]}" --nocapture --test-threads 2 >"$log" 2>&1; then
    verdict=$(grep -h "^kill -9:" "$log" | tail -1)
    echo "run $i/$runs ok: ${verdict:-no verdict line}"
    rm -f "$log"
  else
    failed=$((failed + 1))
    echo "run $i/$runs FAILED (log: $log): $(grep -h -m1 -A2 "panicked at" "$log" | tr '\n' ' ' | cut -c1-400)"
  fi
done
echo "stress-kill9: broker=$broker tests=${tests[*]} runs=$runs failed=$failed ($((100 * failed / runs)) %) in $(( $(date +%s) - start )) s; logs of failures in $logs"
[ "$failed" = 0 ]
