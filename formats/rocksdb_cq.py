"""The RocksDB ConsumeQueue of 5.2+ (``storeType=defaultRocksDB``; Java ``RocksDBConsumeQueueTable``,
``RocksDBConsumeQueueOffsetTable``) and the keys of the RocksDB consumer-offset table
(``RocksDBConsumerOffsetManager``). All integers big-endian; RocksDB sorts keys bytewise, so by
topic length first.

* Column family ``default``: one key per unit, ``cq_key`` -> ``cq_value`` (28 bytes).
* Column family ``offset``: ``offset_key`` (kind ``max`` or ``min``) -> ``offset_value`` (16 bytes:
  the CommitLog offset and queue offset of the LAST unit for ``max``, so the queue's maxOffset is
  cq_offset + 1; ``min`` is written lazily and by truncation); topic ``CHECKPOINT_TOPIC`` queue 0
  ``max`` -> ``checkpoint_value`` (8 bytes: the CommitLog offset the queues are built up to).
* Consumer offsets (``config/consumerOffsets/``): column family ``default``, key
  ``topic@group`` (UTF-8), value fastjson ``{"offsetTable":{"<queueId>":<offset>}}``; column
  family ``kvDataVersion`` holds the table's data version (see :data:`DATA_VERSION_KEY`).
"""
from __future__ import annotations

from construct import Bytes, Const, Int32sb, Int32ub, Int64sb, Struct, this

SEPARATOR = b"\x01"
CQ_FAMILY = "default"
OFFSET_FAMILY = "offset"
MAX_KIND = b"max"
MIN_KIND = b"min"
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
CQ_VALUE_SIZE = 28
OFFSET_VALUE_SIZE = 16
CHECKPOINT_VALUE_SIZE = 8

cq_key = Struct(
    "topic_length" / Int32ub,
    Const(SEPARATOR),
    "topic" / Bytes(this.topic_length),
    Const(SEPARATOR),
    "queue_id" / Int32sb,
    Const(SEPARATOR),
    "queue_offset" / Int64sb,
)

cq_value = Struct(
    "commitlog_offset" / Int64sb,
    "size" / Int32sb,
    "tags_code" / Int64sb,
    "store_timestamp" / Int64sb,
)

offset_key = Struct(
    "topic_length" / Int32ub,
    Const(SEPARATOR),
    "topic" / Bytes(this.topic_length),
    Const(SEPARATOR),
    "kind" / Bytes(3),
    Const(SEPARATOR),
    "queue_id" / Int32sb,
)

offset_value = Struct(
    "commitlog_offset" / Int64sb,
    "queue_offset" / Int64sb,
)

checkpoint_value = Struct(
    "max_commitlog_offset" / Int64sb,
)


def cq_key_size(topic_length: int) -> int:
    """Bytes of a unit key whose topic has ``topic_length`` bytes."""
    return 4 + 1 + topic_length + 1 + 4 + 1 + 8


def offset_key_size(topic_length: int) -> int:
    return 4 + 1 + topic_length + 1 + 3 + 1 + 4


# --- RocksDB consumer offsets (config/consumerOffsets/) ------------------------------------------
CONSUMER_OFFSET_FAMILY = "default"
DATA_VERSION_FAMILY = "kvDataVersion"
TOPIC_GROUP_SEPARATOR = "@"
