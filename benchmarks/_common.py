"""Shared plumbing for the on-demand benchmarks: a reusable big store and child-process timing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
STORES = Path(os.environ.get("MQTOOL_BENCH_STORES", HERE / ".stores"))


def ensure_store(name: str, make_args: list[str]) -> Path:
    """Make a store with ``mqtool fixture make`` once and reuse it on later runs."""
    root = STORES / name
    marker = root / ".complete"
    if marker.exists():
        return root
    if root.exists():
        subprocess.run(["rm", "-rf", str(root)], check=True)
    STORES.mkdir(parents=True, exist_ok=True)
    print(f"making {root} (once) ...", file=sys.stderr)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mqtool", "--no-progress", "fixture", "make", str(root),
                    *make_args], check=True, stdout=subprocess.DEVNULL)
    print(f"  made in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    marker.write_text("ok")
    return root


# Runs in its own process around one mqtool command, so RUSAGE_CHILDREN is that command's (and
# its workers') alone: max RSS only grows within a process, so one wrapper per run keeps figures
# apart. It prints the timings as JSON; the command's stdout stays with it.
_TIMING_WRAPPER = ("import resource, subprocess, sys, time, json;"
                   "t = time.perf_counter();"
                   "p = subprocess.run(sys.argv[1:], capture_output=True);"
                   "d = time.perf_counter() - t;"
                   "u = resource.getrusage(resource.RUSAGE_CHILDREN);"
                   "print(json.dumps({'seconds': d, 'cpu': u.ru_utime + u.ru_stime,"
                   " 'rss_kb': u.ru_maxrss, 'rc': p.returncode}));"
                   "sys.stderr.buffer.write(p.stderr[-2000:])")


_COMPILED = False


def _compile_once() -> None:
    """Write mqtool's bytecode before the first timed run, as ``pip install`` does: where
    PYTHONDONTWRITEBYTECODE is set (this machine) an editable checkout would otherwise compile
    every module from source in every child, about 0.1 s that no installed copy pays."""
    global _COMPILED
    if not _COMPILED:
        import compileall
        import mqtool
        compileall.compile_dir(str(Path(mqtool.__file__).parent), quiet=1)
        _COMPILED = True


def _run_once(args: list[str]) -> tuple[dict, subprocess.CompletedProcess]:
    _compile_once()
    proc = subprocess.run([sys.executable, "-c", _TIMING_WRAPPER, sys.executable, "-m", "mqtool",
                           "--no-progress", *args], capture_output=True, text=True)
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    info["rss"] = info.pop("rss_kb") * 1024
    info["stderr"] = proc.stderr
    proc.returncode = info["rc"]   # the command's exit code, not the wrapper's
    return info, proc


def run_child(args: list[str]) -> tuple[float, int, subprocess.CompletedProcess]:
    """Run ``python -m mqtool ARGS`` in a fresh process: (seconds, peak RSS in bytes, result
    with the command's exit code and stderr)."""
    info, proc = _run_once(args)
    return info["seconds"], info["rss"], proc


def run_child_timed(args: list[str], repeat: int = 1) -> dict:
    """Like :func:`run_child`, best of ``repeat`` runs: wall seconds, CPU seconds (user + system,
    the child and its workers), peak RSS of the largest process, exit code."""
    best = None
    for _ in range(repeat):
        info, _ = _run_once(args)
        if best is None or info["seconds"] < best["seconds"]:
            best = info
    return best


def crc_files_seconds(paths: list[Path], crc=zlib.crc32, repeat: int = 1) -> tuple[float, float]:
    """(wall, CPU) seconds of ``crc`` over the whole files, read in 16 MiB pieces into one
    buffer: the bound a verify that checks every body cannot beat. Best of ``repeat``."""
    buffer = bytearray(1 << 24)
    view = memoryview(buffer)
    best = None
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        for path in paths:
            value = 0
            with open(path, "rb", buffering=0) as fh:
                while True:
                    got = fh.readinto(buffer)
                    if not got:
                        break
                    value = crc(view[:got], value)
        took = (time.perf_counter() - started, time.process_time() - cpu)
        if best is None or took[0] < best[0]:
            best = took
    return best


def load_average() -> str:
    try:
        return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + \
            f" on {os.cpu_count()} cores"
    except OSError:
        return "load average unknown"


def read_files_seconds(paths: list[Path]) -> float:
    started = time.perf_counter()
    for path in paths:
        with open(path, "rb") as fh:
            while fh.read(1 << 24):
                pass
    return time.perf_counter() - started


def crc_bound_seconds(store_root: Path) -> tuple[float, int, int]:
    """Time zlib.crc32 over every message body (positions found first, untimed).

    Returns (seconds, bodies, body bytes)."""
    from mqtool.scan import Scanner
    from mqtool.store import MappedFile, Store

    store = Store(store_root)
    total_bodies = total_bytes = 0
    elapsed = 0.0
    for segment in store.commitlog.segments:
        spans = [(r.body_position - segment.base_offset, r.body_length)
                 for r in Scanner(store.commitlog, check_crc=False).scan_segment(segment)
                 if type(r).__name__ == "MessageRecord" and r.body_length > 0]
        with MappedFile(segment.path) as mapped:
            view = memoryview(mapped.data)
            started = time.perf_counter()
            for start, length in spans:
                zlib.crc32(view[start:start + length])
            elapsed += time.perf_counter() - started
            view.release()
        total_bodies += len(spans)
        total_bytes += sum(length for _, length in spans)
    return elapsed, total_bodies, total_bytes


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
