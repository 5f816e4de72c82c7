"""``recover`` and ``truncate`` on a DLedger-mode store: what the 4.9.8 broker's next start leaves
on disk, and the ledger cut at an entry.

An upgraded store (plain ``commitlog/`` below dividedCommitlogOffset) is recovered the same way:
once DLedger data files exist, ``DLedgerCommitLog.recover`` runs DLedger's recovery alone and
leaves the plain files as they are (the broker recovers those only on its first DLedger start,
which writes the first data file). Truncate cuts only the DLedger part of such a store.

The prediction is :func:`mqtool.dledger.predict_dledger_recovery` (through
:func:`mqtool.recovery.predict_recovery`); this module stages its end state for the shared repair
machinery (plan, backup, apply, undo):

* data files starting past the end of the log are deleted;
* the DLedger index units DLedger rewrites (from the first unit that disagrees with its entry)
  are rewritten;
* beyond the broker, as recover does on a plain store (``--keep-stale`` leaves all three as the
  broker does): the bytes of the cut data file past the end are erased, the index units past the
  last entry erased, and IndexFiles holding entries at or past the end rebuilt under their own
  names without them;
* ConsumeQueues: the broker's ``recover`` and, when they reach past the end, its
  ``truncateDirtyLogicFiles``; by default units past a queue's end are erased (``--keep-stale``
  leaves them, as the broker does);
* IndexFiles an abnormal start deletes are deleted and, as in DLedger mode, not rebuilt;
* ``abort`` is removed; the DLedger ``checkpoint`` (and ``checkpoint.bak``) say committedIndex =
  endIndex = the last entry, and ``currterm.bak`` holds currterm's text, as a single-peer group
  leaves them once its only peer is leader again (the reference stores). Nothing is dispatched
  and the RocketMQ checkpoint is not touched.

Where the broker would not start (the end of the log more than one data file before the last
one), recover refuses; ``truncate`` cuts the log there (or at an earlier entry) instead.

truncate (:func:`resolve_dledger_cut`, :func:`stage_dledger_truncate`, driven by
:func:`mqtool.repair.planners.plan_truncate`): the cut is an entry boundary; data files past it
are deleted and the rest of the cut file erased (DLedger's walk would otherwise accept the old
entries again on the next start), the cut entries' index units erased, units of kept entries
that disagree rewritten, and the DLedger checkpoint's endIndex set to the last entry kept.
"""
from __future__ import annotations

from ..dledger import _MIN_ENTRY_SIZE_EXCLUSIVE, walk_ledger
from ..formats import dledger as dl_fmt
from ..recovery import predict_recovery
from ..reput.dispatching import _dispatch_with_bar
from ..scan import MessageRecord, entry_header_at, scan_buffer
from ..store import MappedFile, Store, properties_int
from ..writer import dledger_index_unit_bytes
from .bookkeeping import _abort_op, _stage_bytes
from .changes import _recover_summary, build_plan
from .commitlog import _commitlog_ops
from .files import data_end
from .index import _finish_index, _setup_index
from .queues import _apply_queue_recoveries, _finish_queues, _truncate_queues
from .transaction import RepairError


def plan_dledger_recover(store: Store, stage, *, mode: str = "auto", keep_stale: bool = False,
                         progress=None, options: dict | None = None):
    """The RepairPlan of ``recover`` on a DLedger-mode store (see the module docstring)."""

    rp = predict_recovery(store, mode=mode)
    if rp.refuses_to_start:
        too_far = any("processOffset is too small" in r for r in rp.refuses_to_start)
        raise RepairError(
            f"{store.root}: the broker would not start on this store ("
            + "; ".join(rp.refuses_to_start) + "); recover refuses to cut it: " + (
                "'mqtool truncate' cuts the log there, or --to an earlier entry" if too_far else
                "'mqtool truncate --to OFFSET' with OFFSET at or before the start of a data "
                "file of the wrong size drops it, else restore the file from a replica"))
    dledger = store.dledger
    folder = store.relative(dledger.directory)
    notes = list(rp.notes)
    lost: list[str] = []
    for name in rp.commitlog_files_deleted:
        stage.delete(f"{folder}/{dl_fmt.DATA_DIR}/{name}")
    for name in rp.index_files_deleted:
        stage.delete(f"index/{name}")
        lost.append(f"index/{name}: deleted by the abnormal start and not rebuilt in DLedger "
                    "mode; its keys are no longer found by key queries")
    if rp.messages_lost:
        lost.append(f"{rp.messages_lost:,} message(s) past the end of the DLedger log at "
                    f"{rp.process_offset:,} ({rp.stop_reason})")

    upf = store.cq_units_per_file
    states = _apply_queue_recoveries(stage, store, rp.queue_recoveries)
    removed = 0
    if rp.cq_truncate_called:       # the queues reach the end of the log
        removed = _truncate_queues(stage, store, upf, rp.process_offset, states,
                                   decided=rp.cq_truncations)
    _finish_queues(stage, store, upf, {key: st.end for key, st in states.items()}, keep_stale)
    if removed:
        lost.append(f"{removed:,} ConsumeQueue unit(s) pointing at or past the end of the log")

    walk = walk_ledger(dledger)
    if walk.rewritten_units:
        _rewrite_index_units(stage, store, walk.rewritten_units)
        notes.append(f"DLedger index units {walk.index_rewritten_from}..{walk.last_index} "
                     "rewritten from their entries, as DLedger's recovery does")
    cl_ops = []
    if not keep_stale:
        # beyond the broker, as recover does on a plain store: what lies past the end of the log
        # goes (bytes of the cut data file, index units, IndexFile entries), so that nothing a
        # later scan meets there passes for live data; --keep-stale leaves it as the broker does
        cl_ops = _commitlog_ops(store, cut=rp.process_offset, delete_names=[], erase_tail=True,
                                pad=False, reason="recover")
        notes += _erase_index_units_after(stage, store, walk.last_index)
        notes += _drop_index_entries_from(stage, store, rp.process_offset,
                                          rp.index_files_deleted, progress)
    if walk.last_index >= 0:
        text = dl_fmt.format_properties_text({dl_fmt.COMMITTED_INDEX_KEY: walk.last_index,
                                              dl_fmt.END_INDEX_KEY: walk.last_index}).encode()
        _stage_bytes(stage, f"{folder}/{dl_fmt.CHECKPOINT_FILE}", text)
        _stage_bytes(stage, f"{folder}/{dl_fmt.CHECKPOINT_FILE}.bak", text)
    currterm = dledger.directory / dl_fmt.CURRTERM_FILE
    if currterm.is_file():
        _stage_bytes(stage, f"{folder}/{dl_fmt.CURRTERM_FILE}.bak", currterm.read_bytes())
    notes.append("the DLedger checkpoint is written as a single-peer group leaves it (everything "
                 "committed); a multi-peer group's leader decides that itself")
    options = {**(options or {}), "mode": rp.mode, "keep_stale": keep_stale, "layout": "dledger"}
    data_loss = bool(rp.messages_lost or removed or rp.index_files_deleted)
    plan = build_plan("recover", store, stage, cl_ops=cl_ops, extra_ops=_abort_op(store), lost=lost,
                      notes=notes, data_loss=data_loss, recovery=rp, options=options,
                      summary_extra=_recover_summary(rp))
    dledger_op_reasons(plan, store, "recover")
    return plan


_REASONS = {
    dl_fmt.CHECKPOINT_FILE: "DLedger checkpoint: committedIndex and endIndex at the last entry",
    dl_fmt.CHECKPOINT_FILE + ".bak": "DLedger keeps the previous checkpoint here",
    dl_fmt.CURRTERM_FILE + ".bak": "DLedger keeps the previous currterm here when it persists "
                                   "the term at start",
    f"{dl_fmt.INDEX_DIR}/": "DLedger index units rewritten from their entries, or erased past "
                            "the last entry",
    f"{dl_fmt.DATA_DIR}/": "DLedger data file past the end of the log (DLedger deletes it)",
}


def _rewrite_index_units(stage, store: Store, units: list[tuple]) -> None:
    """Write DLedger index units (index, pos, size, magic, term) into the staged index files."""

    dledger = store.dledger
    folder = store.relative(dledger.index_dir)
    handles = {}
    try:
        for index, pos, size, magic, term in units:
            offset = index * dl_fmt.INDEX_UNIT_SIZE
            seg = next((f for f in dledger.index_files
                        if f.base_offset <= offset < f.base_offset + f.length), None)
            if seg is None:
                continue
            if seg.name not in handles:
                handles[seg.name] = open(stage.copy_in(f"{folder}/{seg.name}"), "r+b")
            fh = handles[seg.name]
            fh.seek(offset - seg.base_offset)
            fh.write(dledger_index_unit_bytes(magic, pos, size, index, term))
    finally:
        for fh in handles.values():
            fh.close()


# --- truncate ------------------------------------------------------------------------------------

def resolve_dledger_cut(store: Store, offset: int) -> int:
    """Where ``truncate --to OFFSET`` cuts a DLedger log: always at an entry boundary. OFFSET may
    be an entry's pos, the commitLogOffset of the record inside it (pos + 48: the offset dump,
    query and the ConsumeQueues show), the end of the last entry before a blank or unwritten
    space, or a data file start. Raises RepairError anywhere else."""

    log = store.commitlog
    seg = log.segment_for(offset)
    if seg is None:
        if offset == log.min_offset or any(s.base_offset + s.length == offset
                                           for s in log.segments):
            return offset
        raise RepairError(f"no DLedger data file holds offset {offset:,}")
    if offset == seg.base_offset:
        return offset
    with MappedFile(seg.path) as mf:
        for event in scan_buffer(mf.data, seg.base_offset, name=seg.name, check_crc=False,
                                 resync=True, layout=seg.layout):
            if type(event) is MessageRecord:
                entry = event.offset - dl_fmt.ENTRY_HEADER_SIZE
                if offset in (entry, event.offset):
                    return entry
                if event.end == offset:
                    return offset
                if entry < offset < event.end:
                    raise RepairError(
                        f"offset {offset:,} is inside the DLedger entry at {entry:,} "
                        f"({event.end - entry} bytes, its record at {event.offset:,}); use "
                        f"{entry:,} (or {event.offset:,}) to cut before it, {event.end:,} after it")
            elif event.offset == offset:
                return offset
            elif event.offset > offset:
                break
    raise RepairError(f"offset {offset:,} is not at a DLedger entry boundary")


def last_index_before(store: Store, cut: int) -> int:
    """The index of the last sound entry ending at or before ``cut`` (the ledger's first index
    - 1 when none does): what endIndex becomes when the log is cut there."""
    for seg in reversed(store.dledger.data_segments):
        if seg.base_offset >= cut:
            continue
        last = None
        with MappedFile(seg.path) as mapped:
            buf, position = mapped.data, 0
            while seg.base_offset + position < cut:
                header = entry_header_at(buf, position)
                if header is None or header.magic != dl_fmt.ENTRY_MAGIC \
                        or header.pos != seg.base_offset + position \
                        or header.size <= _MIN_ENTRY_SIZE_EXCLUSIVE \
                        or seg.base_offset + position + header.size > cut:
                    break
                last = header.index
                position += header.size
        if last is not None:
            return last
    first = store.dledger.first_entry()
    return (first.index if first is not None else 0) - 1


def stage_dledger_truncate(stage, store: Store, cut: int) -> list[str]:
    """The DLedger bookkeeping of a log cut at ``cut``, as DLedger's recovery then leaves it:
    index units of the entries kept that disagree with them rewritten, the units of every entry
    cut erased, the checkpoint's endIndex at the last entry kept (committedIndex not past it),
    the previous checkpoint in checkpoint.bak. Returns notes for the plan."""

    dledger = store.dledger
    folder = store.relative(dledger.directory)
    last = last_index_before(store, cut)
    notes = [f"DLedger ledger after the cut: entries up to {last}"]
    walk = walk_ledger(dledger)
    rewritten = [u for u in walk.rewritten_units or [] if u[0] <= last]
    if rewritten:
        _rewrite_index_units(stage, store, rewritten)
        notes.append(f"DLedger index units {rewritten[0][0]}..{rewritten[-1][0]} rewritten from "
                     "their entries, as DLedger's recovery does")
    notes += _erase_index_units_after(stage, store, last)
    values, _, _ = dledger.checkpoint()
    committed = properties_int(values, dl_fmt.COMMITTED_INDEX_KEY)
    committed = last if committed is None else min(committed, last)
    text = dl_fmt.format_properties_text({dl_fmt.COMMITTED_INDEX_KEY: committed,
                                          dl_fmt.END_INDEX_KEY: last}).encode()
    current = dledger.directory / dl_fmt.CHECKPOINT_FILE
    old = current.read_bytes() if current.is_file() else None
    if old != text:     # persisted as DLedger does: the previous content moves to .bak
        _stage_bytes(stage, f"{folder}/{dl_fmt.CHECKPOINT_FILE}", text)
        if old is not None:
            _stage_bytes(stage, f"{folder}/{dl_fmt.CHECKPOINT_FILE}.bak", old)
    return notes


def _erase_index_units_after(stage, store: Store, last: int) -> list[str]:
    """Zero the DLedger index units of every entry after ``last`` (written extents only)."""

    dledger = store.dledger
    index_folder = store.relative(dledger.index_dir)
    erase_from = (last + 1) * dl_fmt.INDEX_UNIT_SIZE
    erased = False
    for f in dledger.index_files:
        start = max(erase_from - f.base_offset, 0)
        end = data_end(f.path, start)
        if start >= end:
            continue
        with open(stage.copy_in(f"{index_folder}/{f.name}"), "r+b") as fh:
            fh.seek(start)
            fh.write(bytes(end - start))
        erased = True
    return [f"DLedger index units from {last + 1} on erased (no entry of the log holds them)"] \
        if erased else []


def _drop_index_entries_from(stage, store: Store, end: int, deleted: list[str],
                             progress) -> list[str]:
    """IndexFiles holding entries at or past ``end`` rebuilt under their own names without them
    (the keys of the records before ``end`` indexed again, as the broker had); the files the
    abnormal start deletes stay deleted."""

    checkpoint = store.read_checkpoint() if store.checkpoint_path.is_file() else None
    setup = _setup_index(stage, store, deleted=list(deleted), cut=end, reindex_all=False,
                         index_msg_timestamp=checkpoint.index_msg_timestamp if checkpoint else 0)
    if not setup.rebuilt:
        return []
    if setup.dispatch_from is not None and setup.dispatch_from < end:
        _dispatch_with_bar(store, setup.dispatch_from, end, progress, cq=None, cq_from=end,
                           index=setup.writer, index_from=setup.dispatch_from)
    _finish_index(stage, store, setup.writer)
    return [f"IndexFile(s) {', '.join(setup.rebuilt)} rebuilt under their own names without "
            f"the entries at or past {end:,} (the broker leaves them; its queryMessage skips them)"]


def dledger_op_reasons(plan, store: Store, command: str) -> None:
    """Name what each change of the DLedger folder is for."""
    folder = store.relative(store.dledger.directory)
    reasons = dict(_REASONS)
    if command == "truncate":
        reasons[dl_fmt.CHECKPOINT_FILE] = "DLedger checkpoint: endIndex at the last entry kept"
        reasons[f"{dl_fmt.INDEX_DIR}/"] = "DLedger index units of the cut entries erased"
    for op in plan.ops:
        if op.path.startswith(folder + "/") and not (
                op.kind == "commitlog" and (op.op != "delete" or command != "recover")):
            inside = op.path[len(folder) + 1:]
            op.reason = reasons.get(inside) or reasons.get(inside.split("/")[0] + "/") or op.reason
