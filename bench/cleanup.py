#!/usr/bin/env python3
"""`pgoutbox cleanup` benchmark (issue 15); run it through `bench/run.sh cleanup`.

Per batch size: loads ROWS published rows (published_at 10 days ago) into the poll
table of bench.py's private PostgreSQL, interleaved with rows that must stay (1 %
unpublished, 1 % published an hour ago), VACUUM ANALYZE + CHECKPOINT, then times
`pgoutbox cleanup --source poll --older-than 7d --batch-size B`:
  - total wall time and rows/s;
  - the longest batch, as pgoutbox reports it (one DELETE = one transaction: the
    longest any row or table lock was held);
  - cross-check: the oldest open transaction of the cleanup's backend, sampled every
    ~10 ms from pg_stat_activity (xact_start) — the lock holding time seen from outside;
  - a concurrent writer inserting one row every 20 ms into the same table: its worst
    insert latency (blocked by the cleanup or not).
A run whose deleted/remaining counts do not match what was loaded is marked invalid.
Figures are reported, never asserted. Prints a table; writes
bench/results/cleanup-<utc>.json.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402  (the shared harness: private PostgreSQL, psql session)

TABLE = "poll.outbox"
ROW = ("'bench', (g %% 1000)::text, 'Happened', "
       "jsonb_build_object('i', g, 'pad', repeat('x', %d))" % B.PAD)


def load(b, rows):
    """ROWS old published rows, 1 % unpublished and 1 % recently published between them."""
    b.psql(f"TRUNCATE {TABLE}")
    keep = max(rows // 100, 1)
    step = max((rows + 2 * keep) // (2 * keep), 2)
    b.psql(f"INSERT INTO {TABLE} (aggregate_type, aggregate_id, event_type, payload, created_at, published_at) "
           f"SELECT {ROW}, now() - interval '11 days', "
           f"CASE WHEN g % {step} = 0 AND (g / {step}) % 2 = 0 THEN NULL "
           f"     WHEN g % {step} = 0 THEN now() - interval '1 hour' "
           f"     ELSE now() - interval '10 days' END "
           f"FROM generate_series(1, {rows + 2 * keep}) g")
    b.psql(f"VACUUM ANALYZE {TABLE}", "CHECKPOINT")
    old = int(b.psql(f"SELECT count(*) FROM {TABLE} WHERE published_at < now() - interval '7 days'").strip())
    total = int(b.psql(f"SELECT count(*) FROM {TABLE}").strip())
    return old, total


def sample_xact_age(url, stop, out):
    """Longest-open transaction of a running cleanup DELETE, sampled every ~10 ms."""
    s = B.Psql(url)
    worst = 0.0
    while not stop.is_set():
        v = s.one("SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0) "
                  "FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'WITH gone AS (DELETE%'")
        worst = max(worst, float(v or 0))
        time.sleep(0.01)
    s.close()
    out["xact_age_max_s"] = worst


def writer(url, stop, window, out):
    """One INSERT every 20 ms into the table being cleaned; the worst latency during
    the cleanup (`window` = [start, end]) and, as the machine's own noise, during the
    3 s before it."""
    s = B.Psql(url)
    lat = []
    while not stop.is_set():
        t = time.monotonic()
        s.rows(f"INSERT INTO {TABLE} (aggregate_type, aggregate_id, event_type, payload) "
               "VALUES ('bench', 'w', 'Written', '{}')")
        lat.append((t, time.monotonic() - t))
        time.sleep(0.02)
    s.close()
    during = [d for t, d in lat if window[0] <= t <= window[1]]
    before = [d for t, d in lat if t < window[0]]
    out["insert_max_s"] = max(during) if during else None
    out["insert_p99_s"] = B.quantile(during, 0.99) if during else None
    out["inserts"] = len(during)
    out["insert_max_before_s"] = max(before) if before else None


def run_one(b, relay, rows, batch):
    old, total = load(b, rows)
    B.log(f"cleanup batch {batch}: {old} rows to delete of {total}")
    stop, side, window = threading.Event(), {}, [float("inf"), float("inf")]
    threads = [threading.Thread(target=sample_xact_age, args=(b.url, stop, side)),
               threading.Thread(target=writer, args=(b.url, stop, window, side))]
    for t in threads:
        t.start()
    time.sleep(3)  # the writer's baseline window (not a synchronisation)
    b.pressure.phase = f"cleanup batch {batch}"
    t0 = window[0] = time.monotonic()
    p = subprocess.run([relay, "cleanup", "--database-url", b.url, "--source", "poll", "--table", TABLE,
                        "--older-than", "7d", "--batch-size", str(batch)],
                       capture_output=True, text=True)
    window[1] = time.monotonic()
    wall = window[1] - t0
    stop.set()
    for t in threads:
        t.join()
    left_old = int(b.psql(f"SELECT count(*) FROM {TABLE} WHERE published_at < now() - interval '7 days'").strip())
    m = re.search(r"deleted (\d+) rows .* in (\d+) batches, ([\d.]+) s, longest batch (\d+) ms", p.stdout)
    res = {"batch_size": batch, "to_delete": old, "rows_total": total, "wall_s": wall,
           "exit": p.returncode, "stdout": p.stdout.strip(), **side}
    if m:
        res.update(deleted=int(m[1]), batches=int(m[2]), reported_s=float(m[3]),
                   longest_batch_ms=int(m[4]))
    res["valid"] = bool(m) and p.returncode == 0 and res.get("deleted") == old and left_old == 0
    if not res["valid"]:
        B.log(f"INVALID: exit {p.returncode}, stdout {p.stdout!r}, stderr {p.stderr[-500:]!r}, left {left_old}")
    B.log(f"  {res.get('deleted')} rows in {wall:.1f} s, {res.get('batches')} batches, longest batch "
          f"{res.get('longest_batch_ms')} ms, xact age max {side.get('xact_age_max_s', 0) * 1000:.0f} ms, "
          f"insert max {(side.get('insert_max_s') or 0) * 1000:.0f} ms "
          f"(before: {(side.get('insert_max_before_s') or 0) * 1000:.0f} ms)")
    return res


def main():
    ap = argparse.ArgumentParser(description="pgoutbox cleanup benchmark (see bench/run.sh cleanup)")
    ap.add_argument("rows", nargs="?", type=int, default=int(os.environ.get("BENCH_CLEANUP_ROWS", 1_000_000)))
    ap.add_argument("batch_sizes", nargs="?", default=os.environ.get("BENCH_CLEANUP_BATCHES", "1000 5000 20000"))
    ap.add_argument("--json", help="write the results here (default bench/results/cleanup-<utc>.json)")
    ap.add_argument("--dir", default=os.environ.get("PGOUTBOX_BENCH_DIR", f"/tmp/pgoutbox-bench.{os.getpid()}"))
    o = ap.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc)
    b = B.Bench(argparse.Namespace(dir=o.dir))
    relay = os.environ.get("BENCH_BIN") or b.relay_bin
    runs, error = [], None
    try:
        b.start_postgres()
        B.log(f"# pgoutbox bench cleanup {started:%Y-%m-%dT%H:%M:%SZ}: {os.cpu_count()} cores, PostgreSQL "
              f"{b.version}, {o.rows} rows, batch sizes {o.batch_sizes}, relay {relay}")
        for batch in [int(x) for x in o.batch_sizes.split()]:
            runs.append(run_one(b, relay, o.rows, batch))
    except Exception as e:  # report what was measured before the failure
        error = f"{type(e).__name__}: {e}"
        B.log(f"error: {error}")
    finally:
        b.cleanup()
    cols = ("batch size", "rows deleted", "wall s", "rows/s", "batches", "longest batch ms",
            "xact age max ms (sampled)", "concurrent insert max ms", "insert max ms before", "valid")
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    for r in runs:
        print("| " + " | ".join(str(x) for x in (
            r["batch_size"], r.get("deleted"), f"{r['wall_s']:.1f}",
            f"{(r.get('deleted') or 0) / r['wall_s']:,.0f}", r.get("batches"), r.get("longest_batch_ms"),
            f"{r.get('xact_age_max_s', 0) * 1000:.0f}", f"{(r.get('insert_max_s') or 0) * 1000:.0f}",
            f"{(r.get('insert_max_before_s') or 0) * 1000:.0f}", r["valid"])) + " |")
    pressure = b.pressure.summary()
    for phase, s in pressure.items():
        print(f"  {phase:<22} cpu some avg10 median {B.fmt(s['some_avg10_median'], '.1f')}; "
              f"load median {s['load1_median']:.2f} max {s['load1_max']:.2f}")
    path = o.json or os.path.join(B.ROOT, "bench", "results", f"cleanup-{started:%Y%m%dT%H%M%SZ}.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"started": started.isoformat(), "mode": "cleanup", "cores": os.cpu_count(),
                   "postgres": getattr(b, "version", None), "rows": o.rows, "runs": runs,
                   "pressure": pressure, "error": error}, f, indent=1)
    print(f"results: {os.path.relpath(path, B.ROOT)}")
    if error:
        print(f"INCOMPLETE: {error}")
        sys.exit(1)


if __name__ == "__main__":
    main()
