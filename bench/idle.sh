#!/usr/bin/env bash
# Idle cost of the relay (a measurement aid, never a pass/fail test): each BINARY in
# turn runs against a private PostgreSQL (scripts/dev-postgres.sh) and tansu with no
# events at all (keepalives only), while bench/wakeups.py counts its threads' wake-ups
# and CPU over SECONDS (from 5 s after it started streaming).
#
#   bench/idle.sh SECONDS BINARY...     e.g. bench/idle.sh 30 old/pgoutbox new/pgoutbox
set -euo pipefail
cd "$(dirname "$0")/.."
secs=$1; shift
work=$(mktemp -d /tmp/pgoutbox-idle.XXXXXX); chmod 755 "$work"
export PGOUTBOX_DEV_DIR=$work/pg
url=$(scripts/dev-postgres.sh start)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
scripts/start-tansu.sh "$port" "$work/tansu" > "$work/tansu.log" 2>&1 &
tansu=$!
trap 'kill $tansu 2>/dev/null || true; scripts/dev-postgres.sh stop >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
psql -q "$url" -f sql/outbox.sql > /dev/null
for bin in "$@"; do
  bin=$(realpath "$bin")
  python3 bench/wakeups.py "$bin" --runs 1 --skip 5 --for "$secs" > "$work/wake" 2>&1 &
  watcher=$!
  state=$(mktemp -d "$work/state.XXXX")
  "$bin" run --database-url "$url" --brokers "127.0.0.1:$port" --slot "idle_$RANDOM" \
    --http-addr off --state-dir "$state" > "$work/relay.log" 2>&1 &
  relay=$!
  for _ in $(seq 600); do grep -q "relaying outbox to kafka" "$work/relay.log" && break; sleep 0.1; done
  sleep $((secs + 6))
  kill -TERM $relay; wait $relay || true
  wait $watcher || true
  echo "== $bin: idle, $secs s counted from 5 s after it started streaming"
  cat "$work/wake"
done
