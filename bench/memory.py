"""The memory phase of bench/bench.py (issue 29): what the relay's resident memory does
while it drains a backlog, against the in-flight window that is meant to bound it.

Each drain runs one relay on a fresh broker and samples, every 20 ms, its VmRSS
(/proc/PID/status) and, every 100 ms, its /metrics (records and bytes in flight);
the figure is VmHWM, the kernel's own peak, read just before the relay stops. No
timing is judged here: memory figures do not depend on how loaded the machine is.

Cases (`bench/run.sh memory`):
  idle     a relay on a slot with nothing to read: its peak RSS after a few seconds;
  backlog  ROWS (1,000,000) one-row transactions (--mem-txn for another size) and
           SMALL (100,000): the peak for ROWS must be ≤ BOUND MB (30) and within 10 %
           of SMALL's (memory follows the window, not the amount of work);
  single   one transaction of ROWS rows: ≤ BOUND MB as well;
  large    LARGE (3,000) one-row transactions of ~100 KB payloads, where the bytes
           window (--max-in-flight-bytes, 64 MiB by default) is the limit: peak RSS
           against idle + window bytes × FACTOR (1.5, stated in the table; the
           measured one is ~1.1: librdkafka's copy of what is in flight);
  outage   SMALL one-row transactions with the broker paused (SIGSTOP) for OUTAGE
           seconds (20) once the relay acked its first 300 records (its first write to
           each partition goes alone): the window in use fills and
           stays full (the cap before the window followed the broker; since, what
           the broker needed before it paused), then drains when the broker resumes
           — the full window's cost (≤ BOUND MB as well).
Each drain also reports the relay's CPU µs/event (scheduler run time of all its
threads); with variants, the table gives each one's ratio to the first variant's, all
on the same WAL in the same invocation (a loaded machine moves both sides; say so).
Variants (--mem-variant NAME[:KEY=VALUE,...], repeatable) run the same cases side by
side on the same WAL — every variant's slot is created before the load — with extra
environment (e.g. MALLOC_TRIM_THRESHOLD_=131072) and BIN=path for another build;
without any, the one variant is this build. Reps rotate the variants' order.

--mem-gate turns the bounds of the first variant (≤ BOUND MB for the one-row backlogs,
the single transaction and the outage; idle + window × FACTOR for large rows) into the
exit status: 1 when one is not met (or a drain is invalid), so the bound is checked
without reading a table. The "within 10 %" ratio of ROWS to SMALL is reported beside
it, not gated: on a fast broker a short drain rarely fills the window a long one does.
"""

import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

LARGE_PAD = 100_000  # payload bytes of a "large" row (jsonb {'pad': 'xxx…'})
FACTOR = 1.5  # peak RSS ≤ idle + window bytes × FACTOR for large rows


def parse_variant(text):
    """`name[:KEY=VALUE,...]` → (name, binary or None, env dict, relay args): BIN=path
    another build, ARG=--flag=value an argument of its `pgoutbox run` (repeatable),
    anything else an environment variable."""
    name, _, rest = text.partition(":")
    env, binary, args = {}, None, []
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key == "BIN":
            binary = value
        elif key == "ARG":
            args.append(value)
        else:
            env[key] = value
    return name, binary, env, args


def proc_cpu(pid):
    """CPU seconds of all of a live process's threads (scheduler run time)."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, IndexError, ValueError):
        return None


def status_kb(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def metrics_text(port):
    """The relay's /metrics page, None when unreadable."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            return r.read().decode()
    except OSError:
        return None


def scrape(port):
    """(records, bytes) in flight from the relay's /metrics, None when unreadable."""
    text = metrics_text(port)
    if text is None:
        return None
    get = lambda name: int(float(re.search(rf"^{name} (\S+)$", text, re.M).group(1)))
    try:
        return get("pgoutbox_in_flight_records"), get("pgoutbox_in_flight_bytes")
    except AttributeError:
        return None


def published(port):
    """Records acked so far (every topic), from the relay's /metrics; None when unreadable."""
    text = metrics_text(port)
    if text is None:
        return None
    return sum(int(float(v)) for v in re.findall(r"^outbox_events_published_total\{[^}]*\} (\S+)$", text, re.M))


# Records acked before the outage case pauses the broker.
OUTAGE_AFTER = 300


class Sampler:
    """VmRSS every 20 ms and the window every 100 ms, until stopped."""

    def __init__(self, pid, port):
        self.pid, self.port, self.stop = pid, port, threading.Event()
        self.rss_kb, self.records, self.bytes, self.series = 0, 0, 0, []
        self.t0 = time.time()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        n = 0
        while not self.stop.wait(0.02):
            rss = status_kb(self.pid, "VmRSS")
            if rss is None:
                return
            self.rss_kb = max(self.rss_kb, rss)
            n += 1
            if n % 5 == 0:
                w = scrape(self.port)
                if w:
                    self.records, self.bytes = max(self.records, w[0]), max(self.bytes, w[1])
                    self.series.append((round(time.time() - self.t0, 2), rss, *w))

    def finish(self):
        self.stop.set()
        self.thread.join()


class Memory:
    """The memory cases on one broker (`b`: the Bench, which owns servers and slots)."""

    def __init__(self, b, o, lines):
        self.b, self.o, self.Lines = b, o, lines
        self.variants = [parse_variant(v) for v in o.mem_variant] or [("pgoutbox", None, {}, [])]
        self.out = b.results.setdefault("memory_cases", {})

    def drain(self, slot, end, rows, variant, extra=(), outage=0):
        """One drain of `slot` to `end` by `variant`; peak RSS and window figures."""
        b = self.b
        name, binary, env, args = variant
        b.restart_broker()
        port = free_port()
        p = b.spawn([binary or b.relay_bin, "run", "--database-url", b.url, "--brokers", b.brokers,
                     "--slot", slot, "--topic-template", f"{b.topics_prefix}.${{routedByValue}}",
                     "--http-addr", f"127.0.0.1:{port}",
                     "--state-dir", tempfile.mkdtemp(prefix="relay-state-", dir=b.dir), *extra,
                     *self.o.relay_arg, *args],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    env=dict(os.environ, NO_COLOR="1", RUST_LOG="info", **env))
        lines = self.Lines(p.stderr)
        sampler = Sampler(p.pid, port)
        ready = lines.wait_for(r"relaying outbox to kafka", 120)
        if not ready:
            b.reap(p, signal.SIGKILL)
            raise RuntimeError(f"pgoutbox did not start streaming within 120 s:\n{lines.tail()}")
        if outage:
            # The broker goes down under a relay that has written, as in production:
            # a producer's first write to each partition goes alone (first_writes),
            # so a broker paused before it would hold the relay to that one record.
            deadline = time.time() + 60
            while (published(port) or 0) < OUTAGE_AFTER and time.time() < deadline:
                time.sleep(0.005)
            os.kill(b.broker_pid, signal.SIGSTOP)
            time.sleep(outage)
            full = status_kb(p.pid, "VmRSS")
            os.kill(b.broker_pid, signal.SIGCONT)
            log(f"    broker paused {outage} s: relay RSS {full / 1024:.1f} MB, in flight ≤ {sampler.records:,}")
        t_done, _ = b.wait_confirmed(p, lines, slot, end, max(300, rows / 500) + outage)
        hwm, rss_end = status_kb(p.pid, "VmHWM"), status_kb(p.pid, "VmRSS")
        cpu = proc_cpu(p.pid)
        # Every session's acks (the "stopped" line counts its last session's only: an
        # outage past --stall-timeout ends sessions).
        acked_all = published(port)
        sampler.finish()
        stats = b.stop_relay(p, lines)
        r = {"variant": name, "env": env, "binary": binary, "args": args, "rows": rows,
             "peak_rss_mb": hwm / 1024 if hwm else None, "end_rss_mb": rss_end / 1024 if rss_end else None,
             "max_in_flight_records": sampler.records, "max_in_flight_bytes": sampler.bytes,
             "events_per_second": rows / (t_done - ready[0] - outage) if rows else None,
             "cpu_us_per_event": cpu * 1e6 / rows if cpu and rows else None,
             "acked": stats.get("acked"), "acked_all_sessions": acked_all,
             "valid": stats.get("acked") == rows or (acked_all or 0) >= rows,
             "series": sampler.series[:: max(1, len(sampler.series) // 100)]}
        log(f"    {name:<12} peak RSS {r['peak_rss_mb']:.1f} MB (end {r['end_rss_mb']:.1f}), in flight ≤ "
            f"{sampler.records:,} records / {sampler.bytes / 1e6:.1f} MB, {r['events_per_second'] or 0:,.0f} ev/s, "
            f"CPU {r['cpu_us_per_event'] or 0:.2f} µs/ev"
            + ("" if r["valid"] else f", INVALID: acked {r['acked']} of {rows}"))
        return r

    def case(self, label, rows, load, extra=(), outage=0):
        """Slots for every variant × rep at one LSN, `load()` once, then each drain."""
        b, reps = self.b, self.o.mem_reps
        b.pressure.phase = f"memory {label}"
        log(f"memory {label}: {rows:,} rows, variants {', '.join(v[0] for v in self.variants)}, {reps} rep(s)")
        b.sql.rows("TRUNCATE outbox")
        b.drop_slots("m\\_%")
        slots = {(i, r): f"m_{i}_{r}" for i in range(len(self.variants)) for r in range(reps)}
        b.create_slots(list(slots.values()))
        end = load()
        runs = {v[0]: [] for v in self.variants}
        for r in range(reps):
            order = list(range(len(self.variants)))
            order = order[r % len(order):] + order[:r % len(order)]
            for i in order:
                x = self.drain(slots[(i, r)], end, rows, self.variants[i], extra, outage)
                x["rep"] = r
                runs[self.variants[i][0]].append(x)
        b.drop_slots("m\\_%")
        self.out[label] = {"rows": rows, "runs": runs}
        return runs

    def idle(self):
        """A relay with nothing to read: its peak RSS after IDLE_SECONDS."""
        b = self.b
        b.pressure.phase = "memory idle"
        out = {}
        for variant in self.variants:
            b.restart_broker()
            b.create_slots(["m_idle"])
            p, lines, _, _ = b.start_relay("m_idle", binary=variant[1], extra=variant[3])
            time.sleep(3)
            hwm = status_kb(p.pid, "VmHWM")
            b.stop_relay(p, lines)
            b.drop_slots("m_idle")
            out[variant[0]] = hwm / 1024 if hwm else None
            log(f"    {variant[0]:<12} idle peak RSS {out[variant[0]]:.1f} MB")
        self.out["idle"] = out
        return out

    def load_large(self, rows):
        """ROWS one-row transactions with ~100 KB payloads (TOAST-compressed on disk; the
        stream carries them whole)."""
        t0 = time.time()
        self.b.psql("SET synchronous_commit = off",
                    f"DO $$ BEGIN FOR i IN 1..{rows} LOOP "
                    "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES "
                    f"('bench', (i % 1000)::text, 'Happened', jsonb_build_object('i', i, 'pad', "
                    f"repeat(md5(i::text), {LARGE_PAD // 32}))); COMMIT; END LOOP; END $$")
        end = self.b.sql.one("SELECT pg_current_wal_insert_lsn()")
        log(f"loaded {rows} large rows in {time.time() - t0:.1f} s, end LSN {end}")
        return end

    def run(self):
        o, b = self.o, self.b
        cases = o.mem_cases.split()
        if "idle" in cases or "large" in cases:
            self.idle()
        if "backlog" in cases:
            txn = o.mem_txn
            for rows in (o.mem_small, o.mem_rows):
                label = f"backlog_{rows}" + (f"_txn{txn}" if txn != 1 else "")
                self.case(label, rows, lambda rows=rows: b.load(rows, txn))
        if "single" in cases:
            self.case(f"single_{o.mem_rows}", o.mem_rows, lambda: b.load(o.mem_rows, o.mem_rows))
        if "large" in cases:
            self.case(f"large_{o.mem_large}", o.mem_large, lambda: self.load_large(o.mem_large))
        if "outage" in cases:
            self.case(f"outage_{o.mem_small}", o.mem_small, lambda: b.load(o.mem_small, 1),
                      outage=o.mem_outage)


def window_bytes(o):
    """The bytes window the large case runs with (the relay's default unless given)."""
    for arg in o.relay_arg:
        if arg.startswith("--max-in-flight-bytes="):
            return int(arg.split("=", 1)[1])
    return 64 << 20


def rows_and_verdicts(res, o):
    """Table rows for the memory cases and whether every target of the first variant was met."""
    cases = res.get("memory_cases") or {}
    rows, ok = [], True
    peak = lambda runs: max((x["peak_rss_mb"] for x in runs if x["peak_rss_mb"]), default=None)
    idle = cases.get("idle") or {}
    first = None
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None
    for label, c in cases.items():
        if label == "idle":
            continue
        cpu = {v: med([x["cpu_us_per_event"] for x in rs if x.get("cpu_us_per_event")])
               for v, rs in c["runs"].items()}
        eps = {v: med([x["events_per_second"] for x in rs if x.get("events_per_second")])
               for v, rs in c["runs"].items()}
        base_v = next(iter(c["runs"]))
        for vi, (variant, runs) in enumerate(c["runs"].items()):
            first = first or variant
            valid = all(x["valid"] for x in runs)
            mb = peak(runs)
            peaks = "/".join(f"{x['peak_rss_mb']:.1f}" for x in runs)
            window = f"≤ {max(x['max_in_flight_records'] for x in runs):,} rec, " \
                     f"{max(x['max_in_flight_bytes'] for x in runs) / 1e6:.1f} MB in flight"
            if label.startswith("large"):
                base = idle.get(variant)
                limit = base + window_bytes(o) / 2**20 * FACTOR if base else None
                target = f"≤ idle {base:.1f} + window {window_bytes(o) / 2**20:.0f} MiB × {FACTOR:g}" \
                    if base else "n/a"
                met = mb is not None and limit is not None and mb <= limit
            else:
                target, met = f"≤ {o.mem_bound:g} MB", mb is not None and mb <= o.mem_bound
            verdict = ("met" if met else "NOT met") + ("" if valid else " (invalid run)")
            if variant == first:
                ok = ok and met and valid
            rows.append((f"memory {label} [{variant}]: peak RSS MB (max of reps: {peaks})",
                         fmt1(mb), "", window, target + (" (gate)" if variant == first else ""), verdict))
            small = cases.get(f"backlog_{o.mem_small}", {}).get("runs", {}).get(variant)
            if label == f"backlog_{o.mem_rows}" and small and peak(small) and mb:
                # Reported beside the gate, not part of it: how full the window got
                # differs between a short and a long drain on a fast broker.
                rows.append((f"memory backlog {o.mem_rows:,} vs {o.mem_small:,} [{variant}]: peak RSS ratio",
                             f"{mb / peak(small):.2f}×", f"{peak(small):.1f} MB", "", "≤ 1.10×",
                             "met" if mb <= peak(small) * 1.10 else "NOT met"))
            if cpu.get(variant) and eps.get(variant):
                ratio = "" if variant == base_v or not cpu.get(base_v) else \
                    f"CPU {cpu[variant] / cpu[base_v]:.2f}×, ev/s {eps[variant] / eps[base_v]:.2f}× {base_v}"
                rows.append((f"memory {label} [{variant}]: relay CPU µs/event; ev/s (median)",
                             f"{cpu[variant]:.2f}", f"{eps[variant]:,.0f} ev/s", ratio, "info (loaded machine)", ""))
    for variant, mb in idle.items():
        rows.append((f"memory idle [{variant}]: peak RSS MB", fmt1(mb), "", "", "info", ""))
    return rows, ok


def fmt1(v):
    return "-" if v is None else f"{v:.1f}"


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg):
    import sys
    print(msg, file=sys.stderr, flush=True)
