"""Turning a stage into a :class:`~mqtool.repair.transaction.RepairPlan`: each staged file compared
with the store's (byte ranges, ConsumeQueue units and index entries gained or lost) and the
reason every operation is reported with."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

from .. import mapping
from ..cores import map_on_cores
from ..queue_recovery import BATCH_CONSUME_QUEUE, CONSUME_QUEUE, QueueKind
from ..formats import indexfile as idx_fmt
from ..recovery import RecoveryPlan
from ..store import Store
from .files import data_bytes, diff_ranges
from .transaction import FileOp, RepairPlan, Stage
from .index import _written_entries


def _recover_summary(rp: RecoveryPlan) -> dict:
    return {"mode": rp.mode, "broker_version": rp.broker_version,
            "process_offset": rp.process_offset, "start_file": rp.start_file,
            "messages_removed": rp.messages_lost, "commitlog_bytes_dropped": rp.bytes_dropped}


# --- turning the stage into a plan -------------------------------------------------------------------

_QUEUE_KINDS = {k.directory: k for k in (CONSUME_QUEUE, BATCH_CONSUME_QUEUE)}


def _kind_of(rel: str) -> str:
    first = rel.split("/", 1)[0]
    if first == "abort.bak":
        return "abort"
    if first in ("commitlog", "consumequeue", "batchconsumequeue", "index", "checkpoint", "abort",
                 "compaction", "config"):
        return first
    return "other"


def _cq_unit_delta(old: Path | None, new: Path | None, upf: int, ranges: list[list[int]],
                   kind: QueueKind = CONSUME_QUEUE) -> tuple[int, int]:
    """(units removed, units added) between two versions of a queue file, looking only at
    the units the changed byte ranges touch, a bounded chunk at a time (holes are not read)."""
    removed = added = 0
    unit = kind.unit_size
    limit = upf * unit
    with contextlib.ExitStack() as files:
        fa = files.enter_context(open(old, "rb")) if old is not None else None
        fb = files.enter_context(open(new, "rb")) if new is not None else None
        for lo, hi in ranges:
            first, last = lo // unit, min(hi, limit) // unit + (1 if min(hi, limit) % unit else 0)
            for start in range(first, last, mapping.QUEUE_CHUNK_UNITS):
                stop = min(last, start + mapping.QUEUE_CHUNK_UNITS)
                a = _units_between(fa, start, stop, kind)
                b = _units_between(fb, start, stop, kind)
                if a is None and b is None:
                    continue        # zeros on both sides
                a = np.zeros(stop - start, kind.dtype) if a is None else a
                b = np.zeros(stop - start, kind.dtype) if b is None else b
                changed = a != b
                removed += int((changed & kind.valid(a)).sum())
                added += int((changed & kind.valid(b)).sum())
    return removed, added


def _units_between(fh, first: int, last: int, kind: QueueKind) -> np.ndarray | None:
    """Units [first, last) of an open queue file, zeros where the file has none; None when the
    file holds none of those bytes (a hole, past its end, or no file)."""
    if fh is None or not mapping.holds_data(fh.fileno(), first * kind.unit_size,
                                            last * kind.unit_size):
        return None
    raw = bytearray((last - first) * kind.unit_size)
    data = os.pread(fh.fileno(), len(raw), first * kind.unit_size)
    raw[:len(data)] = data
    return np.frombuffer(bytes(raw), kind.dtype)


def _index_entry_delta(old: Path | None, new: Path | None, ranges: list[list[int]], slots: int,
                       entries: int) -> tuple[int, int]:
    """(entries removed, entries added): entries are appended, so what differs is what follows
    the longest common prefix, which ends at the first entry a changed byte range meets.
    ``ranges`` are :func:`diff_ranges`' (each starts at a differing byte, and its differing
    bytes lie at most 16 apart), so no entry is read."""
    counts = []
    for path in (old, new):
        if path is None:
            counts.append(0)
            continue
        with open(path, "rb") as fh:
            counts.append(_written_entries(fh, slots, entries))
    first = idx_fmt.entry_position(slots, 1)
    same = min(counts)
    for lo, hi in ranges:
        if hi > first:
            # a range reaching in from the slot table differs again within 17 bytes: entry 0
            same = min(same, (max(lo, first) - first) // idx_fmt.INDEX_ENTRY_SIZE)
            break
    return counts[0] - same, counts[1] - same


def build_plan(command: str, store: Store, stage: Stage, *, cl_ops: list[FileOp],
               extra_ops: list[FileOp], lost: list[str], notes: list[str], data_loss: bool,
               recovery: RecoveryPlan | None, options: dict, summary_extra: dict,
               index_geometry: tuple[int, int] | None = None) -> RepairPlan:
    """Compare the stage with the store: one operation per file that really changes."""
    ops: list[FileOp] = list(cl_ops)
    upf = store.cq_units_per_file
    slots, entries = index_geometry or (store.index_slots, store.index_entries)
    cq_removed = cq_added = idx_removed = idx_added = 0
    pairs = []
    for rel in sorted(stage.staged | stage.deleted):
        original = store.root / rel
        old = original if original.is_file() else None
        new = stage.path(rel) if rel in stage.staged else None
        if old is not None or new is not None:
            pairs.append((rel, old, new))
    for (rel, old, new), ranges in zip(pairs, _diff_all(pairs)):
        kind = _kind_of(rel)
        if old is not None and new is not None and not ranges:
            new.unlink()
            continue
        detail = {}
        reason = None
        if kind in _QUEUE_KINDS:
            queue_kind = _QUEUE_KINDS[kind]
            removed, added = _cq_unit_delta(
                old, new, store.bcq_units_per_file if queue_kind.batch else upf, ranges,
                queue_kind)
            cq_removed += removed
            cq_added += added
            detail = {"units_removed": removed, "units_added": added}
            if old is not None and new is not None and command != "rebuild-queues":
                reason = ("units of dispatched records written" if added and not removed else
                          "units pointing at or past the end removed" if removed and not added
                          else "units removed and written" if removed else
                          "stale bytes past the queue's end erased")
        elif kind == "index":
            removed, added = _index_entry_delta(old, new, ranges, slots, entries)
            idx_removed += removed
            idx_added += added
            detail = {"entries_removed": removed, "entries_added": added}
        old_size = old.stat().st_size if old is not None else None
        if new is None:
            ops.append(FileOp("delete", rel, kind, old_size, None, ranges,
                              _reason(kind, "delete", command), detail=detail))
        else:
            ops.append(FileOp("write", rel, kind, old_size, new.stat().st_size, ranges,
                              reason or _SERVICE_REASONS.get(rel)
                              or _reason(kind, "create" if old is None else "change", command),
                              stage_file=str(new), detail=detail))
    ops.extend(extra_ops)
    summary = {
        **_file_counts(ops),
        "cq_units_removed": cq_removed, "cq_units_added": cq_added,
        "index_entries_removed": idx_removed, "index_entries_added": idx_added,
    }
    summary.update(summary_extra)
    return RepairPlan(command, store.root, ops, summary, lost, notes, data_loss and bool(ops),
                      recovery, stage.root, options)


def _diff_all(pairs: list[tuple[str, Path | None, Path | None]]) -> list[list[list[int]]]:
    """diff_ranges of every (old, new) pair, on as many threads as cores: the reads and the
    compares release the GIL, and after a recovery dozens of queue files and an IndexFile of
    tens of MB wait to be compared while nothing else runs."""
    return map_on_cores(lambda pair: diff_ranges(pair[1], pair[2]), pairs,
                        cost=lambda pair: data_bytes(pair[1]) + data_bytes(pair[2]))


def _file_counts(ops: list[FileOp]) -> dict:
    return {"files_created": sum(1 for op in ops if op.action == "create"),
            "files_changed": sum(1 for op in ops if op.action == "change"),
            "files_deleted": sum(1 for op in ops if op.action == "delete"),
            "bytes_changed": sum(op.bytes_changed for op in ops if op.action == "change"),
            "bytes_deleted": sum(op.old_size or 0 for op in ops if op.action == "delete")}


_REASONS = {
    ("consumequeue", "delete"): "ConsumeQueue file past the recovered end",
    ("consumequeue", "create"): "new ConsumeQueue file for dispatched records",
    ("consumequeue", "change"): "ConsumeQueue units truncated / dispatched",
    ("batchconsumequeue", "delete"): "BatchConsumeQueue file past the recovered end",
    ("batchconsumequeue", "create"): "new BatchConsumeQueue file for dispatched records",
    ("batchconsumequeue", "change"): "BatchConsumeQueue units truncated / dispatched",
    ("index", "delete"): "IndexFile dropped (abnormal load, or rebuilt)",
    ("index", "create"): "IndexFile built by re-dispatch",
    ("index", "change"): "IndexFile continued / rebuilt",
    ("checkpoint", "change"): "checkpoint timestamps / confirm offset",
    ("config", "change"): "consumer / delay offsets clamped or restored from .bak "
                          "(--consumer-offsets clamp)",
    ("checkpoint", "create"): "checkpoint (the broker creates a zeroed one)",
}
# the 5.x bookkeeping files recover writes (see _stage_5x_service_files)
_SERVICE_REASONS = {
    "abort.bak": "the 5.x start copies abort here (the crashed broker's PID)",
    "compaction/position-checkpoint": "compaction position checkpoint the 5.x shutdown persists",
    "compaction/position-checkpoint.bak": "the 5.x shutdown keeps the previous compaction "
                                          "position checkpoint",
}


def _reason(kind: str, action: str, command: str) -> str:
    if command == "rebuild-queues" and kind == "consumequeue":
        return {"delete": "ConsumeQueue file not produced by the rebuild",
                "create": "ConsumeQueue file regenerated from the CommitLog",
                "change": "ConsumeQueue file regenerated from the CommitLog"}[action]
    if command == "rebuild-index" and kind == "index":
        return {"delete": "IndexFile replaced by the rebuild",
                "create": "IndexFile regenerated from the CommitLog",
                "change": "IndexFile regenerated from the CommitLog"}[action]
    return _REASONS.get((kind, action), f"{kind} {action}")
