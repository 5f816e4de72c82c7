"""ConsumeQueue and BatchConsumeQueue files as records (units, the end, a partial unit) and the
per-queue summary ``info`` shows, decoded with numpy dtypes derived from the declarations."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from .. import codec
from ..formats import consumequeue as cq_fmt
from ..mapping import read_units
from ..store import OFFSET_NAME, ConsumeQueue, queue_of_file
from .records import RT_BCQ_END, RT_BCQ_PARTIAL, RT_BCQ_UNIT, RT_CQ_END, RT_CQ_PARTIAL, RT_CQ_UNIT


CQ_DTYPE, BCQ_DTYPE = codec.CQ_DTYPE, codec.BATCH_CQ_DTYPE


assert CQ_DTYPE.itemsize == cq_fmt.CQ_STORE_UNIT_SIZE
assert BCQ_DTYPE.itemsize == cq_fmt.BATCH_CQ_STORE_UNIT_SIZE


# --- consume queues ------------------------------------------------------------------------------

def _file_base(path: Path) -> int:
    return int(path.name) if OFFSET_NAME.match(path.name) else 0


def _load_units(path: Path, dtype: np.dtype) -> tuple[np.ndarray, int, int]:
    """(units, file size, bytes after the last whole unit) of a queue file; ``units`` ends
    where the written data does (a trailing hole is zero units: see :func:`read_units`)."""
    units, whole = read_units(path, dtype)
    if whole > len(units):
        # the hole after the written data starts with a zero unit: the queue's end
        units = np.concatenate([units, np.zeros(1, dtype=dtype)])
    size = path.stat().st_size
    return units, size, size - whole * dtype.itemsize


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


def iter_consume_queue_file(path: Path, *, file: str | None = None, topic: str | None = None,
                            queue_id: int | None = None) -> Iterator[dict]:
    """Units of one ConsumeQueue file with their queue offsets ((file base + position)/20), up
    to the first unit with size 0 (reported as ``consumequeue/end`` with what lies after it).
    A file that is not a multiple of 20 bytes gives its whole units, then a partial-unit record."""
    path, file, topic, queue_id, base = _queue_file(path, file, topic, queue_id)
    unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
    units, size, leftover = _load_units(path, CQ_DTYPE)
    rows = units.tolist()
    for i, (offset, msg_size, tags_code) in enumerate(rows):
        position = i * unit_size
        queue_offset = (base + position) // unit_size
        if msg_size == 0:
            after = units[i + 1:]     # the units past these, in a hole, are zeros
            nonzero = int(np.count_nonzero(after["size"] != 0) if len(after) else 0)
            yield {"record_type": RT_CQ_END, "file": file, "topic": topic, "queue_id": queue_id,
                   "file_offset": position, "queue_offset": queue_offset,
                   "units_after_end": (size - leftover) // unit_size - i - 1,
                   "nonzero_units_after_end": nonzero}
            return
        yield {"record_type": RT_CQ_UNIT, "file": file, "topic": topic, "queue_id": queue_id,
               "file_offset": position, "queue_offset": queue_offset,
               "commitlog_offset": offset, "size": msg_size, "tags_code": tags_code,
               "status": _unit_status(offset, msg_size, tags_code)}
    if leftover:
        yield {"record_type": RT_CQ_PARTIAL, "file": file, "topic": topic, "queue_id": queue_id,
               "file_offset": size - leftover, "length": leftover,
               "detail": f"file size {size} is not a multiple of {unit_size}; "
                         f"the last {leftover} bytes are not a whole unit"}


def iter_batch_consume_queue_file(path: Path, *, file: str | None = None,
                                  topic: str | None = None,
                                  queue_id: int | None = None) -> Iterator[dict]:
    """Units of one BatchConsumeQueue file (46 bytes; located by msg_base_offset, not by
    position, so ``unit_index`` = (file base + position)/46 is only the slot number)."""
    path, file, topic, queue_id, base = _queue_file(path, file, topic, queue_id)
    unit_size = cq_fmt.BATCH_CQ_STORE_UNIT_SIZE
    units, size, leftover = _load_units(path, BCQ_DTYPE)
    names = BCQ_DTYPE.names
    for i, row in enumerate(units.tolist()):
        unit = dict(zip(names, row))
        position = i * unit_size
        if unit["size"] == 0:
            after = units[i + 1:]
            yield {"record_type": RT_BCQ_END, "file": file, "topic": topic, "queue_id": queue_id,
                   "file_offset": position, "unit_index": (base + position) // unit_size,
                   "units_after_end": (size - leftover) // unit_size - i - 1,
                   "nonzero_units_after_end": int(np.count_nonzero(after["size"] != 0))
                   if len(after) else 0}
            return
        valid = cq_fmt.is_valid_batch_unit(unit["commitlog_offset"], unit["size"],
                                           unit["msg_base_offset"], unit["batch_size"])
        yield {"record_type": RT_BCQ_UNIT, "file": file, "topic": topic, "queue_id": queue_id,
               "file_offset": position, "unit_index": (base + position) // unit_size, **unit,
               "status": "valid" if valid else "invalid"}
    if leftover:
        yield {"record_type": RT_BCQ_PARTIAL, "file": file, "topic": topic, "queue_id": queue_id,
               "file_offset": size - leftover, "length": leftover,
               "detail": f"file size {size} is not a multiple of {unit_size}; "
                         f"the last {leftover} bytes are not a whole unit"}


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
        units, size, leftover = _load_units(seg.path, dtype)
        if leftover:
            notes.append(f"{seg.name}: {size} bytes is not a multiple of {unit_size}")
        sizes = units["size"]
        zero = np.flatnonzero(sizes == 0)
        written = units[:zero[0]] if len(zero) else units
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
                              else (seg.base_offset + first * unit_size) // unit_size)
            last = int(np.flatnonzero(good)[-1])
            max_physic = int(offsets[last]) + int(sizes[last])
            if commitlog_end is not None:
                past_end += int(((offsets[good] + sizes[good]) > commitlog_end).sum())
        if not is_batch:
            next_offset = (seg.base_offset + len(written) * unit_size) // unit_size
        elif good.any():
            # a BatchConsumeQueue is not positional: the next offset follows the last batch
            last = int(np.flatnonzero(good)[-1])
            next_offset = int(written["msg_base_offset"][last]) + int(written["batch_size"][last])
    return {"files": len(queue.segments), "bytes": sum(s.length for s in queue.segments),
            "units": valid, "pre_blank_units": pre_blank, "invalid_units": invalid,
            "min_offset": min_offset, "max_offset": next_offset,
            "max_physic_offset": max_physic if max_physic >= 0 else None,
            "units_past_commitlog_end": past_end if commitlog_end is not None else None,
            "stray_files": [p.name for p in queue.stray_files], "notes": notes}
