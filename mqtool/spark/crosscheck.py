"""``verify`` itself, run by a Spark audit on every input that is a store root on a file system
every executor reads (a local path, ``file://``, a shared mount): its findings are the audit's
findings for that broker, every code of verify's, counted as ``mqtool verify`` counts them.

verify checks a store in three steps (:mod:`mqtool.verify.run`), and the audit runs them so:

* driver: :func:`~mqtool.verify.run.prepare_checks` per store: the file layout, the ConsumeQueue
  and IndexFile structure, and the context of the per-file checks;
* executors: :func:`~mqtool.verify.run.check_file`, one task per CommitLog file of every such
  store: the file's records, and the joins of the ConsumeQueue units and IndexFile entries that
  point into it with those records (sorted-array joins, as verify makes them);
* driver: :func:`~mqtool.verify.run.merge_checks`: the recovery prediction from the tasks'
  per-file verdicts, the findings that span files, what lies past the recovered end, the
  BatchConsumeQueues, the timer store, DLedger and the consumer offsets.

The contexts are built on the driver and broadcast, not rebuilt by each task: building one reads
every ConsumeQueue file and the IndexFiles' hash columns, which per task would multiply those
reads by the number of CommitLog files; a context itself is small (file lists and, per queue and
IndexFile, where its units and entries lie: ~25 KB for 85 queues and 13 IndexFiles).

Cost: the audit's Arrow scan (the messages table, the per-queue figures, the UNIQ_KEYs) reads
every CommitLog file, and these tasks read each file of such a store once more. The scan's own
record-level findings are not computed for these brokers (one source per broker per code).
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

from .plan import BrokerInput, finding, local_path


@dataclass
class StoreFindings:
    """verify's findings of one broker's store, as the audit's findings table holds them."""

    broker: str
    rows: list[dict] = field(default_factory=list)   # every finding verify made (before its
    # listing cap of MAX_LISTED_PER_CODE per code)
    counts: collections.Counter = field(default_factory=collections.Counter)
    # (code, severity) -> count, verify's summary: also the findings a file's checks counted
    # beyond their own cap without listing them


def verified_by_verify(broker: BrokerInput) -> bool:
    """Whether an audit runs verify on this input: a store root the executors read as files.
    A bare CommitLog directory has no queues or IndexFiles to check, and a remote store's files
    cannot be opened by verify's readers: those keep the audit's CommitLog checks."""
    return broker.local and not broker.bare


def check_one(contexts, task, observe=None) -> tuple:
    """Executor side: verify's checks of one CommitLog file; ``task`` is (broker, file index),
    ``contexts`` the broadcast of every broker's context; ``observe`` sees every scan event
    (:func:`mqtool.verify.run.check_file`)."""
    from pathlib import Path

    from ..store import CommitLog
    from ..verify.run import check_file

    broker, index = task
    ctx = contexts.value[broker]
    # a listing per task, not verify's per-process one: a Python worker runs tasks of many
    # stores
    commitlog = CommitLog(Path(ctx.commitlog_dir), ctx.file_size)
    return broker, check_file(ctx, index, commitlog=commitlog, observe=observe)


def _row(broker: str, f) -> dict:
    return finding(broker, f.code, f.file, f.offset, f.message, severity=f.severity,
                   commitlog_offset=f.commitlog_offset, topic=f.topic, queue_id=f.queue_id,
                   queue_offset=f.queue_offset, count=f.count, details=f.details)


def prepare(brokers: list[BrokerInput], check_crc: bool = True) -> dict:
    """Driver: verify's checks that need no CommitLog record, for every broker
    :func:`verified_by_verify` accepts, by broker name; ``check_crc`` False is verify's
    ``quick``."""
    from ..store import Store
    from ..verify.run import prepare_checks

    return {b.name: prepare_checks(Store(local_path(b.root)), quick=not check_crc)
            for b in brokers if verified_by_verify(b)}


def file_tasks(prepared: dict) -> list[tuple[tuple[str, int], int]]:
    """The per-file checks to run, each ((broker, file index), its file's size)."""
    return [((name, i), segment.length) for name, checks in prepared.items()
            for i, segment in enumerate(checks.ctx.segments)]


def contexts_of(prepared: dict) -> dict:
    """What :func:`check_one` needs broadcast."""
    return {name: checks.ctx for name, checks in prepared.items()}


def merge(prepared: dict, results: list[tuple]) -> dict[str, StoreFindings]:
    """Driver: verify's merge of each broker's per-file results ((broker, result) pairs, in any
    order) into its findings."""
    from ..verify.run import merge_checks

    by_broker: dict = {name: [] for name in prepared}
    for name, result in results:
        by_broker[name].append(result)
    out = {}
    for name, checks in prepared.items():
        # the merge reads the results in file order, as verify's own pool hands them back
        ordered = sorted(by_broker[name], key=lambda r: r.index)
        sink, _ = merge_checks(checks, ordered)
        found = StoreFindings(name, [_row(name, f) for f in sink.findings])
        found.counts.update((f.code, f.severity) for f in sink.findings)
        found.counts.update(sink.extra)
        out[name] = found
    return out


def store_findings(spark, brokers: list[BrokerInput], check_crc: bool = True) \
        -> dict[str, StoreFindings]:
    """verify's findings of every broker :func:`verified_by_verify` accepts, by broker name, in
    a Spark job of its own: a task per CommitLog file."""
    prepared = prepare(brokers, check_crc)
    tasks = [task for task, _ in file_tasks(prepared)]
    results: list = []
    if tasks:
        sc = spark.sparkContext
        contexts = sc.broadcast(contexts_of(prepared))
        try:
            results = sc.parallelize(tasks, len(tasks)) \
                .map(lambda task: check_one(contexts, task)).collect()
        finally:
            contexts.destroy()
    return merge(prepared, results)
