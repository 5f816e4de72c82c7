"""How many cores mqtool may use: the one answer every parallel step (verify's file checks,
recover's scan, the backup's digests) sizes its workers by."""
from __future__ import annotations

import os


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system tells it (a
    container or ``taskset`` limits it below ``os.cpu_count()``), else the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
