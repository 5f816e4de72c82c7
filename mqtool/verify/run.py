"""``verify_store``: the store's checks end to end - structure, the CommitLog files (in worker
processes when asked), the recovery prediction, the merge into the report."""
from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor

from ..batchcq import check_batch_consume_queues
from ..recovery import BrokerRules, predict_recovery, resolve_broker_version
from ..consumers import consumer_findings, ends_over_files
from ..dledger import check_dledger
from ..timer import check_timer_store
from ..store import Store
from .findings import Finding, _Sink, VerifyReport, _finding
from .context import _Context, _SegmentResult, _init_worker, _worker_context
from .commitlog import _SegmentChecker
from .batches import _BatchChecker
from .queues import _Irregular, _check_irregular_queue, _check_queue_structure, _segment_ranges
from .index import _check_index_structure
from .layout import _layout_findings
from .report import _merge_results, _report, _short_file_holes


def _worker_check(index: int) -> _SegmentResult:
    ctx = _worker_context()
    return _checker_class(ctx)(ctx, index).run()


def _checker_class(ctx: _Context):
    return _SegmentChecker if ctx.engine == "records" else _BatchChecker


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _auto_workers(segments: int, workers: int | None) -> int:
    """Worker processes for ``segments`` CommitLog files: ``workers`` if given, else one per
    core; never more than there are files (a file is one task)."""
    wanted = available_cores() if workers is None else max(1, workers)
    return max(1, min(wanted, segments))


def _pool_context():
    """fork where it exists and is safe: a forked worker starts with mqtool and numpy already
    imported (a spawned one pays ~0.3 s of imports) and inherits the context without pickling."""
    if sys.platform == "linux":
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def verify_store(store: Store, *, quick: bool = False, progress=None, broker_version: str = "auto",
                 mode: str = "auto", force_verify_prop_crc: bool = False,
                 message_index_safe: bool = False, workers: int | None = None,
                 engine: str = "batches") -> VerifyReport:
    """Check everything in ``store``; see :data:`CODES` for what each finding means.

    ``quick`` skips CRCs (records, and the prediction: it then assumes every CRC is good).
    ``progress`` is a tqdm-like object advanced by CommitLog bytes. ``engine`` "records" checks
    the CommitLog a record at a time: the slow reference the default "batches" must equal."""
    if engine not in ("batches", "records"):
        raise ValueError(f"engine must be 'batches' or 'records', not {engine!r}")
    version = resolve_broker_version(store, broker_version)
    sink = _Sink()
    deferred: list[Finding] = []          # findings whose severity depends on the recovery plan
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
    indexes, blind = [], []
    for info in store.index_files:
        checked = _check_index_structure(store, info, starts, ends, min_offset, sink, deferred,
                                         blind)
        if checked is not None:
            indexes.append(checked)

    rules = BrokerRules(version, True, force_verify_prop_crc, crc_scanned=not quick)
    ctx = _Context(str(commitlog.directory), commitlog.file_size, str(store.root), segments,
                   not quick, rules, queues, unchecked, indexes, blind, engine,
                   frozenset(topic for topic, _ in batch_keys),
                   count_queue_ends=store.dledger is None and (
                       mode == "abnormal" or (mode == "auto" and store.abort_exists)))
    results = _run_segments(store, ctx, progress, workers)

    verdicts = {r.verdict.base_offset: r.verdict for r in results}
    plan = predict_recovery(store, mode=mode, broker_version=version, check_crc=True,
                            message_index_safe=message_index_safe,
                            force_verify_prop_crc=force_verify_prop_crc, file_verdicts=verdicts,
                            crc_verified=not quick)
    _merge_results(store, plan, results, sink, deferred, _short_file_holes(queues))
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
    for found in (check_batch_consume_queues(store, batch_records, plan.redispatch_from)
                  + check_timer_store(store, plan=plan) + check_dledger(store)):
        extra = {k: found[k] for k in ("commitlog_offset", "topic", "queue_id", "count")
                 if k in found}
        sink.add(_finding(found["code"], found["file"], found["offset"], found["message"],
                          severity=found["severity"], **extra))
    for found in consumer_findings(store, plan):
        sink.add(found)
    return _report(store, sink, plan, results)


def _run_segments(store: Store, ctx: _Context, progress, workers: int | None) -> list[_SegmentResult]:
    n = len(ctx.segments)
    count = _auto_workers(n, workers)
    if count <= 1:
        checker = _checker_class(ctx)
        return [checker(ctx, i, progress, store.commitlog).run() for i in range(n)]
    results = []
    # Files are independent up to their boundaries: each is checked whole by one worker, and
    # map() hands the results back in file order, so the merge sees what one worker produces.
    # Processes, not threads: the checks are many small numpy steps and Python between them,
    # which hold the GIL (only the CRC of large buffers releases it).
    with ProcessPoolExecutor(max_workers=count, mp_context=_pool_context(),
                             initializer=_init_worker, initargs=(ctx,)) as pool:
        for result in pool.map(_worker_check, range(n)):
            if progress is not None:
                progress.update(result.bytes)
            results.append(result)
    return results
