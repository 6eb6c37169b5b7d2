#!/usr/bin/env python3
"""The migrations table of issue 28, per PostgreSQL version: what the relay does for
each change to the outbox table or its publication while it runs (stops, repaired,
goes on), how long after the DDL, and the delivery verdict.

Runs the integration tests that make those changes — `migrations::`, `repair::`,
`layouts::`, `column_types::` — one at a time (`--test-threads 1`, so a case's
figures are its own) on each version, and reads the figures they print:
`detected in X s` (a stop), `repaired X s after the DDL` (a repair) and the
verifier's `Verdict { … lost: N, … duplicated_total: N … }`. A figure, never a
gate: the tests themselves pass or fail.

    bench/migrations.py [VERSIONS]     default: 13 14 15 16 17 18 (15 = pg_config's)
    --json PATH                        also write the rows as JSON

Needs what scripts/test.sh needs (PostgreSQL binaries from scripts/install-postgres.sh,
Apache Kafka from scripts/install-kafka.sh).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILTERS = ["migrations::", "repair::", "layouts::", "column_types::"]
TEST_LINE = re.compile(r"^test (\S+) \.\.\. ?(.*)$")
DETECTED = re.compile(r"detected in ([0-9.]+)s")
REPAIRED = re.compile(r"repaired ([0-9.]+) s after the DDL")
VERDICT = re.compile(r"lost: (\d+), unexpected: (\d+), duplicated_total: (\d+)")


def bindir(version):
    """The server binaries of `version` (pg_config's own for its major)."""
    system = subprocess.run(["pg_config", "--version"], capture_output=True, text=True).stdout
    if re.search(rf"PostgreSQL {version}\b", system):
        return None
    out = subprocess.run([os.path.join(ROOT, "scripts/install-postgres.sh"), str(version)],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def run(version):
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/pgoutbox/target"))
    where = bindir(version)
    if where:
        env["PGOUTBOX_TEST_PG_BINDIR"] = where
    cmd = ["cargo", "test", "--test", "main", "--", *FILTERS,
           "--nocapture", "--test-threads", "1"]
    started = time.time()
    # One stream, so a test's figures (stderr) stay between its name and its
    # outcome (stdout).
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    took = time.time() - started
    return parse(proc.stdout), took


def parse(text):
    """Per test: outcome and the figures printed while it ran."""
    rows, current = {}, None
    for line in text.splitlines():
        m = TEST_LINE.match(line.strip())
        if m:
            # With --nocapture a test's first output line follows "test NAME ... ".
            current, line = m.group(1), m.group(2)
            rows.setdefault(current, {"outcome": "", "detected_s": [], "repaired_s": [],
                                      "lost": 0, "unexpected": 0, "duplicated": 0})
        if current is None:
            continue
        row = rows[current]
        if line.strip() in ("ok", "FAILED", "ignored"):
            row["outcome"] = line.strip()
        for m in DETECTED.finditer(line):
            row["detected_s"].append(float(m.group(1)))
        for m in REPAIRED.finditer(line):
            row["repaired_s"].append(float(m.group(1)))
        for m in VERDICT.finditer(line):
            row["lost"] += int(m.group(1))
            row["unexpected"] += int(m.group(2))
            row["duplicated"] += int(m.group(3))
    return rows


def fmt(values):
    return "/".join(f"{v:.2f}" for v in values) if values else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("versions", nargs="*", default=["13", "14", "15", "16", "17", "18"])
    ap.add_argument("--json")
    args = ap.parse_args()
    table = []
    for version in args.versions:
        rows, took = run(version)
        print(f"==> PostgreSQL {version}: {len(rows)} tests in {took:.0f} s", file=sys.stderr)
        for name, row in sorted(rows.items()):
            table.append({"version": version, "test": name, **row})
    print("| test | PG | outcome | stop detected s | repaired s | lost | dup |")
    print("|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['test']} | {r['version']} | {r['outcome']} | {fmt(r['detected_s'])} | "
              f"{fmt(r['repaired_s'])} | {r['lost']} | {r['duplicated']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "rows": table}, f, indent=1)
    sys.exit(1 if any(r["outcome"] == "FAILED" for r in table) else 0)


if __name__ == "__main__":
    main()
