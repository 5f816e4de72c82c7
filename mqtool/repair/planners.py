"""The per-command planners: recover, truncate, rebuild-queues and rebuild-index each fill a stage
with the files the command produces and return the plan; nothing in the store is touched."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..cores import available_cores
from ..queue_recovery import BATCH_CONSUME_QUEUE, queue_kinds
from ..recovery import (DISPATCHING_NORMAL_RECOVERY, VERSION_49, BrokerRules,
                        FileVerdict, RecoveryPlan, RecoveryStart, predict_from, predict_recovery,
                        recovery_start)
from ..rocksdb_recovery import UnitSink, next_start_after_recover
from ..passport import store_passport
from ..reput.dispatching import (DispatchStats, RecordHints, _bar, _commitlog_bytes,
                                 _dispatch_with_bar, dispatch, iter_records, judged_records,
                                 last_record_before)
from ..reput.pipeline import ParallelJudgedRecords
from ..scan import MessageRecord, scan_buffer
from ..store import MappedFile, Store
from .files import _queue_rel
from .transaction import RepairError, RepairPlan, Stage
from .writers import StagedBatchConsumeQueueWriter, StagedConsumeQueueWriter
from .index import (_count_entries, _finish_index, _last_full_end_timestamp, read_index_states,
                    _setup_index)
from .queues import (_apply_queue_recoveries, _finish_queues, _fix_queue_file_sizes,
                     _queue_view, queues_with_holes, _seed_writers, _settle_queues,
                     _truncate_queues)
from .commitlog import commitlog_gaps, _commitlog_ops
from .dledger import (dledger_op_reasons, plan_dledger_recover, resolve_dledger_cut,
                      stage_dledger_truncate)
from .bookkeeping import (_abort_op, _consumer_offsets, _stage_5x_service_files,
                          _stage_checkpoint)
from .changes import build_plan, _file_counts, _recover_summary


def _predict(store: Store, progress, workers: int | None = None, **kwargs) -> RecoveryPlan:
    """predict_recovery, the files it has to judge itself judged on every core (``workers``)."""
    with _bar(progress, "scan", _commitlog_bytes(store)) as bar:
        return predict_recovery(store, progress=bar, **kwargs,
                                workers=available_cores() if workers is None else workers)


# --- recover ------------------------------------------------------------------------------------------

def plan_recover(store: Store, stage: Stage, *, mode: str = "auto", broker_version: str = "auto",
                 check_crc: bool = True, message_index_safe: bool = False,
                 force_verify_prop_crc: bool = False, reindex_all: bool = False,
                 keep_stale: bool = False, consumer_offsets: str = "keep",
                 workers: int | None = None,
                 progress=None) -> RepairPlan:
    """The broker's startup recovery (spec §7), offline: see the module docstring.

    The phases before the CommitLog scan are :func:`mqtool.recovery.recovery_start`'s (load,
    IndexFile load, queue recovery, start file); the scan and what follows are
    :func:`mqtool.recovery.predict_from`'s, on the same results. Abnormal recovery dispatches
    every record its scan accepts, so there the scan and the dispatch are one pass
    (:func:`judged_records`); normal recovery first predicts where the scan ends, then
    dispatches the (usually short) range the broker re-dispatches. With ``workers`` > 1
    (default: the cores) the abnormal scan runs in worker processes ahead of the dispatch
    (:mod:`.pipeline`); the result is the same byte for byte."""
    rules_options = dict(mode=mode, broker_version=broker_version, check_crc=check_crc,
                         message_index_safe=message_index_safe,
                         force_verify_prop_crc=force_verify_prop_crc)
    if store.dledger is not None:   # DLedger mode: DLedger's own recovery (repair/dledger.py)
        return plan_dledger_recover(store, stage, mode=mode, keep_stale=keep_stale,
                                    progress=progress, options=rules_options)
    passport = store_passport(store)
    if broker_version == "auto":
        rules_options["broker_version"] = passport["recovery_rules"]
    begun = recovery_start(store, **rules_options)
    version = begun.setup.version
    notes: list[str] = []
    options = {**rules_options, "broker_version": version, "reindex_all": reindex_all,
               "keep_stale": keep_stale,
               "broker_version_from": "passport" if broker_version == "auto"
               else "--broker-version"}
    _fix_queue_file_sizes(stage, store, version, notes)
    if not store.commitlog.segments:
        plan = _recover_without_commitlog(store, stage, predict_from(store, begun), notes,
                                          options)
        plan.passport = passport
        return plan
    queues = _StagedQueues.recover(stage, store, begun)
    ckpt = store.read_checkpoint() if store.checkpoint_path.is_file() else None
    run = _RecoverRun(store, stage, begun, queues, reindex_all=reindex_all, keep_stale=keep_stale,
                      index_ts=ckpt.index_msg_timestamp if ckpt is not None else 0,
                      workers=available_cores() if workers is None else workers,
                      progress=progress)
    if begun.setup.branch == "abnormal":
        run.scan_and_dispatch()
    else:
        run.predict_and_dispatch()
    notes[:0] = run.rp.notes
    if run.rp.refuses_to_start:
        notes.append("the broker would refuse to start (" + "; ".join(run.rp.refuses_to_start)
                     + "); mqtool resizes those files first")
    plan = _finish_recover(run, notes, options, consumer_offsets)
    plan.passport = passport
    return plan


@dataclass
class _StagedQueues:
    """The ConsumeQueues (and BatchConsumeQueues) recovered in the stage, as the broker's
    ``ConsumeQueue.recover`` leaves them on disk, and the writers the dispatch fills."""

    states: dict
    batch_states: dict
    cq_writer: object           # StagedConsumeQueueWriter, or a UnitSink with RocksDB
    bcq_writer: StagedBatchConsumeQueueWriter
    rocks: bool

    @classmethod
    def recover(cls, stage: Stage, store: Store, begun: RecoveryStart) -> "_StagedQueues":
        """The queue recovery phase's results (``begun.queues``) applied to the stage."""
        recoveries = begun.queues.recoveries
        states = _apply_queue_recoveries(stage, store, recoveries)
        cq_writer = StagedConsumeQueueWriter(stage, store.cq_units_per_file)
        rocks = store.queues_in_rocksdb
        if rocks:
            # the ConsumeQueues live in RocksDB, which mqtool never writes: the dispatch runs
            # for the index only, the broker's next start fills RocksDB (see _rocksdb_next_start)
            cq_writer = UnitSink()
        bupf = store.bcq_units_per_file
        batch_states = _apply_queue_recoveries(stage, store, recoveries, BATCH_CONSUME_QUEUE)
        bcq_writer = StagedBatchConsumeQueueWriter(stage, bupf,
                                                   {q.topic for q in store.batch_consume_queues})
        return cls(states, batch_states, cq_writer, bcq_writer, rocks)

    def seed(self) -> None:
        _seed_writers(self.cq_writer, self.states, self.bcq_writer, self.batch_states)


class _RecoverRun:
    """recover's dispatch: what it dispatches, and the prediction it ends with (``rp``)."""

    def __init__(self, store: Store, stage: Stage, begun: RecoveryStart, queues: _StagedQueues,
                 *, reindex_all: bool, keep_stale: bool, index_ts: int, workers: int, progress):
        self.store, self.stage, self.begun, self.queues = store, stage, begun, queues
        self.reindex_all, self.keep_stale, self.index_ts = reindex_all, keep_stale, index_ts
        self.workers, self.progress = workers, progress
        self.version = begun.setup.version
        self.abnormal = begun.setup.branch == "abnormal"
        self.stats = DispatchStats()
        self.schedule_loaded = not (self.abnormal and self.version == VERSION_49)
        self.setup = None               # the IndexFile setup (repair/index.py)
        self.index_from = 0
        self.rp: RecoveryPlan | None = None

    @property
    def po(self) -> int:
        return self.rp.process_offset

    def _predict(self, verdicts: dict[int, FileVerdict] | None = None) -> RecoveryPlan:
        """predict_from on the phases already run, the files it has to judge itself judged
        on every core."""
        with _bar(self.progress, "scan", _commitlog_bytes(self.store)) as bar:
            return predict_from(self.store, self.begun, file_verdicts=verdicts, progress=bar,
                                workers=self.workers)

    def _index_setup(self, deleted: list[str], cut: int | None):
        return _setup_index(self.stage, self.store, deleted=list(deleted), cut=cut,
                            reindex_all=self.reindex_all, index_msg_timestamp=self.index_ts)

    def scan_and_dispatch(self) -> None:
        """recoverAbnormally: every record accepted from the start file on is dispatched,
        before the ConsumeQueue truncation; the index goes in the same pass unless a kept
        IndexFile may reach past the recovered end (then it is rebuilt under its name once
        that end is known)."""
        store, begun = self.store, self.begun
        start = begun.start
        cq_from = self.index_from = start.offset
        kept = [s for s in read_index_states(store) if s.name not in begun.index.deleted]
        if self.keep_stale or self.reindex_all or all(
                s.index_count <= 1 or s.end_phy_offset < start.offset for s in kept):
            self.setup = self._index_setup(begun.index.deleted, None)
            if self.setup.dispatch_from is not None:
                self.index_from = min(self.index_from, self.setup.dispatch_from)
        self.queues.seed()
        verdicts: dict[int, FileVerdict] = {}
        with _bar(self.progress, "scan + dispatch", _commitlog_bytes(store, start.offset)) as bar:
            records = self._judged_records(verdicts, bar)
            try:
                self.stats = dispatch(store, 0, 0, cq=self.queues.cq_writer, cq_from=cq_from,
                                      index=self.setup.writer if self.setup else None,
                                      index_from=self.index_from,
                                      schedule_loaded=self.schedule_loaded, records=records,
                                      bcq=self.queues.bcq_writer, queue_ends_from=start.offset)
            finally:
                if isinstance(records, ParallelJudgedRecords):
                    records.close()
        self.rp = self._predict(verdicts)
        po = self.po
        # the judged walk stops where the recovery does: its records are the re-dispatched ones
        self.rp.redispatched_ends = self.stats.queue_ends.for_range(self.rp.redispatch_from, po)
        if self.setup is None:
            self.setup = self._index_setup(self.rp.index_files_deleted,
                                           None if self.keep_stale else po)
            self.index_from = min(self.index_from, self.setup.dispatch_from
                                  if self.setup.dispatch_from is not None else po)
            if self.index_from < po:
                _dispatch_with_bar(store, self.index_from, po, self.progress, cq=None,
                                   cq_from=po, index=self.setup.writer,
                                   index_from=self.index_from)

    def _judged_records(self, verdicts: dict[int, FileVerdict], bar):
        """The records the abnormal scan accepts from the start file on (in worker processes
        when there are several files and workers), after the records before it a full reindex
        wants."""
        store, begun = self.store, self.begun
        usable, start_index = begun.loaded.segments, begun.start.index
        rules = BrokerRules(self.version, begun.setup.rules.check_crc,
                            begun.setup.rules.force_verify_prop_crc, True)
        early = self.index_from < begun.start.offset
        hints = RecordHints(store)
        if self.workers > 1 and not early and len(usable) - start_index > 1:
            records = ParallelJudgedRecords(usable, start_index, rules, verdicts, self.workers,
                                            hints)
            records.progress = bar
        else:
            records = judged_records(store, usable, start_index, rules, verdicts, bar, hints)
        if early:
            # a full reindex starts before the start file: those records first
            records = itertools.chain(iter_records(store, self.index_from, begun.start.offset),
                                      records)
        return records

    def predict_and_dispatch(self) -> None:
        """recoverNormally: the scan predicted, then the range the family dispatches again. 4.9
        and 5.0-5.3.1 truncate the queues before any dispatch (4.9 reputs in start()); 5.3.2+
        dispatches inside recoverNormally, before truncating."""
        store, stage, queues = self.store, self.stage, self.queues
        self.rp = self._predict()
        po = self.po
        upf, bupf = store.cq_units_per_file, store.bcq_units_per_file
        if self.rp.cq_truncate_called and self.version not in DISPATCHING_NORMAL_RECOVERY:
            # truncateDirtyLogicFiles before any dispatch: the prediction's own truncation
            decided = self.rp.cq_truncations
            _truncate_queues(stage, store, upf, po, queues.states, decided=decided)
            _truncate_queues(stage, store, bupf, po, queues.batch_states, BATCH_CONSUME_QUEUE,
                             decided=decided)
        # the re-dispatch rule's start (redispatch_rule): 4.9's reput from the highest queue end,
        # 5.3.2+ past maxPhyOffsetOfConsumeQueue, 5.0-5.3.1 nothing
        cq_from = po if self.rp.redispatch_from is None else min(self.rp.redispatch_from, po)
        self.setup = self._index_setup(self.rp.index_files_deleted,
                                       None if self.keep_stale else po)
        self.index_from = cq_from
        if self.setup.dispatch_from is not None:
            self.index_from = min(self.index_from, self.setup.dispatch_from)
        self.index_from = min(self.index_from, po)
        queues.seed()
        start = min(cq_from, self.index_from)
        if start < po:
            self.stats = _dispatch_with_bar(store, start, po, self.progress,
                                            cq=queues.cq_writer, cq_from=cq_from,
                                            index=self.setup.writer, index_from=self.index_from,
                                            schedule_loaded=self.schedule_loaded,
                                            bcq=queues.bcq_writer)


def _finish_recover(run: _RecoverRun, notes: list[str], options: dict,
                    consumer_offsets: str) -> RepairPlan:
    """After the dispatch: the CommitLog cut (truncateDirtyFiles), the queues settled
    (truncateDirtyLogicFiles), the index finished, the checkpoint, what is lost."""
    store, stage, rp, po = run.store, run.stage, run.rp, run.po
    deleted_cl = list(rp.commitlog_files_deleted)
    # and the empty last file 5.1.3+ deletes on load (load_files)
    loaded = {seg.name for seg in run.begun.loaded.segments}
    deleted_cl += [seg.name for seg in store.commitlog.segments
                   if seg.name not in loaded and seg.name not in deleted_cl]
    cl_ops = _commitlog_ops(store, cut=po, delete_names=deleted_cl, erase_tail=not run.keep_stale,
                            pad=True, reason="recover")
    regenerated = _settle_recovered_files(run, notes)
    _stage_recovered_checkpoint(run, notes)
    lost, data_loss, entries_lost = _recover_losses(run, deleted_cl, notes)
    extra = _recover_summary(rp)
    extra.update({"records_dispatched": run.stats.records,
                  "cq_units_written": run.stats.cq_written, "queues_regenerated": regenerated,
                  "index_entries_not_rebuilt": entries_lost,
                  "index_files_rebuilt_in_place": run.setup.rebuilt})
    service = _stage_5x_service_files(stage, store) if run.version != VERSION_49 else set()
    notes.extend(_consumer_offsets(stage, store, rp, consumer_offsets))
    options["consumer_offsets"] = consumer_offsets
    # with the queues in RocksDB the abort file stays: only the broker's own (abnormal) start
    # re-dispatches into RocksDB from the file holding the CQ checkpoint, as _rocksdb_next_start
    # says; mqtool does not write RocksDB
    plan = build_plan("recover", store, stage, cl_ops=cl_ops,
                      extra_ops=[] if run.queues.rocks else _abort_op(store),
                      lost=lost, notes=notes, data_loss=data_loss, recovery=rp, options=options,
                      summary_extra=extra)
    _drop_if_only(plan, service)
    return plan


def _settle_recovered_files(run: _RecoverRun, notes: list[str]) -> list[str]:
    """The queues truncated where the broker truncates them after dispatching (abnormal
    recovery and 5.3.2+; after 5.3.3 always, a no-op when they end before processOffset),
    the index finished, queues with missing files regenerated; notes on gaps."""
    store, stage, queues, po = run.store, run.stage, run.queues, run.po
    # truncateDirtyLogicFiles where the prediction calls it and it runs after the dispatch
    # (abnormal recovery, 5.3.2+); 4.9 and 5.0-5.3.1 normal recovery ran it before dispatching
    truncate_at = po if run.rp.cq_truncate_called and (
        run.abnormal or run.version in DISPATCHING_NORMAL_RECOVERY) else None
    if not queues.rocks:
        _settle_queues(stage, store, queues.cq_writer, queues.states, store.cq_units_per_file,
                       truncate_at, run.keep_stale)
    _settle_queues(stage, store, queues.bcq_writer, queues.batch_states,
                   store.bcq_units_per_file, truncate_at, run.keep_stale)
    _finish_index(stage, store, run.setup.writer)
    regenerated = [] if queues.rocks else _regenerate_queues_with_holes(
        stage, store, store.cq_units_per_file, po, notes, run.progress)
    if queues.rocks:
        notes.append(_rocksdb_next_start(store, run.rp))
    for start_gap, end_gap in commitlog_gaps(store):
        if start_gap < po:
            notes.append(f"CommitLog files are missing between {start_gap:,} and {end_gap:,} "
                         f"({end_gap - start_gap:,} bytes): the broker reads on past the gap, "
                         "so ConsumeQueue units and index entries pointing into it stay "
                         f"dangling; 'mqtool truncate --to {start_gap}' cuts the store there "
                         "instead")
    return regenerated


def _stage_recovered_checkpoint(run: _RecoverRun, notes: list[str]) -> None:
    """The checkpoint the broker writes at shutdown."""
    store, setup = run.store, run.setup
    index_value = None
    if setup.writer.rolled:
        index_value = setup.writer.index_msg_timestamp
    elif setup.rebuilt or run.reindex_all:
        index_value = _last_full_end_timestamp(run.stage, store, setup.writer)
    cap = None if run.keep_stale else _checkpoint_cap(store, run.stats, run.po, notes)
    # the RocksDB ConsumeQueue does not move logicsMsgTimestamp (rocks-* recovered/ keep it)
    _stage_checkpoint(run.stage, store, version=run.version,
                      logics=None if run.queues.rocks else run.stats.last_cq_timestamp,
                      index=index_value, confirm=run.rp.confirm_offset, physic_cap=cap,
                      logics_cap=cap, index_cap=cap)


def _recover_losses(run: _RecoverRun, deleted_cl: list[str],
                    notes: list[str]) -> tuple[list[str], bool, int]:
    """(what is lost, data loss?, index entries not rebuilt), with the notes on what stays."""
    store, rp, po = run.store, run.rp, run.po
    lost: list[str] = []
    data_loss = False
    if rp.messages_lost or rp.bytes_dropped:
        data_loss = True
        # a torn record alone loses bytes but no message: there is no first message to name
        first = "" if rp.first_lost_offset is None else f"first at {rp.first_lost_offset}; "
        lost.append(f"{rp.messages_lost:,} message(s) at or past processOffset {po:,} "
                    f"({rp.bytes_dropped:,} bytes; {first}stop: {rp.stop_reason})")
    for name in deleted_cl:
        # what these files held is counted in the messages above (a preallocated file is empty)
        notes.append(f"commitlog/{name} is deleted: it starts past processOffset {po:,}")
    entries_lost = 0
    if run.setup.deleted and not run.reindex_all:
        idx_low = min(run.index_from, po)
        min_offset = store.commitlog.min_offset
        for name in run.setup.deleted:
            path = store.root / "index" / name
            if path.exists():
                entries_lost += _count_entries(
                    path, store.index_slots, store.index_entries,
                    lambda e: (e["phy_offset"] < idx_low) & (e["phy_offset"] >= min_offset))
    if entries_lost:
        data_loss = True
        lost.append(f"{entries_lost:,} index entr(y/ies) of the deleted IndexFile(s) point at "
                    f"messages before the re-dispatch start {run.index_from:,} and are not "
                    "rebuilt (--reindex-all rebuilds them)")
    if run.keep_stale and rp.index_entries_stale:
        notes.append(f"{rp.index_entries_stale:,} index entr(y/ies) still point past processOffset "
                     "(--keep-stale; queryMessage skips them)")
    if run.keep_stale:
        notes.append("--keep-stale: bytes past the recovered end are left as the broker leaves "
                     "them")
    return lost, data_loss, entries_lost


def _rocksdb_next_start(store: Store, rp: RecoveryPlan) -> str:
    """What the broker's next start (the same branch: recover leaves the abort file of a
    crashed RocksDB store) does to the RocksDB ConsumeQueue this recovery leaves as it is."""
    return next_start_after_recover(store, rp)


def _drop_if_only(plan: RepairPlan, service: set[str]) -> None:
    """A store that needs no recovery is left alone: the broker's bookkeeping files are written
    only along with a real change, so a second run finds nothing to do."""
    if plan.ops and all(op.path in service for op in plan.ops):
        plan.ops = []
        plan.summary.update(_file_counts(plan.ops))


def _recover_without_commitlog(store: Store, stage: Stage, rp: RecoveryPlan, notes: list[str],
                               options: dict) -> RepairPlan:
    """recoverNormally/Abnormally without a CommitLog file: every ConsumeQueue is destroyed."""
    for queue in store.consume_queues:
        for seg in queue.segments:
            stage.delete(_queue_rel(queue.topic, queue.queue_id, seg.name))
    lost = []
    if rp.cq_units_truncated:
        lost.append(f"{rp.cq_units_truncated:,} ConsumeQueue unit(s): there is no CommitLog")
    return build_plan("recover", store, stage, cl_ops=[], extra_ops=_abort_op(store), lost=lost,
                      notes=list(rp.notes) + notes, data_loss=bool(rp.cq_units_truncated),
                      recovery=rp, options=options, summary_extra=_recover_summary(rp))


def _regenerate_queues_with_holes(stage: Stage, store: Store, upf: int, po: int, notes: list[str],
                                  progress) -> list[str]:
    """Beyond the broker: a queue with missing files is regenerated from the CommitLog."""
    holes = queues_with_holes(store)
    if not holes or not store.commitlog.segments:
        return []
    keys = set()
    for topic, queue_id, why in holes:
        keys.add((topic, queue_id))
        view = _queue_view(stage, store, topic, queue_id)
        for seg in view.segments:
            stage.delete(_queue_rel(topic, queue_id, seg.name))
    writer = StagedConsumeQueueWriter(stage, upf)
    low = store.commitlog.min_offset
    _dispatch_with_bar(store, low, po, progress, cq=writer, cq_from=low, index=None,
                       index_from=po, queues=keys)
    writer.close()
    regenerated = []
    for topic, queue_id, why in holes:
        written = list(stage.path(f"consumequeue/{topic}/{queue_id}").glob("*"))
        if not written:
            # no record of the queue below the recovered end: an empty queue (a truncation
            # deletes files and leaves the directory), nothing is missing
            continue
        for path in written:
            stage.mark_written(_queue_rel(topic, queue_id, path.name))
        regenerated.append(f"{topic}-{queue_id}")
        notes.append(f"{topic} queue {queue_id}: {why}; regenerated from the CommitLog")
    return regenerated


def _checkpoint_cap(store: Store, stats: DispatchStats, po: int, notes: list[str]) -> int | None:
    """Beyond the broker: checkpoint timestamps later than the newest message kept (a clock
    jump, a copied checkpoint) would make a later abnormal recovery start too late."""
    ckpt = store.read_checkpoint() if store.checkpoint_path.is_file() else None
    if ckpt is None:
        return None
    highest = max(ckpt.physic_msg_timestamp, ckpt.logics_msg_timestamp, ckpt.index_msg_timestamp)
    if stats.last_offset is not None and stats.last_timestamp is not None and \
            highest <= stats.last_timestamp:
        return None
    last = last_record_before(store, po)
    if last is None or highest <= last.store_timestamp:
        return None
    notes.append(f"checkpoint timestamps later than the newest kept message "
                 f"({last.store_timestamp}) are lowered to it")
    return last.store_timestamp


# --- truncate -----------------------------------------------------------------------------------------

def record_boundaries_ok(store: Store, offset: int) -> tuple[bool, str]:
    """Is ``offset`` a place a CommitLog can end: a file start, a record start, or the end of the
    last record before a blank / unwritten space?"""
    seg = store.commitlog.segment_for(offset)
    if seg is None:
        if offset == store.commitlog.min_offset or any(
                s.base_offset + s.length == offset for s in store.commitlog.segments):
            return True, ""
        return False, f"no CommitLog file holds offset {offset:,}"
    if offset == seg.base_offset:
        return True, ""
    with MappedFile(seg.path) as mf:
        for event in scan_buffer(mf.data, seg.base_offset, name=seg.name, check_crc=False,
                                 resync=True):
            if event.offset == offset:
                return True, ""
            if type(event) is MessageRecord:
                if event.offset < offset < event.end:
                    return False, (f"offset {offset:,} is inside the record at "
                                   f"{event.offset:,} ({event.total_size} bytes); use "
                                   f"{event.offset:,} or {event.end:,}")
                if event.end == offset:
                    return True, ""
            elif event.offset > offset:
                break
    return False, f"offset {offset:,} is not at a record boundary"


def plan_truncate(store: Store, stage: Stage, *, to: int | None = None,
                  broker_version: str = "auto", mode: str = "auto", check_crc: bool = True,
                  force_verify_prop_crc: bool = False, progress=None) -> RepairPlan:
    """Cut the CommitLog at ``to`` (default: the broker's processOffset), with the ConsumeQueue
    units and index entries pointing at or past it."""
    rp = _predict(store, progress, mode=mode, broker_version=broker_version, check_crc=check_crc,
                  force_verify_prop_crc=force_verify_prop_crc)
    po = rp.process_offset
    cut = _truncate_point(store, po, to)
    notes: list[str] = []
    lost: list[str] = []
    delete_names = [s.name for s in store.commitlog.segments if s.base_offset > cut]
    if store.dledger is not None:
        # DLedger creates a data file for the first entry that goes into it: a file the cut
        # leaves empty goes too (unless it is the only one), whatever its size
        delete_names += [s.name for s in store.dledger.data_segments[1:] if s.base_offset == cut]
    cl_ops = _commitlog_ops(store, cut=cut, delete_names=delete_names, erase_tail=True,
                            pad=False, reason="truncate")

    # messages removed: live records in [cut, po)
    removed = 0
    last_kept_ts = None
    for rec in iter_records(store, cut, po):
        removed += 1
    if cut > store.commitlog.min_offset:
        last = last_record_before(store, cut)
        last_kept_ts = last.store_timestamp if last is not None else None

    cq_units, setup = _stage_truncated_queues_and_index(store, stage, rp, cut, progress)
    cap = last_kept_ts if last_kept_ts is not None else 0
    _stage_checkpoint(stage, store, version=rp.broker_version, index=_rebuilt_index_timestamp(
        stage, store, setup), physic_cap=cap, logics_cap=cap, index_cap=cap, create=False)
    if removed:
        lost.append(f"{removed:,} message(s) in [{cut:,}, {po:,})")
    for seg in store.commitlog.segments:
        if seg.name in delete_names:
            lost.append(f"{seg.store_path}: deleted (starts past {cut:,})")
    refused_end_lost = bool(rp.messages_lost and rp.refuses_to_start)
    if refused_end_lost:
        # the broker would not start, so it had dropped nothing yet: this cut is what drops them
        lost.append(f"{rp.messages_lost:,} record(s) past {po:,}, where the broker's recovery "
                    "ends (it would refuse to start and drop nothing)")
    elif rp.messages_lost:
        notes.append(f"{rp.messages_lost:,} record(s) past the recovered end {po:,} were already "
                     "lost to the broker; their bytes are erased too")
    if store.dledger is not None:
        notes += stage_dledger_truncate(stage, store, cut)
    plan = build_plan("truncate", store, stage, cl_ops=cl_ops, extra_ops=[], lost=lost,
                      notes=notes, data_loss=bool(removed) or bool(delete_names and cut < po)
                      or refused_end_lost,
                      recovery=rp, options={"to": cut}, summary_extra={
                          "cut": cut, "process_offset": po, "messages_removed": removed,
                          "cq_units_truncated": cq_units,
                          "index_files_rebuilt_in_place": setup.rebuilt})
    if store.dledger is not None:
        dledger_op_reasons(plan, store, "truncate")
    return plan


def _truncate_point(store: Store, po: int, to: int | None) -> int:
    """Where truncate cuts: ``to`` (default processOffset), refused unless it is a record
    boundary (DLedger: an entry boundary in the DLedger part) between the first CommitLog
    offset and processOffset."""
    cut = po if to is None else to
    if cut < 0:
        raise RepairError("--to must be >= 0")
    if store.dledger is not None:
        divided = store.commitlog.divided_offset
        if divided is not None and cut < divided:
            raise RepairError(
                f"--to {cut:,} lies in the plain commitlog/ part of this upgraded store (below "
                f"dividedCommitlogOffset {divided:,}); truncate cuts only the DLedger part: use "
                f"an offset of {divided:,} or more")
        # DLedger: the log is cut at an entry boundary (a record's offset names its entry)
        cut = resolve_dledger_cut(store, cut)
    if cut > po:
        raise RepairError(f"--to {cut:,} is past the broker's recovered end {po:,}: the records "
                          "there would be dropped anyway (run 'mqtool recover')")
    if cut < store.commitlog.min_offset:
        raise RepairError(f"--to {cut:,} is before the first CommitLog file "
                          f"({store.commitlog.min_offset:,})")
    if store.dledger is None:
        ok, why = record_boundaries_ok(store, cut)
        if not ok:
            raise RepairError(why)
    return cut


def _stage_truncated_queues_and_index(store: Store, stage: Stage, rp: RecoveryPlan, cut: int,
                                      progress):
    """(ConsumeQueue units removed, the IndexFile setup): every queue as the broker's recovery
    leaves it (``rp``'s queue recoveries applied) and truncated at ``cut``, IndexFiles holding
    entries at or past it rebuilt under their names. The truncation is truncate's own decision
    (at ``cut``, whether or not the queues reach it), on the queues recover's deletions leave,
    so it is computed here and not taken from ``rp``."""
    cq_units = 0
    for kind, _, kind_upf in queue_kinds(store):
        states = _apply_queue_recoveries(stage, store, rp.queue_recoveries, kind)
        cq_units += _truncate_queues(stage, store, kind_upf, cut, states, kind)
        _finish_queues(stage, store, kind_upf, {k: s.end for k, s in states.items()},
                       keep_stale=False, kind=kind)

    ckpt = store.read_checkpoint() if store.checkpoint_path.is_file() else None
    setup = _setup_index(stage, store, deleted=[], cut=cut, reindex_all=False,
                         index_msg_timestamp=ckpt.index_msg_timestamp if ckpt else 0)
    if setup.dispatch_from is not None and setup.dispatch_from < cut:
        _dispatch_with_bar(store, setup.dispatch_from, cut, progress, cq=None, cq_from=cut,
                           index=setup.writer, index_from=setup.dispatch_from)
    _finish_index(stage, store, setup.writer)
    return cq_units, setup


def _rebuilt_index_timestamp(stage: Stage, store: Store, setup) -> int | None:
    """indexMsgTimestamp for the checkpoint after IndexFiles were rebuilt (None: unchanged)."""
    index_value = None
    if setup.rebuilt:
        index_value = (setup.writer.index_msg_timestamp if setup.writer.rolled
                       else _last_full_end_timestamp(stage, store, setup.writer))
    return index_value


# --- rebuild-queues -----------------------------------------------------------------------------------

def plan_rebuild_queues(store: Store, stage: Stage, *, topic: str | None = None,
                        queue_id: int | None = None, cq_units: int | None = None,
                        broker_version: str = "auto", workers: int | None = None,
                        progress=None) -> RepairPlan:
    """ConsumeQueue files regenerated from the CommitLog records up to the recovered end."""
    rp = _predict(store, progress, workers, broker_version=broker_version)
    po = rp.process_offset
    upf = cq_units or store.cq_units_per_file
    notes: list[str] = []

    def selected(t: str, q: int) -> bool:
        return (topic is None or t == topic) and (queue_id is None or q == queue_id)

    writer = StagedConsumeQueueWriter(stage, upf)
    batch_writer = StagedBatchConsumeQueueWriter(stage, store.bcq_units_per_file,
                                                 {q.topic for q in store.batch_consume_queues})
    # fresh files: the writers must not continue the store's copies
    existing = [(kind, q.topic, q.queue_id, s.name) for kind, queues, _ in queue_kinds(store)
                for q in queues for s in q.segments if selected(q.topic, q.queue_id)]
    for kind, t, q, name in existing:
        stage.delete(_queue_rel(t, q, name, kind))

    class _Selected:
        def __contains__(self, key):
            return selected(*key)

    stats = _dispatch_with_bar(store, store.commitlog.min_offset, po, progress, cq=writer,
                               cq_from=store.commitlog.min_offset, index=None, index_from=po,
                               queues=_Selected(), bcq=batch_writer,
                               workers=available_cores() if workers is None else workers)
    produced = set()
    for w in (writer, batch_writer):
        w.close()
        for t, q in w.queue_keys():
            produced.add((w.kind, t, q))
            for path in stage.path(f"{w.kind.directory}/{t}/{q}").glob("*"):
                stage.mark_written(_queue_rel(t, q, path.name, w.kind))
    # a selected queue without any record keeps its files: deleting them would reset its offsets
    for kind, t, q, name in existing:
        if (kind, t, q) not in produced:
            stage.deleted.discard(_queue_rel(t, q, name, kind))
    untouched = sorted({(t, q) for kind, t, q, _ in existing if (kind, t, q) not in produced})
    for t, q in untouched:
        notes.append(f"{t} queue {q}: no record in the CommitLog (up to {po:,}); files left as "
                     "they are")
    if topic is not None and not produced and not existing:
        raise RepairError(f"no record and no ConsumeQueue of topic {topic!r}"
                          + (f" queue {queue_id}" if queue_id is not None else ""))
    if not cq_units and not store.inferred_cq_units_per_file:
        notes.append(f"no ConsumeQueue file to infer the units per file from: {upf} (the "
                     "broker's default) is used; pass --cq-units to match the broker's "
                     "mappedFileSizeConsumeQueue")
    if cq_units and store.inferred_cq_units_per_file and cq_units != store.inferred_cq_units_per_file:
        notes.append(f"--cq-units {cq_units} differs from the store's {store.inferred_cq_units_per_file}"
                     " units per file: the broker must run with the same mappedFileSizeConsumeQueue")
    return build_plan("rebuild-queues", store, stage, cl_ops=[], extra_ops=[], lost=[],
                      notes=notes, data_loss=False, recovery=rp,
                      options={"topic": topic, "queue": queue_id, "cq_units": upf},
                      summary_extra={"process_offset": po, "records_scanned": stats.records,
                                     "queues_rebuilt": len(produced)})


# --- rebuild-index ------------------------------------------------------------------------------------

def plan_rebuild_index(store: Store, stage: Stage, *, slots: int | None = None,
                       entries: int | None = None, broker_version: str = "auto",
                       workers: int | None = None, progress=None) -> RepairPlan:
    """Every IndexFile regenerated from the CommitLog records up to the recovered end."""
    rp = _predict(store, progress, workers, broker_version=broker_version)
    po = rp.process_offset
    slots_given, entries_given = slots is not None, entries is not None
    slots = slots or store.index_slots
    entries = entries or store.index_entries
    if slots < 1 or entries < 2:
        raise RepairError("--slots must be >= 1 and --entries >= 2")
    setup = _setup_index(stage, store, deleted=[], cut=None, reindex_all=True,
                         index_msg_timestamp=0, slots=slots, entries=entries)
    stats = _dispatch_with_bar(store, store.commitlog.min_offset, po, progress, cq=None,
                               cq_from=po, index=setup.writer,
                               index_from=store.commitlog.min_offset,
                               workers=available_cores() if workers is None else workers)
    _finish_index(stage, store, setup.writer)
    _stage_checkpoint(stage, store, version=rp.broker_version,
                      index=setup.writer.index_msg_timestamp, create=False)
    notes = []
    if not store.index_files and not (slots_given and entries_given):
        notes.append(f"no IndexFile to infer the geometry from: {slots} slots x {entries} "
                     "entries (the broker's defaults unless given) are used; pass --slots and "
                     "--entries to match maxHashSlotNum/maxIndexNum")
    if (slots, entries) != (store.index_slots, store.index_entries):
        notes.append(f"new geometry {slots} slots x {entries} entries: the broker must run with "
                     "maxHashSlotNum/maxIndexNum set to match")
    return build_plan("rebuild-index", store, stage, cl_ops=[], extra_ops=[], lost=[],
                      notes=notes, data_loss=False, recovery=rp,
                      options={"slots": slots, "entries": entries},
                      summary_extra={"process_offset": po, "records_scanned": stats.records,
                                     "index_files": list(setup.writer.files)},
                      index_geometry=(slots, entries))


PLANNERS = {"recover": plan_recover, "truncate": plan_truncate,
            "rebuild-queues": plan_rebuild_queues, "rebuild-index": plan_rebuild_index}
