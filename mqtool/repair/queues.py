"""ConsumeQueues in a repair: the broker's queue recovery and truncation on staged copies, files of
the wrong size, queues with holes, and settling the writers' queues at their recovered ends."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..queue_recovery import (CONSUME_QUEUE, QueueKind, QueueRecovery, QueueTruncation,
                              queue_kinds, truncate_dirty_logic)
from ..recovery import deleted_on_load
from ..store import ConsumeQueue, Segment, Store
from .files import data_end, _queue_rel, _store_queues
from .transaction import Stage
from .writers import StagedBatchConsumeQueueWriter, StagedConsumeQueueWriter, _StagedQueueFiles


def _queue_view(stage: Stage, store: Store, topic: str, queue_id: int,
                kind: QueueKind = CONSUME_QUEUE) -> ConsumeQueue:
    """The queue's files as they stand in the stage (originals not deleted, plus staged ones)."""
    names = set()
    original = next((q for q in _store_queues(store, kind)
                     if q.topic == topic and q.queue_id == queue_id), None)
    if original is not None:
        names.update(s.name for s in original.segments)
    staged_dir = stage.path(f"{kind.directory}/{topic}/{queue_id}")
    if staged_dir.is_dir():
        names.update(p.name for p in staged_dir.iterdir() if p.is_file())
    segments = []
    for name in sorted(names, key=int):
        current = stage.current(_queue_rel(topic, queue_id, name, kind))
        if current is not None:
            segments.append(Segment(current, int(name), current.stat().st_size))
    directory = (original.directory if original is not None
                 else store.root / kind.directory / topic / str(queue_id))
    return ConsumeQueue(topic, queue_id, directory, segments)


def _delete_queue_files_after(stage: Stage, view: ConsumeQueue, end_units: int,
                              keep_equal: bool, kind: QueueKind = CONSUME_QUEUE) -> None:
    """Queue files past a queue's end. The broker's truncateDirtyFiles keeps a file that
    starts exactly at the end (write position 0); ``keep_equal=False`` deletes it too."""
    end = end_units * kind.unit_size
    for seg in view.segments:
        if seg.base_offset > end or (seg.base_offset == end and not keep_equal):
            stage.delete(_queue_rel(view.topic, view.queue_id, seg.name, kind))


def _zero_queue_tail(stage: Stage, view: ConsumeQueue, end_units: int, file_size: int,
                     kind: QueueKind = CONSUME_QUEUE) -> None:
    """Erase units at or past the queue's end in the file holding it."""
    end = end_units * kind.unit_size
    for seg in view.segments:
        if seg.base_offset < end < seg.base_offset + file_size or (
                seg.base_offset == end and end_units == 0):
            rel = _queue_rel(view.topic, view.queue_id, seg.name, kind)
            source = stage.current(rel)
            if source is None:
                continue
            cut = end - seg.base_offset
            if data_end(source, cut) <= cut:
                continue
            path = stage.copy_in(rel)
            with open(path, "r+b") as fh:
                # cut and grown back: the tail reads as zeros and stays a hole (not 6 MB written)
                size = os.fstat(fh.fileno()).st_size
                fh.truncate(cut)
                fh.truncate(size)


def _fix_queue_file_sizes(stage: Stage, store: Store, version: str, notes: list[str]) -> None:
    """A queue file of the wrong size makes the broker refuse to load; pad or cut it (an empty
    last file, which 5.1.3+ deletes on load, is deleted as it does)."""
    for kind, queues, upf in queue_kinds(store):
        _fix_file_sizes(stage, kind, queues, upf * kind.unit_size, version, notes)


def _fix_file_sizes(stage: Stage, kind: QueueKind, queues: list[ConsumeQueue], size: int,
                    version: str, notes: list[str]) -> None:
    for queue in queues:
        for seg in queue.segments:
            if seg.length != size:
                rel = _queue_rel(queue.topic, queue.queue_id, seg.name, kind)
                if deleted_on_load(queue.segments, seg, version):
                    stage.delete(rel)
                    notes.append(f"{rel}: empty last file deleted, as 5.1.3+ does on load")
                    continue
                path = stage.copy_in(rel)
                with open(path, "r+b") as fh:
                    fh.truncate(size)
                notes.append(f"{rel}: {seg.length} bytes resized to {size} (the broker refuses to "
                             "load a queue file of another size)")


def queues_with_holes(store: Store) -> list[tuple[str, int, str]]:
    """Queues whose files show that some are missing: a queue directory without files, missing
    names between the first and the last file, or a first file past 0 while no CommitLog file
    has expired yet. The broker never regenerates such files."""
    size = store.cq_units_per_file * CONSUME_QUEUE.unit_size
    found = []
    nothing_expired = bool(store.commitlog.segments) and store.commitlog.min_offset == 0
    for queue in store.consume_queues:
        bases = [s.base_offset for s in queue.segments]
        if not bases:
            found.append((queue.topic, queue.queue_id, "the queue directory holds no file"))
        elif any(b - a != size for a, b in zip(bases, bases[1:])):
            found.append((queue.topic, queue.queue_id, "files are missing between its first "
                                                       "and last file"))
        elif bases[0] > 0 and nothing_expired:
            found.append((queue.topic, queue.queue_id,
                          f"its first file starts at {bases[0]:,} although no CommitLog file "
                          "has expired"))
    return found


# --- the recovered state of the queues ---------------------------------------------------------------

@dataclass
class QueueState:
    end: int                 # logical unit index of the write position
    max_physic: int
    has_files: bool


def _apply_queue_recoveries(stage: Stage, store: Store, recoveries: list[QueueRecovery],
                            kind: QueueKind = CONSUME_QUEUE) -> dict:
    """``ConsumeQueue.recover``'s decisions applied to the stage: the results of
    :func:`mqtool.recovery.recover_queues` (one :class:`QueueRecovery` per queue of the store),
    whose files past the valid end are deleted, as the broker's ``truncateDirtyFiles`` does at the
    end of ``recover`` (a file starting exactly there stays, at write position 0). Returns the
    states of the queues that have files in the stage.

    The recoveries were made on the queues as loaded (:func:`mqtool.recovery.load_files`); the
    staged views hold the same files (the empty last file 5.1.3+ deletes on load is deleted from
    the stage too) and the same units (a file resized by :func:`_fix_queue_file_sizes` holds the
    units the broker maps, padded with zeros that no recovery counts)."""
    decided = {(r.topic, r.queue_id): r for r in recoveries if r.kind == kind.directory}
    states: dict[tuple[str, int], QueueState] = {}
    for queue in _store_queues(store, kind):
        view = _queue_view(stage, store, queue.topic, queue.queue_id, kind)
        if not view.segments:
            continue
        qr = decided[(queue.topic, queue.queue_id)]
        _delete_queue_files_after(stage, view, qr.valid_end, keep_equal=True, kind=kind)
        remaining = [s for s in view.segments if s.base_offset <= qr.valid_end * kind.unit_size]
        states[(queue.topic, queue.queue_id)] = QueueState(qr.valid_end, qr.max_physic_offset,
                                                           bool(remaining))
    return states


def _truncate_queues(stage: Stage, store: Store, upf: int, offset: int,
                     states: dict, kind: QueueKind = CONSUME_QUEUE,
                     decided: list[QueueTruncation] | None = None) -> int:
    """truncateDirtyLogicFiles(offset) on every queue; returns the units removed. ``decided``:
    the truncations :func:`mqtool.recovery.truncate_dirty_logic_files` made on the queues as
    recover leaves them (the staged views), applied instead of walking the queues again."""
    decisions = ({(t.topic, t.queue_id): t for t in decided if t.kind == kind.directory}
                 if decided is not None else None)
    removed = 0
    for key in list(states):
        topic, queue_id = key
        view = _queue_view(stage, store, topic, queue_id, kind)
        if not view.segments:
            states[key] = QueueState(0, offset, False)
            continue
        t = (decisions[key] if decisions is not None
             else truncate_dirty_logic(view, offset, upf, kind))
        removed += t.units
        for name in t.files_deleted:
            stage.delete(_queue_rel(topic, queue_id, name, kind))
        left = len(view.segments) > len(t.files_deleted)
        states[key] = QueueState(t.new_end if left else 0, t.max_physic_offset, left)
    return removed


def _queue_keys(stage: Stage, store: Store, extra, kind: QueueKind = CONSUME_QUEUE) -> set:
    keys = {(q.topic, q.queue_id) for q in _store_queues(store, kind)}
    keys.update(extra)
    return keys


def _finish_queues(stage: Stage, store: Store, upf: int, ends: dict[tuple[str, int], int],
                   keep_stale: bool, kind: QueueKind = CONSUME_QUEUE) -> None:
    """Default mode: nothing valid-looking stays past a queue's end (zeroed units, no files)."""
    if keep_stale:
        return
    for (topic, queue_id), end in ends.items():
        view = _queue_view(stage, store, topic, queue_id, kind)
        if not view.segments:
            continue
        _delete_queue_files_after(stage, view, end, keep_equal=False, kind=kind)
        view = _queue_view(stage, store, topic, queue_id, kind)
        _zero_queue_tail(stage, view, end, upf * kind.unit_size, kind)


def _seed_writers(cq_writer: StagedConsumeQueueWriter, states: dict,
                  bcq_writer: StagedBatchConsumeQueueWriter, batch_states: dict) -> None:
    for writer, kind_states in ((cq_writer, states), (bcq_writer, batch_states)):
        for (topic, queue_id), st in kind_states.items():
            writer.seed(topic, queue_id, st.end if st.has_files else None, st.max_physic)


def _settle_queues(stage: Stage, store: Store, writer: _StagedQueueFiles, states: dict,
                   upf: int, truncate_at: int | None, keep_stale: bool) -> None:
    """After the dispatch: the writer's files join the stage, truncateDirtyLogicFiles runs at
    ``truncate_at`` (None: not now), and by default nothing valid-looking stays past an end."""
    kind = writer.kind
    writer.close()
    ends = {key: st.end for key, st in states.items()}
    for key in writer.queue_keys():
        state = writer.state(*key)
        if state["write_pos"] is not None:
            ends[key] = state["write_pos"] // kind.unit_size
    for topic, queue_id in writer.touched:
        for path in stage.path(f"{kind.directory}/{topic}/{queue_id}").glob("*"):
            stage.mark_written(_queue_rel(topic, queue_id, path.name, kind))
    if truncate_at is not None:
        # not the prediction's truncation (truncate_dirty_logic_files): this one runs after the
        # dispatch, on the units it wrote, as the broker's abnormal and 5.3.2+ recovery do, so
        # the queues are walked here
        truncated = {key: QueueState(ends.get(key, 0), 0, True)
                     for key in _queue_keys(stage, store, writer.touched, kind)}
        _truncate_queues(stage, store, upf, truncate_at, truncated, kind)
        ends = {key: st.end for key, st in truncated.items()}
    _finish_queues(stage, store, upf, ends, keep_stale, kind)
