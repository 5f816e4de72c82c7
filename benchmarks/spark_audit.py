"""Spark audit against single-process verify, local[1] against local[2]: fixed and marginal cost.

    python benchmarks/spark_audit.py [--brokers 4] [--messages 1100000] [--split-size 128m]
                                     [--standalone]

Makes (once, under benchmarks/.stores/) ``--brokers`` stores of ``--messages`` messages with
1-2 KiB bodies in 1 GiB CommitLog files (no IndexFiles; 1.1 M messages is ~1.3 GiB), then times,
each in a fresh process and on the same warm page cache, the first store alone and all of them:

* ``mqtool verify`` of every store, one after the other (the single-process figure);
* ``mqtool spark audit --master local[1]`` and ``local[2]`` of the stores at once, tables
  written to a scratch directory. The figure is the audit job's own time (the summary's
  ``seconds``: planning, the one scan, the tables; not the JVM's start-up, printed apart).

From the two sizes it prints, per engine, the fixed cost (the intercept of the line through
both points) and the marginal seconds per GiB of CommitLog data (its slope), and the ratios of
the marginal costs: local[2] / verify (goal <= 1.25) and local[1] / local[2] (goal >= 1.8);
the executors' peak memory (a Python worker's, bounded by the split, or for a store root that
verify checks, by the file a task reads); what two CPU-bound processes get from this machine
at all (2.0: two free cores; a loaded machine bounds any speed-up) and the load average. Two
points on a shared machine are noisy: rerun before trusting a ratio.

With ``--standalone`` it also starts a Spark standalone master on 127.0.0.1 with one, then two
workers of one core each, audits both sizes on it, and prints the marginal speed-up of two
workers over one.

Measured 2026-11-28 at load 2-4 (``--brokers 4 --messages 300000 --standalone``: 0.34 and
1.37 GiB): verify 1.9 s and 7.7 s; local[2] job 21.3 s and 37.1 s, local[1] 22.8 s and 36.1 s
(JVM start-up 22-23 s apart); marginal local[2] / verify 2.73x (goal 1.25), local[1] / local[2]
0.84x (goal 1.8), fixed cost local[2] 16.0 s (goal 10), standalone two workers over one 2.58x
marginal; executor peak 362 MiB. The job is one phase, plan_scan_and_verify (15.7 s of a
15.7 s job on one broker): a task per CommitLog file, each writing its rows while verify's
checks run, so the 357 MB file of one broker costs 15.7 s in its task against 1.9 s for the
whole verify. The second local core gave nothing, but in the same minute two CPU-bound processes got only
1.10x of one from this machine (another agent was working), which bounds local[1] / local[2];
the standalone pair of one-core workers measured 2.58x over one. What stays whatever the load:
a task costs 2.3-2.7x verify per byte (its rows written beside the checks).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
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
    shutil.rmtree(out, ignore_errors=True)
    return seconds, summary["seconds"], summary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Standalone:
    """A standalone master on 127.0.0.1 and ``workers`` one-core workers (pip's pyspark)."""

    def __init__(self, workers: int, base: Path):
        import pyspark

        spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(base),
               "PYSPARK_PYTHON": sys.executable}
        port = _free_port()
        self.url = f"spark://127.0.0.1:{port}"
        self.procs = []
        log = base / "master.log"
        self._start(spark_class, env, log, "org.apache.spark.deploy.master.Master", "--host",
                    "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port()))
        self._wait(lambda: b"elected leader" in log.read_bytes())
        for n in range(workers):
            self._start(spark_class, env, base / f"worker-{n}.log",
                        "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                        "--cores", "1", "--memory", "2g", "--webui-port", str(_free_port()),
                        self.url)
        self._wait(lambda: log.read_bytes().count(b"Registering worker") >= workers)

    def _start(self, spark_class, env, log: Path, *args) -> None:
        with open(log, "wb") as out:
            self.procs.append(subprocess.Popen([str(spark_class), *args], env=env, stdout=out,
                                               stderr=subprocess.STDOUT, cwd=self.base))

    @staticmethod
    def _wait(ready, seconds: float = 300) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            if time.monotonic() > deadline:
                raise SystemExit("the standalone cluster did not start")
            time.sleep(0.5)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _data_bytes(root: Path) -> int:
    info = Store(root).commitlog
    last = info.segments[-1]
    # written bytes: full files plus the used part of the last (its tail is a sparse hole)
    return sum(s.length for s in info.segments[:-1]) + last.path.stat().st_blocks * 512


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept s, slope s/GiB) of the line through (GiB, seconds) points (least squares)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else float("nan")
    return my - slope * mx, slope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", type=int, default=4, help="the larger size (the smaller is 1)")
    parser.add_argument("--messages", type=int, default=1_100_000, help="per broker")
    parser.add_argument("--split-size", default="128m")
    parser.add_argument("--standalone", action="store_true",
                        help="also audit on a standalone cluster of one, then two workers")
    args = parser.parse_args()
    roots = [ensure_store(f"spark-broker-{i}-{args.messages}", [
        "--messages", str(args.messages), "--seed", str(100 + i), "--body-size", "1k/2k",
        "--commitlog-file-size", "1g", "--cq-units", "300000", "--no-index"])
        for i in range(args.brokers)]
    segments = [s for root in roots for s in Store(root).commitlog.segments]
    load_before = os.getloadavg()
    read_files_seconds([s.path for s in segments])   # warm the page cache
    capacity = parallel_capacity()

    sizes = sorted({1, args.brokers})
    figures: dict = {}      # engine -> [(GiB, seconds)]
    jvm: dict = {}
    summaries = []
    scratch = Path(tempfile.mkdtemp(prefix="spark-audit-", dir=STORES))
    try:
        for count in sizes:
            chosen = roots[:count]
            gib = sum(_data_bytes(r) for r in chosen) / 2 ** 30
            verify_s = 0.0
            for root in chosen:
                seconds, _, proc = run_child(["verify", "--json", str(root)])
                if proc.returncode not in (0, 1):
                    raise SystemExit(f"verify {root} failed: {proc.stderr[-500:]}")
                verify_s += seconds
            figures.setdefault("verify", []).append((gib, verify_s))
            for master in ("local[1]", "local[2]"):
                out = scratch / f"{master.replace('[', '').replace(']', '')}-{count}"
                process, job, summary = _audit(master, chosen, out, args.split_size)
                figures.setdefault(master, []).append((gib, job))
                jvm.setdefault(master, []).append(process - job)
                summaries.append(summary)
                print(f"{count} broker(s), {gib:5.2f} GiB: {master} job {job:6.1f} s "
                      f"(process {process:.1f} s), {summary['tasks']} tasks; "
                      f"verify {verify_s:.1f} s", flush=True)
        if args.standalone:
            for workers in (1, 2):
                cluster = Standalone(workers, scratch / f"cluster-{workers}")
                engine = f"standalone x{workers}"
                try:
                    for count in sizes:
                        chosen = roots[:count]
                        gib = sum(_data_bytes(r) for r in chosen) / 2 ** 30
                        out = scratch / f"standalone-{workers}-{count}"
                        _, job, summary = _audit(cluster.url, chosen, out, args.split_size)
                        figures.setdefault(engine, []).append((gib, job))
                        summaries.append(summary)
                        print(f"{count} broker(s), {gib:5.2f} GiB: {engine} job {job:6.1f} s",
                              flush=True)
                finally:
                    cluster.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load_after = os.getloadavg()

    peak = max(s["executor_peak_rss"] or 0 for s in summaries)
    lines = {engine: _line(points) for engine, points in figures.items()}
    print(f"stores: {len(roots)} broker(s) of {args.messages:,} messages, {len(segments)} "
          f"CommitLog files, split {args.split_size}")
    print(f"load average          {load_before[0]:5.2f} before, {load_after[0]:5.2f} after "
          f"({os.cpu_count()} CPUs)")
    print(f"two processes vs one  {capacity:8.2f} x   (what this machine allows; 2.0 = two cores)")
    print(f"{'':22}{'fixed s':>9}{'s/GiB':>9}   points (GiB, s)")
    for engine, (fixed, marginal) in lines.items():
        points = ", ".join(f"({x:.2f}, {y:.1f})" for x, y in figures[engine])
        print(f"{engine:22}{fixed:9.1f}{marginal:9.2f}   {points}")
    for master, starts in jvm.items():
        print(f"{master} JVM start-up   {', '.join(f'{x:.1f}' for x in starts)} s (not in the job)")
    v, one, two = lines["verify"][1], lines["local[1]"][1], lines["local[2]"][1]
    print(f"marginal local[2] / verify    {two / v:6.2f} x   (goal <= 1.25)")
    print(f"marginal local[1] / local[2]  {one / two:6.2f} x   (goal >= 1.8)")
    print(f"fixed cost local[2]           {lines['local[2]'][0]:6.1f} s   (goal <= 10)")
    if "standalone x2" in lines:
        print(f"marginal speed-up, two workers over one  "
              f"{lines['standalone x1'][1] / lines['standalone x2'][1]:6.2f} x")
    print(f"executor peak memory  {fmt_bytes(peak)}   (a Python worker)")
    for summary in summaries[-2:]:
        phases = ", ".join(f"{k} {v:.1f}" for k, v in summary["phase_seconds"].items())
        print(f"{summary['master']} phases (s)    {phases}")


if __name__ == "__main__":
    main()
