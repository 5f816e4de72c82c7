"""Lookups through a ConsumeQueue: by queue offset and by store time (the broker's binary search
over the units), and a queue's bounds."""
from __future__ import annotations

import os

import numpy as np

from .. import codec
from ..formats import consumequeue as cq_fmt
from ..queue_recovery import BATCH_CONSUME_QUEUE, CONSUME_QUEUE, QueueKind, iter_cq_units
from ..store import ConsumeQueue, Segment, Store
from .results import Found, NotFound, QueryError, QueryResult
from ..scan.reader import RecordReader


_CQ_UNIT = codec.CQ_UNIT


# --- ConsumeQueue lookups ------------------------------------------------------------------------

def _queue(store: Store, topic: str, queue_id: int) -> ConsumeQueue:
    queue = store.queue(topic, queue_id)
    if queue is None:
        known = sorted(q.queue_id for q in store.consume_queues + store.batch_consume_queues
                       if q.topic == topic)
        if known:
            raise QueryError(f"topic {topic!r} has no queue {queue_id} (queues: "
                             f"{', '.join(map(str, known))})")
        raise QueryError(f"no ConsumeQueue for topic {topic!r} in {store.root}")
    if not queue.segments:
        raise NotFound(f"{topic}/{queue_id}: the queue directory holds no ConsumeQueue file")
    return queue


def _valid_chunks(path, units_per_file: int, kind: QueueKind = CONSUME_QUEUE):
    """``(first unit index, units)`` chunks of a queue file's units up to the first that is not
    valid (the end getMaxOffsetInQueue sees), each bounded in size: no whole file in memory."""
    for first, units in iter_cq_units(path, units_per_file, kind):
        valid = kind.valid(units)
        stop = len(units) if valid.all() else int(np.argmin(valid))
        if stop:
            yield first, units[:stop]
        if stop < len(units):
            return


def _valid_span(path, units_per_file: int, kind: QueueKind = CONSUME_QUEUE):
    """(valid units, the first, the last) of a queue file; (0, None, None) without any."""
    count, head, tail = 0, None, None
    for first, units in _valid_chunks(path, units_per_file, kind):
        head = units[0] if head is None else head
        count, tail = first + len(units), units[-1]
    return count, head, tail


def queue_bounds(store: Store, queue: ConsumeQueue) -> tuple[int | None, int]:
    """(first queue offset whose unit points into the CommitLog, next queue offset) of a queue,
    as correctMinOffset and getMaxOffsetInQueue compute them."""
    units_per_file = store.cq_units_per_file
    low = store.commitlog.min_offset
    first = None
    for seg in queue.segments:
        for start, units in _valid_chunks(seg.path, units_per_file):
            good = np.flatnonzero((units["commitlog_offset"] >= low)
                                  & (units["size"] != cq_fmt.PRE_BLANK_SIZE))
            if len(good):
                first = seg.base_offset // cq_fmt.CQ_STORE_UNIT_SIZE + start + int(good[0])
                break
        if first is not None:
            break
    last = queue.segments[-1]
    end = (last.base_offset // cq_fmt.CQ_STORE_UNIT_SIZE
           + _valid_span(last.path, units_per_file)[0])
    return first, end


def _unit_location(store: Store, queue: ConsumeQueue,
                   queue_offset: int) -> tuple[Segment | None, int]:
    """The file holding a queue offset (named floor(q*20/fileSize)*fileSize) and the unit's
    position in it."""
    file_bytes = store.cq_units_per_file * cq_fmt.CQ_STORE_UNIT_SIZE
    logical = queue_offset * cq_fmt.CQ_STORE_UNIT_SIZE
    file_start = logical - logical % file_bytes
    for seg in queue.segments:
        if seg.base_offset == file_start:
            return seg, logical - file_start
    return None, logical - file_start


# --- BatchConsumeQueue lookups -------------------------------------------------------------------

def _batch_queue(store: Store, topic: str, queue_id: int) -> ConsumeQueue | None:
    for queue in store.batch_consume_queues:
        if queue.topic == topic and queue.queue_id == queue_id:
            return queue
    return None


def query_batch_queue_offset(store: Store, queue: ConsumeQueue,
                             queue_offset: int) -> QueryResult:
    """BatchConsumeQueue.getBatchMsgIndexBuffer + getMessage: the unit whose batch holds
    ``queue_offset`` (the last file whose first msgBaseOffset is at or below it, searched from
    the newest, then the last unit there starting at or below it) and the whole record it
    points at: the broker returns the batch record, never a part of it, and continues at the
    unit's msgBaseOffset + batchSize."""
    topic, queue_id = queue.topic, queue.queue_id
    result = QueryResult({"mode": "queue-offset", "topic": topic, "queue_id": queue_id,
                          "queue_offset": queue_offset})
    upf = store.bcq_units_per_file
    files = [(seg, _valid_span(seg.path, upf, BATCH_CONSUME_QUEUE)) for seg in queue.segments]
    files = [(seg, head) for seg, (count, head, _) in files if count]
    if not files:
        raise NotFound(f"{topic}/{queue_id}: the BatchConsumeQueue holds no valid unit")
    last = _valid_span(files[-1][0].path, upf, BATCH_CONSUME_QUEUE)[2]
    first_base = int(files[0][1]["msg_base_offset"])
    end = int(last["msg_base_offset"]) + int(last["batch_size"])
    result.details["queue"] = {"min_offset": first_base, "max_offset": end,
                               "batch_consume_queue": True}
    if queue_offset >= end:
        raise NotFound(f"{topic}/{queue_id} queue offset {queue_offset} is past the queue's end "
                       f"(next offset {end})")
    seg = next((seg for seg, head in reversed(files)
                if int(head["msg_base_offset"]) <= queue_offset), None)
    if seg is None:
        raise NotFound(f"{topic}/{queue_id} queue offset {queue_offset} is below the queue's "
                       f"first unit (msgBaseOffset {first_base})")
    index, unit = _last_batch_at_or_below(seg.path, upf, queue_offset)
    phy, size = int(unit["commitlog_offset"]), int(unit["size"])
    base, batch = int(unit["msg_base_offset"]), int(unit["batch_size"])
    unit_out = {"file": store.relative(seg.path),
                "file_offset": index * cq_fmt.BATCH_CQ_STORE_UNIT_SIZE,
                "commitlog_offset": phy, "size": size, "tags_code": int(unit["tags_code"]),
                "store_timestamp": int(unit["store_timestamp"]), "msg_base_offset": base,
                "batch_size": batch, "next_offset": base + batch}
    result.details["unit"] = unit_out
    if not base <= queue_offset < base + batch:
        result.notes.append(f"queue offset {queue_offset} lies in no unit's batch: the nearest "
                            f"unit below covers [{base}, {base + batch})")
    elif queue_offset != base:
        result.notes.append(f"queue offset {queue_offset} lies inside the batch [{base}, "
                            f"{base + batch}) stored at CommitLog offset {phy}: the broker "
                            f"returns that whole record and continues at {base + batch}")
    record = _unit_record(store, result, unit_out, topic, queue_id, queue_offset, phy, size,
                          base, f"the record's QUEUEOFFSET is {{}}, the unit's msgBaseOffset "
                                f"{base}")
    result.found.append(Found(record, "batch-consume-queue"))
    return result


def _last_batch_at_or_below(path, units_per_file: int, queue_offset: int):
    """(index, unit) of the last valid unit of a BatchConsumeQueue file whose msgBaseOffset is
    at or below ``queue_offset`` (units ascend), a chunk at a time."""
    index, unit = -1, None
    for first, units in _valid_chunks(path, units_per_file, BATCH_CONSUME_QUEUE):
        k = int(np.searchsorted(units["msg_base_offset"], queue_offset, side="right"))
        if k:
            index, unit = first + k - 1, units[k - 1]
        if k < len(units):
            break
    return index, unit


def _unit_record(store: Store, result: QueryResult, unit: dict, topic: str, queue_id: int,
                 queue_offset: int, phy: int, size: int, expected_queue_offset: int,
                 queue_offset_mismatch: str):
    """The record a (Batch)ConsumeQueue unit points at, CRC checked; where the two disagree the
    result says how (``queue_offset_mismatch`` is formatted with the record's QUEUEOFFSET)."""
    with RecordReader(store.commitlog) as reader:
        record, why = reader.at(phy, check_crc=True)
    if record is None:
        raise NotFound(f"{topic}/{queue_id} queue offset {queue_offset} points at CommitLog "
                       f"offset {phy}: {why}")
    mismatches = []
    if record.topic != topic or record.queue_id != queue_id:
        mismatches.append(f"the record is in {record.topic}/{record.queue_id}")
    if record.queue_offset != expected_queue_offset:
        mismatches.append(queue_offset_mismatch.format(record.queue_offset))
    if record.total_size != size:
        mismatches.append(f"the record is {record.total_size} bytes, the unit says {size}")
    if mismatches:
        result.notes.append(f"the unit and the record disagree: {'; '.join(mismatches)}")
        unit["mismatch"] = mismatches
    return record


def query_queue_offset(store: Store, topic: str, queue_id: int, queue_offset: int) -> QueryResult:
    """The ConsumeQueue unit at ``queue_offset`` and the message it points at (on a BatchCQ
    topic: :func:`query_batch_queue_offset`)."""
    if queue_offset < 0:
        raise QueryError(f"--offset must be >= 0, got {queue_offset}")
    if store.queues_in_rocksdb:
        return query_rocksdb_queue_offset(store, topic, queue_id, queue_offset)
    if store.queue(topic, queue_id) is None:
        batch_queue = _batch_queue(store, topic, queue_id)
        if batch_queue is not None:
            return query_batch_queue_offset(store, batch_queue, queue_offset)
    queue = _queue(store, topic, queue_id)
    result = QueryResult({"mode": "queue-offset", "topic": topic, "queue_id": queue_id,
                          "queue_offset": queue_offset})
    first, end = queue_bounds(store, queue)
    result.details["queue"] = {"min_offset": first, "max_offset": end}
    seg, position = _unit_location(store, queue, queue_offset)
    if seg is None or position + cq_fmt.CQ_STORE_UNIT_SIZE > seg.length:
        raise NotFound(f"{topic}/{queue_id}: no ConsumeQueue file holds queue offset "
                       f"{queue_offset} (the queue holds {first}..{end - 1})"
                       if first is not None and end > first else
                       f"{topic}/{queue_id}: no ConsumeQueue file holds queue offset "
                       f"{queue_offset}")
    with open(seg.path, "rb") as fh:
        fh.seek(position)
        phy, size, tags_code = _CQ_UNIT.unpack(fh.read(cq_fmt.CQ_STORE_UNIT_SIZE))
    unit = {"file": store.relative(seg.path), "file_offset": position, "commitlog_offset": phy,
            "size": size, "tags_code": tags_code}
    result.details["unit"] = unit
    if cq_fmt.is_pre_blank(phy, size, tags_code):
        raise NotFound(f"{topic}/{queue_id} queue offset {queue_offset} is a pre-blank filler "
                       f"unit (0, 0x7FFFFFFF, 0): the queue starts at {first}")
    if not cq_fmt.is_valid_unit(phy, size):
        raise NotFound(f"{topic}/{queue_id} queue offset {queue_offset} is past the queue's "
                       f"end (next offset {end})" if queue_offset >= end else
                       f"{topic}/{queue_id} queue offset {queue_offset}: the unit is not valid "
                       f"(offset {phy}, size {size})")
    record = _unit_record(store, result, unit, topic, queue_id, queue_offset, phy, size,
                          queue_offset, "the record's QUEUEOFFSET is {}")
    if queue_offset < (first if first is not None else 0):
        result.notes.append(f"queue offset {queue_offset} is below the queue's minimum {first}: "
                            f"the broker no longer serves it")
    result.found.append(Found(record, "consume-queue"))
    return result


def query_rocksdb_queue_offset(store: Store, topic: str, queue_id: int,
                               queue_offset: int) -> QueryResult:
    """The unit at ``queue_offset`` of a RocksDB ConsumeQueue (5.2+) and its message, served as
    the broker serves it: only within [minOffset, maxOffset); a unit past the queue's max entry
    is stale (left by a truncation) and is shown, not served."""
    from ..rocksdb_cq import load_rocksdb_cq
    table = load_rocksdb_cq(store)
    queue = table.queue(topic, queue_id)
    if queue is None:
        known = sorted(q.queue_id for q in table.queues.values() if q.topic == topic)
        if known:
            raise QueryError(f"topic {topic!r} has no queue {queue_id} in the RocksDB "
                             f"ConsumeQueue (queues: {', '.join(map(str, known))})")
        raise QueryError(f"no queue of topic {topic!r} in the RocksDB ConsumeQueue of "
                         f"{store.root}")
    result = QueryResult({"mode": "queue-offset", "topic": topic, "queue_id": queue_id,
                          "queue_offset": queue_offset})
    first, end = queue.min_offset, queue.max_offset
    result.details["queue"] = {"min_offset": first, "max_offset": end, "source": "rocksdb"}
    unit = queue.unit(queue_offset)
    if unit is None:
        raise NotFound(f"{topic}/{queue_id}: the RocksDB ConsumeQueue holds no unit at queue "
                       f"offset {queue_offset} (the queue serves {first}..{end - 1})"
                       if end > first else f"{topic}/{queue_id}: the RocksDB ConsumeQueue "
                       f"holds no unit at queue offset {queue_offset}")
    found = {"file": f"{table.folder}/", "commitlog_offset": unit.commitlog_offset,
             "size": unit.size, "tags_code": unit.tags_code,
             "store_timestamp": unit.store_timestamp, "stale": unit.stale}
    result.details["unit"] = found
    if unit.stale:
        raise NotFound(f"{topic}/{queue_id} queue offset {queue_offset}: a stale unit past the "
                       f"queue's max entry ({end - 1}), left by a truncation; the broker does "
                       f"not serve it (it points at CommitLog {unit.commitlog_offset})")
    record = _unit_record(store, result, found, topic, queue_id, queue_offset,
                          unit.commitlog_offset, unit.size, queue_offset,
                          "the record's QUEUEOFFSET is {}")
    if queue_offset < first:
        result.notes.append(f"queue offset {queue_offset} is below the queue's minimum {first}: "
                            f"the broker no longer serves it")
    result.found.append(Found(record, "consume-queue"))
    return result


def _store_time_of(reader: RecordReader, phy: int) -> int:
    """CommitLog.pickupStoreTimestamp: -1 when no record is readable there."""
    record, _ = reader.at(int(phy))
    return record.store_timestamp if record is not None else -1


def query_queue_time(store: Store, topic: str, queue_id: int, timestamp: int) -> QueryResult:
    """ConsumeQueue.getOffsetInQueueByTime (4.9): binary search of one file for the unit whose
    message was stored at ``timestamp``, else the nearer neighbour.

    The broker picks the first file whose *mtime* is at or after the time; mtimes do not survive
    copying a store, so the first file whose last unit's message was stored at or after it is
    taken (the same file on a store that was never copied)."""
    if store.queues_in_rocksdb:
        raise QueryError(f"{topic}/{queue_id}: a lookup by time is not supported on a RocksDB "
                         f"ConsumeQueue yet (--offset is; 'mqtool dump {store.root}/consumequeue' "
                         f"lists every unit with its store time)")
    if store.queue(topic, queue_id) is None and _batch_queue(store, topic, queue_id) is not None:
        raise QueryError(f"{topic}/{queue_id} is a BatchConsumeQueue: a lookup by time is not "
                         f"supported there (--offset is)")
    queue = _queue(store, topic, queue_id)
    result = QueryResult({"mode": "queue-time", "topic": topic, "queue_id": queue_id,
                          "time": timestamp})
    first, end = queue_bounds(store, queue)
    result.details["queue"] = {"min_offset": first, "max_offset": end}
    units_per_file = store.cq_units_per_file
    min_phy = store.commitlog.min_offset
    unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
    min_logic = (first if first is not None else 0) * unit_size
    with RecordReader(store.commitlog) as reader:
        chosen, count = None, 0
        for seg in queue.segments:
            seg_count, _, seg_last = _valid_span(seg.path, units_per_file)
            if not seg_count:
                continue
            chosen, count = seg, seg_count
            last_time = _store_time_of(reader, seg_last["commitlog_offset"])
            if last_time >= timestamp:
                break
        if chosen is None:
            raise NotFound(f"{topic}/{queue_id}: the queue holds no valid unit")
        offsets = _UnitOffsets(chosen.path)     # one unit read per step of the search
        low = max(0, min_logic - chosen.base_offset)
        high = (count - 1) * unit_size
        left = right = target = -1
        left_time = right_time = -1
        while high >= low:
            mid = (low + high) // (2 * unit_size) * unit_size
            phy = offsets.at(mid)
            if phy < min_phy:
                low, left = mid + unit_size, mid
                continue
            stored = _store_time_of(reader, phy)
            if stored < 0:
                raise NotFound(f"{topic}/{queue_id}: the unit at queue offset "
                               f"{(chosen.base_offset + mid) // unit_size} points at CommitLog "
                               f"offset {phy}, where no message is readable (the broker "
                               f"answers 0)")
            if stored == timestamp:
                target = mid
                break
            if stored > timestamp:
                high, right, right_time = mid - unit_size, mid, stored
            else:
                low, left, left_time = mid + unit_size, mid, stored
        if target != -1:
            pick = target
        elif left_time == -1:
            pick = right
        elif right_time == -1:
            pick = left
        else:
            pick = right if abs(timestamp - left_time) > abs(timestamp - right_time) else left
        if pick < 0:
            raise NotFound(f"{topic}/{queue_id}: no unit of {chosen.name} points into the "
                           f"CommitLog")
        queue_offset = (chosen.base_offset + pick) // unit_size
    found = query_queue_offset(store, topic, queue_id, queue_offset)
    result.found = found.found
    result.notes += found.notes
    result.details["queue_offset"] = queue_offset
    result.details["consume_queue_file"] = store.relative(chosen.path)
    result.details["unit"] = found.details.get("unit")
    return result


class _UnitOffsets:
    """The CommitLog offsets of a ConsumeQueue file's units, read one unit at a time."""

    def __init__(self, path):
        self.path = path

    def at(self, position: int) -> int:
        with open(self.path, "rb") as fh:
            data = os.pread(fh.fileno(), cq_fmt.CQ_STORE_UNIT_SIZE, position)
        return _CQ_UNIT.unpack(data)[0]
