"""Offline equivalents of mqadmin's queries: by offsetMsgId, UNIQ_KEY, key, queue offset, time.

A broker answers ``queryMessage`` from its IndexFiles: slot ``hash(topic#key) % slots`` holds the
newest entry of a chain linked through ``prev_index``; the broker keeps every entry whose hash
and index time match (:meth:`IndexFile.broker_select`, ``IndexFile.selectPhyOffset``), walks
the files newest first, caps the answer at 64 and sorts it (:func:`broker_query_message`,
``IndexService.queryOffset`` + ``DefaultMessageStore.queryMessage``). The key itself is not
stored, so the broker's answer can hold other keys' messages; entries pointing past the
CommitLog's readable end are skipped.

mqtool's own answers (:func:`query_key`, :func:`query_uniq_key`) have no cap: every chain entry
with the key's hash is followed to the real record, which must carry the key (hash collisions
are counted and dropped). Where no IndexFile covers part of the CommitLog (no index, an index
that stops before the end of the data, files lost to an abnormal recovery) or a chain is
damaged, that part is scanned instead, and the result says so. Every chain walk terminates:
a healthy chain only ever points to older entries, so a pointer that does not is damage.

:func:`explain` says why the broker's own query would fail or differ from mqtool's answer.

Modules, in the order to read them:

* :mod:`.keys` - :func:`query_key`, :func:`query_uniq_key`, :func:`query_msg_id`.
* :mod:`.queues` - :func:`query_queue_offset`, :func:`query_queue_time`, :func:`queue_bounds`.
* :mod:`.broker` - :func:`broker_query_message` and :func:`explain`.
* :mod:`.traces` - :func:`query_traces`: a message's trace records (``query --traces``).
* :mod:`.results` - :class:`QueryResult`, :class:`Found`, the query errors.
* :mod:`.index` - :class:`IndexFile` and :class:`IndexSet`: slots, chains, the broker's selection.
* :mod:`.ids` - offsetMsgId and UNIQ_KEY checks, descriptions and time windows.
* :mod:`.reader` - :class:`RecordReader`: records by CommitLog offset.
"""
from __future__ import annotations

from .results import Found, NotFound, QueryError, QueryResult
from .ids import (check_hex_id, describe_msg_id, describe_uniq_key, mqadmin_uniq_key_begin,
                  uniq_key_windows)
from ..scan.reader import RecordReader
from .index import JAVA_LONG_MAX, MAX_MSGS_NUM_BATCH, ChainProblem, IndexFile, IndexHit, IndexSet
from .keys import (SCHEDULE_TOPIC, SYSTEM_TOPICS, TIMER_TOPIC, TRANS_HALF_TOPIC,
                   TRANS_OP_HALF_TOPIC, query_key, query_msg_id, query_uniq_key, store_topics)
from .queues import (query_batch_queue_offset, query_queue_offset, query_queue_time,
                     queue_bounds)
from .broker import broker_query_message, explain, readable_end



def __getattr__(name: str):
    """The trace lookups load the dump and RocksDB readers they share with ``dump``: loaded on
    first use, so that the many readers of :class:`RecordReader` (verify's timer check among
    them) do not pay for them at start-up."""
    if name in ("query_traces", "trace_ids"):
        from . import traces
        return getattr(traces, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["JAVA_LONG_MAX", "MAX_MSGS_NUM_BATCH", "SYSTEM_TOPICS", "QueryError", "NotFound",
           "ChainProblem", "IndexHit", "IndexFile", "IndexSet", "RecordReader", "Found",
           "QueryResult", "check_hex_id", "describe_msg_id", "describe_uniq_key",
           "uniq_key_windows", "mqadmin_uniq_key_begin", "store_topics", "query_key",
           "query_uniq_key", "query_msg_id", "query_queue_offset", "query_batch_queue_offset",
           "query_queue_time",
           "queue_bounds", "readable_end", "broker_query_message", "explain", "SCHEDULE_TOPIC",
           "TIMER_TOPIC", "TRANS_HALF_TOPIC", "TRANS_OP_HALF_TOPIC", "query_traces", "trace_ids"]
