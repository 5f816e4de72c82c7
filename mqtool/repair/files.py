"""Small helpers on store files that every repair step shares: where a file's data ends, the byte
ranges two versions of a file differ in, and the relative names operations are reported under."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..queue_recovery import CONSUME_QUEUE, QueueKind
from ..store import ConsumeQueue, Store, data_extents


_CHUNK = 1 << 20


# --- helpers on files ------------------------------------------------------------------------------

def _last_nonzero(block: np.ndarray) -> int:
    """Index of the last non-zero byte of a block (-1 if none), looked for in 64 KiB pieces
    from the end so that a mostly-zero block costs little."""
    piece = 1 << 16
    hi = len(block)
    while hi > 0:
        part = block[max(0, hi - piece):hi]
        nonzero = np.flatnonzero(part)
        if len(nonzero):
            return max(0, hi - piece) + int(nonzero[-1])
        hi -= piece
    return -1


def data_end(path: Path, start: int = 0) -> int:
    """One past the last non-zero byte of a file at or after ``start`` (``start`` if none).
    Read backwards, data extents only, into one reused buffer (a mapping would count the whole
    file as resident)."""
    size = path.stat().st_size
    if size <= start:
        return start
    step = 16 << 20
    with open(path, "rb", buffering=0) as fh:
        extents = data_extents(fh, size, start)
        buf = bytearray(min(step, max((hi - lo for lo, hi in extents), default=0)))
        for ext_lo, ext_hi in reversed(extents):
            pos = ext_hi
            while pos > ext_lo:
                lo = max(ext_lo, pos - step)
                fh.seek(lo)
                view = memoryview(buf)[:pos - lo]
                got = fh.readinto(view)
                last = _last_nonzero(np.frombuffer(view[:got], np.uint8))
                if last >= 0:
                    return lo + last + 1
                pos = lo
    return start


def data_bytes(path: Path | None) -> int:
    """The bytes a file holds on disk (its holes not counted): what reading its data costs."""
    if path is None:
        return 0
    try:
        return path.stat().st_blocks * 512
    except FileNotFoundError:
        return 0


def _merged(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of two lists of [lo, hi) ranges, sorted and merged."""
    out: list[list[int]] = []
    for lo, hi in sorted(a + b):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def diff_ranges(old: Path | None, new: Path | None) -> list[list[int]]:
    """[start, end) ranges where two files differ (bytes only one of them has included).
    Where both files have a hole both read as zeros, so only their data extents are compared."""
    old_size = old.stat().st_size if old is not None else 0
    new_size = new.stat().st_size if new is not None else 0
    if old is None or new is None:
        return [[0, max(old_size, new_size)]] if max(old_size, new_size) else []
    ranges: list[list[int]] = []

    def add(s: int, e: int) -> None:
        if ranges and s - ranges[-1][1] <= 16:
            ranges[-1][1] = max(ranges[-1][1], e)
        else:
            ranges.append([s, e])

    common = min(old_size, new_size)
    with open(old, "rb") as fa, open(new, "rb") as fb:
        for lo, hi in _merged(data_extents(fa, old_size, 0, common),
                              data_extents(fb, new_size, 0, common)):
            pos = lo
            fa.seek(lo)
            fb.seek(lo)
            while pos < hi:
                n = min(_CHUNK, hi - pos)
                a, b = fa.read(n), fb.read(n)
                if a != b:
                    diff = np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8)
                    idx = np.flatnonzero(diff)
                    # a gap of at most 16 equal bytes joins two ranges, as in add()
                    breaks = np.flatnonzero(np.diff(idx) - 1 > 16)
                    found = np.empty((len(breaks) + 1, 2), dtype=np.int64)
                    found[0, 0], found[1:, 0] = idx[0], idx[breaks + 1]
                    found[:-1, 1], found[-1, 1] = idx[breaks], idx[-1]
                    found += (pos, pos + 1)
                    # ranges found in one chunk are already more than 16 bytes apart: only the
                    # first can join the last one found before (an IndexFile's slots give tens
                    # of thousands of ranges, too many to merge one by one)
                    first = found[0].tolist()
                    add(*first)
                    ranges.extend(found[1:].tolist())
                pos += n
    if old_size != new_size:
        add(common, max(old_size, new_size))
    return ranges


def _rel(store: Store, path: Path) -> str:
    return store.relative(path)


def _queue_rel(topic: str, queue_id: int, name: str, kind: QueueKind = CONSUME_QUEUE) -> str:
    return f"{kind.directory}/{topic}/{queue_id}/{name}"


def _store_queues(store: Store, kind: QueueKind) -> list[ConsumeQueue]:
    return store.batch_consume_queues if kind.batch else store.consume_queues
