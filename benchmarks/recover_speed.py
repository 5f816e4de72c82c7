"""recover against verify on the same crashed store, and recover's peak memory.

    python benchmarks/recover_speed.py [--messages 1100000] [--reindex-all-too] [--flat-check]

Makes (once, under benchmarks/.stores/) a crashed store of >= 1 GiB (``fixture make --crash``,
1 GiB CommitLog files, ~1 KiB bodies, the broker's default ConsumeQueue and IndexFile geometry),
copies it (recover changes the copy), then prints recover time as a ratio to verify time on the
same store and both peak RSS. Goals: recover <= 1.5 x verify; recover's memory flat with store
size (--flat-check repeats the run on a store a quarter the size). Run on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import STORES, ensure_store, fmt_bytes, read_files_seconds, run_child

from mqtool.store import Store


def _store_args(messages: int) -> list[str]:
    return ["--messages", str(messages), "--seed", "7", "--body-size", "1k/2k",
            "--commitlog-file-size", "1g", "--cq-units", "300000", "--index-slots", "5000000",
            "--index-entries", "20000000", "--crash"]


def _copy(source: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    # zero-filled preallocated files stay sparse in the copy
    subprocess.run(["cp", "-r", "--sparse=always", str(source), str(dest)], check=True)
    (dest / ".complete").unlink(missing_ok=True)


def measure(messages: int, work: Path, extra: list[str]) -> dict:
    root = ensure_store(f"recover-crash-{messages}", _store_args(messages))
    copy = work / f"copy-{messages}"
    _copy(root, copy)
    store = Store(copy)
    paths = [s.path for s in store.commitlog.segments]
    read_files_seconds(paths)  # warm the page cache
    verify_s, verify_rss, _ = run_child(["verify", "--json", str(copy)])
    recover_s, recover_rss, recover = run_child(["recover", "--json", *extra, str(copy)])
    if recover.returncode not in (0, 1):
        raise SystemExit(f"recover failed ({recover.returncode}): {recover.stderr[-2000:]}")
    # the child's stdout stays with the timing wrapper: the summary comes from the manifest
    manifest = sorted((copy / ".mqtool-backup").glob("*/manifest.json"))[-1]
    written = json.loads(manifest.read_text())
    summary = written["summary"]
    after = subprocess.run([sys.executable, "-m", "mqtool", "--no-progress", "verify", "--json",
                            str(copy)], capture_output=True, text=True)
    errors = json.loads(after.stdout)["summary"]["errors"]
    shutil.rmtree(copy)
    return {"messages": messages, "bytes": sum(s.length for s in store.commitlog.segments),
            "verify_s": verify_s, "verify_rss": verify_rss, "recover_s": recover_s,
            "recover_rss": recover_rss, "recover_exit": 1 if written["data_loss"] else 0,
            "summary": summary, "errors_after": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_100_000)
    parser.add_argument("--reindex-all-too", action="store_true",
                        help="also time recover --reindex-all (indexes every message)")
    parser.add_argument("--flat-check", action="store_true",
                        help="also run on a store a quarter the size and compare peak RSS")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="recover-bench-", dir=STORES.parent))
    try:
        runs = [("recover", measure(args.messages, work, []))]
        if args.reindex_all_too:
            runs.append(("recover --reindex-all", measure(args.messages, work, ["--reindex-all"])))
        if args.flat_check:
            runs.append(("recover (1/4 store)", measure(args.messages // 4, work, [])))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for label, r in runs:
        s = r["summary"]
        print(f"{label}: {r['messages']:,} messages, {fmt_bytes(r['bytes'])} of CommitLog files, "
              f"{s['mode']} recovery from {s['start_file']}, {s['records_dispatched']:,} records "
              f"dispatched, {s['cq_units_added']:,} ConsumeQueue units and "
              f"{s['index_entries_added']:,} index entries written")
        print(f"  verify            {r['verify_s']:8.2f} s   peak RSS {fmt_bytes(r['verify_rss'])}")
        print(f"  {label:17} {r['recover_s']:8.2f} s   peak RSS {fmt_bytes(r['recover_rss'])}"
              f"   exit {r['recover_exit']}")
        print(f"  recover / verify  {r['recover_s'] / r['verify_s']:8.2f} x   (goal <= 1.5)")
        print(f"  verify afterwards: {r['errors_after']} error(s)")
    if args.flat_check and len(runs) >= 2:
        big, small = runs[0][1], runs[-1][1]
        print(f"peak RSS {fmt_bytes(small['recover_rss'])} at {small['messages']:,} messages, "
              f"{fmt_bytes(big['recover_rss'])} at {big['messages']:,} "
              f"({big['recover_rss'] / small['recover_rss']:.2f} x for "
              f"{big['messages'] / small['messages']:.0f} x the data)")


if __name__ == "__main__":
    main()
