"""CommitLog messages as records: bodies decompressed (bounded), truncated and encoded on request,
:func:`message_to_dict` - the flat record ``dump``, ``query``, ``export`` and Spark share, with a
``system`` object for system topics and properties (:mod:`mqtool.systopics`) - the message
filter, and the record stream of a CommitLog file or directory."""
from __future__ import annotations

import base64
import codecs as _text_codecs
import zlib
from dataclasses import dataclass
from typing import Callable, Iterator

from .. import dledger
from ..errors import MqtoolError
from ..formats import codecs
from ..innerbatch import OpenedBatch, is_inner_batch, open_record
from ..formats import commitlog as cl_fmt
from ..formats import transaction as tx_fmt
from ..scan import (BlankRecord, MessageRecord, Scanner, UnwrittenTail, entry_damage,
                    entry_fields, read_body)
from ..store import CommitLog, MappedFile, Segment
from ..systopics import is_system_topic, needs_body, system_fields
from .records import RT_BLANK, RT_CORRUPT, RT_MESSAGE, RT_UNWRITTEN


BODY_MODES = ("text", "hex", "base64", "none")
# A compressed body is at most 4 MiB stored; this bounds what a hostile stream may inflate to.
MAX_DECOMPRESSED_BODY = 256 * 1024 * 1024


# --- bodies --------------------------------------------------------------------------------------

@dataclass
class DecodedBody:
    data: bytes
    error: str | None = None   # why the stored bytes were kept
    complete: bool = True      # False: data is only the first ``limit`` bytes of the output


def _inflate_zlib(stored: bytes, limit: int) -> DecodedBody:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(stored, limit)
        if inflater.eof:
            return DecodedBody(out)
        if len(out) >= limit:
            more = inflater.decompress(inflater.unconsumed_tail, 1)
            if more or not inflater.eof:
                return DecodedBody(out[:limit], complete=False)
            return DecodedBody(out)
    except zlib.error as err:
        return DecodedBody(stored, f"zlib: {err}")
    return DecodedBody(stored, "zlib: the stream ends early")


def _inflate_lz4(stored: bytes, limit: int) -> DecodedBody:
    try:
        import lz4.frame
    except ImportError:
        return DecodedBody(stored, "lz4: the 'lz4' package is not installed; body kept compressed")
    decompressor = lz4.frame.LZ4FrameDecompressor()
    try:
        out = decompressor.decompress(stored, max_length=limit)
    except RuntimeError as err:
        return DecodedBody(stored, f"lz4: {err}")
    if decompressor.eof:
        return DecodedBody(out)
    if decompressor.needs_input:
        return DecodedBody(stored, "lz4: the frame ends early")
    return DecodedBody(out[:limit], complete=False)


def _inflate_zstd(stored: bytes, limit: int) -> DecodedBody:
    try:
        import zstandard
    except ImportError:
        return DecodedBody(stored, "zstd: the 'zstandard' package is not installed; "
                                   "body kept compressed")
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    out = bytearray()
    try:
        # small input steps keep a hostile frame from inflating far past the limit at once
        for start in range(0, len(stored), 1024):
            out += decompressor.decompress(stored[start:start + 1024])
            if len(out) > limit:
                return DecodedBody(bytes(out[:limit]), complete=False)
    except zstandard.ZstdError as err:
        return DecodedBody(stored, f"zstd: {err}")
    if not decompressor.eof:
        return DecodedBody(stored, "zstd: the frame ends early")
    return DecodedBody(bytes(out))


def decompress_body(stored: bytes, sys_flag: int,
                    limit: int = MAX_DECOMPRESSED_BODY) -> DecodedBody:
    """The body a consumer would see: inflate by the sysflag's compression type (0 and 3 zlib,
    1 LZ4 frame, 2 zstd). On any failure the stored bytes come back with ``error`` set."""
    kind = cl_fmt.compression_type(sys_flag)
    if kind in (0, cl_fmt.COMPRESSION_ZLIB):
        return _inflate_zlib(stored, limit)
    if kind == cl_fmt.COMPRESSION_LZ4:
        return _inflate_lz4(stored, limit)
    if kind == cl_fmt.COMPRESSION_ZSTD:
        return _inflate_zstd(stored, limit)
    return DecodedBody(stored, f"unknown compression type {kind}")


def encode_body(data: bytes | None, mode: str) -> tuple[str | None, str]:
    """(body, body_encoding). ``text`` falls back to base64 for bytes that are not UTF-8, so the
    value is never lossy; a UTF-8 sequence cut by truncation is dropped from the text."""
    if mode == "none" or data is None:
        return None, "none"
    if mode == "hex":
        return data.hex(), "hex"
    if mode == "text":
        try:
            return _text_codecs.getincrementaldecoder("utf-8")().decode(data, final=False), "text"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(data).decode("ascii"), "base64"


# --- messages ------------------------------------------------------------------------------------

def message_to_dict(record: MessageRecord, stored_body: bytes | None = None, *,
                    commitlog: CommitLog | None = None, file: str | None = None,
                    file_offset: int | None = None, body_mode: str = "base64",
                    max_body_bytes: int | None = None, decompress: bool = True) -> dict:
    """The flat JSON record of one message, keys in declaration order (snake_case).

    ``stored_body`` is the body as stored; when omitted it is read through ``commitlog``.
    ``decompress`` inflates a compressed body (the stored form stays described by
    ``body_stored_length``/``body_compression``); ``max_body_bytes`` truncates the output body
    and sets ``body_truncated``. ``body_crc_ok`` is computed from the stored bytes when the
    scanner did not check it (so an empty body with CRC 0 is ok, as the broker's decoder says).
    """
    if body_mode not in BODY_MODES:
        raise MqtoolError(f"body mode must be one of {', '.join(BODY_MODES)}, not {body_mode!r}")
    if stored_body is None and record.body_length > 0 and commitlog is not None:
        stored_body = read_body(commitlog, record)
    if stored_body is None and record.body_length <= 0:
        stored_body = b""
    stored = bytes(stored_body) if stored_body is not None else None
    if file is None and commitlog is not None:
        seg = commitlog.segment_for(record.offset)
        file = seg.name if seg is not None else None
    if file_offset is None and commitlog is not None:
        seg = commitlog.segment_for(record.offset)
        file_offset = record.offset - seg.base_offset if seg is not None else None

    crc_ok = record.body_crc_ok
    if crc_ok is None and stored is not None:
        crc_ok = codecs.body_crc(stored) == record.body_crc
    props = codecs.decode_properties(record.properties_raw)
    sys_flag = record.sys_flag
    compressed = bool(sys_flag & cl_fmt.COMPRESSED_FLAG)

    out = {
        "record_type": RT_MESSAGE,
        "file": file,
        "file_offset": file_offset,
        "commitlog_offset": record.offset,
        "total_size": record.total_size,
        "magic_code": record.magic_code,
        "magic_version": cl_fmt.magic_version(record.magic_code),
        "body_crc": record.body_crc,
        "body_crc_ok": crc_ok,
        "queue_id": record.queue_id,
        "flag": record.flag,
        "queue_offset": record.queue_offset,
        "physical_offset": record.physical_offset,
        "offset_ok": record.offset_ok,
        "sys_flag": sys_flag,
        "transaction": cl_fmt.TRANSACTION_NAMES[cl_fmt.transaction_type(sys_flag)],
        "born_timestamp": record.born_timestamp,
        "born_host": codecs.format_host(record.born_ip, record.born_port),
        "store_timestamp": record.store_timestamp,
        "store_host": codecs.format_host(record.store_ip, record.store_port),
        "reconsume_times": record.reconsume_times,
        "prepared_transaction_offset": record.prepared_transaction_offset,
        "body_length": record.body_length,
        "topic": record.topic,
        "properties": props,
        "tags": props.get("TAGS"),
        "keys": props.get("KEYS"),
        "uniq_key": props.get("UNIQ_KEY"),
        "msg_id": codecs.offset_msg_id(record.store_ip, record.store_port,
                                       record.physical_offset),
        "prop_crc_ok": record.prop_crc_ok,
    }

    body = stored
    error = None
    complete = True
    decompressed = False
    if compressed and decompress and stored and body_mode != "none":
        # zlib and lz4 read a limit of 0 as "no limit"; truncation to 0 happens below
        limit = MAX_DECOMPRESSED_BODY if max_body_bytes is None else max(1, min(
            max_body_bytes, MAX_DECOMPRESSED_BODY))
        decoded = decompress_body(stored, sys_flag, limit)
        if decoded.error is None and not decoded.complete and max_body_bytes is None:
            error = f"decompressed body exceeds {MAX_DECOMPRESSED_BODY} bytes; body kept compressed"
        elif decoded.error is not None:
            error = decoded.error
        else:
            body, complete, decompressed = decoded.data, decoded.complete, True
    system = system_object(record.topic, props, stored, sys_flag, record.store_timestamp,
                           record.reconsume_times, body=body, decompressed=decompressed)
    truncated = False
    if body is not None and max_body_bytes is not None and (len(body) > max_body_bytes
                                                            or not complete):
        body, truncated = body[:max_body_bytes], True
    out["body"], out["body_encoding"] = encode_body(body, body_mode)
    out["body_stored_length"] = len(stored) if stored is not None else None
    out["body_compression"] = (cl_fmt.COMPRESSION_NAMES.get(cl_fmt.compression_type(sys_flag),
                                                            "unknown") if compressed else None)
    out["body_decompressed"] = decompressed
    out["body_decompress_error"] = error
    out["body_truncated"] = truncated
    if system is not None:
        out["system"] = system
    return out


def may_have_system(topic: str) -> bool:
    """True when a message of ``topic`` has a ``system`` object whatever its properties (the
    others have one only with an origin or priority property:
    :data:`mqtool.systopics.SYSTEM_PROPERTIES`)."""
    return is_system_topic(topic) or topic in (tx_fmt.TRANS_OP_HALF_TOPIC,
                                               tx_fmt.TRANS_HALF_TOPIC)


def system_reads_body(topic: str, props: dict[str, str]) -> bool:
    """True when :func:`system_object` reads the stored body of a message of ``topic``."""
    return needs_body(topic, props) or topic == tx_fmt.TRANS_OP_HALF_TOPIC


def system_object(topic: str, props: dict[str, str], stored: bytes | None, sys_flag: int,
                  store_timestamp: int, reconsume_times: int, *, body: bytes | None = None,
                  decompressed: bool = False) -> dict | None:
    """The ``system`` object of a message record (None when it has none): what its system
    topic or system properties say (:func:`mqtool.systopics.system_fields`), a transaction
    record's fields first. ``stored`` is the body as stored; ``body`` the inflated one when the
    caller already inflated it. One rule for dump, query, export and the Spark tables."""
    system = system_fields(topic, props, _system_body(stored, body, decompressed, sys_flag,
                                                      topic, props),
                           store_timestamp, reconsume_times)
    txn = transaction_decoded(topic, props, stored)
    if txn is not None:   # a transaction record: its own fields, then any origin/priority
        system = txn if system is None else {
            **txn, **{k: v for k, v in system.items() if k != "kind"}}
    return system


def _system_body(stored: bytes | None, body: bytes | None, decompressed: bool, sys_flag: int,
                 topic: str, props: dict[str, str]) -> bytes | None:
    """The body a consumer sees, for the system topics whose bodies are decoded (trace, pop);
    None for the others (not read)."""
    if not needs_body(topic, props) or stored is None:
        return None
    if decompressed:
        return body
    if sys_flag & cl_fmt.COMPRESSED_FLAG:
        decoded = decompress_body(stored, sys_flag, 1 << 20)
        return decoded.data if decoded.error is None and decoded.complete else stored
    return stored


def transaction_decoded(topic: str, props: dict, stored: bytes | None) -> dict | None:
    """What a transaction system record says, decoded: an op message's body as the half-queue
    offsets it ends (and the items that are no number), a half message's real topic and queue,
    producer group, transaction id and check times; None for other topics."""
    if topic == tx_fmt.TRANS_OP_HALF_TOPIC:
        offsets, bad = tx_fmt.decode_op_body(stored)
        return {"kind": "transaction-op", "half_offsets": offsets, "bad_items": bad,
                "ends_half_messages": props.get("TAGS") == tx_fmt.REMOVE_TAG}
    if topic == tx_fmt.TRANS_HALF_TOPIC:
        return {"kind": "transaction-half", "real_topic": props.get(tx_fmt.PROP_REAL_TOPIC),
                "real_queue_id": tx_fmt.java_int(props.get(tx_fmt.PROP_REAL_QID)),
                "producer_group": props.get(tx_fmt.PROP_PRODUCER_GROUP),
                "transaction_id": props.get(tx_fmt.PROP_TRANSACTION_ID),
                "check_times": tx_fmt.java_int(props.get(tx_fmt.PROP_CHECK_TIMES))}
    return None


# --- inner batches -------------------------------------------------------------------------------

def _consumer_body(record: MessageRecord, stored: bytes) -> bytes:
    """A batch body as the consumer unwraps it (inflated when the record says compressed)."""
    if record.sys_flag & cl_fmt.COMPRESSED_FLAG and stored:
        decoded = decompress_body(stored, record.sys_flag)
        if decoded.error is None and decoded.complete:
            return decoded.data
    return stored


def inner_message_dicts(outer: dict, opened: OpenedBatch, *, body_mode: str = "base64",
                        max_body_bytes: int | None = None) -> list[dict]:
    """One record per inner message, built on the outer record's dict: the record's topic,
    queue, times and hosts, its own queue offset (INNER_BASE + position), properties, keys,
    tags, UNIQ_KEY, flag and body; ``inner_batch`` says where it lies (the outer record's
    CommitLog offset, size and UNIQ_KEY, its position and the batch's count)."""
    outer_props = outer.get("properties") or {}
    where = {"commitlog_offset": opened.outer_offset, "total_size": outer.get("total_size"),
             "uniq_key": outer_props.get("UNIQ_KEY"), "count": len(opened.messages),
             "stated_count": opened.stated_count, "base": opened.base,
             "properties": outer_props}
    if opened.problem:
        where["problem"] = opened.problem
    out = []
    for inner in opened.messages:
        message = inner.message
        props = message.properties
        body = message.body
        truncated = max_body_bytes is not None and len(body) > max_body_bytes
        shown = body[:max_body_bytes] if truncated else body
        d = dict(outer)
        d.update({
            "queue_offset": inner.queue_offset,
            "flag": message.flag,
            "body_length": len(body),
            "body_crc": codecs.body_crc(body),
            "properties": props,
            "tags": props.get("TAGS"),
            "keys": props.get("KEYS"),
            "uniq_key": props.get("UNIQ_KEY"),
            "body_stored_length": len(body),
            "body_compression": None,
            "body_decompressed": False,
            "body_decompress_error": None,
            "body_truncated": truncated,
        })
        d["body"], d["body_encoding"] = encode_body(shown, body_mode)
        d["inner_batch"] = {**where, "position": inner.position}
        out.append(d)
    return out


def unwrap_message_dict(outer: dict, record: MessageRecord, stored_body, *,
                        body_mode: str = "base64", max_body_bytes: int | None = None
                        ) -> list[dict]:
    """``[outer]`` for an ordinary record; the inner messages of an inner batch. A batch that
    cannot be opened stays one record with ``inner_batch_error`` saying why (never raises)."""
    if not is_inner_batch(record.sys_flag):
        return [outer]
    stored = bytes(stored_body) if stored_body is not None else b""
    opened = open_record(record, _consumer_body(record, stored))
    if not opened.opened:
        outer["inner_batch_error"] = opened.problem
        return [outer]
    return inner_message_dicts(outer, opened, body_mode=body_mode, max_body_bytes=max_body_bytes)


@dataclass
class MessageFilter:
    """Message selection for dump/query: every given criterion must hold.

    ``from_offset``/``to_offset`` are CommitLog offsets, [from, to); ``since``/``until`` are
    store times in epoch ms, [since, until]; ``key`` is one item of KEYS."""

    topic: str | None = None
    queue_id: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    since: int | None = None
    until: int | None = None
    key: str | None = None
    uniq_key: str | None = None

    @property
    def selects_content(self) -> bool:
        """True when records other than messages cannot match (anything but an offset range)."""
        return any(v is not None for v in (self.topic, self.queue_id, self.since, self.until,
                                           self.key, self.uniq_key))

    def offset_in_range(self, offset: int) -> bool:
        return ((self.from_offset is None or offset >= self.from_offset)
                and (self.to_offset is None or offset < self.to_offset))

    def matches(self, record: MessageRecord) -> bool:
        if not self.matches_place(record):
            return False
        if self.key is not None or self.uniq_key is not None:
            return self.matches_properties(codecs.decode_properties(record.properties_raw))
        return True

    def matches_properties(self, props: dict[str, str]) -> bool:
        """The key and UNIQ_KEY criteria on a message's (or an inner message's) properties."""
        if self.key is not None and self.key not in codecs.message_keys(props):
            return False
        return self.uniq_key is None or props.get("UNIQ_KEY") == self.uniq_key

    def matches_place(self, record: MessageRecord) -> bool:
        """Every criterion but key and UNIQ_KEY (what an inner message shares with its batch)."""
        if not self.offset_in_range(record.offset):
            return False
        if self.topic is not None and record.topic != self.topic:
            return False
        if self.queue_id is not None and record.queue_id != self.queue_id:
            return False
        if self.since is not None and record.store_timestamp < self.since:
            return False
        if self.until is not None and record.store_timestamp > self.until:
            return False
        return True


def _event_dict(event, file: str, base: int) -> dict:
    """A non-message scan event as a record."""
    common = {"file": file, "file_offset": event.offset - base, "commitlog_offset": event.offset}
    if isinstance(event, BlankRecord):
        return {"record_type": RT_BLANK, **common, "total_size": event.total_size,
                "magic_code": cl_fmt.BLANK_MAGIC_CODE}
    if isinstance(event, UnwrittenTail):
        return {"record_type": RT_UNWRITTEN, **common, "length": event.length}
    return {"record_type": RT_CORRUPT, **common, "length": event.length, "code": event.code,
            "detail": event.detail, "declared_size": event.total_size}


def iter_commitlog_records(commitlog: CommitLog, *, segments: list[Segment] | None = None,
                           file_name: Callable[[Segment], str] = lambda s: s.name,
                           filters: MessageFilter | None = None, resync: bool = False,
                           body_mode: str = "base64", max_body_bytes: int | None = None,
                           decompress: bool = True, messages_only: bool = False,
                           unwrap: bool = True, progress=None) -> Iterator[dict]:
    """Records of CommitLog segments in offset order (messages with CRC checked, and blank,
    unwritten and corrupt regions unless a content filter or ``messages_only`` excludes them).
    With ``unwrap`` an inner batch gives one record per inner message (key and UNIQ_KEY
    filters then select inner messages; a batch matching them itself gives all of its own).

    Without ``resync`` a corrupt region ends its file's scan, as the broker's recovery does; the
    next file is still scanned. A damaged DLedger entry header whose size still frames an
    intact record is a corrupt region of 48 bytes, and the scan reads on: the record behind it
    comes with ``dledger_entry_damage`` (code and detail), though the broker's DLedger recovery
    ends the log there."""
    filters = filters or MessageFilter()
    scanner = Scanner(commitlog, check_crc=True, resync=resync, forensic=True)
    start, end = filters.from_offset, filters.to_offset
    if segments is None:
        segments = scanner.segments(start, end)
    structural = not (messages_only or filters.selects_content)
    for seg in segments:
        if seg.length == 0:
            continue
        name = file_name(seg)
        seg_start = start if start is not None and start > seg.base_offset else None
        with MappedFile(seg.path) as mapped:
            buf = mapped.data
            for event in scanner.scan_segment(seg, seg_start, end, progress):
                if type(event) is MessageRecord:
                    opening = unwrap and is_inner_batch(event.sys_flag)
                    if not (filters.matches_place(event) if opening else filters.matches(event)):
                        continue
                    body = None
                    if event.body_length > 0:
                        pos = event.body_position - seg.base_offset
                        body = buf[pos:pos + event.body_length]
                    out = message_to_dict(event, body, file=name,
                                          file_offset=event.offset - seg.base_offset,
                                          body_mode=body_mode, max_body_bytes=max_body_bytes,
                                          decompress=decompress)
                    if seg.is_dledger:
                        out["dledger"] = entry_fields(buf, event.offset - seg.base_offset)
                        damage = entry_damage(buf, event.offset - seg.base_offset,
                                              seg.base_offset)
                        if damage is not None:
                            out["dledger_entry_damage"] = damage
                    if not opening:
                        yield out
                        continue
                    whole = filters.matches(event)
                    for d in unwrap_message_dict(out, event, body, body_mode=body_mode,
                                                 max_body_bytes=max_body_bytes):
                        if whole or filters.matches_properties(d["properties"]):
                            yield d
                elif structural and filters.offset_in_range(event.offset):
                    out = _event_dict(event, name, seg.base_offset)
                    if seg.is_dledger and out["record_type"] == RT_BLANK:
                        out["magic_code"] = dledger.dl_fmt.BLANK_MAGIC   # -1, then bytes left
                    yield out
