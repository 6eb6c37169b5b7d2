#!/usr/bin/env bash
# Zero to an event in Kafka, locally, no Docker: start a private PostgreSQL
# (wal_level=logical) and a local Kafka-protocol broker (tansu, pinned), run
# `pgoutbox run`, insert a demo outbox event in a transaction, and read the record
# back from Kafka. Everything stays running afterwards; `scripts/quickstart.sh stop`
# stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pgoutbox/target}
state=${PGOUTBOX_DEV_DIR:-/tmp/pgoutbox-dev}

stop() {
  [ -f "$state.relay.pid" ] && kill -TERM "$(cat "$state.relay.pid")" 2>/dev/null || true
  [ -f "$state.tansu.pid" ] && kill -KILL "$(cat "$state.tansu.pid")" 2>/dev/null || true
  rm -f "$state.relay.pid" "$state.tansu.pid"
  rm -rf "$state.relay-state"
  scripts/dev-postgres.sh stop
}
if [ "${1:-}" = stop ]; then stop; echo "stopped"; exit 0; fi

echo "==> building pgoutbox (first time: a few minutes, librdkafka is compiled)"
cargo build --quiet --bin pgoutbox --example consume
bin="$CARGO_TARGET_DIR/debug/pgoutbox"

echo "==> starting a private PostgreSQL (wal_level=logical)"
url=$(scripts/dev-postgres.sh start)
psql -X -q "$url" -f sql/outbox.sql
echo "    $url"

echo "==> starting a local Kafka-protocol broker (tansu)"
if [ -f "$state.tansu.pid" ] && kill -0 "$(cat "$state.tansu.pid")" 2>/dev/null; then
  port=$(cat "$state.tansu.port")
else
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  scripts/start-tansu.sh "$port" "$state.tansu" >"$state.tansu.log" 2>&1 &
  echo $! > "$state.tansu.pid"
  echo "$port" > "$state.tansu.port"
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
fi
brokers="127.0.0.1:$port"
echo "    $brokers"

echo "==> pgoutbox run --brokers $brokers"
[ -f "$state.relay.pid" ] && kill -TERM "$(cat "$state.relay.pid")" 2>/dev/null && sleep 1
# The relay's state file (slot safety) lives with the throw-away cluster: a later
# quickstart makes a new cluster, which must not look like "the database moved".
"$bin" run --database-url "$url" --brokers "$brokers" --state-dir "$state.relay-state" >"$state.relay.log" 2>&1 &
echo $! > "$state.relay.pid"
for _ in $(seq 1 600); do grep -q "relaying outbox to kafka" "$state.relay.log" && break; sleep 0.1; done
grep -q "relaying outbox to kafka" "$state.relay.log" || { cat "$state.relay.log" >&2; exit 1; }

echo "==> inserting a demo event in a transaction"
psql -X -q "$url" <<'SQL'
BEGIN;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', '42', 'OrderCreated', '{"order_id": 42, "total": "19.99", "currency": "EUR"}');
COMMIT;
SQL

echo "==> the record in Kafka topic outbox.event.order:"
"$CARGO_TARGET_DIR/debug/examples/consume" "$brokers" outbox.event.order 1 60

echo "==> done. Relay log: $state.relay.log. Try: $bin tail --database-url '$url'"
echo "    stop everything with: scripts/quickstart.sh stop"
