#!/usr/bin/env bash
# pgoutbox benchmark harness (reported figures; never a pass/fail test).
#
#   bench/run.sh backlog [ROWS] [TXN_SIZES]   default: 100000 "1 10 100"
#   bench/run.sh live [RATE] [SECONDS]        default: 1000 rows/s for 20 s
#
# backlog: for each transaction size K, load ROWS outbox rows in transactions of K
#   rows into a private PostgreSQL, with two pgoutput slots created at the same LSN
#   before the load, then in the same invocation drain the same WAL with
#   (a) pg_recvlogical → /dev/null (the PostgreSQL decode baseline) and
#   (b) `pgoutbox run` (release build) → a local tansu broker, acked and confirmed.
#   Prints events/s for both, their ratio, relay CPU µs/event (utime+stime of the
#   relay process / events) and the relay's peak RSS.
# live: pgbench inserts single-row transactions at a fixed RATE while the relay runs;
#   prints commit→broker-ack latency p50/p99 as measured by the relay (commit
#   timestamp from the WAL to the delivery report).
# Machine noise: run on an otherwise idle box; the script prints the load average.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pgoutbox/target}
export PGOUTBOX_DEV_DIR=${PGOUTBOX_BENCH_DIR:-/tmp/pgoutbox-bench}
mode=${1:-backlog}

cargo build --release --quiet --bin pgoutbox
relay_bin="$CARGO_TARGET_DIR/release/pgoutbox"
bindir=$(pg_config --bindir)

url=$(scripts/dev-postgres.sh start)
q() { psql -X -q -At "$url" -c "$1"; }
tansu_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
scripts/start-tansu.sh "$tansu_port" "$PGOUTBOX_DEV_DIR.tansu" >/dev/null 2>&1 &
tansu_pid=$!
disown "$tansu_pid" 2>/dev/null || true
cleanup() { kill -9 "$tansu_pid" 2>/dev/null || true; scripts/dev-postgres.sh stop >/dev/null 2>&1 || true; }
trap cleanup EXIT
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$tansu_port") 2>/dev/null && break; sleep 0.1; done
brokers="127.0.0.1:$tansu_port"
psql -X -q "$url" -f sql/outbox.sql
q "DROP PUBLICATION IF EXISTS pgoutbox; CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')"
echo "# $(date -u +%FT%TZ) $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(pg_config --version)"

lsn_reached() { [ "$(q "SELECT confirmed_flush_lsn >= '$2' FROM pg_replication_slots WHERE slot_name = '$1'")" = t ]; }
now() { date +%s.%N; }

backlog() {
  local rows=$1 k=$2
  q "TRUNCATE outbox"
  for s in b_recv b_relay; do q "SELECT pg_drop_replication_slot('$s') FROM pg_replication_slots WHERE slot_name = '$s'" >/dev/null; done
  q "SELECT pg_create_logical_replication_slot('b_recv', 'pgoutput')" >/dev/null
  q "SELECT pg_create_logical_replication_slot('b_relay', 'pgoutput')" >/dev/null
  psql -X -q "$url" -c "DO \$\$ BEGIN FOR i IN 1..($rows / $k) LOOP
      INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
      SELECT 'bench', ((i * $k + g) % 1000)::text, 'Happened', jsonb_build_object('i', i, 'g', g, 'pad', repeat('x', 100))
      FROM generate_series(1, $k) g;
      COMMIT; END LOOP; END \$\$"
  local end; end=$(q "SELECT pg_current_wal_lsn()")
  local t0 t1 t2 t3
  t0=$(now)
  "$bindir/pg_recvlogical" -d "$url" --slot b_recv --start -o proto_version=1 -o publication_names=pgoutbox \
    -E "$end" -f /dev/null --no-loop
  t1=$(now)
  t2=$(now)
  "$relay_bin" run --database-url "$url" --brokers "$brokers" --slot b_relay \
    --topic-template 'bench.${routedByValue}' >"$PGOUTBOX_DEV_DIR.relay.log" 2>&1 &
  local pid=$!
  until lsn_reached b_relay "$end"; do sleep 0.02; done
  t3=$(now)
  local cpu rss
  cpu=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  kill -TERM "$pid"; wait "$pid" || true
  local hz; hz=$(getconf CLK_TCK)
  python3 - "$rows" "$k" "$t0" "$t1" "$t2" "$t3" "$cpu" "$hz" "$rss" <<'PY'
import sys
rows, k = int(sys.argv[1]), int(sys.argv[2])
t0, t1, t2, t3 = map(float, sys.argv[3:7])
cpu_ticks, hz, rss_kb = int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
recv, relay = rows / (t1 - t0), rows / (t3 - t2)
print(f"| {rows:>7} | {k:>4} | {recv:>12,.0f} | {relay:>12,.0f} | {relay / recv:>5.2f} | {cpu_ticks / hz * 1e6 / rows:>8.2f} | {rss_kb / 1024:>7.1f} |")
PY
}

live() {
  local rate=$1 secs=$2
  q "SELECT pg_drop_replication_slot('b_live') FROM pg_replication_slots WHERE slot_name = 'b_live'" >/dev/null
  "$relay_bin" run --database-url "$url" --brokers "$brokers" --slot b_live \
    --topic-template 'live.${routedByValue}' >"$PGOUTBOX_DEV_DIR.live.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do grep -q "relaying outbox to kafka" "$PGOUTBOX_DEV_DIR.live.log" && break; sleep 0.1; done
  local script; script=$(mktemp)
  echo "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('live', (random() * 100)::int::text, 'Tick', '{\"live\": true}');" > "$script"
  "$bindir/pgbench" -n -f "$script" -R "$rate" -T "$secs" -c 2 -j 1 "$url" >/dev/null 2>&1
  rm -f "$script"
  sleep 1
  kill -TERM "$pid"; wait "$pid" || true
  grep ' stopped ' "$PGOUTBOX_DEV_DIR.live.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g' \
    | grep -o 'acked=[0-9]*\|latency_p50_us=[0-9]*\|latency_p99_us=[0-9]*' | tr '\n' ' '
  echo "(rate $rate/s for ${secs}s)"
}

case "$mode" in
  backlog)
    rows=${2:-100000}
    echo "| rows    | txn  | pg_recvlogical ev/s | pgoutbox ev/s | ratio | CPU µs/ev | RSS MB |"
    echo "|---------|------|--------------|--------------|-------|----------|---------|"
    for k in ${3:-1 10 100}; do backlog "$rows" "$k"; done
    ;;
  live) live "${2:-1000}" "${3:-20}" ;;
  *) echo "usage: $0 backlog [ROWS] [TXN_SIZES] | live [RATE] [SECONDS]" >&2; exit 2 ;;
esac
