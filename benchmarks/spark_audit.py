"""Spark audit scaling and overhead on >= 4 GiB of CommitLog from several brokers.

    python benchmarks/spark_audit.py [--brokers 4] [--messages 1000000] [--split-size 128m]

Makes (once, under benchmarks/.stores/) ``--brokers`` stores of ``--messages`` messages with
1-2 KiB bodies in 1 GiB CommitLog files (no IndexFiles), then times, each in a fresh process:

* ``mqtool verify`` of every store, one after the other (the single-process figure);
* ``mqtool spark audit --master local[1]`` and ``local[2]`` of all stores at once, tables
  written to a scratch directory (JVM start-up included).

Prints local[1] / local[2] (goal >= 1.7) and verify / local[2] (goal >= 0.67, i.e. Spark at
most 1.5x the single-process time). It also measures what two processes can get from this
machine at all (two CPU-bound processes against one): on shared or hyper-threaded vCPUs that
bounds any speed-up, Spark's included. Run on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import multiprocessing
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--split-size", default="128m")
    args = parser.parse_args()
    roots = [ensure_store(f"spark-broker-{i}", [
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
    read_files_seconds([s.path for s in segments])   # warm the page cache
    capacity = parallel_capacity()

    verify_s = 0.0
    for root in roots:
        seconds, _, proc = run_child(["verify", "--json", str(root)])
        if proc.returncode not in (0, 1):
            raise SystemExit(f"verify {root} failed: {proc.stderr[-500:]}")
        verify_s += seconds

    scratch = Path(tempfile.mkdtemp(prefix="spark-audit-", dir=STORES))
    timings = {}
    try:
        for master in ("local[1]", "local[2]"):
            out = scratch / master.replace("[", "").replace("]", "")
            seconds, rss, proc = run_child(["spark", "audit", "--master", master, "--json",
                                            "--out", str(out), "--split-size", args.split_size,
                                            *map(str, roots)])
            if proc.returncode not in (0, 1):
                raise SystemExit(f"spark audit on {master} failed: {proc.stderr[-1500:]}")
            timings[master] = seconds
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    one, two = timings["local[1]"], timings["local[2]"]
    print(f"stores: {len(roots)} brokers, {len(segments)} CommitLog files, "
          f"{fmt_bytes(data)} of CommitLog data ({args.messages:,} messages each), "
          f"split {args.split_size}")
    print(f"two processes vs one  {capacity:8.2f} x   (what this machine allows; 2.0 = two cores)")
    print(f"verify, one by one    {verify_s:8.1f} s")
    print(f"spark local[1]        {one:8.1f} s")
    print(f"spark local[2]        {two:8.1f} s")
    print(f"local[1] / local[2]   {one / two:8.2f} x   (goal >= 1.7)")
    print(f"verify / local[2]     {verify_s / two:8.2f} x   (goal >= 0.67)")


if __name__ == "__main__":
    main()
