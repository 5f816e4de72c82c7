"""The checks of a Spark audit that read a store root's own files rather than its CommitLog
records: verify's own functions, run by the executors, one task per store (the DLedger
bookkeeping, the checkpoint/abort/lock files, the timer store, the config files) and one per
IndexFile (its structure check).

Only the codes those functions alone decide are reported (:data:`STORE_FILE_CODES`); what also
depends on the record merge or verify's recovery prediction stays verify's: IDX_DANGLING and
IDX_MISSING_KEY (also found by the merge, and toned down for IndexFiles the broker's recovery
deletes), CKPT_AHEAD (the newest stored record), TIMER_LOST (the recovered end), the consumer
and delay offset codes (the queue ends after the predicted start)."""
from __future__ import annotations

from .plan import BrokerInput, finding, local_path

#: DLedger's own bookkeeping (:func:`mqtool.dledger.check_dledger`)
DLEDGER_CODES = ("DL_INDEX_SEQUENCE", "DL_TERM_ORDER", "DL_INDEX_UNIT", "DL_CHECKPOINT",
                 "DL_LAYOUT")
#: the store's small files (:func:`mqtool.verify.layout.store_state_findings`)
STATE_CODES = ("CKPT_MISSING", "ABORT_PRESENT", "LOCK_HELD")
#: the timer store (:func:`mqtool.timer.check_timer_store` without a recovery prediction)
TIMER_CODES = ("TIMER_FILE_SIZE", "TIMER_TORN", "TIMER_UNIT_SIZE", "TIMER_MAGIC",
               "TIMER_PREV_POS", "TIMER_DANGLING", "TIMER_MISMATCH", "TIMER_CKPT",
               "TIMER_WHEEL_SIZE", "TIMER_SLOT_TIME", "TIMER_SLOT_POINTER", "TIMER_SLOT_CHAIN",
               "TIMER_UNREACHABLE", "TIMER_WHEEL_BEHIND")
#: an IndexFile's header (:func:`mqtool.verify.index.index_structure_findings`)
INDEX_CODES = ("IDX_HEADER",)
#: the config files (:func:`mqtool.consumers.consumer_findings` without a recovery prediction:
#: these codes never use it; the consumer and delay offset codes compare with the queue ends
#: after the predicted start, and stay verify's)
CONFIG_CODES = ("CFG_UNREADABLE", "CFG_BAD_VALUE", "CFG_IN_ROCKSDB", "TOPIC_NOT_IN_CONFIG")
STORE_FILE_CODES = DLEDGER_CODES + STATE_CODES + TIMER_CODES + INDEX_CODES + CONFIG_CODES


def store_tasks(brokers: list[BrokerInput]) -> list[tuple[str, str, str | None]]:
    """(broker, store root, IndexFile name or None for the store's other checks) of every task:
    store roots on a file system every executor reads (local paths, ``file://``, a shared
    mount); a bare CommitLog directory has none of these files."""
    from ..store import Store

    out = []
    for broker in brokers:
        if broker.bare or not broker.local:
            continue
        root = local_path(broker.root)
        out.append((broker.name, root, None))
        out.extend((broker.name, root, info.name) for info in Store(root).index_files)
    return out


def _as_row(broker: str, f) -> dict:
    return finding(broker, f.code, f.file, f.offset, f.message, severity=f.severity,
                   commitlog_offset=f.commitlog_offset, topic=f.topic, queue_id=f.queue_id,
                   queue_offset=f.queue_offset, count=f.count, details=f.details)


def check_store_files(broker: str, root: str, index_name: str | None) -> list[dict]:
    """An executor's part: verify's functions on one store (or one of its IndexFiles), only the
    findings of :data:`STORE_FILE_CODES` kept."""
    from ..consumers import consumer_findings
    from ..dledger import check_dledger
    from ..store import Store
    from ..timer import check_timer_store
    from ..verify.findings import _Sink
    from ..verify.index import index_structure_findings
    from ..verify.layout import store_state_findings

    store = Store(root)
    if index_name is not None:
        infos = [i for i in store.index_files if i.name == index_name]
        sink = index_structure_findings(store, infos)
        return [_as_row(broker, f) for f in sink.findings if f.code in INDEX_CODES]
    sink = _Sink()
    store_state_findings(store, sink)
    out = [_as_row(broker, f) for f in sink.findings if f.code in STATE_CODES]
    out += [_as_row(broker, f) for f in consumer_findings(store, None) if f.code in CONFIG_CODES]
    for found in check_dledger(store) + check_timer_store(store):
        if found["code"] in DLEDGER_CODES + TIMER_CODES:
            out.append(finding(broker, found["code"], found["file"], found["offset"],
                               found["message"], severity=found["severity"],
                               commitlog_offset=found.get("commitlog_offset"),
                               topic=found.get("topic"), queue_id=found.get("queue_id"),
                               count=found.get("count")))
    return out


def store_file_findings(spark, brokers: list[BrokerInput]) -> list[dict]:
    """The findings of :data:`STORE_FILE_CODES` of every store root of ``brokers``, computed by
    the executors, returned to the driver (a handful per store file)."""
    tasks = store_tasks(brokers)
    if not tasks:
        return []
    return spark.sparkContext.parallelize(tasks, len(tasks)) \
        .flatMap(lambda task: check_store_files(*task)).collect()
