"""A message's trace records: the trace messages whose KEYS name its id (the client's
``AsyncTraceDispatcher`` sets a trace message's KEYS to the traced messages' ids and keys), found
through the IndexFiles as ``query --key`` finds them, each decoded (:mod:`mqtool.systopics`).

A trace record found by the key whose decoded contexts do not name the id (a body that is no
trace, or contexts of other messages only) stays in the answer, marked ``trace-key-only``."""
from __future__ import annotations

from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..inspect import decompress_body
from ..formats import systopics as st
from ..store import Store
from ..systopics import decode_trace_body
from .keys import query_key
from ..scan.reader import RecordReader
from .results import Found


def query_traces(store: Store, msg_ids: list[str], trace_topic: str = st.TRACE_TOPIC,
                 reader: RecordReader | None = None) -> list[Found]:
    """The trace records of the messages with these ids (UNIQ_KEY or offsetMsgId), in CommitLog
    order, each once; ``found_by`` is ``trace`` (a context names an id) or ``trace-key-only``."""
    ids = [i for i in dict.fromkeys(msg_ids) if i and " " not in i]
    found: dict[int, Found] = {}
    own = reader is None
    reader = reader or RecordReader(store.commitlog)
    try:
        for msg_id in ids:
            result = query_key(store, msg_id, trace_topic)
            for hit in result.found:
                record = hit.record
                if record.offset in found and found[record.offset].found_by == "trace":
                    continue
                body = bytes(reader.body(record) or b"")
                if record.sys_flag & cl_fmt.COMPRESSED_FLAG:
                    inflated = decompress_body(body, record.sys_flag, 1 << 22)
                    body = inflated.data if inflated.error is None else body
                decoded = decode_trace_body(body)
                names = {c.get(k) for c in decoded["contexts"]
                         for k in ("msg_id", "offset_msg_id")}
                by = "trace" if names & set(ids) else "trace-key-only"
                found[record.offset] = Found(record, by, hit.index_hits)
    finally:
        if own:
            reader.close()
    return [found[o] for o in sorted(found)]


def trace_ids(record) -> list[str]:
    """The ids a message's trace records name it by: its UNIQ_KEY and its offsetMsgId."""
    props = codecs.decode_properties(record.properties_raw)
    ids = [props.get("UNIQ_KEY")] if props.get("UNIQ_KEY") else []
    ids.append(codecs.offset_msg_id(record.store_ip, record.store_port, record.physical_offset))
    return ids
