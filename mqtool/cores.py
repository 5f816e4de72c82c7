"""How many cores mqtool may use: the one answer every parallel step (verify's file checks,
recover's scan, the backup's digests) sizes its workers by; and the threads that share file
work out over them."""
from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import ThreadPoolExecutor


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system tells it (a
    container or ``taskset`` limits it below ``os.cpu_count()``), else the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def fork_context():
    """The fork start method where it exists and is safe (Linux), else None. A forked worker
    starts with mqtool and numpy already imported (a spawned one pays ~0.3 s of imports),
    inherits its context without pickling, and needs no re-import of ``python -m mqtool``,
    which a spawned child cannot do."""
    if sys.platform == "linux":
        return multiprocessing.get_context("fork")
    return None


def map_on_cores(fn, items, *, cost=None, limit: int | None = None) -> list:
    """``[fn(x) for x in items]`` on one thread per core (at most ``limit``), for work that
    releases the GIL (file reads, digests, numpy compares). With ``cost``, the costliest items
    start first: a repair's one large IndexFile started last would run alone on one core while
    the other waits."""
    items = list(items)
    workers = min(len(items), available_cores(), limit or len(items))
    if workers <= 1:
        return [fn(item) for item in items]
    order = range(len(items)) if cost is None else \
        sorted(range(len(items)), key=lambda i: -cost(items[i]))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {i: pool.submit(fn, items[i]) for i in order}
        return [futures[i].result() for i in range(len(items))]
