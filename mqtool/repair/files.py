"""Small helpers on store files that every repair step shares: where a file's data ends, the byte
ranges two versions of a file differ in, and the relative names operations are reported under."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..recovery import CONSUME_QUEUE, QueueKind
from ..store import ConsumeQueue, Store


_CHUNK = 1 << 20


# --- helpers on files ------------------------------------------------------------------------------

def data_end(path: Path, start: int = 0) -> int:
    """One past the last non-zero byte of a file at or after ``start`` (``start`` if none).
    Read backwards into one reused buffer (a mapping would count the whole file as resident)."""
    size = path.stat().st_size
    if size <= start:
        return start
    step = 16 << 20
    buf = bytearray(min(step, size - start))
    with open(path, "rb", buffering=0) as fh:
        pos = size
        while pos > start:
            lo = max(start, pos - step)
            fh.seek(lo)
            view = memoryview(buf)[:pos - lo]
            got = fh.readinto(view)
            block = np.frombuffer(view[:got], np.uint8)
            if block.any():
                # the last non-zero byte, found in 64 KiB pieces from the end
                piece = 1 << 16
                hi = len(block)
                while hi > 0:
                    part = block[max(0, hi - piece):hi]
                    nonzero = np.flatnonzero(part)
                    if len(nonzero):
                        return lo + max(0, hi - piece) + int(nonzero[-1]) + 1
                    hi -= piece
            pos = lo
    return start


def diff_ranges(old: Path | None, new: Path | None) -> list[list[int]]:
    """[start, end) ranges where two files differ (bytes only one of them has included)."""
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
        pos = 0
        while pos < common:
            n = min(_CHUNK, common - pos)
            a, b = fa.read(n), fb.read(n)
            if a != b:
                diff = np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8)
                idx = np.flatnonzero(diff)
                breaks = np.flatnonzero(np.diff(idx) > 16)
                starts = np.concatenate(([idx[0]], idx[breaks + 1]))
                ends = np.concatenate((idx[breaks], [idx[-1]])) + 1
                for s, e in zip(starts.tolist(), ends.tolist()):
                    add(pos + s, pos + e)
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
