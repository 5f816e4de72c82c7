"""ConsumeQueue and BatchConsumeQueue units as broker recovery walks them (spec §7).

``ConsumeQueue.recover`` (:func:`recover_consume_queue`) and ``truncateDirtyLogicFiles``
(:func:`truncate_dirty_logic`) for one queue, and the unit reading they share; every walk goes a
bounded chunk at a time (:mod:`mqtool.mapping`), so an oversized or sparse queue file is never
read whole. :mod:`mqtool.recovery` puts the per-queue results into the whole-store prediction.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .codec import BATCH_CQ_DTYPE, CQ_DTYPE
from .formats import consumequeue as cq_fmt
from .mapping import iter_unit_chunks, iter_units, read_units
from .store import ConsumeQueue, Store


@dataclass(frozen=True)
class QueueKind:
    """What recovery treats differently in a ConsumeQueue and a 5.x BatchConsumeQueue (whose
    recover/truncateDirtyLogicFiles are otherwise the same walk over bigger units)."""

    directory: str
    unit_size: int
    dtype: np.dtype
    batch: bool

    def valid(self, units: np.ndarray) -> np.ndarray:
        """recover's test: offset >= 0 and size > 0 (BatchCQ: msgBaseOffset >= 0 and
        batchSize > 0 too; pre-blank ConsumeQueue units pass it)."""
        ok = (units["commitlog_offset"] >= 0) & (units["size"] > 0)
        if self.batch:
            ok &= (units["msg_base_offset"] >= 0) & (units["batch_size"] > 0)
        return ok

    def max_physic(self, unit) -> int:
        """A queue's maxPhysicOffset after this unit: the end of its record, except that a
        BatchConsumeQueue keeps the record's start (maxMsgPhyOffsetInCommitLog)."""
        if self.batch:
            return int(unit["commitlog_offset"])
        return int(unit["commitlog_offset"]) + int(unit["size"])


CONSUME_QUEUE = QueueKind("consumequeue", cq_fmt.CQ_STORE_UNIT_SIZE, CQ_DTYPE, False)
BATCH_CONSUME_QUEUE = QueueKind("batchconsumequeue", cq_fmt.BATCH_CQ_STORE_UNIT_SIZE,
                                BATCH_CQ_DTYPE, True)


def read_cq_units(path, units_per_file: int | None = None,
                  kind: QueueKind = CONSUME_QUEUE) -> np.ndarray:
    """The units of one queue file up to its written end (a trailing hole is all zeros, which no
    caller counts; a trailing partial unit is ignored); with ``units_per_file``, only the part
    of the file the broker maps. Readers of a store always pass its geometry: without one, data
    at the end of a huge file would be read whole."""
    return read_units(path, kind.dtype, units_per_file)[0]  # a trailing hole is not read


def iter_cq_units(path, units_per_file: int | None = None, kind: QueueKind = CONSUME_QUEUE):
    """The units :func:`read_cq_units` returns, as ``(first unit index, units)`` chunks of bounded
    size that follow each other without a gap (:func:`mapping.iter_units`)."""
    return iter_units(path, kind.dtype, units_per_file)


def _first_false(flags: np.ndarray) -> int | None:
    return None if flags.all() else int(np.argmin(flags))


def scan_valid_prefix(path, units_per_file: int | None = None,
                      kind: QueueKind = CONSUME_QUEUE) -> tuple[int, int, object]:
    """(units read, leading units that pass recover's test, the last of those or None) of one
    queue file, a chunk at a time."""
    count, last = 0, None
    for first, units in iter_cq_units(path, units_per_file, kind):
        count = first + len(units)
        stop = _first_false(kind.valid(units))
        if stop is None:
            last = units[-1]
            continue
        if stop:
            last = units[stop - 1]
        return count, first + stop, last
    return count, count, last


def count_valid(path, units_per_file: int | None = None, kind: QueueKind = CONSUME_QUEUE,
                start: int = 0) -> int:
    """Units from index ``start`` on that pass recover's test, wherever they lie."""
    found = 0
    for first, units in iter_cq_units(path, units_per_file, kind):
        if first + len(units) > start:
            found += int(kind.valid(units[max(0, start - first):]).sum())
    return found


def units_past_mapped_size(path, units_per_file: int, kind: QueueKind = CONSUME_QUEUE) -> int:
    """Non-zero units of an oversized queue file past the ``units_per_file`` the broker maps
    (data it never reads), counted a bounded chunk at a time: holes are skipped, so a 2 GiB
    sparse file costs only its written parts' reads."""
    _, chunks = iter_unit_chunks(path, kind.dtype, first_unit=units_per_file)
    found = 0
    for _, units in chunks:
        found += int(np.count_nonzero(units.view(np.uint8).reshape(len(units), -1).any(axis=1)))
    return found


# --- ConsumeQueue recovery and truncation ----------------------------------------------------------

@dataclass
class QueueRecovery:
    """ConsumeQueue.recover for one queue."""

    topic: str
    queue_id: int
    max_physic_offset: int      # -1: no valid unit in the files recover looks at
    valid_end: int              # logical unit index one past the last valid unit
    dropped_units: int = 0      # valid-looking units after the first invalid one (recover drops them)
    kind: str = CONSUME_QUEUE.directory


def recover_consume_queue(queue: ConsumeQueue, units_per_file: int,
                          kind: QueueKind = CONSUME_QUEUE) -> QueueRecovery:
    segments = queue.segments
    result = QueueRecovery(queue.topic, queue.queue_id, -1, 0, kind=kind.directory)
    if not segments:
        return result
    index = max(0, len(segments) - 3)
    result.valid_end = segments[index].base_offset // kind.unit_size
    while index < len(segments):
        seg = segments[index]
        count, n, last = scan_valid_prefix(seg.path, units_per_file, kind)
        if n:
            result.max_physic_offset = kind.max_physic(last)
            result.valid_end = seg.base_offset // kind.unit_size + n
        if n == units_per_file and count == units_per_file:
            index += 1
            continue
        result.dropped_units += count_valid(seg.path, units_per_file, kind, start=n)
        for later in segments[index + 1:]:
            result.dropped_units += count_valid(later.path, units_per_file, kind)
        break
    return result


@dataclass
class QueueTruncation:
    """truncateDirtyLogicFiles(processOffset) for one queue."""

    topic: str
    queue_id: int
    units: int                  # valid units removed
    first_queue_offset: int     # queue offset of the first removed unit
    files_deleted: list[str] = field(default_factory=list)
    new_end: int = 0            # logical unit index the queue ends at afterwards
    max_physic_offset: int = 0  # the queue's maxPhysicOffset afterwards
    kind: str = CONSUME_QUEUE.directory


def truncate_dirty_logic(queue: ConsumeQueue, process_offset: int, units_per_file: int,
                         kind: QueueKind = CONSUME_QUEUE) -> QueueTruncation:
    segments = list(queue.segments)
    # the BatchConsumeQueue starts from the last offset it may keep, the ConsumeQueue from the end
    start_max = process_offset - 1 if kind.batch else process_offset
    result = QueueTruncation(queue.topic, queue.queue_id, 0, 0, max_physic_offset=start_max,
                             kind=kind.directory)
    first_removed = None
    while segments:
        seg = segments[-1]
        base_unit = seg.base_offset // kind.unit_size
        count, whole, cut, end, kept_last = _dirty_cut(seg.path, process_offset,
                                                       units_per_file, kind)
        if count == 0:
            # the broker maps a full-size file: an empty one reads as unit 0 = (0, 0, 0)
            result.new_end = base_unit + 1
            result.max_physic_offset = 0
            break
        if whole:
            result.units += end
            first_removed = base_unit
            result.files_deleted.append(seg.name)
            segments.pop()
            continue
        result.max_physic_offset = kind.max_physic(kept_last)
        if end > cut:
            result.units += end - cut
            first_removed = base_unit + cut
        result.new_end = base_unit + cut
        break
    result.first_queue_offset = first_removed if first_removed is not None else result.new_end
    return result


def _dirty_cut(path, process_offset: int, units_per_file: int, kind: QueueKind):
    """truncateDirtyLogicFiles over one file, a chunk at a time: (units read, whether unit 0
    already reaches ``process_offset`` so the whole file goes, the first unit cut, one past the
    last valid unit cut, the last unit kept). Unit 0 is kept without the validity test, the
    rest while valid and below the offset; a whole file's removal counts its valid prefix."""
    count, whole, cut, end, kept_last = 0, False, None, None, None
    for first, units in iter_cq_units(path, units_per_file, kind):
        count = first + len(units)
        valid = kind.valid(units)
        rest = 0                      # where the search for the end of the cut starts
        if first == 0 and units["commitlog_offset"][0] >= process_offset:
            whole, cut = True, 0
        if cut is None:
            keep = valid & (units["commitlog_offset"] < process_offset)
            if first == 0:
                keep[0] = True
            stop = _first_false(keep)
            if stop is None:
                kept_last = units[-1]
                continue
            if stop:
                kept_last = units[stop - 1]
            cut, rest = first + stop, stop
        stop = _first_false(valid[rest:])
        if stop is not None:
            end = first + rest + stop
            break
    if cut is None:
        cut = count
    return count, whole, cut, count if end is None else end, kept_last


def queue_kinds(store: Store) -> list[tuple[QueueKind, list[ConsumeQueue], int]]:
    """(kind, queues, units per file) of the ConsumeQueues and the BatchConsumeQueues."""
    return [(CONSUME_QUEUE, store.consume_queues, store.cq_units_per_file),
            (BATCH_CONSUME_QUEUE, store.batch_consume_queues, store.bcq_units_per_file)]
