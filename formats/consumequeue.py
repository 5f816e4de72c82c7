"""ConsumeQueue and BatchConsumeQueue units (Java ``ConsumeQueue``, ``queue.BatchConsumeQueue``).

* ``consumequeue_unit`` - 20 bytes: commitLogOffset, size, tagsCode. A unit is valid when
  offset >= 0 and size > 0; pre-blank units (0, 0x7FFFFFFF, 0) fill the start of a queue's
  first file when the queue does not begin at offset 0.
* ``batch_consumequeue_unit`` - 46 bytes (5.x BatchCQ).
"""
from __future__ import annotations

from construct import Int16sb, Int32sb, Int64sb, Struct

CQ_STORE_UNIT_SIZE = 20
BATCH_CQ_STORE_UNIT_SIZE = 46
DEFAULT_CQ_UNITS_PER_FILE = 300_000
PRE_BLANK_SIZE = 0x7FFFFFFF
# ConsumeQueueExt: a tagsCode at or below this is a decorated ext address, not a hash.
MAX_EXT_ADDR = -2147483649
INVALID_POS = -1

consumequeue_unit = Struct(
    "commitlog_offset" / Int64sb,
    "size" / Int32sb,
    "tags_code" / Int64sb,
)

batch_consumequeue_unit = Struct(
    "commitlog_offset" / Int64sb,
    "size" / Int32sb,
    "tags_code" / Int64sb,
    "store_timestamp" / Int64sb,
    "msg_base_offset" / Int64sb,
    "batch_size" / Int16sb,
    "compacted_offset" / Int32sb,
    "reserved" / Int32sb,
)

PRE_BLANK_UNIT = {"commitlog_offset": 0, "size": PRE_BLANK_SIZE, "tags_code": 0}


def is_valid_unit(commitlog_offset: int, size: int) -> bool:
    """ConsumeQueue.recover's test (pre-blank units pass it too)."""
    return commitlog_offset >= 0 and size > 0


def is_pre_blank(commitlog_offset: int, size: int, tags_code: int) -> bool:
    return commitlog_offset == 0 and size == PRE_BLANK_SIZE and tags_code == 0


def is_valid_batch_unit(commitlog_offset: int, size: int, msg_base_offset: int,
                        batch_size: int) -> bool:
    return commitlog_offset >= 0 and size > 0 and msg_base_offset >= 0 and batch_size > 0


def is_ext_address(tags_code: int) -> bool:
    return tags_code <= MAX_EXT_ADDR
