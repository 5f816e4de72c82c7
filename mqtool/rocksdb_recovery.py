"""What the broker's next start does to a RocksDB ConsumeQueue (5.2-5.3.3, storeType=defaultRocksDB),
unit by unit, and the cross-check of every unit against the record it points at.

The CommitLog side of the start (which file it starts from: the one holding the CQ checkpoint;
processOffset; the files it deletes) is :func:`mqtool.recovery.predict_recovery`. Here: the
units the start leaves in each queue, which is the units the database holds up to processOffset
(a truncation moves a queue's max entry back and leaves the units past it, stale) overwritten by
the units the start dispatches again (every record from the start file on after a crash; those
past the CQ checkpoint after a clean stop), computed by the one offline dispatch
(:func:`mqtool.reput.dispatching.dispatch`).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .formats import codecs
from .scan.reader import RecordReader
from .recovery import RecoveryPlan
from .reput.dispatching import dispatch
from .rocksdb_cq import RocksConsumeQueue, load_rocksdb_cq
from .store import Store

#: (queueOffset, commitLogOffset, size, tagsCode) of one unit
Unit = tuple[int, int, int, int]


class UnitSink:
    """The ConsumeQueue writer of a dispatch whose units go nowhere (``recover`` on a RocksDB
    store: the index is rebuilt, RocksDB is left to the broker)."""

    def state(self, topic: str, queue_id: int) -> dict:
        return {"max_physic": -1, "write_pos": None}

    def put_run(self, topic, queue_id, offsets, sizes, codes, queue_offsets) -> int:
        return len(offsets)


class _UnitCollector:
    """Takes the units the dispatch makes (the RocksDB CQ writes every unit it is given: a
    repeated one overwrites its key with the same value)."""

    def __init__(self):
        self.units: dict[tuple[str, int], dict[int, Unit]] = {}

    def state(self, topic: str, queue_id: int) -> dict:
        return {"max_physic": -1, "write_pos": None}

    def put_run(self, topic, queue_id, offsets, sizes, codes, queue_offsets) -> int:
        queue = self.units.setdefault((topic, int(queue_id)), {})
        for phy, size, code, qoff in zip(np.asarray(offsets).tolist(), np.asarray(sizes).tolist(),
                                         np.asarray(codes).tolist(),
                                         np.asarray(queue_offsets).tolist()):
            queue[int(qoff)] = (int(qoff), int(phy), int(size), int(code))
        return len(offsets)


@dataclass
class RocksRecovery:
    """The RocksDB ConsumeQueue after the start: served units per queue, the units the start
    leaves stale, and how many units it dispatched again."""

    process_offset: int
    redispatch_from: int | None
    queues: dict[tuple[str, int], list[Unit]] = field(default_factory=dict)
    stale: dict[tuple[str, int], list[Unit]] = field(default_factory=dict)
    redispatched: int = 0
    checkpoint_after: int = 0

    @property
    def units(self) -> int:
        return sum(len(u) for u in self.queues.values())

    @property
    def stale_units(self) -> int:
        return sum(len(u) for u in self.stale.values())

    def summary(self) -> dict:
        return {"units_after_start": self.units, "redispatched_units": self.redispatched,
                "redispatch_from": self.redispatch_from, "stale_units_after_start":
                self.stale_units, "cq_checkpoint_after_start": self.checkpoint_after,
                "queues_with_stale_units": sorted(f"{t}-{q}" for (t, q), u in self.stale.items()
                                                  if u)}


def predict_rocksdb_units(store: Store, plan: RecoveryPlan, progress=None) -> RocksRecovery:
    """The units each queue of the store's RocksDB ConsumeQueue holds after the start ``plan``
    predicts."""
    table = load_rocksdb_cq(store)
    end = plan.process_offset
    result = RocksRecovery(end, plan.redispatch_from, checkpoint_after=end)
    kept: dict[tuple[str, int], dict[int, Unit]] = {}
    for key, queue in table.queues.items():
        units = kept.setdefault(key, {})
        for u in queue.served:
            unit = (u.queue_offset, u.commitlog_offset, u.size, u.tags_code)
            if u.commitlog_offset + u.size <= end or not plan.cq_truncate_called:
                units[u.queue_offset] = unit
            else:
                result.stale.setdefault(key, []).append(unit)
        for u in queue.stale:
            result.stale.setdefault(key, []).append((u.queue_offset, u.commitlog_offset,
                                                     u.size, u.tags_code))
    if plan.redispatch_from is not None and plan.redispatch_from < end:
        collector = _UnitCollector()
        dispatch(store, plan.redispatch_from, end, cq=collector, cq_from=plan.redispatch_from,
                 index=None, index_from=end, progress=progress)
        for key, units in collector.units.items():
            kept.setdefault(key, {}).update(units)
            result.redispatched += len(units)
            if key in result.stale:   # a re-dispatched unit is served again
                result.stale[key] = [u for u in result.stale[key] if u[0] not in units]
    for key, units in kept.items():
        if units:
            result.queues[key] = [units[q] for q in sorted(units)]
    # a unit is stale when no served unit holds its queue offset any more
    result.stale = {key: sorted(u for u in units if u[0] not in kept.get(key, {}))
                    for key, units in result.stale.items()}
    result.stale = {k: v for k, v in result.stale.items() if v}
    return result


# --- every unit against its record -----------------------------------------------------------------

@dataclass(frozen=True)
class UnitProblem:
    code: str            # CQ_DANGLING | CQ_MISMATCH
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    message: str


def cross_check_units(store: Store, table: RocksConsumeQueue) -> tuple[int, list[UnitProblem]]:
    """(units checked, problems) of every served unit: a record must start at its CommitLog
    offset, of its size, in its topic and queue at its queue offset, stored at its store time,
    with its tagsCode (the TAGS hash, or the delivery time of a delay message)."""
    problems = []
    checked = 0
    with RecordReader(store.commitlog) as reader:
        for queue in table.sorted_queues():
            for u in queue.served:
                checked += 1
                record, why = reader.at(u.commitlog_offset, check_crc=False)
                where = (f"{queue.topic!r} queue {queue.queue_id} unit at queue offset "
                         f"{u.queue_offset} (CommitLog {u.commitlog_offset})")
                if record is None:
                    problems.append(UnitProblem("CQ_DANGLING", queue.topic, queue.queue_id,
                                                u.queue_offset, u.commitlog_offset,
                                                f"{where}: no record there ({why})"))
                    continue
                found = []
                if (record.topic, record.queue_id) != (queue.topic, queue.queue_id):
                    found.append(f"the record is in {record.topic!r} queue {record.queue_id}")
                if record.queue_offset != u.queue_offset:
                    found.append(f"its QUEUEOFFSET is {record.queue_offset}")
                if record.total_size != u.size:
                    found.append(f"it is {record.total_size} bytes, the unit says {u.size}")
                if record.store_timestamp != u.store_timestamp:
                    found.append(f"it was stored at {record.store_timestamp}, the unit says "
                                 f"{u.store_timestamp}")
                tags = codecs.tags_code(record.topic, record.properties, record.store_timestamp)
                if tags != u.tags_code:
                    found.append(f"its tagsCode is {tags}, the unit says {u.tags_code}")
                if found:
                    problems.append(UnitProblem("CQ_MISMATCH", queue.topic, queue.queue_id,
                                                u.queue_offset, u.commitlog_offset,
                                                f"{where}: {'; '.join(found)}"))
    return checked, problems


def check_rocksdb_cq(store: Store, plan: RecoveryPlan, progress=None) -> list[dict]:
    """verify's findings about a RocksDB ConsumeQueue (dicts with code, severity, file, offset,
    message and where known commitlog_offset, topic, queue_id, count), and ``plan.rocksdb``
    filled with what the start leaves: every served unit checked against its record; the
    dispatchable records below where the start dispatches again that no unit serves; units
    that do not decode."""
    from .vocabulary import ERROR, INFO, WARNING
    table = load_rocksdb_cq(store)
    folder = f"{table.folder}/"
    findings = []
    for problem in table.problems:
        findings.append({"code": "CQ_MISMATCH", "severity": ERROR, "file": folder, "offset": 0,
                         "message": f"{problem}: the broker cannot read this entry"})
    _, problems = cross_check_units(store, table)
    for p in problems:
        past = p.commitlog_offset >= plan.process_offset and plan.cq_truncate_called
        findings.append({"code": p.code, "severity": WARNING if past else ERROR, "file": folder,
                         "offset": 0, "message": p.message + ("; past processOffset: the "
                         "start's truncation leaves it stale" if past else ""),
                         "commitlog_offset": p.commitlog_offset, "topic": p.topic,
                         "queue_id": p.queue_id})
    # records the queues never serve: below the re-dispatch start and without a unit
    low = store.commitlog.min_offset
    high = min(plan.redispatch_from if plan.redispatch_from is not None else plan.process_offset,
               plan.process_offset)
    if high > low:
        collector = _UnitCollector()
        dispatch(store, low, high, cq=collector, cq_from=low, index=None, index_from=high,
                 progress=progress)
        for (topic, queue_id), units in sorted(collector.units.items()):
            queue = table.queue(topic, queue_id)
            have = {(u.queue_offset, u.commitlog_offset) for u in queue.served} if queue else set()
            missing = sorted(u for u in units.values() if (u[0], u[1]) not in have)
            if missing:
                findings.append({
                    "code": "CQ_MISSING", "severity": ERROR, "file": folder, "offset": 0,
                    "message": f"{len(missing)} record(s) of {topic!r} queue {queue_id} (queue "
                               f"offsets {missing[0][0]}..{missing[-1][0]}, CommitLog "
                               f"{missing[0][1]}..{missing[-1][1]}) have no unit in the RocksDB "
                               f"ConsumeQueue, and the start dispatches again only from {high}",
                    "commitlog_offset": missing[0][1], "topic": topic, "queue_id": queue_id,
                    "count": len(missing)})
    after = predict_rocksdb_units(store, plan, progress)
    plan.rocksdb = {"checkpoint": table.checkpoint, "units_now": table.unit_count,
                    "stale_units_now": table.stale_count, **after.summary()}
    findings.append({
        "code": "ROCKSDB_PRESENT", "severity": INFO, "file": folder, "offset": 0,
        "message": f"the start dispatches {after.redispatched:,} unit(s) again from CommitLog "
                   f"{plan.redispatch_from if plan.redispatch_from is not None else '-'} and "
                   f"leaves {after.units:,} served unit(s), {after.stale_units:,} stale past "
                   f"their queue's max entry, and the CQ checkpoint at {after.checkpoint_after:,}"})
    return findings


# --- export to file ConsumeQueues (rebuild-queues --out on a RocksDB store) -----------------------

def export_file_queues(store: Store, out: Path, *, units_per_file: int | None = None,
                       progress=None) -> dict:
    """Write the units each queue holds after the broker's next start (what
    :func:`predict_rocksdb_units` predicts) as file ConsumeQueues under ``out``
    (``out/<topic>/<queueId>/<20-digit>``, the broker's names, pre-blank units where a queue does
    not start at 0): a ``consumequeue/`` for an operator moving the store back to the file
    ConsumeQueue. ``out`` must be a new or empty folder outside the store; the store is only
    read."""
    from .errors import MqtoolError
    from .formats import consumequeue as cq_fmt
    from .recovery import predict_recovery
    from .writer.queues import ConsumeQueueWriter
    out = Path(out).absolute()
    root = store.root.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MqtoolError(f"--out {out}: exists and is not an empty folder")
    if out.resolve() == root or root in out.resolve().parents:
        raise MqtoolError("--out must be outside the store")
    plan = predict_recovery(store, progress=progress)
    after = predict_rocksdb_units(store, plan, progress)
    upf = units_per_file or cq_fmt.DEFAULT_CQ_UNITS_PER_FILE
    # built under a hidden sibling and renamed when whole, as every --out copy is: a killed or
    # failed export leaves no half-made folder under the name the operator asked for
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.mqtool-partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        writer = ConsumeQueueWriter(partial, upf)
        try:
            for (topic, queue_id), units in sorted(after.queues.items()):
                array = np.array(units, dtype=np.int64).reshape(-1, 4)
                writer.put_run(topic, queue_id, array[:, 1], array[:, 2], array[:, 3],
                               array[:, 0])
        finally:
            writer.close()
        if out.exists():
            out.rmdir()   # checked empty above
        os.rename(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return {"out": str(out), "queues": len(after.queues), "units": after.units,
            "units_per_file": upf, "process_offset": plan.process_offset,
            "redispatched_units": after.redispatched, "stale_units_left_out": after.stale_units,
            "start_file": plan.start_file}


def next_start_after_recover(store: Store, plan: RecoveryPlan) -> str:
    """One sentence: what the broker's next start does to the RocksDB ConsumeQueue that
    ``recover`` leaves as it is. recover cuts the CommitLog at processOffset (zeros after it) and
    keeps an abort file, so that start takes the same branch as ``plan``: after a crash the
    abnormal one, from the newest file whose first record is at or before the CQ checkpoint,
    dispatching every record from there to processOffset into RocksDB."""
    table = load_rocksdb_cq(store)
    after = predict_rocksdb_units(store, plan)
    checkpoint = table.checkpoint if table.checkpoint is not None else 0
    stale = (f"; its truncation at {plan.process_offset:,} leaves {after.stale_units:,} unit(s) "
             f"of {len(after.stale)} queue(s) stale past their max entry"
             if after.stale else "; no unit becomes stale")
    keep = ("the abort file stays, so that the start is an abnormal one again: "
            if plan.mode == "abnormal" else "")
    return (f"the RocksDB ConsumeQueue ({table.folder}/, CQ checkpoint {checkpoint:,}) is left "
            f"for the broker's next start; {keep}it starts at commitlog/{plan.start_file} and "
            f"dispatches {after.redispatched:,} unit(s) from "
            f"{plan.redispatch_from if plan.redispatch_from is not None else '-'} to "
            f"processOffset {plan.process_offset:,}{stale}, leaving {after.units:,} units "
            f"served and the CQ checkpoint at {after.checkpoint_after:,}")
