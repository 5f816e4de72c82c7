"""The dump records of a RocksDB ConsumeQueue database (5.2+, ``consumequeue/`` holding CURRENT,
MANIFEST-*, *.sst): every unit in key order (stale ones past their queue's max entry marked),
every max/min entry, the CQ checkpoint, and every key or value that does not decode."""
from __future__ import annotations

from typing import Iterator

from ..rocksdb_cq import RocksConsumeQueue
from .records import RT_RDB_CHECKPOINT, RT_RDB_OFFSET, RT_RDB_PROBLEM, RT_RDB_UNIT


def iter_rocksdb_cq(table: RocksConsumeQueue) -> Iterator[dict]:
    for queue in table.sorted_queues():
        for unit in queue.units:
            yield {"record_type": RT_RDB_UNIT, "file": table.folder, "topic": queue.topic,
                   "queue_id": queue.queue_id, "queue_offset": unit.queue_offset,
                   "commitlog_offset": unit.commitlog_offset, "size": unit.size,
                   "tags_code": unit.tags_code, "store_timestamp": unit.store_timestamp,
                   "status": "stale" if unit.stale else "served"}
    for queue in table.sorted_queues():
        for kind, entry in (("max", queue.max_entry), ("min", queue.min_entry)):
            if entry is not None:
                yield {"record_type": RT_RDB_OFFSET, "file": table.folder, "topic": queue.topic,
                       "queue_id": queue.queue_id, "kind": kind, "commitlog_offset": entry[0],
                       "queue_offset": entry[1], "min_offset": queue.min_offset,
                       "max_offset": queue.max_offset, "stale_units": len(queue.stale)}
    if table.checkpoint is not None:
        yield {"record_type": RT_RDB_CHECKPOINT, "file": table.folder,
               "max_commitlog_offset": table.checkpoint}
    for problem in table.problems:
        yield {"record_type": RT_RDB_PROBLEM, "file": table.folder, "family": problem.family,
               "key": problem.key.hex(), "detail": problem.message}
