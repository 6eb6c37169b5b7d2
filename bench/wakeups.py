#!/usr/bin/env python3
"""Wake-ups and CPU of one relay process, per thread, while it runs (a measurement
aid beside bench/run.sh, never a pass/fail test).

    bench/wakeups.py BINARY [--runs N] [--skip S] [--for D] [--out PATH]

Waits for a process whose executable is BINARY (e.g. the release pgoutbox that
bench/run.sh live starts), samples every thread's context switches and CPU ticks
from /proc every 0.2 s while it lives, and when it exits prints, per thread name and
in total, the voluntary context switches (≈ times the thread slept and was woken),
involuntary ones and CPU seconds between its first and last sample. Divide by the
event count the bench printed for that run to get wake-ups per event. Repeats for
every later run of BINARY until interrupted (or --runs N). --skip S starts counting S
seconds after the process appeared (leaves startup out), --for D stops counting D
seconds later (leaves shutdown out).
"""

import argparse
import json
import os
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def pids_of(binary):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{pid}/exe") == binary:
                yield int(pid)
        except OSError:
            continue


def sample(pid):
    """{tid: (name, voluntary, involuntary, cpu_ticks)} or None once gone."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                st = dict(line.split(":", 1) for line in f if ":" in line)
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = (st["Name"].strip(), int(st["voluntary_ctxt_switches"]),
                    int(st["nonvoluntary_ctxt_switches"]), int(fields[11]) + int(fields[12]))
    return out


def watch(pid, skip=0.0, span=None):
    """Counters of every thread from its first to its last sample (threads that
    exit before the process keep their last one)."""
    time.sleep(skip)
    first = sample(pid) or {}
    last = dict(first)
    t0 = t1 = time.monotonic()
    while True:
        time.sleep(0.2)
        s = sample(pid)
        if not s or (span and time.monotonic() - t0 > span):
            break
        t1 = time.monotonic()
        for tid, v in s.items():
            first.setdefault(tid, (v[0], 0, 0, 0))
            last[tid] = v
    by_name = {}
    for tid, (name, vol, inv, cpu) in last.items():
        n0 = first.get(tid, (name, 0, 0, 0))
        agg = by_name.setdefault(name, [0, 0, 0, 0])
        agg[0] += 1
        agg[1] += vol - n0[1]
        agg[2] += inv - n0[2]
        agg[3] += (cpu - n0[3]) / TICK
    return t1 - t0, by_name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("--skip", type=float, default=0.0)
    ap.add_argument("--for", dest="span", type=float)
    o = ap.parse_args()
    binary = os.path.realpath(o.binary)
    seen, runs = set(), []
    while not o.runs or len(runs) < o.runs:
        pid = next((p for p in pids_of(binary) if p not in seen), None)
        if pid is None:
            time.sleep(0.05)
            continue
        seen.add(pid)
        secs, by_name = watch(pid, o.skip, o.span)
        tot = [sum(v[i] for v in by_name.values()) for i in range(4)]
        print(f"pid {pid}: {secs:.1f} s, voluntary {tot[1]}, involuntary {tot[2]}, cpu {tot[3]:.2f} s "
              f"({tot[1] / secs:.0f} wake-ups/s)", flush=True)
        for name, (n, vol, inv, cpu) in sorted(by_name.items(), key=lambda x: -x[1][1]):
            print(f"    {name:<24} x{n:<3} voluntary {vol:>8} involuntary {inv:>6} cpu {cpu:6.2f} s", flush=True)
        runs.append({"pid": pid, "seconds": secs, "threads": by_name})
        if o.out:
            with open(o.out, "w") as f:
                json.dump(runs, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
