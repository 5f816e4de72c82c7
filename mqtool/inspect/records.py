"""What the records of info and dump are made of: the ``record_type`` of every dict a dump stream
yields, and the time codecs of their fields (epoch milliseconds to ISO-8601 and back)."""
from __future__ import annotations

import datetime as _dt
import re

from ..errors import MqtoolError


# --- record types --------------------------------------------------------------------------------
RT_MESSAGE = "commitlog/message"
RT_BLANK = "commitlog/blank"
RT_UNWRITTEN = "commitlog/unwritten"
RT_CORRUPT = "commitlog/corrupt"
RT_CQ_UNIT = "consumequeue/unit"
RT_CQ_END = "consumequeue/end"
RT_CQ_PARTIAL = "consumequeue/partial-unit"
RT_BCQ_UNIT = "batchconsumequeue/unit"
RT_BCQ_END = "batchconsumequeue/end"
RT_BCQ_PARTIAL = "batchconsumequeue/partial-unit"
RT_INDEX_HEADER = "index/header"
RT_INDEX_SLOT = "index/slot"
RT_INDEX_ENTRY = "index/entry"
RT_INDEX_NOTE = "index/note"
RT_CHECKPOINT = "checkpoint"
RT_ABORT = "abort"
RT_LOCK = "lock"
RT_CONFIG = "config"
RT_RDB_UNIT = "rocksdb-cq/unit"              # a unit of a RocksDB ConsumeQueue (5.2+)
RT_RDB_OFFSET = "rocksdb-cq/offset"          # its max/min entry of one queue
RT_RDB_CHECKPOINT = "rocksdb-cq/checkpoint"  # CHECKPOINT_TOPIC: the CommitLog offset built to
RT_RDB_PROBLEM = "rocksdb-cq/problem"        # a key or value that does not decode


# --- small codecs for presentation ---------------------------------------------------------------

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def ms_to_iso(ms: int | None) -> str | None:
    """UTC ISO-8601 with milliseconds (``2026-11-21T10:00:00.123Z``); None when unrepresentable."""
    if ms is None:
        return None
    try:
        moment = _EPOCH + _dt.timedelta(milliseconds=int(ms))
    except (OverflowError, ValueError):
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_time(text: str) -> int:
    """Epoch milliseconds from epoch ms (digits) or ISO-8601 (``2026-11-21T10:00:00Z``,
    ``2026-11-21 10:00:00``, with or without fractions/offset; no offset means UTC)."""
    value = str(text).strip()
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    iso = value[:-1] + "+00:00" if value[-1:] in ("Z", "z") else value
    try:
        moment = _dt.datetime.fromisoformat(iso)
    except ValueError:
        raise MqtoolError(f"not a time: {text!r} (use epoch milliseconds or ISO-8601 such as "
                          f"2026-11-21T10:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    return (moment - _EPOCH) // _dt.timedelta(milliseconds=1)
