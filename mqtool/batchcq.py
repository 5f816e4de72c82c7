"""Checking 5.x BatchConsumeQueues (``batchconsumequeue/<topic>/<qid>/``) against the CommitLog.

Each valid 46-byte unit must point at a record of its topic and queue with the size, store
time and tagsCode it records, msgBaseOffset equal to the record's queue offset (INNER_BASE for
an inner batch) and batchSize 1 (INNER_NUM); consecutive units continue each other's offsets;
an inner batch's body must hold INNER_NUM whole inner messages (CL_INNER_BATCH).
The other way round, every dispatchable record of a BatchConsumeQueue topic below the recovered
end must have a unit: the caller's CommitLog scan collects those records' offsets."""
from __future__ import annotations

import numpy as np

from .codec import BATCH_CQ_DTYPE
from .errors import MqtoolError
from .formats import codecs
from .formats import consumequeue as cq_fmt
from .innerbatch import is_inner_batch, open_record
from .mapping import iter_units, read_units as read_mapped_units
from .scan import message_at, read_body
from .store import Store


def read_units(path, units_per_file: int | None = None) -> np.ndarray:
    """The units of one BatchConsumeQueue file up to its written end (a trailing hole is not
    read); with ``units_per_file``, only the part of the file the broker maps."""
    return read_mapped_units(path, BATCH_CQ_DTYPE, units_per_file)[0]


def iter_unit_rows(path, units_per_file: int | None = None):
    """(index, unit tuple) of :func:`read_units`' units, read a bounded chunk at a time."""
    for first, units in iter_units(path, BATCH_CQ_DTYPE, units_per_file):
        yield from enumerate(units.tolist(), first)


def check_batch_consume_queues(store: Store,
                               records: dict[tuple[str, int], list[int]] | None = None,
                               redispatch_from: int | None = None) -> list[dict]:
    """Findings (code, severity, file, offset, message, ...) of every BatchConsumeQueue.

    ``records`` maps (topic, queue id) of a BatchConsumeQueue topic to the CommitLog offsets of
    its dispatchable records (None: the records were not scanned, only units are checked).
    Records without a unit at the tail of a queue from ``redispatch_from`` on are what the
    broker's next start dispatches again: warnings, not errors."""
    findings = []
    referenced: dict[tuple[str, int], set[int]] = {}
    opened: set[int] = set()

    def add(code, rel, offset, message, severity="error", **extra):
        findings.append({"code": code, "severity": severity, "file": rel, "offset": offset,
                         "message": message, **extra})

    unit_size = cq_fmt.BATCH_CQ_STORE_UNIT_SIZE
    for queue in store.batch_consume_queues:
        expected_next = None
        seen = referenced.setdefault((queue.topic, queue.queue_id), set())
        for seg in queue.segments:
            rel = store.relative(seg.path)
            if seg.length % unit_size:
                add("BCQ_FILE_SIZE", rel, seg.length - seg.length % unit_size,
                    f"{seg.length} bytes is not a whole number of 46-byte units")
            for i, unit in iter_unit_rows(seg.path, store.bcq_units_per_file):
                offset, size, tags_code, store_ts, base, batch, _, _ = unit
                if not cq_fmt.is_valid_batch_unit(offset, size, base, batch):
                    break  # the end of the written units
                at = i * unit_size
                if expected_next is not None and base != expected_next:
                    add("BCQ_GAP", rel, at, f"unit {i} starts at queue offset {base}, the "
                        f"previous unit ends at {expected_next}", topic=queue.topic,
                        queue_id=queue.queue_id)
                expected_next = base + batch
                seen.add(offset)
                try:
                    record = message_at(store.commitlog, offset, check_crc=False)
                except MqtoolError:
                    add("BCQ_DANGLING", rel, at, f"unit {i} points at CommitLog offset {offset}, "
                        "where no record starts", commitlog_offset=offset, topic=queue.topic,
                        queue_id=queue.queue_id)
                    continue
                if is_inner_batch(record.sys_flag) and offset not in opened:
                    opened.add(offset)
                    _check_inner_batch(store, record, add, queue)
                props = record.properties
                record_says = {
                    "topic/queue": (record.topic, record.queue_id),
                    "size": record.total_size,
                    "store time": record.store_timestamp,
                    "tagsCode": codecs.tags_code(record.topic, props, record.store_timestamp),
                }
                record_says["msgBaseOffset"], record_says["batchSize"] = codecs.batch_position(
                    props, record.queue_offset)
                unit_says = {"topic/queue": (queue.topic, queue.queue_id), "size": size,
                             "store time": store_ts, "tagsCode": tags_code,
                             "msgBaseOffset": base, "batchSize": batch}
                wrong = [k for k in unit_says if unit_says[k] != record_says[k]]
                if wrong:
                    add("BCQ_MISMATCH", rel, at,
                        f"unit {i} disagrees with the record at {offset} on "
                        + ", ".join(f"{k} (unit {unit_says[k]}, record {record_says[k]})"
                                    for k in wrong),
                        commitlog_offset=offset, topic=queue.topic, queue_id=queue.queue_id)
    for (topic, queue_id), offsets in sorted((records or {}).items()):
        _missing_units(store, topic, queue_id, offsets, referenced.get((topic, queue_id), set()),
                       redispatch_from, add)
    return findings


def _check_inner_batch(store: Store, record, add, queue) -> None:
    """CL_INNER_BATCH: an inner batch a consumer cannot unwrap as its record describes it (a
    torn body, INNER_NUM or INNER_BASE disagreeing with the body or the record)."""
    problem = open_record(record, read_body(store.commitlog, record)).problem
    if problem is None:
        return
    seg = store.commitlog.segment_for(record.offset)
    add("CL_INNER_BATCH", store.relative(seg.path), record.offset - seg.base_offset,
        f"the inner batch at {record.offset}: {problem}", commitlog_offset=record.offset,
        topic=queue.topic, queue_id=queue.queue_id)


def _missing_units(store: Store, topic: str, queue_id: int, offsets: list[int],
                   referenced: set[int], redispatch_from: int | None, add) -> None:
    """One BCQ_MISSING per run of consecutive records of the queue that no unit references."""
    offsets = sorted(offsets)
    run: list[int] = []
    for offset in offsets + [None]:
        if offset is not None and offset not in referenced:
            run.append(offset)
            continue
        if run:
            seg = store.commitlog.segment_for(run[0])
            rel = store.relative(seg.path) if seg is not None else "commitlog"
            position = run[0] - seg.base_offset if seg is not None else run[0]
            what = (f"the record at {run[0]} has" if len(run) == 1 else
                    f"{len(run)} records from {run[0]} to {run[-1]} have")
            message = f"{what} no unit in BatchConsumeQueue {topic}/{queue_id}"
            redispatched = (offset is None and redispatch_from is not None
                            and run[0] >= redispatch_from)
            if redispatched:
                message += "; the broker's recovery dispatches them again"
            add("BCQ_MISSING", rel, position, message,
                severity="warning" if redispatched else "error", commitlog_offset=run[0],
                topic=topic, queue_id=queue_id, count=len(run))
            run = []
