"""Read-only views of a store: the ``info`` summary and the ``dump`` record streams.

Everything here returns plain JSON-ready values (dicts of str/int/bool/None/lists) so the CLI,
``query``/``export`` and the Spark jobs can share them:

* :func:`store_info` - one dict describing the files, the CommitLog scan, the topic/queue table
  (from the CommitLog and from the ConsumeQueues), checkpoint, abort/lock, configs, geometry;
* :func:`message_to_dict` - the flat record of one CommitLog message (bodies decompressed,
  truncated and encoded on request);
* :func:`dump_path` - the records of a whole store or of any single store file, as dicts with a
  ``record_type`` (``commitlog/message``, ``consumequeue/unit``, ``index/entry``, ...).

Files are only ever opened ``"rb"`` or mapped with ``ACCESS_READ`` (through
:class:`mqtool.store.MappedFile`). Fixed-size units are decoded with numpy dtypes derived from
the construct declarations, so there is no second description of any format here.
"""
from __future__ import annotations

import base64
import codecs as _text_codecs
import datetime as _dt
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from . import codec, dledger, timer
from .errors import MqtoolError, ParseError, StoreLayoutError, StoreNotFoundError
from .formats import checkpoint as ckpt_fmt
from .formats import codecs
from .formats import commitlog as cl_fmt
from .formats import consumequeue as cq_fmt
from .formats import indexfile as idx_fmt
from .passport import store_passport
from .scan import BlankRecord, MessageRecord, Scanner, UnwrittenTail, entry_fields, read_body
from .store import (INDEX_NAME, OFFSET_NAME, CommitLog, ConsumeQueue, MappedFile, Segment, Store,
                    identify_file, load_config, lock_holder, parse_at, queue_of_file,
                    read_fastjson)

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

BODY_MODES = ("text", "hex", "base64", "none")
# A compressed body is at most 4 MiB stored; this bounds what a hostile stream may inflate to.
MAX_DECOMPRESSED_BODY = 256 * 1024 * 1024

# Files and directories a broker (4.x or 5.x) leaves in its store root.
KNOWN_ROOT_ENTRIES = {"commitlog", "consumequeue", "consumequeue_ext", "batchconsumequeue",
                      "index", "checkpoint", "abort", "abort.bak", "lock", "config", "timerlog",
                      "timerwheel", "compaction", "epochFileCheckpoint", "brokerIdentity"}


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



CQ_DTYPE, BCQ_DTYPE = codec.CQ_DTYPE, codec.BATCH_CQ_DTYPE
INDEX_ENTRY_DTYPE, INDEX_SLOT_DTYPE = codec.INDEX_ENTRY_DTYPE, codec.INDEX_SLOT_DTYPE
assert CQ_DTYPE.itemsize == cq_fmt.CQ_STORE_UNIT_SIZE
assert BCQ_DTYPE.itemsize == cq_fmt.BATCH_CQ_STORE_UNIT_SIZE
assert INDEX_ENTRY_DTYPE.itemsize == idx_fmt.INDEX_ENTRY_SIZE


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
    return out


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
        if self.key is not None or self.uniq_key is not None:
            props = codecs.decode_properties(record.properties_raw)
            if self.key is not None and self.key not in codecs.message_keys(props):
                return False
            if self.uniq_key is not None and props.get("UNIQ_KEY") != self.uniq_key:
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
                           progress=None) -> Iterator[dict]:
    """Records of CommitLog segments in offset order (messages with CRC checked, and blank,
    unwritten and corrupt regions unless a content filter or ``messages_only`` excludes them).

    Without ``resync`` a corrupt region ends its file's scan, as the broker's recovery does; the
    next file is still scanned."""
    filters = filters or MessageFilter()
    scanner = Scanner(commitlog, check_crc=True, resync=resync)
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
                    if not filters.matches(event):
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
                    yield out
                elif structural and filters.offset_in_range(event.offset):
                    out = _event_dict(event, name, seg.base_offset)
                    if seg.is_dledger and out["record_type"] == RT_BLANK:
                        out["magic_code"] = dledger.dl_fmt.BLANK_MAGIC   # -1, then bytes left
                    yield out


# --- consume queues ------------------------------------------------------------------------------

def _file_base(path: Path) -> int:
    return int(path.name) if OFFSET_NAME.match(path.name) else 0


def _load_units(path: Path, dtype: np.dtype) -> tuple[np.ndarray, int, int]:
    """(units, file size, bytes after the last whole unit) of a queue file."""
    with MappedFile(path) as mapped:
        size = mapped.size
        whole = size // dtype.itemsize
        units = (np.frombuffer(mapped.data, dtype=dtype, count=whole).copy() if whole
                 else np.zeros(0, dtype=dtype))
    return units, size, size - whole * dtype.itemsize


def _unit_status(offset: int, size: int, tags_code: int) -> str:
    if cq_fmt.is_pre_blank(offset, size, tags_code):
        return "pre_blank"
    return "valid" if cq_fmt.is_valid_unit(offset, size) else "invalid"


def _queue_file(path, file: str | None, topic: str | None, queue_id: int | None):
    """(path, shown file name, topic, queue id, file base offset) of a queue file; the topic and
    queue id come from its directories unless given."""
    path = Path(path)
    if topic is None or queue_id is None:
        topic, queue_id = queue_of_file(path)
    return path, file or path.name, topic, queue_id, _file_base(path)


def iter_consume_queue_file(path: Path, *, file: str | None = None, topic: str | None = None,
                            queue_id: int | None = None) -> Iterator[dict]:
    """Units of one ConsumeQueue file with their queue offsets ((file base + position)/20), up
    to the first unit with size 0 (reported as ``consumequeue/end`` with what lies after it).
    A file that is not a multiple of 20 bytes gives its whole units, then a partial-unit record."""
    path, file, topic, queue_id, base = _queue_file(path, file, topic, queue_id)
    unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
    units, size, leftover = _load_units(path, CQ_DTYPE)
    rows = units.tolist()
    for i, (offset, msg_size, tags_code) in enumerate(rows):
        position = i * unit_size
        queue_offset = (base + position) // unit_size
        if msg_size == 0:
            after = units[i + 1:]
            nonzero = int(np.count_nonzero(after["size"] != 0) if len(after) else 0)
            yield {"record_type": RT_CQ_END, "file": file, "topic": topic, "queue_id": queue_id,
                   "file_offset": position, "queue_offset": queue_offset,
                   "units_after_end": len(after), "nonzero_units_after_end": nonzero}
            return
        yield {"record_type": RT_CQ_UNIT, "file": file, "topic": topic, "queue_id": queue_id,
               "file_offset": position, "queue_offset": queue_offset,
               "commitlog_offset": offset, "size": msg_size, "tags_code": tags_code,
               "status": _unit_status(offset, msg_size, tags_code)}
    if leftover:
        yield {"record_type": RT_CQ_PARTIAL, "file": file, "topic": topic, "queue_id": queue_id,
               "file_offset": size - leftover, "length": leftover,
               "detail": f"file size {size} is not a multiple of {unit_size}; "
                         f"the last {leftover} bytes are not a whole unit"}


def iter_batch_consume_queue_file(path: Path, *, file: str | None = None,
                                  topic: str | None = None,
                                  queue_id: int | None = None) -> Iterator[dict]:
    """Units of one BatchConsumeQueue file (46 bytes; located by msg_base_offset, not by
    position, so ``unit_index`` = (file base + position)/46 is only the slot number)."""
    path, file, topic, queue_id, base = _queue_file(path, file, topic, queue_id)
    unit_size = cq_fmt.BATCH_CQ_STORE_UNIT_SIZE
    units, size, leftover = _load_units(path, BCQ_DTYPE)
    names = BCQ_DTYPE.names
    for i, row in enumerate(units.tolist()):
        unit = dict(zip(names, row))
        position = i * unit_size
        if unit["size"] == 0:
            after = units[i + 1:]
            yield {"record_type": RT_BCQ_END, "file": file, "topic": topic, "queue_id": queue_id,
                   "file_offset": position, "unit_index": (base + position) // unit_size,
                   "units_after_end": len(after),
                   "nonzero_units_after_end": int(np.count_nonzero(after["size"] != 0))
                   if len(after) else 0}
            return
        valid = cq_fmt.is_valid_batch_unit(unit["commitlog_offset"], unit["size"],
                                           unit["msg_base_offset"], unit["batch_size"])
        yield {"record_type": RT_BCQ_UNIT, "file": file, "topic": topic, "queue_id": queue_id,
               "file_offset": position, "unit_index": (base + position) // unit_size, **unit,
               "status": "valid" if valid else "invalid"}
    if leftover:
        yield {"record_type": RT_BCQ_PARTIAL, "file": file, "topic": topic, "queue_id": queue_id,
               "file_offset": size - leftover, "length": leftover,
               "detail": f"file size {size} is not a multiple of {unit_size}; "
                         f"the last {leftover} bytes are not a whole unit"}


def queue_summary(queue: ConsumeQueue, commitlog_end: int | None = None) -> dict:
    """What a ConsumeQueue's own files say: units (valid, pre-blank, invalid), the first valid
    queue offset, the next queue offset (end of written units, as getMaxOffsetInQueue) and the
    end of the last unit in the CommitLog (maxPhysicOffset)."""
    is_batch = queue.unit_size == cq_fmt.BATCH_CQ_STORE_UNIT_SIZE
    dtype = BCQ_DTYPE if is_batch else CQ_DTYPE
    unit_size = dtype.itemsize
    valid = pre_blank = invalid = 0
    min_offset = next_offset = None
    max_physic = -1
    past_end = 0
    notes = []
    for seg in queue.segments:
        units, size, leftover = _load_units(seg.path, dtype)
        if leftover:
            notes.append(f"{seg.name}: {size} bytes is not a multiple of {unit_size}")
        sizes = units["size"]
        zero = np.flatnonzero(sizes == 0)
        written = units[:zero[0]] if len(zero) else units
        offsets, sizes = written["commitlog_offset"], written["size"]
        blank = (offsets == 0) & (sizes == cq_fmt.PRE_BLANK_SIZE) & (written["tags_code"] == 0)
        good = (offsets >= 0) & (sizes > 0) & ~blank
        if is_batch:
            good &= (written["msg_base_offset"] >= 0) & (written["batch_size"] > 0)
        valid += int(good.sum())
        pre_blank += int(blank.sum())
        invalid += int(len(written) - good.sum() - blank.sum())
        if good.any():
            first = int(np.flatnonzero(good)[0])
            if min_offset is None:
                min_offset = (int(written["msg_base_offset"][first]) if is_batch
                              else (seg.base_offset + first * unit_size) // unit_size)
            last = int(np.flatnonzero(good)[-1])
            max_physic = int(offsets[last]) + int(sizes[last])
            if commitlog_end is not None:
                past_end += int(((offsets[good] + sizes[good]) > commitlog_end).sum())
        if not is_batch:
            next_offset = (seg.base_offset + len(written) * unit_size) // unit_size
        elif good.any():
            # a BatchConsumeQueue is not positional: the next offset follows the last batch
            last = int(np.flatnonzero(good)[-1])
            next_offset = int(written["msg_base_offset"][last]) + int(written["batch_size"][last])
    return {"files": len(queue.segments), "bytes": sum(s.length for s in queue.segments),
            "units": valid, "pre_blank_units": pre_blank, "invalid_units": invalid,
            "min_offset": min_offset, "max_offset": next_offset,
            "max_physic_offset": max_physic if max_physic >= 0 else None,
            "units_past_commitlog_end": past_end if commitlog_end is not None else None,
            "stray_files": [p.name for p in queue.stray_files], "notes": notes}


# --- index files ---------------------------------------------------------------------------------

def index_geometry(file_size: int, slots: int | None = None,
                   entries: int | None = None) -> tuple[int, int]:
    """(slots, entries) of an IndexFile: the given values, or derived from its size."""
    body = file_size - idx_fmt.INDEX_HEADER_SIZE
    slot_size, entry_size = idx_fmt.HASH_SLOT_SIZE, idx_fmt.INDEX_ENTRY_SIZE
    if slots and entries:
        return slots, entries
    if slots:
        return slots, max(0, (body - slot_size * slots) // entry_size)
    if entries:
        return max(0, (body - entry_size * entries) // slot_size), entries
    guesses = idx_fmt.geometries_for_size(file_size)
    if guesses:
        return guesses[0]
    defaults = (idx_fmt.DEFAULT_SLOT_COUNT, idx_fmt.DEFAULT_ENTRY_COUNT)
    if file_size == idx_fmt.index_file_size(*defaults):
        return defaults
    raise MqtoolError(f"cannot infer the IndexFile geometry from its size ({file_size} bytes); "
                      f"pass --index-slots and --index-entries")


def read_index_header(data, name: str) -> dict:
    if len(data) < idx_fmt.INDEX_HEADER_SIZE:
        raise ParseError(name, 0, "", f"IndexFile is {len(data)} bytes, shorter than its "
                                      f"{idx_fmt.INDEX_HEADER_SIZE}-byte header")
    parsed = parse_at(idx_fmt.index_header, data[:idx_fmt.INDEX_HEADER_SIZE], file=name)
    return {k: v for k, v in parsed.items() if not k.startswith("_")}


def index_header_dict(header: dict, *, file: str, file_size: int, slots: int,
                      entries: int) -> dict:
    expected = idx_fmt.index_file_size(slots, entries)
    return {"record_type": RT_INDEX_HEADER, "file": file, "file_size": file_size,
            "begin_timestamp": header["begin_timestamp"],
            "begin_time": ms_to_iso(header["begin_timestamp"]),
            "end_timestamp": header["end_timestamp"],
            "end_time": ms_to_iso(header["end_timestamp"]),
            "begin_phy_offset": header["begin_phy_offset"],
            "end_phy_offset": header["end_phy_offset"],
            "hash_slot_count": header["hash_slot_count"], "index_count": header["index_count"],
            "entries_used": max(0, header["index_count"] - 1),
            "slot_count": slots, "entry_count": entries, "expected_size": expected,
            "size_ok": file_size == expected}


def iter_index_file(path: Path, *, file: str | None = None, slots: int | None = None,
                    entries: int | None = None, follow_slot: int | None = None) -> Iterator[dict]:
    """The header, the used hash slots, then entries 1..indexCount-1 of an IndexFile.

    With ``follow_slot`` only that slot's chain is walked (newest entry first, via prev_index);
    the walk stops with an ``index/note`` at a loop or a pointer past indexCount / the file."""
    path = Path(path)
    file = file or path.name
    with MappedFile(path) as mapped:
        data = mapped.data
        size = mapped.size
        header = read_index_header(data, str(path))
        slots, entries = index_geometry(size, slots, entries)
        yield index_header_dict(header, file=file, file_size=size, slots=slots, entries=entries)
        index_count = header["index_count"]
        begin_ts = header["begin_timestamp"]
        slot_area = idx_fmt.INDEX_HEADER_SIZE
        readable_slots = max(0, min(slots, (size - slot_area) // idx_fmt.HASH_SLOT_SIZE))
        slot_values = np.frombuffer(data, dtype=INDEX_SLOT_DTYPE, count=readable_slots,
                                    offset=slot_area) if readable_slots else np.zeros(0, ">i4")
        entry_area = idx_fmt.entry_position(slots, 0)
        readable_entries = max(0, min(entries, (size - entry_area) // idx_fmt.INDEX_ENTRY_SIZE))

        def note(text: str, **extra) -> dict:
            return {"record_type": RT_INDEX_NOTE, "file": file, "note": text, **extra}

        def entry(number: int, **extra) -> dict:
            pos = idx_fmt.entry_position(slots, number)
            key_hash, phy_offset, time_diff, prev_index = np.frombuffer(
                data, dtype=INDEX_ENTRY_DTYPE, count=1, offset=pos).tolist()[0]
            return {"record_type": RT_INDEX_ENTRY, "file": file, "number": number,
                    "file_offset": pos, "key_hash": key_hash, "slot": key_hash % slots,
                    "phy_offset": phy_offset, "time_diff": time_diff,
                    "timestamp": begin_ts + time_diff * 1000,
                    "time": ms_to_iso(begin_ts + time_diff * 1000), "prev_index": prev_index,
                    **extra}

        if readable_slots < slots:
            yield note(f"the file holds {readable_slots} of {slots} hash slots and no entries: "
                       f"it is {size} bytes, {idx_fmt.index_file_size(slots, entries)} expected")
        if follow_slot is not None:
            if not 0 <= follow_slot < slots:
                raise MqtoolError(f"--follow-slot {follow_slot} is outside 0..{slots - 1}")
            if follow_slot >= readable_slots:
                return
            number = int(slot_values[follow_slot])
            yield {"record_type": RT_INDEX_SLOT, "file": file, "slot": follow_slot,
                   "file_offset": idx_fmt.slot_position(follow_slot), "entry": number,
                   "valid": 0 < number < index_count}
            seen: set[int] = set()
            position = 0
            while number > 0:
                if number >= index_count:
                    yield note(f"entry {number} is past indexCount {index_count}: chain walk "
                               f"stopped", entry=number)
                    return
                if number >= readable_entries:
                    yield note(f"entry {number} is past the end of the file: chain walk stopped",
                               entry=number)
                    return
                if number in seen:
                    yield note(f"entry {number} was already visited (a loop): chain walk stopped",
                               entry=number)
                    return
                seen.add(number)
                record = entry(number, chain_position=position)
                yield record
                number = record["prev_index"]
                position += 1
            if number < 0:
                yield note(f"prev_index {number} is negative: chain walk stopped", entry=number)
            return

        for slot in np.flatnonzero(slot_values).tolist():
            value = int(slot_values[slot])
            yield {"record_type": RT_INDEX_SLOT, "file": file, "slot": slot,
                   "file_offset": idx_fmt.slot_position(slot), "entry": value,
                   "valid": 0 < value < index_count}
        last = index_count - 1
        if last > entries - 1:
            yield note(f"indexCount {index_count} exceeds the {entries} entries of the file; "
                       f"listing the first {entries - 1}")
            last = entries - 1
        if last > readable_entries - 1:
            if readable_entries:
                yield note(f"the file ends after entry {readable_entries - 1}; indexCount says "
                           f"{index_count}")
            last = readable_entries - 1
        for number in range(1, last + 1):
            yield entry(number)


# --- checkpoint, abort, lock, config -------------------------------------------------------------

CHECKPOINT_TIME_FIELDS = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")


def checkpoint_dict(data: bytes, file: str) -> dict:
    """The checkpoint's fields (timestamps raw and as UTC) plus the derived recovery minimums.
    ``master_flushed_offset``/``confirm_phy_offset`` exist only in 5.x (0 in 4.x files)."""
    if len(data) < 40:
        raise ParseError(file, 0, "", f"checkpoint is {len(data)} bytes, expected "
                                      f"{ckpt_fmt.CHECKPOINT_SIZE}")
    page = bytes(data[:ckpt_fmt.CHECKPOINT_SIZE]).ljust(ckpt_fmt.CHECKPOINT_SIZE, b"\0")
    parsed = parse_at(ckpt_fmt.checkpoint, page, file=file)
    out = {"record_type": RT_CHECKPOINT, "file": file, "file_size": len(data),
           "size_ok": len(data) == ckpt_fmt.CHECKPOINT_SIZE}
    for name in CHECKPOINT_TIME_FIELDS:
        out[name] = parsed[name]
        out[name.replace("_timestamp", "_time")] = ms_to_iso(parsed[name])
    out["master_flushed_offset"] = parsed["master_flushed_offset"]
    out["confirm_phy_offset"] = parsed["confirm_phy_offset"]
    out["rest_zero"] = not any(bytes(data[40:]))
    minimum = ckpt_fmt.min_timestamp(parsed["physic_msg_timestamp"],
                                     parsed["logics_msg_timestamp"])
    out["min_timestamp"] = minimum
    out["min_time"] = ms_to_iso(minimum)
    out["min_timestamp_index"] = ckpt_fmt.min_timestamp_index(
        parsed["physic_msg_timestamp"], parsed["logics_msg_timestamp"],
        parsed["index_msg_timestamp"])
    return out


def _read_small(path: Path, limit: int = 1 << 16) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(limit)


def small_file_dict(path: Path, kind: str, file: str | None = None) -> dict:
    """abort / abort.bak (empty in 4.x, the broker PID in 5.x) or lock (``lock``, plus whether
    a live process holds it)."""
    path = Path(path)
    raw = _read_small(path)
    text = raw.decode("utf-8", errors="replace")
    out = {"record_type": RT_ABORT if kind == "abort" else RT_LOCK, "file": file or path.name,
           "file_size": path.stat().st_size, "content": text}
    if kind == "abort":
        out["pid"] = int(text.strip()) if text.strip().isdigit() else None
    else:
        out["held"] = lock_holder(path)
    return out


def config_dict(path: Path, file: str | None = None) -> dict:
    """A fastjson config file; for a main file the ``.bak`` is the fallback, as in the broker's
    ConfigManager (``source`` says which was read)."""
    path = Path(path)
    if path.name.endswith(".bak"):
        try:
            data, source = read_fastjson(path), path.name
        except ValueError as err:
            raise ParseError(file or path.name, 0, "", f"not readable as fastjson: {err}") from None
    else:
        data, source = load_config(path)
    if data is None:
        raise ParseError(file or path.name, 0, "", "not readable as fastjson (nor its .bak)")
    return {"record_type": RT_CONFIG, "file": file or path.name, "source": source, "data": data}


# --- dump dispatch -------------------------------------------------------------------------------

@dataclass
class DumpOptions:
    body: str = "base64"
    max_body_bytes: int | None = None
    decompress: bool = True
    resync: bool = False
    messages_only: bool = False
    filters: MessageFilter = field(default_factory=MessageFilter)
    follow_slot: int | None = None
    kind: str | None = None            # force the kind of a single file
    commitlog_file_size: int | None = None
    cq_units: int | None = None
    index_slots: int | None = None
    index_entries: int | None = None
    progress: object = None            # a tqdm-like bar fed with scanned CommitLog bytes


DUMPABLE_KINDS = ("commitlog", "consumequeue", "batchconsumequeue", "index", "checkpoint",
                  "abort", "lock", "config", "timerlog", "timerwheel", "timercheck",
                  dledger.DLEDGER_INDEX_KIND, dledger.DLEDGER_TEXT_KIND)


def path_kind(path: Path, kind: str | None = None) -> str:
    """``store`` for a directory holding a store (or a bare CommitLog directory), ``queue-dir`` /
    ``index-dir`` for a directory of such files, else the kind of the single file."""
    path = Path(path)
    if not path.exists():
        raise StoreNotFoundError(f"{path}: no such file or directory")
    if path.is_dir():
        parts = path.resolve().parts
        offset_files = any(OFFSET_NAME.match(p.name) for p in path.iterdir() if p.is_file())
        if offset_files and len(parts) >= 3 and parts[-3] in ("consumequeue", "batchconsumequeue"):
            return "queue-dir"
        if path.name == "index" and any(INDEX_NAME.match(p.name) for p in path.iterdir()):
            return "index-dir"
        return "store"
    if kind:
        if kind not in DUMPABLE_KINDS:
            raise MqtoolError(f"--kind must be one of {', '.join(DUMPABLE_KINDS)}")
        return kind
    return identify_file(path)


def _require_nonempty(path: Path, kind: str) -> None:
    if path.stat().st_size == 0:
        raise StoreLayoutError(f"{path}: empty file (0 bytes): no {kind} data to dump")


def dump_path(path: Path, options: DumpOptions | None = None) -> Iterator[dict]:
    """Records of a store (its CommitLog) or of one store file; see the module docstring."""
    options = options or DumpOptions()
    path = Path(path)
    kind = path_kind(path, options.kind)
    if options.follow_slot is not None and kind not in ("index",):
        raise MqtoolError("--follow-slot applies to a single IndexFile")
    body_args = dict(body_mode=options.body, max_body_bytes=options.max_body_bytes,
                     decompress=options.decompress)
    if options.body not in BODY_MODES:
        raise MqtoolError(f"--body must be one of {', '.join(BODY_MODES)}")
    if kind == "store":
        store = Store(path, commitlog_file_size=options.commitlog_file_size,
                      cq_units_per_file=options.cq_units, index_slots=options.index_slots,
                      index_entries=options.index_entries)
        yield from iter_commitlog_records(
            store.commitlog, file_name=lambda seg: store.relative(seg.path),
            filters=options.filters, resync=options.resync, messages_only=options.messages_only,
            progress=options.progress, **body_args)
    elif kind == "queue-dir":
        is_batch = path.resolve().parts[-3] == "batchconsumequeue"
        reader = iter_batch_consume_queue_file if is_batch else iter_consume_queue_file
        for child in sorted(p for p in path.iterdir() if p.is_file() and OFFSET_NAME.match(p.name)):
            yield from reader(child, file=child.name)
    elif kind == "index-dir":
        for child in sorted(p for p in path.iterdir() if p.is_file() and INDEX_NAME.match(p.name)):
            yield from iter_index_file(child, file=child.name, slots=options.index_slots,
                                       entries=options.index_entries)
    elif kind == "commitlog":
        _require_nonempty(path, kind)
        base = _file_base(path)
        commitlog = CommitLog(path.parent, options.commitlog_file_size)
        segment = Segment(path, base, path.stat().st_size)
        yield from iter_commitlog_records(
            commitlog, segments=[segment], filters=options.filters, resync=options.resync,
            messages_only=options.messages_only, progress=options.progress, **body_args)
    elif kind == "consumequeue":
        _require_nonempty(path, kind)
        yield from iter_consume_queue_file(path)
    elif kind == "batchconsumequeue":
        _require_nonempty(path, kind)
        yield from iter_batch_consume_queue_file(path)
    elif kind == "index":
        _require_nonempty(path, kind)
        yield from iter_index_file(path, slots=options.index_slots, entries=options.index_entries,
                                   follow_slot=options.follow_slot)
    elif kind == "checkpoint":
        _require_nonempty(path, kind)
        record = checkpoint_dict(_read_small(path, ckpt_fmt.CHECKPOINT_SIZE * 2), str(path))
        record["file"] = path.name
        yield record
    elif kind in ("abort", "lock"):
        yield small_file_dict(path, kind)
    elif kind == "config":
        yield config_dict(path)
    elif kind == "timerlog":
        _require_nonempty(path, kind)
        for record in timer.iter_timerlog(path, _file_base(path)):
            yield {"file": path.name, **record}
    elif kind == "timerwheel":
        _require_nonempty(path, kind)
        for record in timer.iter_timerwheel(path):
            yield {"file": path.name, **record}
    elif kind == "timercheck":
        _require_nonempty(path, kind)
        yield {"file": path.name, **timer.timer_checkpoint_dict(path)}
    elif kind in (dledger.DLEDGER_INDEX_KIND, dledger.DLEDGER_TEXT_KIND):
        yield from dledger.dump_file(path, kind)
    else:
        raise StoreLayoutError(f"{path}: dumping {kind} files is not supported")


# --- info ----------------------------------------------------------------------------------------

def _geometry(store: Store) -> dict:
    def source(value, inferred, default):
        if inferred and value == inferred:
            return "inferred"
        if value == default and not inferred:
            return "default"
        return "override"

    cl = store.commitlog
    index_sizes = Counter(f.length for f in store.index_files)
    common_index = index_sizes.most_common(1)[0][0] if index_sizes else 0
    inferred_index = idx_fmt.geometries_for_size(common_index) if common_index else []
    index_value = (store.index_slots, store.index_entries)
    return {
        "commitlog_file_size": cl.file_size,
        "commitlog_file_size_source": source(cl.file_size, cl.inferred_file_size, 1024 ** 3),
        "cq_units_per_file": store.cq_units_per_file,
        "cq_file_size": store.cq_units_per_file * cq_fmt.CQ_STORE_UNIT_SIZE,
        "cq_units_per_file_source": source(store.cq_units_per_file,
                                           store.inferred_cq_units_per_file,
                                           cq_fmt.DEFAULT_CQ_UNITS_PER_FILE),
        "index_slots": store.index_slots,
        "index_entries": store.index_entries,
        "index_file_size": idx_fmt.index_file_size(*index_value),
        "index_geometry_source": source(index_value, inferred_index[0] if inferred_index else None,
                                        (idx_fmt.DEFAULT_SLOT_COUNT, idx_fmt.DEFAULT_ENTRY_COUNT)),
    }


def _scan_summary(store: Store, check_crc: bool, progress=None) -> tuple[dict, dict]:
    """(CommitLog section, per topic/queue counts) from one scan of every segment."""
    cl = store.commitlog
    scanner = Scanner(cl, check_crc=check_crc, resync=False)
    files = []
    per_queue: dict[tuple[str, int], dict] = {}
    by_transaction = Counter()
    messages = compressed = v2 = crc_bad = offset_bad = prop_crc_bad = prop_crc_records = 0
    first_ts = last_ts = min_ts = max_ts = None
    end_of_data = None
    corrupt = []
    previous_end = None
    for seg in cl.segments:
        entry = {"name": seg.name, "file": store.relative(seg.path), "size": seg.length,
                 "start_offset": seg.base_offset, "end_offset": seg.base_offset + seg.length,
                 "size_ok": seg.length == cl.file_size, "messages": 0, "scan_end": None}
        if previous_end is not None and seg.base_offset != previous_end:
            entry["gap_before"] = seg.base_offset - previous_end
        previous_end = seg.base_offset + cl.file_size
        for event in scanner.scan_segment(seg, progress=progress):
            kind = type(event)
            if kind is MessageRecord:
                entry["messages"] += 1
                messages += 1
                end_of_data = event.end
                tx = event.sys_flag & cl_fmt.TRANSACTION_TYPE_MASK
                by_transaction[cl_fmt.TRANSACTION_NAMES[tx]] += 1
                compressed += bool(event.sys_flag & cl_fmt.COMPRESSED_FLAG)
                v2 += event.magic_code == cl_fmt.MESSAGE_MAGIC_CODE_V2
                crc_bad += event.body_crc_ok is False
                prop_crc_bad += event.prop_crc_ok is False
                # presence, not validity: quick scans leave prop_crc_ok unset
                prop_crc_records += codecs.stored_prop_crc(event.properties_raw) is not None
                offset_bad += not event.offset_ok
                ts = event.store_timestamp
                if first_ts is None:
                    first_ts = min_ts = max_ts = ts
                min_ts, max_ts, last_ts = min(min_ts, ts), max(max_ts, ts), ts
                q = per_queue.get((event.topic, event.queue_id))
                if q is None:
                    q = per_queue[(event.topic, event.queue_id)] = {
                        "messages": 0, "min_queue_offset": None, "max_queue_offset": None,
                        "prepared": 0, "rollback": 0}
                if tx in (cl_fmt.TRANSACTION_NOT_TYPE, cl_fmt.TRANSACTION_COMMIT_TYPE):
                    q["messages"] += 1
                    qo = event.queue_offset
                    if q["min_queue_offset"] is None or qo < q["min_queue_offset"]:
                        q["min_queue_offset"] = qo
                    if q["max_queue_offset"] is None or qo > q["max_queue_offset"]:
                        q["max_queue_offset"] = qo
                elif tx == cl_fmt.TRANSACTION_PREPARED_TYPE:
                    q["prepared"] += 1
                else:
                    q["rollback"] += 1
            else:
                position = event.offset - seg.base_offset
                if kind is BlankRecord:
                    entry["scan_end"] = {"kind": "blank", "position": position,
                                         "declared_size": event.total_size}
                elif kind is UnwrittenTail:
                    entry["scan_end"] = {"kind": "unwritten", "position": position,
                                         "length": event.length}
                else:
                    entry["scan_end"] = {"kind": "corrupt", "position": position,
                                         "code": event.code, "detail": event.detail}
                    corrupt.append({"file": seg.name, "position": position,
                                    "commitlog_offset": event.offset, "code": event.code,
                                    "detail": event.detail})
        if entry["scan_end"] is None:
            entry["scan_end"] = {"kind": "file_end", "position": seg.length}
        files.append(entry)
    section = {
        "directory": store.relative(cl.directory) if cl.directory != store.root else ".",
        "files": files,
        "stray_files": [store.relative(p) for p in cl.stray_files],
        "min_offset": cl.min_offset if cl.segments else None,
        "end_of_data": end_of_data,
        "messages": messages,
        "by_transaction": {name: by_transaction.get(name, 0)
                           for name in cl_fmt.TRANSACTION_NAMES.values()},
        "compressed": compressed,
        "v2_records": v2,
        "prop_crc_records": prop_crc_records,
        "crc_checked": check_crc,
        "body_crc_mismatches": crc_bad if check_crc else None,
        "prop_crc_mismatches": prop_crc_bad if check_crc else None,
        "physical_offset_mismatches": offset_bad,
        "corrupt_regions": corrupt,
        "first_store_timestamp": first_ts, "first_store_time": ms_to_iso(first_ts),
        "last_store_timestamp": last_ts, "last_store_time": ms_to_iso(last_ts),
        "min_store_timestamp": min_ts, "max_store_timestamp": max_ts,
    }
    return section, per_queue


def _index_section(store: Store) -> dict:
    files = []
    for info in store.index_files:
        entry = {"name": info.name, "size": info.length,
                 "size_ok": info.length == idx_fmt.index_file_size(store.index_slots,
                                                                    store.index_entries)}
        try:
            with MappedFile(info.path) as mapped:
                header = read_index_header(mapped.data, info.name)
            entry.update(header)
            entry["begin_time"] = ms_to_iso(header["begin_timestamp"])
            entry["end_time"] = ms_to_iso(header["end_timestamp"])
            entry["entries_used"] = max(0, header["index_count"] - 1)
            entry["full"] = header["index_count"] >= store.index_entries
        except ParseError as err:
            entry["error"] = str(err)
        files.append(entry)
    return {"files": files, "stray_files": [store.relative(p) for p in store.index_stray]}


def _checkpoint_section(store: Store) -> dict | None:
    path = store.checkpoint_path
    if not path.is_file():
        return None
    try:
        out = checkpoint_dict(_read_small(path, ckpt_fmt.CHECKPOINT_SIZE * 2), "checkpoint")
    except ParseError as err:
        return {"error": str(err)}
    out.pop("record_type", None)
    out.pop("file", None)
    return out


def _config_summary(name: str, data) -> dict:
    if not isinstance(data, dict):
        return {}
    if name == "topics.json":
        return {"topics": len(data.get("topicConfigTable") or {})}
    if name in ("consumerOffset.json", "lmqConsumerOffset.json"):
        table = data.get("offsetTable") or {}
        return {"topic_groups": len(table),
                "queues": sum(len(v) for v in table.values() if isinstance(v, dict))}
    if name == "delayOffset.json":
        table = data.get("offsetTable") or {}
        return {"levels": {str(k): v for k, v in sorted(table.items(),
                                                         key=lambda kv: int(kv[0])
                                                         if str(kv[0]).lstrip("-").isdigit()
                                                         else 0)}}
    if name == "subscriptionGroup.json":
        return {"groups": len(data.get("subscriptionGroupTable") or {})}
    return {"keys": sorted(map(str, data))[:10]}


def _config_section(store: Store) -> dict:
    out = {}
    for name, (data, source) in store.configs().items():
        entry = {"source": source, "fallback_to_bak": bool(source and source.endswith(".bak"))}
        if data is None:
            entry["error"] = "unreadable (main file and .bak)"
        else:
            entry.update(_config_summary(name, data))
        out[name] = entry
    return out


def _stray_root_entries(store: Store) -> list[str]:
    if store.is_bare_commitlog:
        return []
    return sorted(p.name + ("/" if p.is_dir() else "") for p in store.root.iterdir()
                  if p.name not in KNOWN_ROOT_ENTRIES and not p.name.startswith("dledger-")
                  and not p.name.startswith("."))


def _abort_section(store: Store) -> dict:
    root = store.root
    out = {"present": store.abort_exists, "last_shutdown_abnormal": store.abort_exists,
           "content": None, "pid": None, "bak_present": (root / "abort.bak").is_file(),
           "bak_content": None}
    if out["present"] and (root / "abort").is_file():
        out["content"] = _read_small(root / "abort").decode("utf-8", errors="replace")
        out["pid"] = int(out["content"].strip()) if out["content"].strip().isdigit() else None
    if out["bak_present"]:
        out["bak_content"] = _read_small(root / "abort.bak").decode("utf-8", errors="replace")
    return out


def _lock_section(store: Store) -> dict:
    path = store.root / "lock"
    present = path.is_file()
    return {"present": present, "held": store.lock_held() if present else False,
            "content": _read_small(path).decode("utf-8", errors="replace") if present else None}


def store_info(store: Store, *, check_crc: bool = False, progress=None) -> dict:
    """Everything ``mqtool info`` shows, as one JSON-ready dict.

    Message counts and queue-offset ranges come from one CommitLog scan (CRC not checked unless
    asked: info must be quick); only NOT/COMMIT records carry queue offsets, PREPARED/ROLLBACK
    are counted apart. Each queue also gets what its own ConsumeQueue files say."""
    commitlog, per_queue = _scan_summary(store, check_crc, progress)
    cl_end = commitlog["end_of_data"]
    queues = {(q.topic, q.queue_id): q for q in store.consume_queues}
    topics = []
    for key in sorted(set(per_queue) | set(queues), key=lambda k: (k[0], k[1])):
        topic, queue_id = key
        cq = queues.get(key)
        topics.append({"topic": topic, "queue_id": queue_id,
                       "commitlog": per_queue.get(key),
                       "consume_queue": queue_summary(cq, cl_end) if cq is not None else None})
    batch = [{"topic": q.topic, "queue_id": q.queue_id, **queue_summary(q, cl_end)}
             for q in store.batch_consume_queues]
    cq_files = sum(len(q.segments) for q in store.consume_queues)
    return {
        "root": str(store.root),
        "layout": "bare-commitlog" if store.is_bare_commitlog else "store",
        "geometry": _geometry(store),
        "passport": store_passport(store, v2_records=commitlog["v2_records"],
                                   prop_crc_records=commitlog["prop_crc_records"]),
        "commitlog": commitlog,
        "consume_queues": {"queues": len(store.consume_queues), "files": cq_files,
                           "bytes": sum(s.length for q in store.consume_queues
                                        for s in q.segments),
                           "stray_files": [store.relative(p) for q in store.consume_queues
                                           for p in q.stray_files]},
        "batch_consume_queues": batch,
        "topics": topics,
        "index": _index_section(store),
        "checkpoint": _checkpoint_section(store),
        "abort": _abort_section(store),
        "lock": _lock_section(store),
        "config": _config_section(store),
        "stray_files": _stray_root_entries(store),
    }
