#!/usr/bin/env bash
# The PostgreSQL compatibility matrix: the integration tests that depend on the
# server (streaming, delivery, crash and restart, keepalive, auth, check, slot
# safety, failover, logical decoding messages, heartbeat, poll mode, cleanup,
# replay) against every supported major version other than the system
# one, which runs the whole suite (scripts/test.sh).
#
#   scripts/test-matrix.sh             # 13 14 15 16 17 18 minus the system major
#   scripts/test-matrix.sh 17 18       # just these
#   PGOUTBOX_MATRIX="16 17" scripts/test-matrix.sh
#
# Server binaries come from scripts/install-postgres.sh (cached). Every version
# runs even when an earlier one fails; the summary lists tests run / passed /
# failed and wall time per version, and the exit status is non-zero when any
# version failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pgoutbox/target}

# Module filters of tests/main.rs that make up the compatibility subset.
SUBSET=(tail:: run:: faults:: keepalive:: auth:: ops::check slot_safety:: restart:: failover::
        messages:: heartbeat:: poll:: cleanup:: replay:: migrations:: repair::)

system_major=$(pg_config --version 2>/dev/null | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
if [ "$#" -gt 0 ]; then
  versions=("$@")
elif [ -n "${PGOUTBOX_MATRIX:-}" ]; then
  read -r -a versions <<<"$PGOUTBOX_MATRIX"
else
  versions=()
  for v in 13 14 15 16 17 18; do [ "$v" = "$system_major" ] || versions+=("$v"); done
fi

logs=$(mktemp -d)
summary=()
failed=0
for v in "${versions[@]}"; do
  if ! bindir=$(scripts/install-postgres.sh "$v"); then
    summary+=("$(printf '%-4s %s' "$v" 'install failed')")
    failed=1
    continue
  fi
  echo "==> PostgreSQL $v ($bindir): ${SUBSET[*]}"
  start=$(date +%s)
  PGOUTBOX_TEST_PG_BINDIR=$bindir cargo test --test main -- "${SUBSET[@]}" 2>&1 | tee "$logs/$v.log"
  status=${PIPESTATUS[0]}
  took=$(($(date +%s) - start))
  result=$(grep -E '^test result:' "$logs/$v.log" | tail -1)
  passed=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$result")
  failures=$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$result")
  ignored=$(sed -nE 's/.* ([0-9]+) ignored.*/\1/p' <<<"$result")
  run=$((${passed:-0} + ${failures:-0}))
  summary+=("$(printf '%-4s run %3s  passed %3s  failed %3s  ignored %2s  %4ss  %s' \
    "$v" "$run" "${passed:-0}" "${failures:-?}" "${ignored:-0}" "$took" \
    "$([ "$status" = 0 ] && echo ok || echo FAILED)")")
  [ "$status" = 0 ] && [ "$run" -gt 0 ] || failed=1
done

echo
echo "PostgreSQL compatibility matrix (system PostgreSQL ${system_major:-?} runs the whole suite):"
printf '  %s\n' "${summary[@]}"
rm -rf "$logs"
exit "$failed"
