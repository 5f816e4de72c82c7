"""Value codecs shared by the store formats (Java ``UtilAll``, ``MessageDecoder``,
``MessageClientIDSetter``, ``IndexService``, ``MessageExtBrokerInner``).

Every function is pure: bytes and numbers in, bytes and numbers out.
"""
from __future__ import annotations

import calendar
import datetime as _dt
import ipaddress
import operator
import zlib

CRC32_MASK = 0x7FFFFFFF
PROP_CRC_KEY = "__CRC32#"
# len("__CRC32#") + 0x01 + 10 digits + 0x02 (MessageConst.CRC32_RESERVED_LEN)
CRC32_RESERVED_LEN = 20

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# where a transaction's prepared (half) messages and their commit/rollback op records are stored
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
# MessageStoreConfig.messageDelayLevel default: levels 1..18
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


def body_crc(data: bytes | memoryview) -> int:
    """UtilAll.crc32: standard CRC-32 masked to a non-negative Java int."""
    return zlib.crc32(data) & CRC32_MASK


def _to_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 0x1_0000_0000 if value & 0x8000_0000 else value


def java_string_hash(text: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return _to_int32(h)


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: abs(hashCode), with Integer.MIN_VALUE mapped to 0."""
    h = java_string_hash(key)
    return 0 if h == -0x8000_0000 else abs(h)


def index_key(topic: str, key: str) -> str:
    """The string the broker indexes: ``topic#key`` with the stored topic."""
    return f"{topic}#{key}"


# --- the same hashes, fast ------------------------------------------------------------------------
# hashCode is the polynomial sum(u_i * 31^(n-1-i)) mod 2^32 over the UTF-16 units u_i, so it can be
# evaluated by map/sum in C against a table of powers, and continued: h(a + b) = h(a) * 31^len(b)
# + h(b). The definitions above stay the reference; tests hold these equal to them.

_POW31_SPAN = 1024
_POW31_DESCENDING = tuple(pow(31, _POW31_SPAN - 1 - i, 1 << 32) for i in range(_POW31_SPAN))
_POW31_SPAN_FACTOR = pow(31, _POW31_SPAN, 1 << 32)
# UTF-16 in the machine's byte order, so a memoryview cast to "H" yields the code units
_UTF16_NATIVE = "utf-16-le" if memoryview(b"\x01\x00").cast("H")[0] == 1 else "utf-16-be"


def java_hash_extend(h: int, text: str) -> int:
    """The unsigned 32-bit hashCode of ``s + text``, given ``h``, the unsigned hashCode of ``s``."""
    units = text.encode("ascii") if text.isascii() else \
        memoryview(text.encode(_UTF16_NATIVE)).cast("H")
    n = len(units)
    start = 0
    while n - start > _POW31_SPAN:
        stop = start + _POW31_SPAN
        h = (h * _POW31_SPAN_FACTOR
             + sum(map(operator.mul, units[start:stop], _POW31_DESCENDING))) & 0xFFFFFFFF
        start = stop
    rest = n - start
    if rest:
        h = (h * pow(31, rest, 1 << 32) + sum(map(operator.mul, units[start:],
                                                    _POW31_DESCENDING[_POW31_SPAN - rest:]))) \
            & 0xFFFFFFFF
    return h


def java_string_hash_fast(text: str) -> int:
    """:func:`java_string_hash`, evaluated in C."""
    return _to_int32(java_hash_extend(0, text))


def index_hash_of_unsigned(h: int) -> int:
    """indexKeyHashMethod of an unsigned 32-bit hashCode."""
    h = _to_int32(h)
    return 0 if h == -0x8000_0000 else abs(h)


def index_key_hash_after(prefix_hash: int, key: str) -> int:
    """:func:`index_key_hash` of ``prefix + key`` from the unsigned hashCode of ``prefix`` (the
    broker hashes ``topic#key``; the ``topic#`` part is the same for all keys of a topic)."""
    return index_hash_of_unsigned(java_hash_extend(prefix_hash, key))


def index_key_prefix_hash(topic: str) -> int:
    """The unsigned hashCode of ``topic#``, to continue with :func:`index_key_hash_after`."""
    return java_hash_extend(0, index_key(topic, ""))


def delay_level_table(levels: str = DEFAULT_DELAY_LEVELS) -> dict[int, int]:
    """Parse messageDelayLevel ("1s 5s ...") into {level: milliseconds}."""
    table = {}
    for level, item in enumerate(levels.split(), start=1):
        table[level] = int(item[:-1]) * _DELAY_UNIT_MS[item[-1]]
    return table


_DEFAULT_DELAYS = delay_level_table()


def tags_code(topic: str, properties: dict[str, str], store_timestamp: int,
              delays: dict[int, int] | None = None) -> int:
    """ConsumeQueue tagsCode (CommitLog.checkMessageAndReturnSize).

    The hash of the whole TAGS value, except in SCHEDULE_TOPIC_XXXX where a positive DELAY level
    makes it the delivery time (store time + the level's delay; +1000 ms for a level missing from
    the table)."""
    delays = _DEFAULT_DELAYS if delays is None else delays
    tags = properties.get("TAGS")
    code = java_string_hash(tags) if tags else 0
    if topic == SCHEDULE_TOPIC:
        delay = properties.get("DELAY")
        if delay is not None:
            try:
                level = int(delay)
            except ValueError:
                return code
            level = min(level, max(delays) if delays else level)
            if level > 0:
                return store_timestamp + delays.get(level, 1000)
    return code


def batch_position(properties: dict[str, str], queue_offset: int) -> tuple[int, int]:
    """(msgBaseOffset, batchSize) of a record's BatchConsumeQueue unit: INNER_BASE/INNER_NUM of
    a 5.x inner batch, else the record's queue offset and 1. (-1, -1) when they do not parse:
    putMessagePositionInfoWrapper then writes no unit."""
    try:
        return (int(properties.get("INNER_BASE", queue_offset)),
                int(properties.get("INNER_NUM", 1)))
    except ValueError:
        return -1, -1


def decode_properties(raw: bytes | None) -> dict[str, str]:
    """MessageDecoder.string2messageProperties over the UTF-8 decoded bytes.

    Segments shorter than 3 characters, without a name, or without a value are dropped; a later
    duplicate name overwrites an earlier one."""
    if not raw:
        return {}
    text = bytes(raw).decode("utf-8", errors="replace")
    result: dict[str, str] = {}
    for segment in text.split(PROPERTY_SEPARATOR):
        if len(segment) < 3:
            continue
        sep = segment.find(NAME_VALUE_SEPARATOR)
        if sep <= 0 or sep == len(segment) - 1:
            continue
        result[segment[:sep]] = segment[sep + 1:]
    return result


def encode_properties(properties: dict[str, str | None], trailing_separator: bool = False) -> bytes:
    """MessageDecoder.messageProperties2String: ``name 0x01 value`` pairs separated by 0x02.

    The reference stores settle the last separator (the spec says every pair ends with 0x02):
    4.9.8 wrote none after the last pair, 5.3.3 does (``trailing_separator``). Pairs with a
    null value are skipped."""
    pairs = [f"{name}{NAME_VALUE_SEPARATOR}{value}" for name, value in properties.items()
             if value is not None]
    text = PROPERTY_SEPARATOR.join(pairs)
    if trailing_separator and text:
        text += PROPERTY_SEPARATOR
    return text.encode("utf-8")


def java_hashmap_order(keys_in_insertion_order: list[str], initial_capacity: int = 16) -> list[str]:
    """The iteration order of a java.util.HashMap holding these String keys.

    Buckets are ``(h ^ (h >>> 16)) & (capacity - 1)`` with the capacity doubled while
    size > 0.75 x capacity; a resize keeps insertion order inside a bucket, so the result is a
    stable sort of the insertion order by final bucket."""
    capacity = initial_capacity
    while len(keys_in_insertion_order) > capacity * 0.75:
        capacity *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys_in_insertion_order, key=bucket)


def message_keys(properties: dict[str, str]) -> list[str]:
    """The non-empty items of KEYS split on single spaces (MessageConst.KEY_SEPARATOR)."""
    keys = properties.get("KEYS")
    if not keys:
        return []
    return [k for k in keys.split(" ") if k]


def property_int(text: str | None) -> int | None:
    """A numeric property's value (REAL_QID, DELAY, TIMER_OUT_MS, ...) as an int; None when the
    property is absent or its text is not a number."""
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# --- property CRC (5.2+, enabledAppendPropCRC) --------------------------------------------------

def prop_crc_digits(crc: int) -> str:
    """The 10 ASCII digits the broker writes: least-significant digit first, '0'-padded."""
    return str(crc)[::-1].ljust(10, "0")


def prop_crc_from_digits(digits: str) -> int:
    """Inverse of :func:`prop_crc_digits`."""
    return int(digits[::-1])


def prop_crc_field(crc: int) -> bytes:
    """The 20-byte tail of the properties: ``__CRC32#`` 0x01 digits 0x02."""
    return f"{PROP_CRC_KEY}{NAME_VALUE_SEPARATOR}{prop_crc_digits(crc)}{PROPERTY_SEPARATOR}".encode("ascii")


def stored_prop_crc(properties_raw: bytes | None) -> int | None:
    """The CRC recorded in the last 20 bytes of the properties, or None when absent/malformed."""
    if not properties_raw or len(properties_raw) < CRC32_RESERVED_LEN:
        return None
    tail = bytes(properties_raw[-CRC32_RESERVED_LEN:])
    prefix = (PROP_CRC_KEY + NAME_VALUE_SEPARATOR).encode("ascii")
    if not tail.startswith(prefix) or tail[-1:] != b"\x02":
        return None
    digits = tail[len(prefix):-1]
    if not digits.isdigit():
        return None
    return prop_crc_from_digits(digits.decode("ascii"))


def record_prop_crc(record: bytes | memoryview) -> int:
    """CRC over the whole record except its final 20 bytes (the property CRC's range)."""
    return zlib.crc32(record[: len(record) - CRC32_RESERVED_LEN]) & CRC32_MASK


# --- hosts and message ids ----------------------------------------------------------------------

_IPV4_MAPPED_PREFIX = b"\0" * 10 + b"\xff\xff"


def format_host(ip: bytes, port: int) -> str:
    """A socket address as the broker's MessageDecoder prints it: ``a.b.c.d:port``, and IPv6 in
    Java's uncompressed form in brackets (``[fd85:71f:0:0:0:0:0:1]:port``). Java turns an
    IPv4-mapped 16-byte address into an IPv4 one, so that is done here too."""
    ip = bytes(ip)
    if len(ip) == 16 and ip.startswith(_IPV4_MAPPED_PREFIX):
        ip = ip[12:]
    if len(ip) == 4:
        return f"{ip[0]}.{ip[1]}.{ip[2]}.{ip[3]}:{port}"
    groups = ":".join(f"{int.from_bytes(ip[i:i + 2], 'big'):x}" for i in range(0, len(ip), 2))
    return f"[{groups}]:{port}"


def parse_host(text: str) -> tuple[bytes, int]:
    """Inverse of :func:`format_host`; accepts ``[v6]:port`` too."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    return ipaddress.ip_address(host).packed, int(port)


def offset_msg_id(store_ip: bytes, store_port: int, commitlog_offset: int) -> str:
    """MessageDecoder.createMessageId: hex of store IP, port and CommitLog offset (32 or 56 chars)."""
    return (bytes(store_ip) + store_port.to_bytes(4, "big", signed=True)
            + commitlog_offset.to_bytes(8, "big", signed=True)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """Inverse of :func:`offset_msg_id`: (``ip:port``, CommitLog offset).

    Raises ValueError for anything that is not 32 (IPv4) or 56 (IPv6) hex characters."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"offsetMsgId must be 32 or 56 hex characters, got {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    ip_len = 4 if len(raw) == 16 else 16
    port = int.from_bytes(raw[ip_len:ip_len + 4], "big", signed=True)
    offset = int.from_bytes(raw[ip_len + 4:], "big", signed=True)
    return format_host(raw[:ip_len], port), offset


# the "now" a UNIQ_KEY is read against, kept where the month arithmetic stays in years 1..9999
_NOW_MIN_MS = 0
_NOW_MAX_MS = calendar.timegm((9999, 10, 1, 0, 0, 0)) * 1000


def decode_uniq_key(uniq_key: str, now_ms: int | None = None,
                    tz: _dt.tzinfo | None = None) -> dict:
    """MessageClientIDSetter: client IP, pid, class-loader hash, counter and the approximate time.

    The time is the month start (in ``tz``, default UTC) plus the unsigned ms field; when that lies
    in the future the previous month is used, as getNearlyTimeFromID does."""
    if len(uniq_key) not in (32, 56):
        raise ValueError(f"UNIQ_KEY must be 32 or 56 hex characters, got {len(uniq_key)}")
    raw = bytes.fromhex(uniq_key)
    ip_len = len(raw) - 12
    ip = raw[:ip_len]
    pid = int.from_bytes(raw[ip_len:ip_len + 2], "big")
    loader = int.from_bytes(raw[ip_len + 2:ip_len + 6], "big", signed=True)
    delta_ms = int.from_bytes(raw[ip_len + 6:ip_len + 10], "big")
    counter = int.from_bytes(raw[ip_len + 10:ip_len + 12], "big")
    tz = tz or _dt.timezone.utc
    if now_ms is not None:
        # a damaged store timestamp can lie outside what a date can hold (year 1..9999)
        now_ms = min(max(now_ms, _NOW_MIN_MS), _NOW_MAX_MS)
    now = _dt.datetime.now(tz) if now_ms is None else _dt.datetime.fromtimestamp(now_ms / 1000, tz)
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    approx = month_start + _dt.timedelta(milliseconds=delta_ms)
    if approx >= now:
        prev = (month_start - _dt.timedelta(days=1)).replace(day=1)
        approx = prev + _dt.timedelta(milliseconds=delta_ms)
    return {
        "ip": str(ipaddress.ip_address(ip)),
        "pid": pid,
        "class_loader_hash": loader,
        "ms_since_month_start": delta_ms,
        "counter": counter,
        "approx_time_ms": int(calendar.timegm(approx.utctimetuple()) * 1000 + approx.microsecond // 1000),
    }
