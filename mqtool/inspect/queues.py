"""ConsumeQueue and BatchConsumeQueue files as records (units, the end, a partial unit) and the
per-queue summary ``info`` shows, decoded with numpy dtypes derived from the declarations."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from .. import codec
from ..formats import consumequeue as cq_fmt
from ..mapping import iter_unit_chunks
from ..store import OFFSET_NAME, ConsumeQueue, queue_of_file
from .records import RT_BCQ_END, RT_BCQ_PARTIAL, RT_BCQ_UNIT, RT_CQ_END, RT_CQ_PARTIAL, RT_CQ_UNIT


CQ_DTYPE, BCQ_DTYPE = codec.CQ_DTYPE, codec.BATCH_CQ_DTYPE


assert CQ_DTYPE.itemsize == cq_fmt.CQ_STORE_UNIT_SIZE
assert BCQ_DTYPE.itemsize == cq_fmt.BATCH_CQ_STORE_UNIT_SIZE


# --- consume queues ------------------------------------------------------------------------------

def _file_base(path: Path) -> int:
    return int(path.name) if OFFSET_NAME.match(path.name) else 0


def _written_chunks(path: Path, dtype: np.dtype) -> Iterator[tuple[int, np.ndarray]]:
    """``(first unit index, units)`` chunks of a queue file, up to its first unit of size 0
    (a hole is zero units): memory is one chunk whatever the file's size."""
    _, chunks = iter_unit_chunks(path, dtype)
    expected = 0
    try:
        for first, chunk in chunks:
            if first > expected:
                return
            zero = np.flatnonzero(chunk["size"] == 0)
            if len(zero):
                if zero[0]:
                    yield first, chunk[:zero[0]]
                return
            yield first, chunk
            expected = first + len(chunk)
    finally:
        chunks.close()


def _walk_units(path: Path, dtype: np.dtype) -> Iterator[tuple]:
    """A queue file a chunk at a time: ``("unit", index, row)`` for every unit before the first
    unit of size 0, then ``("end", index, units after it, non-zero units after it)`` when there
    is one. A hole is zero units and is never read, so memory is one chunk whatever the size."""
    count, chunks = iter_unit_chunks(path, dtype)
    expected = 0                 # the next unit index the walk has not seen
    end = None
    nonzero_after = 0
    for first, chunk in chunks:
        if end is None and first > expected:
            end = expected       # a hole before this chunk: its first unit has size 0
        if end is not None:
            beyond = chunk[max(0, end + 1 - first):]
            nonzero_after += int(np.count_nonzero(beyond["size"] != 0))
            continue
        zero = np.flatnonzero(chunk["size"] == 0)
        stop = int(zero[0]) if len(zero) else len(chunk)
        for i, row in enumerate(chunk[:stop].tolist()):
            yield "unit", first + i, row
        expected = first + len(chunk)
        if len(zero):
            end = first + stop
            nonzero_after += int(np.count_nonzero(chunk["size"][stop + 1:] != 0))
    if end is None and expected < count:
        end = expected
    if end is not None:
        yield "end", end, count - end - 1, nonzero_after


def _unit_status(offset: int, size: int, tags_code: int) -> str:
    if cq_fmt.is_pre_blank(offset, size, tags_code):
        return "pre_blank"
    return "valid" if cq_fmt.is_valid_unit(offset, size) else "invalid"


def _queue_file(path, file: str | None, topic: str | None, queue_id: int | None):
    """(path, shown file name, topic, queue id, file base offset) of a queue file; the topic and
    queue id come from its directories unless given."""
    path = Path(path)
    if topic is None or queue_id is None:
        topic, queue_id = queue_of_file(path)
    return path, file or path.name, topic, queue_id, _file_base(path)


def _partial_unit(record_type: str, file: str, topic: str, queue_id: int, size: int,
                  unit_size: int) -> dict:
    """The record for the bytes past a queue file's last whole unit."""
    leftover = size % unit_size
    return {"record_type": record_type, "file": file, "topic": topic, "queue_id": queue_id,
            "file_offset": size - leftover, "length": leftover,
            "detail": f"file size {size} is not a multiple of {unit_size}; "
                      f"the last {leftover} bytes are not a whole unit"}


def iter_consume_queue_file(path: Path, *, file: str | None = None, topic: str | None = None,
                            queue_id: int | None = None) -> Iterator[dict]:
    """Units of one ConsumeQueue file with their queue offsets ((file base + position)/20), up
    to the first unit with size 0 (reported as ``consumequeue/end`` with what lies after it).
    A file that is not a multiple of 20 bytes gives its whole units, then a partial-unit record."""
    path, file, topic, queue_id, base = _queue_file(path, file, topic, queue_id)
    unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
    size = path.stat().st_size
    leftover = size % unit_size
    for step in _walk_units(path, CQ_DTYPE):
        if step[0] == "end":
            _, i, after, nonzero = step
            position = i * unit_size
            yield {"record_type": RT_CQ_END, "file": file, "topic": topic, "queue_id": queue_id,
                   "file_offset": position, "queue_offset": (base + position) // unit_size,
                   "units_after_end": after, "nonzero_units_after_end": nonzero}
            return
        _, i, (offset, msg_size, tags_code) = step
        position = i * unit_size
        queue_offset = (base + position) // unit_size
        yield {"record_type": RT_CQ_UNIT, "file": file, "topic": topic, "queue_id": queue_id,
               "file_offset": position, "queue_offset": queue_offset,
               "commitlog_offset": offset, "size": msg_size, "tags_code": tags_code,
               "status": _unit_status(offset, msg_size, tags_code)}
    if leftover:
        yield _partial_unit(RT_CQ_PARTIAL, file, topic, queue_id, size, unit_size)


def iter_batch_consume_queue_file(path: Path, *, file: str | None = None,
                                  topic: str | None = None,
                                  queue_id: int | None = None) -> Iterator[dict]:
    """Units of one BatchConsumeQueue file (46 bytes; located by msg_base_offset, not by
    position, so ``unit_index`` = (file base + position)/46 is only the slot number)."""
    path, file, topic, queue_id, base = _queue_file(path, file, topic, queue_id)
    unit_size = cq_fmt.BATCH_CQ_STORE_UNIT_SIZE
    size = path.stat().st_size
    leftover = size % unit_size
    names = BCQ_DTYPE.names
    for step in _walk_units(path, BCQ_DTYPE):
        if step[0] == "end":
            _, i, after, nonzero = step
            position = i * unit_size
            yield {"record_type": RT_BCQ_END, "file": file, "topic": topic, "queue_id": queue_id,
                   "file_offset": position, "unit_index": (base + position) // unit_size,
                   "units_after_end": after, "nonzero_units_after_end": nonzero}
            return
        _, i, row = step
        unit = dict(zip(names, row))
        position = i * unit_size
        valid = cq_fmt.is_valid_batch_unit(unit["commitlog_offset"], unit["size"],
                                           unit["msg_base_offset"], unit["batch_size"])
        yield {"record_type": RT_BCQ_UNIT, "file": file, "topic": topic, "queue_id": queue_id,
               "file_offset": position, "unit_index": (base + position) // unit_size, **unit,
               "status": "valid" if valid else "invalid"}
    if leftover:
        yield _partial_unit(RT_BCQ_PARTIAL, file, topic, queue_id, size, unit_size)


def queue_summary(queue: ConsumeQueue, commitlog_end: int | None = None) -> dict:
    """What a ConsumeQueue's own files say: units (valid, pre-blank, invalid), the first valid
    queue offset, the next queue offset (end of written units, as getMaxOffsetInQueue) and the
    end of the last unit in the CommitLog (maxPhysicOffset)."""
    is_batch = queue.unit_size == cq_fmt.BATCH_CQ_STORE_UNIT_SIZE
    dtype = BCQ_DTYPE if is_batch else CQ_DTYPE
    unit_size = dtype.itemsize
    valid = pre_blank = invalid = 0
    min_offset = next_offset = None
    max_physic = -1
    past_end = 0
    notes = []
    for seg in queue.segments:
        size = seg.path.stat().st_size
        if size % unit_size:
            notes.append(f"{seg.name}: {size} bytes is not a multiple of {unit_size}")
        written_units = 0
        for first_index, written in _written_chunks(seg.path, dtype):
            written_units = first_index + len(written)
            offsets, sizes = written["commitlog_offset"], written["size"]
            blank = (offsets == 0) & (sizes == cq_fmt.PRE_BLANK_SIZE) & (written["tags_code"] == 0)
            good = (offsets >= 0) & (sizes > 0) & ~blank
            if is_batch:
                good &= (written["msg_base_offset"] >= 0) & (written["batch_size"] > 0)
            valid += int(good.sum())
            pre_blank += int(blank.sum())
            invalid += int(len(written) - good.sum() - blank.sum())
            if good.any():
                first = int(np.flatnonzero(good)[0])
                if min_offset is None:
                    min_offset = (int(written["msg_base_offset"][first]) if is_batch
                                  else (seg.base_offset + (first_index + first) * unit_size)
                                  // unit_size)
                last = int(np.flatnonzero(good)[-1])
                max_physic = int(offsets[last]) + int(sizes[last])
                if commitlog_end is not None:
                    past_end += int(((offsets[good] + sizes[good]) > commitlog_end).sum())
                if is_batch:
                    # a BatchConsumeQueue is not positional: the next offset follows the last batch
                    next_offset = (int(written["msg_base_offset"][last])
                                   + int(written["batch_size"][last]))
        if not is_batch:
            next_offset = (seg.base_offset + written_units * unit_size) // unit_size
    return {"files": len(queue.segments), "bytes": sum(s.length for s in queue.segments),
            "units": valid, "pre_blank_units": pre_blank, "invalid_units": invalid,
            "min_offset": min_offset, "max_offset": next_offset,
            "max_physic_offset": max_physic if max_physic >= 0 else None,
            "units_past_commitlog_end": past_end if commitlog_end is not None else None,
            "stray_files": [p.name for p in queue.stray_files], "notes": notes}
