"""How many cores mqtool may use: the one answer every parallel step (verify's file checks,
recover's scan, the backup's digests) sizes its workers by; the threads that share file
work out over them; and the rule that no worker process outlives the process that started it."""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

#: prctl(2) option: the signal the kernel sends this process when its parent dies
_PR_SET_PDEATHSIG = 1
_WATCH_SECONDS = 0.2


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


def die_with_parent(parent_pid: int) -> None:
    """Called first in every worker process mqtool starts (a pool's initializer, a process's
    target): the worker never outlives ``parent_pid``, whatever ends that process (SIGKILL
    included), so no orphan sleeps on with the caller's stdout and stderr open.

    On Linux the kernel kills the worker (``prctl(PR_SET_PDEATHSIG, SIGKILL)``); a parent that
    died between the fork and that call has already handed the worker to another parent, which
    the ``getppid`` check right after catches. Elsewhere a thread watches ``getppid``. The
    signal follows the *thread* that forked the worker: pools are started and closed by one
    thread of the caller, which outlives them."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
        if armed:
            if os.getppid() != parent_pid:
                os._exit(1)
            return
    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="mqtool-parent-watch",
                     daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_WATCH_SECONDS)
    os._exit(1)


def worker_initializer(parent_pid: int, init=None, *args) -> None:
    """A pool initializer: :func:`die_with_parent`, then ``init(*args)``."""
    die_with_parent(parent_pid)
    if init is not None:
        init(*args)


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
