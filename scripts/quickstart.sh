#!/usr/bin/env bash
# Zero to an event in Kafka, locally, no Docker: start a private PostgreSQL
# (wal_level=logical) and a local broker (Apache Kafka where Java and Maven are
# present, else tansu, a pinned Kafka-protocol broker without a JVM; Linux x86_64),
# run `pgoutbox run`, insert a demo outbox event in a transaction, and read that record
# back from Kafka. Everything stays running afterwards.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/quickstart.sh [start]   build, start PostgreSQL + a broker + the relay, relay one demo event
       scripts/quickstart.sh stop      stop everything the quickstart started
       scripts/quickstart.sh --help    this text

A rerun reuses the running PostgreSQL and broker, restarts the relay (the new build)
and relays a new demo event. Every port is picked free (PostgreSQL, the broker, the
relay's /metrics endpoint), so it runs next to other services and other users'
quickstarts.

Environment:
  PGOUTBOX_DEV_DIR   the throw-away cluster's directory; the quickstart's files (logs,
                     pids, the relay's state) sit next to it with the same prefix.
                     Default: /tmp/pgoutbox-dev-$USER (one per user).
  CARGO_TARGET_DIR   where cargo builds (default ~/.cache/pgoutbox/target).
  PGOUTBOX_QUICKSTART_BROKER
                     kafka: Apache Kafka 4.1 (KRaft, one node; needs Java 17 and Maven:
                     scripts/install-kafka.sh fetches its jars from Maven Central, and
                     its topics are readable with Debian's kcat);
                     tansu: no JVM (Debian's kcat cannot read it: tansu 0.6's ApiVersions
                     answer makes kcat fail with "Read underflow"; use the bundled
                     consumer printed at the end);
                     auto (default): kafka when java and mvn are on PATH, else tansu.
EOF
}

case "${1:-start}" in
  start) ;;
  stop) action=stop ;;
  -h|--help|help) usage; exit 0 ;;
  *) echo "quickstart: unknown argument '$1'; usage: scripts/quickstart.sh [start|stop|--help]" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "quickstart: one argument at most; usage: scripts/quickstart.sh [start|stop|--help]" >&2; exit 2; }

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pgoutbox/target}
# One location per user (scripts/dev-postgres.sh has the same default).
export PGOUTBOX_DEV_DIR=${PGOUTBOX_DEV_DIR:-/tmp/pgoutbox-dev-$(id -un)}
state=$PGOUTBOX_DEV_DIR
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Stop the relay and wait until it has exited (it drains for up to 30 s), so a new
# one never shares the log with it.
stop_relay() {
  alive "$state.relay.pid" || { rm -f "$state.relay.pid"; return 0; }
  local pid; pid=$(cat "$state.relay.pid")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 400); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  rm -f "$state.relay.pid"
}

# The broker: Apache Kafka where a JVM is at hand, else tansu (see --help).
case "${PGOUTBOX_QUICKSTART_BROKER:-auto}" in
  kafka|tansu) broker_kind=$PGOUTBOX_QUICKSTART_BROKER ;;
  auto) if command -v java >/dev/null && command -v mvn >/dev/null; then broker_kind=kafka; else broker_kind=tansu; fi ;;
  *) echo "quickstart: PGOUTBOX_QUICKSTART_BROKER=$PGOUTBOX_QUICKSTART_BROKER: expected kafka, tansu or auto" >&2; exit 2 ;;
esac

stop_brokers() {
  alive "$state.tansu.pid" && kill -KILL "$(cat "$state.tansu.pid")" 2>/dev/null
  rm -f "$state.tansu.pid" "$state.tansu.port"
  rm -rf "$state.tansu"
  if [ -f "$state.kafka/kafka.pid" ]; then scripts/start-kafka.sh stop "$state.kafka"; fi
  rm -rf "$state.kafka"
}

if [ "${action:-}" = stop ]; then
  stop_relay
  stop_brokers
  rm -rf "$state.relay-state"
  scripts/dev-postgres.sh stop
  echo "stopped"
  exit 0
fi

echo "==> building pgoutbox (first time: a few minutes, librdkafka is compiled)"
cargo build --quiet --bin pgoutbox --example consume
bin="$CARGO_TARGET_DIR/debug/pgoutbox"

echo "==> starting a private PostgreSQL (wal_level=logical)"
url=$(scripts/dev-postgres.sh start)
psql -X -q "$url" -f sql/outbox.sql
echo "    $url"

if [ "$broker_kind" = kafka ]; then
  echo "==> starting Apache Kafka (one KRaft node; first time: its jars come from Maven Central)"
  alive "$state.tansu.pid" && stop_brokers
  if alive "$state.kafka/kafka.pid"; then
    port=$(sed -n 's#^listeners=PLAINTEXT://127.0.0.1:\([0-9]*\),.*#\1#p' "$state.kafka/server.properties")
  else
    scripts/install-kafka.sh >/dev/null
    addr=$(scripts/start-kafka.sh start "$state.kafka") || { echo "quickstart: Apache Kafka did not start; its log: $state.kafka/server.log" >&2; exit 1; }
    port=${addr##*:}
  fi
else
  echo "==> starting a local Kafka-protocol broker (tansu)"
  if alive "$state.kafka/kafka.pid"; then stop_brokers; fi
  if alive "$state.tansu.pid"; then
    port=$(cat "$state.tansu.port")
  else
    port=$(free_port)
    scripts/start-tansu.sh "$port" "$state.tansu" >>"$state.tansu.log" 2>&1 &
    echo $! > "$state.tansu.pid"
    echo "$port" > "$state.tansu.port"
    for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    alive "$state.tansu.pid" || { echo "quickstart: the broker did not start:" >&2; tail -n 20 "$state.tansu.log" >&2; exit 1; }
  fi
fi
brokers="127.0.0.1:$port"
echo "    $brokers"

stop_relay
http_port=$(free_port)
echo "==> pgoutbox run --brokers $brokers --http-addr 127.0.0.1:$http_port"
# The relay's state file (slot safety) lives with the throw-away cluster: a later
# quickstart makes a new cluster, which must not look like "the database moved".
# The log is appended to (O_APPEND), never truncated under a writer.
echo "---- $(date -u +%FT%TZ) quickstart: pgoutbox run" >>"$state.relay.log"
log_start=$(wc -l <"$state.relay.log")
"$bin" run --database-url "$url" --brokers "$brokers" --http-addr "127.0.0.1:$http_port" \
  --state-dir "$state.relay-state" >>"$state.relay.log" 2>&1 &
relay=$!
echo "$relay" > "$state.relay.pid"
relay_log() { tail -n "+$((log_start + 1))" "$state.relay.log"; }
for _ in $(seq 1 600); do
  relay_log | grep -q "relaying outbox to kafka" && break
  if ! kill -0 "$relay" 2>/dev/null; then
    wait "$relay" && code=0 || code=$?
    echo "quickstart: pgoutbox run exited (code $code) before relaying:" >&2
    relay_log >&2
    rm -f "$state.relay.pid"
    exit 1
  fi
  sleep 0.1
done
relay_log | grep -q "relaying outbox to kafka" || {
  echo "quickstart: pgoutbox run did not start relaying within 60 s; its log so far:" >&2
  relay_log >&2
  exit 1
}

echo "==> inserting a demo event in a transaction"
id=$(psql -X -q -t -A "$url" <<'SQL'
BEGIN;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', '42', 'OrderCreated', '{"order_id": 42, "total": "19.99", "currency": "EUR"}')
RETURNING id;
COMMIT;
SQL
)
echo "    id $id"

echo "==> the record in Kafka topic outbox.event.order:"
"$CARGO_TARGET_DIR/debug/examples/consume" --id "$id" "$brokers" outbox.event.order 1 60

echo "==> done. Relay log: $state.relay.log; metrics: http://127.0.0.1:$http_port/metrics"
echo "    debug view: $bin tail --database-url '$url'"
echo "    read a topic: $CARGO_TARGET_DIR/debug/examples/consume $brokers outbox.event.order 10"
if [ "$broker_kind" = kafka ]; then
  echo "    or with kcat:  kcat -b $brokers -C -t outbox.event.order -f '%k %h %s\\n' -e"
fi
echo "    stop everything with: scripts/quickstart.sh stop"
