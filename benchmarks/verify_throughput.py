"""verify throughput against physics: zlib.crc32 over the same CommitLog files.

    python benchmarks/verify_throughput.py [--store default|big|both] [--repeat 3] [--workers N]

Makes (once, under benchmarks/.stores/) one or both of:

* ``default``: the broker's DEFAULT geometry, as production stores look: 600,000 messages of
  ~1.4 KiB in 128 MiB CommitLog files, 6,000,000-byte ConsumeQueue files, one 420,000,040-byte
  IndexFile of 5,000,000 slots x 20,000,000 entries (laid out sparse by ``fixture make``);
* ``big``: >= 1 GiB of ~1 KiB bodies (1,100,000 messages) in 1 GiB CommitLog files.

For each it times, in this one run and with a warm page cache: zlib.crc32 over the whole
CommitLog files (the bound: a verify that checks every body cannot beat it), ``mqtool verify``
and ``verify --quick`` as whole processes (start-up included), and prints the ratios with the
peak RSS, the CPU seconds (user + system, workers included) and the machine's load average: on a
shared machine the wall-clock ratios move with the load, the CPU ones much less. Without
``--workers`` it also times ``verify --workers 1`` (one process), to show what the workers gain.
Goals: verify <= 2.0 x the bound, --quick <= 1.2 x, peak RSS <= 300 MiB.
"""
from __future__ import annotations

import argparse
import zlib

from _common import (crc_files_seconds, ensure_store, fmt_bytes, load_average,
                     read_files_seconds, run_child_timed)

from mqtool import crc as fast_crc
from mqtool.store import Store

STORES = {
    "default": ("verify-default-600000", [
        "--messages", "600000", "--seed", "7", "--body-size", "1400/4k",
        "--commitlog-file-size", "128m", "--cq-units", "300000", "--index-slots", "5000000",
        "--index-entries", "20000000"]),
    "big": ("verify-1100000", [
        "--messages", "1100000", "--seed", "7", "--body-size", "1k/2k",
        "--commitlog-file-size", "1g", "--cq-units", "300000", "--index-slots", "5000000",
        "--index-entries", "20000000"]),
}


def measure(kind: str, repeat: int, workers: list[str]) -> None:
    name, make_args = STORES[kind]
    root = ensure_store(name, make_args)
    store = Store(root)
    segments = store.commitlog.segments
    paths = [s.path for s in segments]
    size = sum(s.length for s in segments)
    geometry = ["--cq-units", "300000", "--index-slots", "5000000", "--index-entries",
                "20000000"]
    read_files_seconds(paths)  # warm the page cache
    read_s = read_files_seconds(paths)
    crc_s, crc_cpu = crc_files_seconds(paths, zlib.crc32, repeat)
    fast_s, _ = crc_files_seconds(paths, fast_crc.crc32, repeat)
    load_before = load_average()
    runs = {"full": ["verify", "--json", *workers, *geometry, str(root)],
            "quick": ["verify", "--quick", "--json", *workers, *geometry, str(root)]}
    if not workers:
        runs["serial"] = ["verify", "--json", "--workers", "1", *geometry, str(root)]
    best: dict = {}
    for _ in range(repeat):     # interleaved, so that a burst of load hits all alike
        for label, args in runs.items():
            took = run_child_timed(args)
            if label not in best or took["seconds"] < best[label]["seconds"]:
                best[label] = took
    full, quick, serial = best["full"], best["quick"], best.get("serial")
    load_after = load_average()
    print(f"== {kind}: {root.name}: {len(segments)} CommitLog files, {fmt_bytes(size)}")
    print(f"  {load_before} (before), {load_after} (after)")
    print(f"  read files               {read_s:7.2f} s")
    print(f"  zlib.crc32 of the files  {crc_s:7.2f} s   cpu {crc_cpu:6.2f} s   (the bound)")
    print(f"  {fast_crc.NAME + ' crc32 of the files':24} {fast_s:7.2f} s")
    for label, run, goal in (("verify", full, 2.0), ("verify --quick", quick, 1.2)):
        print(f"  {label:24} {run['seconds']:7.2f} s   cpu {run['cpu']:6.2f} s   exit {run['rc']}"
              f"   peak RSS {fmt_bytes(run['rss'])}")
        print(f"    / bound                {run['seconds'] / crc_s:7.2f} x   cpu "
              f"{run['cpu'] / crc_cpu:6.2f} x   (goal <= {goal})")
    if serial is not None:
        print(f"  verify --workers 1       {serial['seconds']:7.2f} s   cpu {serial['cpu']:6.2f} s"
              f"   peak RSS {fmt_bytes(serial['rss'])}   (default workers: "
              f"{serial['seconds'] / full['seconds']:.2f} x faster)")
    worst = max(full["rss"], quick["rss"])
    print(f"  peak RSS                 {fmt_bytes(worst):>10}   (goal <= 300 MiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", choices=("default", "big", "both"), default="both")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs of each timing")
    parser.add_argument("--workers", type=int, default=None,
                        help="pass --workers N to verify (default: verify's own default)")
    args = parser.parse_args()
    workers = [] if args.workers is None else ["--workers", str(args.workers)]
    for kind in (("default", "big") if args.store == "both" else (args.store,)):
        measure(kind, max(1, args.repeat), workers)


if __name__ == "__main__":
    main()
