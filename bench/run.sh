#!/usr/bin/env bash
# pgoutbox benchmark harness (reported figures; never a pass/fail test, except the
# memory mode's --mem-gate, which judges peak RSS only).
#
#   bench/run.sh [all] [--json PATH] [--rates R]  every figure of issues 6 and 16, one invocation
#   bench/run.sh backlog [ROWS] [TXN_SIZES]       backlog drains only (default 200000 "1 10 100")
#   bench/run.sh live [RATES] [SECONDS]           the live table only: one-row backlog, idle relay,
#                                                 then each rate (default "1000 5000 10000"/s)
#   bench/run.sh poll [RATE] [SECONDS]            poll mode (issue 15): commit→ack p50/p99 with NOTIFY
#                                                 and interval-only at RATE (default 1000/s), and the
#                                                 backlog drain rate of poll vs logical mode (--rows)
#   bench/run.sh cleanup [ROWS] [BATCH_SIZES]     `pgoutbox cleanup` of ROWS published rows per
#                                                 batch size (default 1000000 "1000 5000 20000"):
#                                                 time, longest batch, concurrent insert latency
#                                                 (bench/cleanup.py; BENCH_BIN=path skips the build)
#   bench/run.sh messages [ROWS] [TXN_SIZE]       the same events as outbox rows vs logical decoding
#                                                 messages (default 200000, 10): insert rate, WAL
#                                                 bytes, relay drain rate and CPU for each (issue 14)
#   bench/run.sh topics [ROWS] [TOPIC_COUNTS]     one ROWS-row transaction routed over each count of
#                                                 topics (default 200000 "1 100 1000"): drain time,
#                                                 relay CPU µs/event by thread, broker CPU, against
#                                                 pg_recvlogical and producer-only over the same topics
#   bench/run.sh memory [ROWS] [CASES]            peak RSS (VmHWM) against the in-flight window
#                                                 (issue 29, bench/memory.py): ROWS (1000000) and
#                                                 --mem-small (100000) one-row transactions, one
#                                                 ROWS-row transaction, 100 KB rows, a paused broker
#                                                 (CASES, default "backlog single large outage");
#                                                 --mem-gate exits 1 past --mem-bound (30 MB), the
#                                                 one pass/fail here (memory, never timing);
#                                                 --mem-variant NAME:BIN=…,ARG=…,ENV=… side by side
#   bench/run.sh eos [ROWS] [RATE]                at-least-once vs --delivery exactly-once on
#                                                 Apache Kafka only (tansu ignores transactions),
#                                                 modes alternating per rep: drain rate of ROWS
#                                                 (200000) rows in transactions of 10 (target:
#                                                 exactly-once ≥ 0.8×), relay CPU µs/event, Kafka
#                                                 transactions and records per transaction from
#                                                 /metrics; then RATE (1000) one-row txns/s for
#                                                 --live-seconds: commit→visible p50/p99 as a
#                                                 read_committed consumer sees it
#                                                 (examples/visible_latency), relay CPU µs/event;
#                                                 --eos-arg ARG for the exactly-once relays only
#   BENCH_QUICK=1 bench/run.sh                    smoke run: small sizes, 1 repetition
#
# Every mode runs once per broker: --broker tansu|kafka|both (BENCH_BROKER; default both,
# tansu first), with a fresh broker before every Kafka-side measurement: a new tansu, or a
# new Apache Kafka KRaft node (scripts/start-kafka.sh in a fresh directory, heap KAFKA_HEAP,
# default "-Xms256m -Xmx1g"). Figures are prefixed [tansu] / [kafka] in the table. The eos
# mode runs on Apache Kafka alone whatever --broker says (--broker tansu is refused).
#
# Builds the release relay and the examples it measures with (produce_only, polling_relay,
# wake_cost, visible_latency), then runs bench/bench.py on a private PostgreSQL
# (scripts/dev-postgres.sh, under /tmp/pgoutbox-bench.<pid>, removed afterwards) and
# local brokers. What is measured, and against which baseline, is described at the top
# of bench/bench.py.
# Prints a table (value, baseline, ratio, target, met / not met) with the CPU pressure
# seen in each phase, and writes bench/results/<utc-timestamp>.json (or --json PATH).
#
# Tunables (env or flag): BENCH_ROWS/--rows (200000), BENCH_REPS/--reps (3),
# BENCH_TXN_SIZES/--txn-sizes ("1 10 100"), BENCH_LIVE_SECONDS/--live-seconds (15),
# BENCH_MEM_ROWS/--mem-rows (1000000), BENCH_MEM_TXN/--mem-txn (1), BENCH_RATES/--rates
# ("1000 5000 10000"), BENCH_IDLE_SECONDS/--idle-seconds (30), BENCH_TOPIC_COUNTS/
# --topic-counts ("1 100 1000"). Before/after: BENCH_RELAY_B/
# --relay-b BIN runs a second pgoutbox build (e.g. main's) in the same live rotation;
# --before PATH compares the live rows with an earlier results JSON (p50, CPU per event).
# The machine should be otherwise idle: the pressure lines show when it was not.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pgoutbox/target}
if [ "${1:-}" = cleanup ]; then
  shift
  [ -n "${BENCH_BIN:-}" ] || cargo build --release --quiet --bin pgoutbox
  exec python3 bench/cleanup.py "$@"
fi
cargo build --release --quiet --bin pgoutbox --example produce_only --example polling_relay --example wake_cost --example visible_latency
exec python3 bench/bench.py "$@"
