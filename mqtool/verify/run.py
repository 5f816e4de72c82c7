"""``verify_store``: the store's checks end to end - structure, the CommitLog files (in worker
processes when asked), the recovery prediction, the merge into the report."""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from ..cores import available_cores, fork_context, worker_initializer
from ..batchcq import check_batch_consume_queues
from ..recovery import (VERSION_532, VERSION_534, BrokerRules, RecoveryPlan, predict_recovery,
                        resolve_broker_version)
from ..consumers import consumer_findings, ends_over_files
from ..controller import check_epoch_file
from ..dledger import check_dledger
from ..timer import check_timer_store
from ..transactions import check_transactions
from ..store import CommitLog, Store
from .findings import Finding, _Sink, VerifyReport, _finding
from .context import _Context, _SegmentResult, _init_worker, _worker_context
from .commitlog import _SegmentChecker
from .batches import _BatchChecker
from .queues import _Irregular, _check_irregular_queue, _check_queue_structure, _segment_ranges
from .index import _check_index_structure
from .layout import _layout_findings
from .report import _merge_results, _report, _short_file_holes


def _worker_check(index: int) -> _SegmentResult:
    return check_file(_worker_context(), index)


def _checker_class(ctx: _Context):
    return _SegmentChecker if ctx.engine == "records" else _BatchChecker


def _auto_workers(segments: int, workers: int | None) -> int:
    """Worker processes for ``segments`` CommitLog files: ``workers`` if given, else one per
    core; never more than there are files (a file is one task)."""
    return max(1, min(_wanted(workers), segments))


def _wanted(workers: int | None) -> int:
    return available_cores() if workers is None else max(1, workers)


def _threads(segments: int, workers: int | None) -> int:
    """Threads of the native core's pass in each worker: what the processes leave of
    ``workers`` (one file and two cores: one process whose pass runs on two threads)."""
    return max(1, _wanted(workers) // _auto_workers(segments, workers))


def _pool_context():
    """fork where it is safe (:func:`mqtool.cores.fork_context`), else the platform's default
    (the context is pickled to spawned workers)."""
    return fork_context() or multiprocessing.get_context()


@dataclass
class StoreChecks:
    """What :func:`prepare_checks` found before the CommitLog files are checked: the context
    every per-file check needs (:func:`check_file`; it pickles, so files can be checked in other
    processes or on other machines) and what the merge (:func:`merge_checks`) adds them to."""

    store: Store
    ctx: _Context
    version: str
    sink: _Sink
    deferred: list          # findings whose severity depends on the recovery plan
    queues: dict
    mode: str
    quick: bool
    force_verify_prop_crc: bool
    message_index_safe: bool
    #: checks that need no CommitLog record and feed no per-file check (IndexFile hash slots and
    #: chains): run by :meth:`run_later`, while the files are checked elsewhere, else at the merge
    later: list = field(default_factory=list)
    #: --broker-version auto: the records may still name a newer family (passport evidence)
    auto_version: bool = False

    def run_later(self) -> None:
        while self.later:
            self.later.pop(0)()


def prepare_checks(store: Store, *, quick: bool = False, broker_version: str = "auto",
                   mode: str = "auto", force_verify_prop_crc: bool = False,
                   message_index_safe: bool = False, engine: str = "batches") -> StoreChecks:
    """The checks that need no CommitLog record (file layout, ConsumeQueue and IndexFile
    structure), and the context of the per-file checks."""
    if engine not in ("batches", "records"):
        raise ValueError(f"engine must be 'batches' or 'records', not {engine!r}")
    version = resolve_broker_version(store, broker_version)
    sink = _Sink()
    deferred: list[Finding] = []
    _layout_findings(store, sink, version)
    commitlog = store.commitlog
    segments = list(commitlog.segments)
    starts, ends = _segment_ranges(segments)
    min_offset = commitlog.min_offset

    batch_keys = {(q.topic, q.queue_id) for q in store.batch_consume_queues}
    queues, unchecked = {}, set(batch_keys)
    irregular = []
    for queue in store.consume_queues:
        key = (queue.topic, queue.queue_id)
        if queue.topic.startswith("%LMQ%"):
            unchecked.add(key)  # LMQ units point at records of other topics by design
            continue
        info = _check_queue_structure(store, queue, starts, ends, min_offset, sink, deferred,
                                      version)
        if isinstance(info, _Irregular):
            irregular.append(info.info)
            unchecked.add(key)
        elif info is not None:
            queues[key] = info
    for info in irregular:
        _check_irregular_queue(store, info, min_offset, sink)
    indexes, blind, later = [], [], []
    for info in store.index_files:
        checked = _check_index_structure(store, info, starts, ends, min_offset, sink, deferred,
                                         blind, later)
        if checked is not None:
            indexes.append(checked)

    rules = BrokerRules(version, True, force_verify_prop_crc, crc_scanned=not quick)
    ctx = _Context(str(commitlog.directory), commitlog.file_size, str(store.root), segments,
                   not quick, rules, queues, unchecked, indexes, blind, engine,
                   frozenset(topic for topic, _ in batch_keys),
                   count_queue_ends=store.dledger is None and (
                       mode == "abnormal" or (mode == "auto" and store.abort_exists)),
                   extra_commitlog_dirs=tuple(str(d) for d in commitlog.extra_dirs))
    return StoreChecks(store, ctx, version, sink, deferred, queues, mode, quick,
                       force_verify_prop_crc, message_index_safe, later,
                       auto_version=broker_version == "auto")


def check_file(ctx: _Context, index: int, progress=None,
               commitlog: CommitLog | None = None, observe=None) -> _SegmentResult:
    """Every check of CommitLog file ``index`` of ``ctx.segments``: its records, and the joins
    with the ConsumeQueue units and IndexFile entries that point into it. Without
    ``commitlog`` the process's own listing of ``ctx``'s CommitLog is used (one per worker).
    ``observe`` (batches engine) is called with every scan event the checks see, before they
    use it: a Spark audit writes its rows from the same read."""
    checker = _checker_class(ctx)(ctx, index, progress, commitlog)
    if observe is not None:
        if ctx.engine != "batches":
            raise ValueError("observe needs the batches engine")
        checker.observe = observe
    return checker.run()


def merge_checks(checks: StoreChecks, results: list[_SegmentResult]) -> tuple[_Sink, RecoveryPlan]:
    """The per-file results (in file order) merged with the recovery prediction, and the
    checks that need it (BatchConsumeQueues, the timer store, DLedger, consumer offsets): every
    finding, before the report's listing caps, and the plan."""
    store, ctx, sink = checks.store, checks.ctx, checks.sink
    checks.run_later()      # before the files' findings: the sink's order is one pass's order
    segments = ctx.segments
    verdicts = {r.verdict.base_offset: r.verdict for r in results}
    if checks.auto_version and checks.version == VERSION_532 and \
            any(r.own_property_batch_records for r in results):
        # the records show the newest code's classic batches (store_passport): its rules, which
        # judge every record as 5.3.2+ does, so the files' verdicts stand
        checks.version = VERSION_534
    plan = predict_recovery(store, mode=checks.mode, broker_version=checks.version,
                            check_crc=True, message_index_safe=checks.message_index_safe,
                            force_verify_prop_crc=checks.force_verify_prop_crc,
                            file_verdicts=verdicts, crc_verified=not checks.quick)
    _merge_results(store, plan, results, sink, checks.deferred, _short_file_holes(checks.queues))
    if plan.mode == "abnormal" and store.dledger is None and \
            all(r.queue_ends is not None for r in results):
        # the files' judged records are what the start re-dispatches: no second scan for the
        # queue ends after it
        plan.redispatched_ends = ends_over_files([r.queue_ends for r in results],
                                                 plan.redispatch_from, plan.process_offset,
                                                 [seg.base_offset for seg in segments])
    # 5.x side stores: BatchConsumeQueues and the timer store, checked unit by unit
    batch_records: dict = {}
    for r in results:
        for key, found in r.batch_records.items():
            batch_records.setdefault(key, []).extend(o for o in found if o < plan.process_offset)
    rocksdb = []
    if store.queues_in_rocksdb:
        # the RocksDB reader (and the query stack it shares) only for stores that need it
        from ..rocksdb_recovery import check_rocksdb_cq
        rocksdb = check_rocksdb_cq(store, plan)
    for found in (check_batch_consume_queues(store, batch_records, plan.redispatch_from)
                  + check_timer_store(store, plan=plan) + check_dledger(store)
                  + check_epoch_file(store, plan.process_offset) + rocksdb
                  + check_transactions(store, plan=plan)):
        extra = {k: found[k] for k in ("commitlog_offset", "topic", "queue_id", "count")
                 if k in found}
        sink.add(_finding(found["code"], found["file"], found["offset"], found["message"],
                          severity=found["severity"], **extra))
    for found in consumer_findings(store, plan):
        sink.add(found)
    return sink, plan


def verify_store(store: Store, *, quick: bool = False, progress=None, broker_version: str = "auto",
                 mode: str = "auto", force_verify_prop_crc: bool = False,
                 message_index_safe: bool = False, workers: int | None = None,
                 engine: str = "batches") -> VerifyReport:
    """Check everything in ``store``; see :data:`CODES` for what each finding means.

    ``quick`` skips CRCs (records, and the prediction: it then assumes every CRC is good).
    ``progress`` is a tqdm-like object advanced by CommitLog bytes. ``engine`` "records" checks
    the CommitLog a record at a time: the slow reference the default "batches" must equal.

    The steps are :func:`prepare_checks`, :func:`check_file` per CommitLog file (here in worker
    processes when there are several cores; a Spark audit runs them as tasks), then
    :func:`merge_checks` and the report."""
    checks = prepare_checks(store, quick=quick, broker_version=broker_version, mode=mode,
                            force_verify_prop_crc=force_verify_prop_crc,
                            message_index_safe=message_index_safe, engine=engine)
    results = _run_segments(store, checks.ctx, progress, workers, meanwhile=checks.run_later)
    sink, plan = merge_checks(checks, results)
    return _report(store, sink, plan, results)


def _run_segments(store: Store, ctx: _Context, progress, workers: int | None,
                  meanwhile=None) -> list[_SegmentResult]:
    """check_file of every CommitLog file, in file order; ``meanwhile`` is called once the
    workers have their files (here, while they check them)."""
    n = len(ctx.segments)
    count = _auto_workers(n, workers)
    ctx = dataclasses.replace(ctx, threads=_threads(n, workers))
    if count <= 1:
        return [check_file(ctx, i, progress, store.commitlog) for i in range(n)]
    results = []
    # Files are independent up to their boundaries: each is checked whole by one worker, and
    # map() hands the results back in file order, so the merge sees what one worker produces.
    # Processes, not threads: the checks are many small numpy steps and Python between them,
    # which hold the GIL (only the CRC of large buffers releases it).
    with ProcessPoolExecutor(max_workers=count, mp_context=_pool_context(),
                             initializer=worker_initializer,
                             initargs=(os.getpid(), _init_worker, ctx)) as pool:
        # map() submits every file at once (a fork pool starts all its workers then): the
        # parent's own checks run while they work
        checked = pool.map(_worker_check, range(n))
        if meanwhile is not None:
            meanwhile()
        for result in checked:
            if progress is not None:
                progress.update(result.bytes)
            results.append(result)
    return results
