#!/usr/bin/env bash
# Zero to a decoded outbox event: start a private PostgreSQL, create the outbox
# table, run `pgoutbox tail`, insert a demo event, and show what tail printed.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pgoutbox/target}
echo "==> building pgoutbox"
cargo build --quiet --bin pgoutbox
bin="$CARGO_TARGET_DIR/debug/pgoutbox"

echo "==> starting a private PostgreSQL (wal_level=logical)"
url=$(scripts/dev-postgres.sh start)
echo "    $url"
psql -X -q "$url" -f sql/outbox.sql

echo "==> pgoutbox tail --limit 1"
out=$(mktemp)
"$bin" tail --database-url "$url" --limit 1 >"$out" 2>"$out.err" &
tail_pid=$!
for _ in $(seq 1 600); do grep -q "tailing outbox" "$out.err" 2>/dev/null && break; sleep 0.1; done

echo "==> inserting a demo event in a transaction"
psql -X -q "$url" <<'SQL'
BEGIN;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', '42', 'OrderCreated', '{"order_id": 42, "total": "19.99", "currency": "EUR"}');
COMMIT;
SQL
wait "$tail_pid" || { cat "$out.err" >&2; exit 1; }
echo "==> tail printed:"
cat "$out"
rm -f "$out" "$out.err"
echo "==> done. The cluster keeps running at $url (stop it with scripts/dev-postgres.sh stop)."
