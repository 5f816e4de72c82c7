"""Keeping freed memory for reuse while a repair runs.

The scan and the dispatch allocate and free numpy arrays of a few MB for every batch of records.
glibc's malloc gives such memory back to the system as soon as the top of the heap is free
(128 KiB trim threshold), so the next batch faults the same pages in again, zero-filled: on the
default-geometry benchmark ~140,000 page faults per 600,000 records, about a sixth of the
scanning process's CPU time. A high trim threshold and top pad keep the pages mapped between
batches; the peak resident size is what the largest batch needs either way. Forked scanning
workers inherit the setting. Elsewhere than glibc nothing changes."""
from __future__ import annotations

import ctypes
from contextlib import contextmanager

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_KEEP = 256 << 20              # freed memory kept mapped, at most
_PAD = 64 << 20                # grown by at least this much at a time
_GLIBC_DEFAULT = 128 << 10     # both parameters' defaults (mallopt(3))


def _libc():
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


@contextmanager
def retained_heap():
    """Keep freed heap memory mapped inside the block; hand it back at its end."""
    libc = _libc()
    if libc is None:
        yield
        return
    libc.mallopt(_M_TRIM_THRESHOLD, _KEEP)
    libc.mallopt(_M_TOP_PAD, _PAD)
    try:
        yield
    finally:
        libc.mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT)
        libc.mallopt(_M_TOP_PAD, _GLIBC_DEFAULT)
        libc.malloc_trim(0)
