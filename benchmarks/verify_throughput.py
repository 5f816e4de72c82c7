"""verify throughput against physics: the CRC of every body and reading the files.

    python benchmarks/verify_throughput.py [--messages 1100000] [--quick-too]

Makes (once, under benchmarks/.stores/) a store of >= 1 GiB with ~1 KiB bodies in 1 GiB
CommitLog files, then prints verify time as a ratio to (a) zlib.crc32 over the same bodies and
(b) reading the files, and verify's peak RSS. Goals: ratio (a) <= 2.0; peak RSS <= 300 MB.
Run on an otherwise idle machine with a warm page cache (the script reads the files first).
"""
from __future__ import annotations

import argparse

from _common import crc_bound_seconds, ensure_store, fmt_bytes, read_files_seconds, run_child

from mqtool.store import Store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_100_000)
    parser.add_argument("--quick-too", action="store_true", help="also time verify --quick")
    args = parser.parse_args()
    root = ensure_store(f"verify-{args.messages}", [
        "--messages", str(args.messages), "--seed", "7", "--body-size", "1k/2k",
        "--commitlog-file-size", "1g", "--cq-units", "300000", "--index-slots", "5000000",
        "--index-entries", "20000000"])
    store = Store(root)
    paths = [s.path for s in store.commitlog.segments]
    size = sum(s.length for s in store.commitlog.segments)
    read_files_seconds(paths)  # warm the page cache
    read_s = read_files_seconds(paths)
    crc_s, bodies, body_bytes = crc_bound_seconds(root)
    verify_s, rss, proc = run_child(["verify", "--json", str(root)])
    print(f"store: {root} ({fmt_bytes(size)} CommitLog, {bodies:,} bodies, "
          f"{fmt_bytes(body_bytes)} of body)")
    print(f"read files        {read_s:8.2f} s")
    print(f"crc32 of bodies   {crc_s:8.2f} s")
    print(f"verify            {verify_s:8.2f} s   exit {proc.returncode}")
    print(f"verify / crc32    {verify_s / crc_s:8.2f} x   (goal <= 2.0)")
    print(f"verify / read     {verify_s / read_s:8.2f} x")
    print(f"verify peak RSS   {fmt_bytes(rss):>10}   (goal <= 300 MiB)")
    if args.quick_too:
        quick_s, quick_rss, _ = run_child(["verify", "--quick", "--json", str(root)])
        print(f"verify --quick    {quick_s:8.2f} s   ({quick_s / crc_s:.2f} x crc32, "
              f"peak RSS {fmt_bytes(quick_rss)})")


if __name__ == "__main__":
    main()
