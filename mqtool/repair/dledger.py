"""``recover`` on a DLedger-mode store: what the 4.9.8 broker's next start leaves on disk.

The prediction is :func:`mqtool.dledger.predict_dledger_recovery` (through
:func:`mqtool.recovery.predict_recovery`); this module stages its end state for the shared repair
machinery (plan, backup, apply, undo):

* data files starting past the end of the log are deleted; no byte of a kept file changes;
* the DLedger index units DLedger rewrites (from the first unit that disagrees with its entry)
  are rewritten; units past the end stay as they are, as the broker leaves them;
* ConsumeQueues: the broker's ``recover`` and, when they reach past the end, its
  ``truncateDirtyLogicFiles``; by default units past a queue's end are erased (``--keep-stale``
  leaves them, as the broker does);
* IndexFiles an abnormal start deletes are deleted and, as in DLedger mode, not rebuilt;
* ``abort`` is removed; the DLedger ``checkpoint`` (and ``checkpoint.bak``) say committedIndex =
  endIndex = the last entry, and ``currterm.bak`` holds currterm's text, as a single-peer group
  leaves them once its only peer is leader again (the reference stores). Nothing is dispatched
  and the RocketMQ checkpoint is not touched.

Where the broker would not start (the end of the log more than one data file before the last
one), recover refuses.
"""
from __future__ import annotations

from ..dledger import walk_ledger
from ..formats import dledger as dl_fmt
from ..recovery import predict_recovery
from ..store import Store


def plan_dledger_recover(store: Store, stage, *, mode: str = "auto", keep_stale: bool = False,
                         progress=None, options: dict | None = None):
    """The RepairPlan of ``recover`` on a DLedger-mode store (see the module docstring)."""
    from .bookkeeping import _abort_op, _stage_bytes
    from .changes import build_plan
    from .planners import _recover_summary
    from .queues import _finish_queues, _recover_queues, _truncate_queues
    from .transaction import RepairError

    rp = predict_recovery(store, mode=mode)
    if rp.refuses_to_start:
        raise RepairError(f"{store.root}: the broker would not start on this store ("
                          + "; ".join(rp.refuses_to_start) + "); recover refuses to cut it")
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
    states, max_phy = _recover_queues(stage, store, upf)
    removed = 0
    if max_phy >= rp.process_offset:
        removed = _truncate_queues(stage, store, upf, rp.process_offset, states)
    _finish_queues(stage, store, upf, {key: st.end for key, st in states.items()}, keep_stale)
    if removed:
        lost.append(f"{removed:,} ConsumeQueue unit(s) pointing at or past the end of the log")

    walk = walk_ledger(dledger)
    if walk.rewritten_units:
        _rewrite_index_units(stage, store, walk.rewritten_units)
        notes.append(f"DLedger index units {walk.index_rewritten_from}..{walk.last_index} "
                     "rewritten from their entries, as DLedger's recovery does")
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
    plan = build_plan("recover", store, stage, cl_ops=[], extra_ops=_abort_op(store), lost=lost,
                      notes=notes, data_loss=data_loss, recovery=rp, options=options,
                      summary_extra=_recover_summary(rp))
    for op in plan.ops:
        if op.path.startswith(folder + "/"):
            inside = op.path[len(folder) + 1:]
            op.reason = _REASONS.get(inside) or _REASONS.get(inside.split("/")[0] + "/",
                                                             op.reason)
    return plan


_REASONS = {
    dl_fmt.CHECKPOINT_FILE: "DLedger checkpoint: committedIndex and endIndex at the last entry",
    dl_fmt.CHECKPOINT_FILE + ".bak": "DLedger keeps the previous checkpoint here",
    dl_fmt.CURRTERM_FILE + ".bak": "DLedger keeps the previous currterm here when it persists "
                                   "the term at start",
    f"{dl_fmt.INDEX_DIR}/": "DLedger index units rewritten from their entries",
    f"{dl_fmt.DATA_DIR}/": "DLedger data file past the end of the log (DLedger deletes it)",
}


def _rewrite_index_units(stage, store: Store, units: list[tuple]) -> None:
    """Write DLedger index units (index, pos, size, magic, term) into the staged index files."""
    from ..writer import dledger_index_unit_bytes

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
