"""CommitLog records (Java ``CommitLog.MessageExtEncoder``, ``MessageDecoder``, ``MessageSysFlag``).

Declarations:

* ``message_header`` - the fixed 48 bytes every message starts with;
* ``host_v4`` / ``host_v6`` - a socket address of 8 or 20 bytes;
* ``commitlog_message`` - a whole message record, V1 (1-byte topic length) or V2 (2-byte), hosts
  sized by sysflag bits 0x10 (born) and 0x20 (store);
* ``blank_record`` - the 8-byte end-of-file filler (size + ``BLANK_MAGIC_CODE``).

Lengths are kept as stored (``body_length``, ``topic_length``, ``properties_length``) so damaged
records parse and rebuild byte for byte; :func:`message_length` is ``calMsgLength``.
"""
from __future__ import annotations

from construct import (Bytes, Const, Error, If, IfThenElse, Int8sb, Int16sb, Int32sb, Int32ub,
                       Int64sb, OneOf, Struct, Switch, this)

# MessageDecoder magic codes, as unsigned 32-bit values (Java: -626843481, -626843477, -875286124)
MESSAGE_MAGIC_CODE = 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB
BLANK_MAGIC_CODE = 0xCBD43194
MESSAGE_MAGIC_CODES = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)

# CommitLog.END_FILE_MIN_BLANK_LENGTH
END_FILE_MIN_BLANK_LENGTH = 8
# Default maxMessageSize (4 MiB) plus the 64 KiB the encoder allows on top of it.
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
MAX_RECORD_SIZE = DEFAULT_MAX_MESSAGE_SIZE + 64 * 1024

# MessageSysFlag
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x1 << 1
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x1 << 2
TRANSACTION_COMMIT_TYPE = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
TRANSACTION_TYPE_MASK = 0xC
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOSTADDRESS_V6_FLAG = 0x1 << 5
NEED_UNWRAP_FLAG = 0x1 << 6
INNER_BATCH_FLAG = 0x1 << 7
COMPRESSION_TYPE_COMPARATOR = 0x7 << 8
COMPRESSION_LZ4, COMPRESSION_ZSTD, COMPRESSION_ZLIB = 1, 2, 3

TRANSACTION_NAMES = {
    TRANSACTION_NOT_TYPE: "NOT",
    TRANSACTION_PREPARED_TYPE: "PREPARED",
    TRANSACTION_COMMIT_TYPE: "COMMIT",
    TRANSACTION_ROLLBACK_TYPE: "ROLLBACK",
}
COMPRESSION_NAMES = {0: "zlib", COMPRESSION_LZ4: "lz4", COMPRESSION_ZSTD: "zstd",
                     COMPRESSION_ZLIB: "zlib"}

message_header = Struct(
    "total_size" / Int32sb,
    "magic_code" / Int32ub,
    "body_crc" / Int32sb,
    "queue_id" / Int32sb,
    "flag" / Int32sb,
    "queue_offset" / Int64sb,
    "physical_offset" / Int64sb,
    "sys_flag" / Int32sb,
    "born_timestamp" / Int64sb,
)

host_v4 = Struct("ip" / Bytes(4), "port" / Int32sb)
host_v6 = Struct("ip" / Bytes(16), "port" / Int32sb)

commitlog_message = Struct(
    "total_size" / Int32sb,
    "magic_code" / OneOf(Int32ub, MESSAGE_MAGIC_CODES),
    *message_header.subcons[2:],  # body_crc .. born_timestamp, as in message_header
    "born_host" / IfThenElse(this.sys_flag & BORNHOST_V6_FLAG, host_v6, host_v4),
    "store_timestamp" / Int64sb,
    "store_host" / IfThenElse(this.sys_flag & STOREHOSTADDRESS_V6_FLAG, host_v6, host_v4),
    "reconsume_times" / Int32sb,
    "prepared_transaction_offset" / Int64sb,
    "body_length" / Int32sb,
    "body" / If(this.body_length > 0, Bytes(this.body_length)),
    "topic_length" / Switch(this.magic_code, {MESSAGE_MAGIC_CODE: Int8sb,
                                              MESSAGE_MAGIC_CODE_V2: Int16sb}, default=Error),
    "topic" / Bytes(this.topic_length),
    "properties_length" / Int16sb,
    "properties" / If(this.properties_length > 0, Bytes(this.properties_length)),
)

blank_record = Struct(
    "total_size" / Int32sb,
    "magic_code" / Const(BLANK_MAGIC_CODE, Int32ub),
)

# What the broker's isMappedFileMatchedRecover reads of a file's first record: the fields up to
# STORETIMESTAMP (whose position depends on the born host's size).
message_prefix_through_store_timestamp = Struct(*commitlog_message.subcons[
    :[sc.name for sc in commitlog_message.subcons].index("store_timestamp") + 1])

# Field names of a message record in declaration (= Java layout) order.
MESSAGE_FIELDS = tuple(sc.name for sc in commitlog_message.subcons)


def host_length(sys_flag: int, v6_flag: int) -> int:
    return 20 if sys_flag & v6_flag else 8


def message_length(magic_code: int, sys_flag: int, body_length: int, topic_length: int,
                   properties_length: int) -> int:
    """CommitLog.calMsgLength: the size a record with these lengths must declare."""
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
            + host_length(sys_flag, BORNHOST_V6_FLAG) + 8
            + host_length(sys_flag, STOREHOSTADDRESS_V6_FLAG) + 4 + 8
            + 4 + max(body_length, 0)
            + (2 if magic_code == MESSAGE_MAGIC_CODE_V2 else 1) + max(topic_length, 0)
            + 2 + max(properties_length, 0))


def transaction_type(sys_flag: int) -> int:
    """MessageSysFlag.getTransactionValue."""
    return sys_flag & TRANSACTION_TYPE_MASK


def compression_type(sys_flag: int) -> int:
    """(sysFlag & 0x700) >> 8; 0 means zlib (from before 4.9.4)."""
    return (sys_flag & COMPRESSION_TYPE_COMPARATOR) >> 8


def describe_sys_flag(sys_flag: int) -> dict:
    """A readable breakdown of the sysflag bits."""
    return {
        "compressed": bool(sys_flag & COMPRESSED_FLAG),
        "multi_tags": bool(sys_flag & MULTI_TAGS_FLAG),
        "transaction": TRANSACTION_NAMES[transaction_type(sys_flag)],
        "born_host_v6": bool(sys_flag & BORNHOST_V6_FLAG),
        "store_host_v6": bool(sys_flag & STOREHOSTADDRESS_V6_FLAG),
        "need_unwrap": bool(sys_flag & NEED_UNWRAP_FLAG),
        "inner_batch": bool(sys_flag & INNER_BATCH_FLAG),
        "compression": COMPRESSION_NAMES.get(compression_type(sys_flag),
                                             f"unknown({compression_type(sys_flag)})"),
    }


def magic_version(magic_code: int) -> str:
    return {MESSAGE_MAGIC_CODE: "V1", MESSAGE_MAGIC_CODE_V2: "V2",
            BLANK_MAGIC_CODE: "BLANK"}.get(magic_code, "UNKNOWN")
