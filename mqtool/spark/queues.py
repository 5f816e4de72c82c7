"""The ConsumeQueue checks of a Spark audit that need no record: verify's own structure check
(:func:`mqtool.verify.queues.queue_structure_findings`), run by executors on groups of queues.

Only the codes that check alone decides are reported (:data:`QUEUE_FILE_CODES`); the cross-checks
of units against records (``CQ_DANGLING``, ``CQ_MISMATCH``, ``CQ_MISSING``) also depend on the
record merge and the recovery prediction and stay verify's."""
from __future__ import annotations

from .plan import BrokerInput, finding, local_path

#: verify's codes the structure check alone produces, counted as verify counts them
QUEUE_FILE_CODES = ("CQ_FILE_SIZE",)
#: queues per task, so a store of thousands of queues is spread over the executors
QUEUES_PER_TASK = 256


def queue_tasks(brokers: list[BrokerInput]) -> list[tuple[str, str, str, int]]:
    """(broker, store root, topic, queue id) of every ConsumeQueue a task checks: the queues
    of store roots on a file system every executor reads (local paths, ``file://``, a shared
    mount); a bare CommitLog directory has none. LMQ queues are skipped, as verify skips them."""
    from ..store import Store

    out = []
    for broker in brokers:
        if broker.bare or not broker.local:
            continue
        root = local_path(broker.root)
        for queue in Store(root).consume_queues:
            if not queue.topic.startswith("%LMQ%"):
                out.append((broker.name, root, queue.topic, queue.queue_id))
    return out


def check_queue_files(rows) -> list[dict]:
    """An executor's part: the structure check of its queues, a store opened once per task."""
    from ..recovery import resolve_broker_version
    from ..store import Store
    from ..verify.queues import queue_structure_findings

    by_root: dict = {}
    for broker, root, topic, queue_id in rows:
        by_root.setdefault((broker, root), set()).add((topic, queue_id))
    out = []
    for (broker, root), keys in by_root.items():
        store = Store(root)
        queues = [q for q in store.consume_queues if (q.topic, q.queue_id) in keys]
        sink = queue_structure_findings(store, queues, resolve_broker_version(store, "auto"))
        for f in sink.findings:
            if f.code in QUEUE_FILE_CODES:
                out.append(finding(broker, f.code, f.file, f.offset, f.message,
                                   severity=f.severity, commitlog_offset=f.commitlog_offset,
                                   topic=f.topic, queue_id=f.queue_id,
                                   queue_offset=f.queue_offset, count=f.count,
                                   details=f.details))
    return out


def queue_file_findings(spark, brokers: list[BrokerInput]) -> list[dict]:
    """The findings of :data:`QUEUE_FILE_CODES` over every queue of ``brokers``, computed by the
    executors, returned to the driver (they are few: at most a handful per queue file)."""
    tasks = queue_tasks(brokers)
    if not tasks:
        return []
    slices = max(1, -(-len(tasks) // QUEUES_PER_TASK))
    return spark.sparkContext.parallelize(tasks, slices) \
        .mapPartitions(lambda rows: iter(check_queue_files(list(rows)))).collect()
