"""recover against verify on the same crashed store, and recover's peak memory.

    python benchmarks/recover_speed.py [--geometry default|large] [--messages N]
                                       [--reindex-all-too] [--flat-check] [--repeat K]

``--geometry default`` (the default) is what production stores look like: 128 MiB CommitLog
files, 6,000,000-byte ConsumeQueue files (300,000 units) and one 420,000,040-byte IndexFile
(5,000,000 slots x 20,000,000 entries), 600,000 messages by default; the checkpoint of the copy
is zeroed so the abnormal recovery re-checks every file from file 0 and re-indexes every key
(what the broker did in the measurement of ../shared/perf-notes.md, 2026-11-25).
``--geometry large`` is the older run: 1 GiB CommitLog files, 1.1 M messages, the checkpoint
``fixture make --crash`` leaves.

Each store is made once under benchmarks/.stores/ (``fixture make --crash``, sparse) and copied
for every run (recover changes the copy). ``verify``, ``recover`` (default workers: the
cores) and ``recover --workers 1`` are timed as whole processes (``python -m mqtool ...``,
start-up and worker processes included; peak RSS is the largest process's) in the same run,
alternated when ``--repeat`` > 1; printed: the times (best of the repeats), recover / verify,
peak RSS, and the machine's load average before and after. Goals: recover <= 1.2 x verify;
recover's peak RSS <= 300 MB whatever the store size (--flat-check repeats on a store a quarter
the size).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import STORES, ensure_store, fmt_bytes, read_files_seconds, run_child_timed

from mqtool.store import Store

RATIO_GOAL = 1.2
RSS_GOAL = 300 * 10**6
_CHECKPOINT_TIMESTAMPS = 24   # physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp


def _store_args(geometry: str, messages: int) -> list[str]:
    size = "128m" if geometry == "default" else "1g"
    body = "1024/4096" if geometry == "default" else "1k/2k"
    return ["--messages", str(messages), "--seed", "7", "--body-size", body,
            "--commitlog-file-size", size, "--cq-units", "300000", "--index-slots", "5000000",
            "--index-entries", "20000000", "--crash"]


def _copy(source: Path, dest: Path, zero_checkpoint: bool) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    # zero-filled preallocated files stay sparse in the copy
    subprocess.run(["cp", "-r", "--sparse=always", str(source), str(dest)], check=True)
    (dest / ".complete").unlink(missing_ok=True)
    if zero_checkpoint:
        checkpoint = dest / "checkpoint"
        raw = checkpoint.read_bytes()
        checkpoint.write_bytes(bytes(_CHECKPOINT_TIMESTAMPS) + raw[_CHECKPOINT_TIMESTAMPS:])


def _run(args: list[str]) -> tuple[float, int, float]:
    """``python -m mqtool ARGS`` in a fresh process: (seconds, peak RSS in bytes, CPU seconds of
    the process and its workers). CPU time is what a loaded machine distorts least: wall time
    there measures the other jobs too. Exits when the command fails."""
    took = run_child_timed(args)
    if took["rc"] not in (0, 1):
        raise SystemExit(f"mqtool {args[0]} failed ({took['rc']}): {took['stderr'][-2000:]}")
    return took["seconds"], took["rss"], took["cpu"]


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def measure(geometry: str, messages: int, work: Path, extra: list[str], repeat: int) -> dict:
    root = ensure_store(f"recover-{geometry}-{messages}", _store_args(geometry, messages))
    copy = work / f"copy-{messages}"
    load_before = _load()
    verify_runs, recover_runs, serial_runs = [], [], []
    for _ in range(repeat):
        for runs, workers in ((serial_runs, ["--workers", "1"]), (recover_runs, [])):
            _copy(root, copy, zero_checkpoint=geometry == "default")
            store = Store(copy)
            paths = [s.path for s in store.commitlog.segments]
            read_files_seconds(paths)  # warm the page cache
            if not workers:
                verify_runs.append(_run(["verify", "--json", str(copy)]))
            runs.append(_run(["recover", "--json", *workers, *extra, str(copy)]))
    load_after = _load()
    # the child's stdout stays with the timing wrapper: the summary comes from the manifest
    manifest = sorted((copy / ".mqtool-backup").glob("*/manifest.json"))[-1]
    written = json.loads(manifest.read_text())
    summary = written["summary"]
    after = subprocess.run([sys.executable, "-m", "mqtool", "--no-progress", "verify", "--json",
                            str(copy)], capture_output=True, text=True)
    errors = json.loads(after.stdout)["summary"]["errors"]
    shutil.rmtree(copy)
    return {"messages": messages, "bytes": sum(s.length for s in store.commitlog.segments),
            "files": len(paths),
            "verify_s": min(r[0] for r in verify_runs),
            "verify_rss": max(r[1] for r in verify_runs),
            "verify_cpu": min(r[2] for r in verify_runs),
            "recover_s": min(r[0] for r in recover_runs),
            "recover_rss": max(r[1] for r in recover_runs),
            "recover_cpu": min(r[2] for r in recover_runs),
            "ratios": [r[0] / v[0] for v, r in zip(verify_runs, recover_runs)],
            "serial_s": min(r[0] for r in serial_runs),
            "serial_rss": max(r[1] for r in serial_runs),
            "serial_cpu": min(r[2] for r in serial_runs),
            "recover_exit": 1 if written["data_loss"] else 0, "summary": summary,
            "errors_after": errors, "load_before": load_before, "load_after": load_after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--geometry", choices=("default", "large"), default="default")
    parser.add_argument("--messages", type=int, default=None,
                        help="default 600,000 (default geometry) / 1,100,000 (large)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="verify and recover alternated this many times; best of each")
    parser.add_argument("--reindex-all-too", action="store_true",
                        help="also time recover --reindex-all (indexes every message)")
    parser.add_argument("--flat-check", action="store_true",
                        help="also run on a store a quarter the size and compare peak RSS")
    args = parser.parse_args()
    messages = args.messages or (600_000 if args.geometry == "default" else 1_100_000)
    work = Path(tempfile.mkdtemp(prefix="recover-bench-", dir=STORES.parent))
    try:
        runs = [("recover", measure(args.geometry, messages, work, [], args.repeat))]
        if args.reindex_all_too:
            runs.append(("recover --reindex-all",
                         measure(args.geometry, messages, work, ["--reindex-all"], args.repeat)))
        if args.flat_check:
            runs.append(("recover (1/4 store)",
                         measure(args.geometry, messages // 4, work, [], args.repeat)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"geometry {args.geometry}: whole processes (python -m mqtool ...), page cache warm, "
          f"{os.cpu_count()} cores")
    for label, r in runs:
        s = r["summary"]
        print(f"{label}: {r['messages']:,} messages, {fmt_bytes(r['bytes'])} in {r['files']} "
              f"CommitLog files, {s['mode']} recovery from {s['start_file']}, "
              f"{s['records_dispatched']:,} records dispatched, {s['cq_units_added']:,} "
              f"ConsumeQueue units and {s['index_entries_added']:,} index entries written")
        print(f"  load average      {r['load_before']} before, {r['load_after']} after")
        print(f"  verify            {r['verify_s']:8.2f} s   CPU {r['verify_cpu']:6.2f} s   "
              f"peak RSS {fmt_bytes(r['verify_rss'])}")
        print(f"  {label:17} {r['recover_s']:8.2f} s   CPU {r['recover_cpu']:6.2f} s   "
              f"peak RSS {fmt_bytes(r['recover_rss'])}   exit {r['recover_exit']}   "
              f"(goal <= {fmt_bytes(RSS_GOAL)})")
        print(f"  {'  --workers 1':17} {r['serial_s']:8.2f} s   CPU {r['serial_cpu']:6.2f} s   "
              f"peak RSS {fmt_bytes(r['serial_rss'])}   "
              f"({r['serial_s'] / r['verify_s']:.2f} x verify; CPU "
              f"{r['serial_cpu'] / r['verify_cpu']:.2f} x)")
        each = ", ".join(f"{x:.2f}" for x in r["ratios"])
        print(f"  recover / verify  {r['recover_s'] / r['verify_s']:8.2f} x   (goal <= "
              f"{RATIO_GOAL}; each run: {each})")
        print(f"  verify afterwards: {r['errors_after']} error(s)")
    if args.flat_check and len(runs) >= 2:
        big, small = runs[0][1], runs[-1][1]
        print(f"peak RSS {fmt_bytes(small['recover_rss'])} at {small['messages']:,} messages, "
              f"{fmt_bytes(big['recover_rss'])} at {big['messages']:,} "
              f"({big['recover_rss'] / small['recover_rss']:.2f} x for "
              f"{big['messages'] / small['messages']:.0f} x the data)")


if __name__ == "__main__":
    main()
