"""Spark audit against single-process verify, and local[1] against local[2], in one run.

    python benchmarks/spark_audit.py [--brokers 1] [--messages 1100000] [--split-size 128m]

Makes (once, under benchmarks/.stores/) ``--brokers`` stores of ``--messages`` messages with
1-2 KiB bodies in 1 GiB CommitLog files (no IndexFiles; 1.1 M messages is the 2 GiB store of
the issue), then times, each in a fresh process and on the same warm page cache:

* ``mqtool verify`` of every store, one after the other (the single-process figure);
* ``mqtool spark audit --master local[1]`` and ``local[2]`` of all stores at once, tables
  written to a scratch directory. The figure compared is the audit job's own time (the
  summary's ``seconds``: planning, the scan, the tables and the SQL; not the JVM's start-up,
  printed apart).

Prints ratios measured in this run, so that a loaded machine moves both sides:
local[2] / verify (goal <= 1.5), local[1] / local[2] (goal >= 1.7), the executors' peak
memory (a Python worker's, which depends on the split size and not on the store), what two
CPU-bound processes get from this machine at all (2.0: two free cores; a loaded or
hyper-threaded machine bounds any speed-up, Spark's included) and the load average.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import tempfile
import time
import zlib
from pathlib import Path

from _common import STORES, ensure_store, fmt_bytes, read_files_seconds, run_child

from mqtool.store import Store


def _burn(seconds_box) -> None:
    data = b"x" * 4096
    started = time.perf_counter()
    for _ in range(400_000):
        zlib.crc32(data)
    seconds_box.value = time.perf_counter() - started


def parallel_capacity() -> float:
    """Throughput of two concurrent CPU-bound processes relative to one (2.0: two real cores)."""
    one = multiprocessing.Value("d", 0.0)
    p = multiprocessing.Process(target=_burn, args=(one,))
    p.start()
    p.join()
    boxes = [multiprocessing.Value("d", 0.0) for _ in range(2)]
    procs = [multiprocessing.Process(target=_burn, args=(b,)) for b in boxes]
    for q in procs:
        q.start()
    for q in procs:
        q.join()
    return 2 * one.value / max(b.value for b in boxes)


def _audit(master: str, roots: list[Path], out: Path, split_size: str) -> tuple[float, float, dict]:
    seconds, _, proc = run_child(["spark", "audit", "--master", master, "--json", "--out",
                                  str(out), "--split-size", split_size, *map(str, roots)])
    if proc.returncode not in (0, 1):
        raise SystemExit(f"spark audit on {master} failed: {proc.stderr[-1500:]}")
    summary = json.loads((out / "summary.json").read_text())
    return seconds, summary["seconds"], summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--messages", type=int, default=1_100_000)
    parser.add_argument("--split-size", default="128m")
    args = parser.parse_args()
    roots = [ensure_store(f"spark-broker-{i}-{args.messages}", [
        "--messages", str(args.messages), "--seed", str(100 + i), "--body-size", "1k/2k",
        "--commitlog-file-size", "1g", "--cq-units", "300000", "--no-index"])
        for i in range(args.brokers)]
    segments = [s for root in roots for s in Store(root).commitlog.segments]
    data = 0
    for root in roots:
        info = Store(root).commitlog
        last = info.segments[-1]
        # written bytes: full files plus the used part of the last (its tail is a sparse hole)
        data += sum(s.length for s in info.segments[:-1]) + last.path.stat().st_blocks * 512
    load_before = os.getloadavg()
    read_files_seconds([s.path for s in segments])   # warm the page cache
    capacity = parallel_capacity()

    verify_s = 0.0
    for root in roots:
        seconds, _, proc = run_child(["verify", "--json", str(root)])
        if proc.returncode not in (0, 1):
            raise SystemExit(f"verify {root} failed: {proc.stderr[-500:]}")
        verify_s += seconds

    scratch = Path(tempfile.mkdtemp(prefix="spark-audit-", dir=STORES))
    runs = {}
    try:
        for master in ("local[1]", "local[2]"):
            out = scratch / master.replace("[", "").replace("]", "")
            runs[master] = _audit(master, roots, out, args.split_size)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load_after = os.getloadavg()

    (p1, one, s1), (p2, two, s2) = runs["local[1]"], runs["local[2]"]
    records = s2["totals"]["records"]
    assert records == s1["totals"]["records"]
    peak = max(s["executor_peak_rss"] or 0 for s in (s1, s2))
    print(f"stores: {len(roots)} broker(s), {len(segments)} CommitLog files, "
          f"{fmt_bytes(data)} of CommitLog data, {records:,} records, split {args.split_size} "
          f"({s2['tasks']} tasks)")
    print(f"load average          {load_before[0]:5.2f} before, {load_after[0]:5.2f} after "
          f"({os.cpu_count()} CPUs)")
    print(f"two processes vs one  {capacity:8.2f} x   (what this machine allows; 2.0 = two cores)")
    print(f"verify, one by one    {verify_s:8.1f} s")
    print(f"spark local[1] job    {one:8.1f} s   (process {p1:.1f} s with the JVM)")
    print(f"spark local[2] job    {two:8.1f} s   (process {p2:.1f} s with the JVM)")
    print(f"local[2] / verify     {two / verify_s:8.2f} x   (goal <= 1.5)")
    print(f"local[1] / local[2]   {one / two:8.2f} x   (goal >= 1.7)")
    print(f"executor peak memory  {fmt_bytes(peak)}   (a Python worker; split {args.split_size})")
    for master, summary in (("local[1]", s1), ("local[2]", s2)):
        phases = ", ".join(f"{k} {v:.1f}" for k, v in summary["phase_seconds"].items())
        print(f"{master} phases (s)    {phases}")


if __name__ == "__main__":
    main()
