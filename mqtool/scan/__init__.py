"""The CommitLog scanner every command shares.

It walks segment files on a read-only mmap with ``struct`` codecs derived from the construct
declarations in :mod:`mqtool.formats.commitlog`, and yields, in offset order:

* :class:`MessageRecord` - a message, with its integrity flags (body CRC, property CRC,
  self-recorded PHYSICALOFFSET vs real position);
* :class:`BlankRecord` - the end-of-file filler; the rest of the file is not data;
* :class:`UnwrittenTail` - zeros where a record should start: the end of written data;
* :class:`CorruptRegion` - bytes that are not a record the broker would accept (bad magic,
  declared vs computed length, a record running past the file end). Without ``resync`` the scan
  of that file stops here, as the broker's does; with it the scanner resynchronises on the next
  plausible record (magic, PHYSICALOFFSET equal to its position, consistent length, body CRC).

Only records that pass the cheap checks are decoded by the fast path; anything else is handed
to the interpreted construct declaration so the reported error names the failing field.

:func:`scan_buffer_batches` / :func:`scan_segment_batches` yield the same events with runs of
records as :class:`RecordBatch` columns (numpy), decoded a run at a time; ``scan_buffer`` stays
the reference they are tested against, and decodes every record the batch path refuses.

Both CommitLog layouts go through the same functions: a :class:`~mqtool.store.Segment` says
whether its records are back to back (plain) or each inside a DLedger entry (48-byte header in
front, :mod:`mqtool.formats.dledger`). For DLedger data the scan steps from entry to entry, checks
each header as the broker's DLedger recovery does (magic, pos = its own offset, size = header +
body, the body is exactly one record) and decodes the record behind it; events carry the same
offsets as in plain mode (a record's offset is entry pos + 48, the broker's commitLogOffset; a
corrupt region starts at the entry). The buffer-level functions take ``layout``.
"""
from __future__ import annotations

import bisect
import mmap
import re
import struct
from itertools import repeat
from typing import Iterator, NamedTuple

import numpy as np

from .. import codec as _codec
from ..crc import crc32 as _crc32
from ..codec import HOST_FLAGS, MESSAGE_HEADER, MESSAGE_MIDDLE
from ..errors import MqtoolError, ParseError
from ..mapping import map_readonly
from ..formats import codecs
from ..formats import commitlog as fmt
from ..formats import dledger as dl_fmt
from ..store import (COMMITLOG_LAYOUT, DLEDGER_LAYOUT, CommitLog, MappedFile, Segment, parse_at,
                    written_extent)

# --- struct codecs derived from the declarations (mqtool.codec) -----------------------------
HEADER = MESSAGE_HEADER
MIDDLE = MESSAGE_MIDDLE
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
MIN_MESSAGE_SIZE = fmt.message_length(fmt.MESSAGE_MAGIC_CODE, 0, 0, 0, 0)
_V1, _V2, _BLANK = fmt.MESSAGE_MAGIC_CODE, fmt.MESSAGE_MAGIC_CODE_V2, fmt.BLANK_MAGIC_CODE
_MAGIC_BYTES = (_U32.pack(_V1), _U32.pack(_V2))
_MAGIC_PATTERN = re.compile(b"|".join(re.escape(m) for m in _MAGIC_BYTES))
_PROP_CRC_PREFIX = (codecs.PROP_CRC_KEY + codecs.NAME_VALUE_SEPARATOR).encode()
_DL_HEADER = _codec.DLEDGER_ENTRY_HEADER
_DL_HEADER_SIZE = dl_fmt.ENTRY_HEADER_SIZE
_DL_HEADER_FIELDS = tuple(sc.name for sc in dl_fmt.entry_header.subcons)

# --- scan events ---------------------------------------------------------------------------------


class MessageRecord(NamedTuple):
    """A message record at global ``offset``; fields named as in the declaration."""

    offset: int
    total_size: int
    magic_code: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_ip: bytes
    born_port: int
    store_timestamp: int
    store_ip: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body_length: int
    body_position: int        # global offset of the first body byte
    topic: str
    properties_raw: bytes
    body_crc_ok: bool | None  # None: not checked (quick mode) or no body
    prop_crc_ok: bool | None  # None: the record carries no __CRC32# property

    @property
    def offset_ok(self) -> bool:
        return self.physical_offset == self.offset

    @property
    def end(self) -> int:
        return self.offset + self.total_size

    @property
    def properties(self) -> dict[str, str]:
        return codecs.decode_properties(self.properties_raw)

    def brief(self) -> dict:
        """Where the record is and whose it is: how reports list a record."""
        return {"commitlog_offset": self.offset, "size": self.total_size, "topic": self.topic,
                "queue_id": self.queue_id, "queue_offset": self.queue_offset,
                "store_timestamp": self.store_timestamp}


class BlankRecord(NamedTuple):
    offset: int
    total_size: int


class UnwrittenTail(NamedTuple):
    offset: int
    length: int


class CorruptRegion(NamedTuple):
    offset: int
    length: int            # bytes up to the next sync point (or the file end)
    code: str              # CL_BAD_MAGIC, CL_LENGTH_MISMATCH, CL_TRUNCATED
    detail: str
    total_size: int        # what the first bad record declared (0 if unreadable)


ScanEvent = MessageRecord | BlankRecord | UnwrittenTail | CorruptRegion

# --- decoding one record -------------------------------------------------------------------------


class _Bad(MqtoolError):
    """decode_message's refusal: a CL_* code, the reason, and the total_size the record
    declared (0 when unreadable)."""

    def __init__(self, code: str, detail: str, total_size: int = 0):
        super().__init__(detail)
        self.code, self.detail, self.total_size = code, detail, total_size


def _prop_crc_state(buf, pos: int, end: int, props: bytes, check_crc: bool) -> bool | None:
    """prop_crc_ok of a record whose properties end in the ``__CRC32#`` 0x01 prefix."""
    stored = codecs.stored_prop_crc(props)
    if stored is None:
        return False
    if not check_crc:
        return None
    # codecs.record_prop_crc's rule, through the fast CRC
    return _crc32(memoryview(buf)[pos:end - codecs.CRC32_RESERVED_LEN]) & codecs.CRC32_MASK \
        == stored


def decode_message(buf, pos: int, limit: int, base: int, check_crc: bool) -> MessageRecord:
    """Decode the message at ``buf[pos]`` (file position) whose file ends at ``limit``.

    Raises _Bad (an MqtoolError) for anything the broker would refuse."""
    limit = min(limit, len(buf))
    if pos < 0 or pos + HEADER.size > limit:
        declared = _I32.unpack_from(buf, pos)[0] if 0 <= pos and pos + 4 <= limit else 0
        raise _Bad("CL_TRUNCATED", f"{max(limit - pos, 0)} bytes remain, fewer than a record "
                   "header", declared)
    total_size, magic, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag, \
        born_ts = HEADER.unpack_from(buf, pos)
    if magic != _V1 and magic != _V2:
        raise _Bad("CL_BAD_MAGIC", f"magic code 0x{magic:08X} is not a message", total_size)
    if total_size < MIN_MESSAGE_SIZE or pos + total_size > limit:
        raise _Bad("CL_TRUNCATED" if total_size >= MIN_MESSAGE_SIZE else "CL_LENGTH_MISMATCH",
                   f"total_size {total_size} but {limit - pos} bytes remain in the file",
                   total_size)
    end = pos + total_size
    middle = MIDDLE[sys_flag & HOST_FLAGS]
    p = pos + HEADER.size
    if p + middle.size > end:
        raise _Bad("CL_LENGTH_MISMATCH", f"total_size {total_size} is shorter than the header",
                   total_size)
    born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared, body_len = \
        middle.unpack_from(buf, p)
    body_pos = p + middle.size
    q = body_pos + (body_len if body_len > 0 else 0)
    if magic == _V1:
        if q + 1 > end:
            raise _Bad("CL_LENGTH_MISMATCH", f"body_length {body_len} runs past total_size "
                       f"{total_size}", total_size)
        topic_len = _I8.unpack_from(buf, q)[0]
        q += 1
    else:
        if q + 2 > end:
            raise _Bad("CL_LENGTH_MISMATCH", f"body_length {body_len} runs past total_size "
                       f"{total_size}", total_size)
        topic_len = _I16.unpack_from(buf, q)[0]
        q += 2
    if topic_len < 0 or q + topic_len + 2 > end:
        raise _Bad("CL_LENGTH_MISMATCH", f"topic_length {topic_len} does not fit in total_size "
                   f"{total_size}", total_size)
    topic = bytes(buf[q:q + topic_len]).decode("utf-8", errors="replace")
    q += topic_len
    props_len = _I16.unpack_from(buf, q)[0]
    q += 2
    expected = fmt.message_length(magic, sys_flag, body_len, topic_len, props_len)
    if expected != total_size:
        raise _Bad("CL_LENGTH_MISMATCH",
                   f"total_size {total_size} but the fields add up to {expected}", total_size)
    props = bytes(buf[q:q + props_len]) if props_len > 0 else b""
    crc_ok = None
    if check_crc and body_len > 0:
        crc_ok = (_crc32(buf[body_pos:body_pos + body_len]) & codecs.CRC32_MASK) == body_crc
    prop_crc_ok = None
    if props_len >= codecs.CRC32_RESERVED_LEN and props[-20:-11] == _PROP_CRC_PREFIX:
        prop_crc_ok = _prop_crc_state(buf, pos, end, props, check_crc)
    return MessageRecord(
        base + pos, total_size, magic, body_crc, queue_id, flag, queue_offset, physical_offset,
        sys_flag, born_ts, born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared,
        body_len, base + body_pos, topic, props, crc_ok, prop_crc_ok)


def explain_corruption(buf, pos: int, limit: int, name: str) -> str:
    """Why the interpreted declaration refuses the bytes at ``pos`` (with construct's field path);
    empty when it parses them."""
    window = bytes(buf[pos:min(limit, pos + fmt.MAX_RECORD_SIZE)])
    try:
        parse_at(fmt.commitlog_message, window, file=name)
    except ParseError as err:
        path = f" ({err.field_path})" if err.field_path else ""
        return f"{err.detail}{path}"
    return ""


def plausible_record_at(buf, pos: int, limit: int, base: int, check_crc: bool = True) -> bool:
    """A resynchronisation point: a message whose lengths agree, whose PHYSICALOFFSET equals
    its position and whose body CRC matches (when checked)."""
    if pos < 0 or pos + HEADER.size > limit:
        return False
    try:
        rec = decode_message(buf, pos, limit, base, check_crc)
    except (_Bad, struct.error):
        return False
    return rec.offset_ok and rec.body_crc_ok is not False and rec.prop_crc_ok is not False


def entry_problem(buf, pos: int, limit: int, base: int) -> tuple[str, str, int] | None:
    """Why the DLedger entry at file position ``pos`` is not one the broker's DLedger recovery
    accepts, as (code, detail, declared entry size); None when its header is sound and its body
    is exactly as long as the record it holds declares."""
    if pos < 0 or pos + _DL_HEADER_SIZE > limit:
        return ("CL_TRUNCATED", f"{max(limit - pos, 0)} bytes remain, fewer than a DLedger entry "
                "header", 0)
    magic, size, index, _term, entry_pos, _ch, _chain, _crc, body_size = \
        _DL_HEADER.unpack_from(buf, pos)
    if magic != dl_fmt.ENTRY_MAGIC:
        return "CL_BAD_MAGIC", f"DLedger entry magic {magic} is not {dl_fmt.ENTRY_MAGIC}", size
    if entry_pos != base + pos:
        return ("CL_OFFSET_MISMATCH", f"DLedger entry {index} records pos {entry_pos} but lies at "
                f"{base + pos}", size)
    if size != _DL_HEADER_SIZE + body_size or body_size < MIN_MESSAGE_SIZE:
        return ("CL_LENGTH_MISMATCH", f"DLedger entry {index}: size {size} but body size "
                f"{body_size} + {_DL_HEADER_SIZE}", size)
    if pos + size > limit:
        return ("CL_TRUNCATED", f"DLedger entry {index} of {size} bytes but {limit - pos} bytes "
                "remain in the file", size)
    declared = _I32.unpack_from(buf, pos + _DL_HEADER_SIZE)[0]
    if declared != body_size:
        return ("CL_LENGTH_MISMATCH", f"DLedger entry {index}: body size {body_size} but the "
                f"record inside declares {declared}", size)
    return None


def plausible_entry_at(buf, pos: int, limit: int, base: int, check_crc: bool = True) -> bool:
    """A resynchronisation point in DLedger data: a sound entry holding a plausible record."""
    if entry_problem(buf, pos, limit, base) is not None:
        return False
    size = _I32.unpack_from(buf, pos + 4)[0]
    return plausible_record_at(buf, pos + _DL_HEADER_SIZE, pos + size, base, check_crc)


def find_sync_point(buf, start: int, limit: int, base: int, check_crc: bool = True,
                    layout: str = COMMITLOG_LAYOUT) -> int:
    """The first plausible record position (DLedger: entry position) >= start, or ``limit``
    when there is none."""
    if layout == DLEDGER_LAYOUT:
        return _find_entry(buf, start, limit, base, check_crc)
    search = max(start + 4, 4)
    while True:
        # one pass finds the nearer of both magics; searching each to the file end for every
        # rejected candidate made a resync quadratic
        found = _MAGIC_PATTERN.search(buf, search, limit)
        if found is None:
            return limit
        hit = found.start()
        if plausible_record_at(buf, hit - 4, limit, base, check_crc):
            return hit - 4
        search = hit + 1


def _find_entry(buf, start: int, limit: int, base: int, check_crc: bool) -> int:
    """The first plausible entry whose record starts at or after ``start`` (positions are
    record positions in DLedger data too, as offsets are)."""
    # a record's magic sits 4 bytes into the record, which starts 48 bytes into its entry
    lead = _DL_HEADER_SIZE + 4
    search = max(start + 4, lead)
    while True:
        found = _MAGIC_PATTERN.search(buf, search, limit)
        if found is None:
            return limit
        hit = found.start()
        if plausible_entry_at(buf, hit - lead, limit, base, check_crc):
            return hit - lead
        search = hit + 1


def entry_fields(buf, record_pos: int) -> dict[str, int]:
    """The DLedger entry header in front of the record at file position ``record_pos``, with
    the declaration's field names."""
    return dict(zip(_DL_HEADER_FIELDS, _DL_HEADER.unpack_from(buf, record_pos - _DL_HEADER_SIZE)))


def _zero_run_end(buf, pos: int, limit: int) -> int:
    """End of the run of zero bytes starting at pos."""
    chunk = 1 << 20
    p = pos
    while p < limit:
        block = buf[p:min(limit, p + chunk)]
        stripped = block.lstrip(b"\0")
        if stripped:
            return p + len(block) - len(stripped)
        p += len(block)
    return limit


def _step(buf, pos: int, limit: int, base: int, name: str, check_crc: bool,
          resync: bool, layout: str = COMMITLOG_LAYOUT) -> tuple[ScanEvent, int | None]:
    """The event at file position ``pos`` (DLedger: an entry's position) and where the scan
    goes on (None: the file ends)."""
    if pos + 8 > limit:
        if any(buf[pos:limit]):
            return CorruptRegion(base + pos, limit - pos, "CL_TRUNCATED",
                                 f"{limit - pos} trailing bytes are too short for a record", 0), None
        return UnwrittenTail(base + pos, limit - pos), None
    dledger = layout == DLEDGER_LAYOUT
    first, second = struct.unpack_from(">iI", buf, pos)
    if dledger and first == dl_fmt.BLANK_MAGIC:        # magic, then the bytes left
        return BlankRecord(base + pos, second), None
    if not dledger and second == _BLANK:               # size, then the magic
        return BlankRecord(base + pos, first), None
    if first == 0 and second == 0:
        zeros_end = _zero_run_end(buf, pos, limit)
        if not resync or zeros_end >= limit:
            return UnwrittenTail(base + pos, zeros_end - pos if resync else limit - pos), None
        nxt = find_sync_point(buf, max(zeros_end - 4, 0), limit, base, check_crc, layout)
        return UnwrittenTail(base + pos, nxt - pos), nxt
    record_pos, record_limit = pos, limit
    if dledger:
        problem = entry_problem(buf, pos, limit, base)
        if problem is not None:
            code, detail, declared = problem
            nxt = find_sync_point(buf, pos, limit, base, check_crc, layout) if resync else limit
            return CorruptRegion(base + pos, nxt - pos, code, detail, declared), \
                (nxt if resync else None)
        record_pos, record_limit = pos + _DL_HEADER_SIZE, pos + second   # the entry's size
    try:
        rec = decode_message(buf, record_pos, record_limit, base, check_crc)
    except (_Bad, struct.error) as bad:
        code = getattr(bad, "code", "CL_TRUNCATED")
        detail = getattr(bad, "detail", str(bad))
        declared = getattr(bad, "total_size", first)
        why = explain_corruption(buf, record_pos, record_limit, name)
        if why and why not in detail:
            detail = f"{detail}; declaration: {why}"
        if dledger:
            detail = f"the record in DLedger entry {entry_fields(buf, record_pos)['index']}: " \
                     f"{detail}"
        nxt = find_sync_point(buf, pos, limit, base, check_crc, layout) if resync else limit
        return CorruptRegion(base + pos, nxt - pos, code, detail, declared), \
            (nxt if resync else None)
    return rec, rec.end - base


def scan_buffer(buf, base: int, *, name: str = "", start: int = 0, stop: int | None = None,
                check_crc: bool = True, resync: bool = False,
                layout: str = COMMITLOG_LAYOUT) -> Iterator[ScanEvent]:
    """Scan one segment's bytes. ``start``/``stop`` are file positions: events that *start* in
    [start, stop) are yielded; a ``start`` other than 0 first resynchronises (Spark splits).
    ``layout``: the segment's (:attr:`Segment.layout`)."""
    limit = len(buf)
    stop = limit if stop is None else min(stop, limit)
    pos = start
    if start > 0:
        pos = find_sync_point(buf, start, limit, base, check_crc, layout)
    while pos < stop:
        event, pos = _step(buf, pos, limit, base, name, check_crc, resync, layout)
        if type(event) is MessageRecord and event.offset >= base + stop:
            return      # DLedger: the entry starts before stop, its record does not
        yield event
        if pos is None:
            return


# --- runs of records as columns: the fast path ----------------------------------------------------
#
# A run of well-formed records is found by a tight loop that only follows TOTALSIZE; the fixed
# fields of the whole run are then decoded with numpy gathers, the length checks of
# decode_message are made on the columns, and the run is cut at the first record that fails one.
# That record goes through _step (the reference path above), which reports it exactly as
# scan_buffer does; the fast path resumes after it.

_BATCH_RECORDS = 16384
_BATCH_BYTES = 32 << 20
_TOPIC_VECTOR_MAX = 255      # longer topics (V2 records) are interned one record at a time
FLAG_NONE, FLAG_FALSE, FLAG_TRUE = -1, 0, 1
_FLAG_CODES = {None: FLAG_NONE, False: FLAG_FALSE, True: FLAG_TRUE}
_FLAG_VALUES = {FLAG_NONE: None, FLAG_FALSE: False, FLAG_TRUE: True}
_HEADER_DTYPE = _codec.MESSAGE_HEADER_DTYPE
_MIDDLE_DTYPES = _codec.MESSAGE_MIDDLE_DTYPES
# the host flags as a small number 0..3, to index tables by
_HOST_SHIFT = (HOST_FLAGS & -HOST_FLAGS).bit_length() - 1
_MIDDLE_SIZES = np.array([MIDDLE[f << _HOST_SHIFT].size for f in range(4)], dtype=np.int64)
# calMsgLength without the three variable lengths, by (magic is V2, host flags >> 4)
_FIXED_LENGTHS = np.array([[fmt.message_length(magic, f << _HOST_SHIFT, 0, 0, 0) for f in range(4)]
                           for magic in (_V1, _V2)], dtype=np.int64)
_TOPIC_LENGTH_SIZES = {m: _codec.TOPIC_LENGTH_DTYPES[m].itemsize for m in (_V1, _V2)}
_PROPS_LENGTH_SIZE = _codec.PROPERTIES_LENGTH_DTYPE.itemsize
_PROP_CRC_PREFIX_CODES = np.frombuffer(_PROP_CRC_PREFIX, dtype=np.uint8)

_COLUMNS = ("position", "total_size", "magic_code", "body_crc", "queue_id", "flag",
            "queue_offset", "physical_offset", "sys_flag", "born_timestamp", "store_timestamp",
            "reconsume_times", "prepared_transaction_offset", "body_length", "body_position",
            "topic_id", "properties_position", "properties_length", "body_crc_ok", "prop_crc_ok")


class TopicTable:
    """The topics of one scan, interned: batches carry ids into ``names``."""

    def __init__(self):
        self.names: list[str] = []
        self._by_name: dict[str, int] = {}
        self._by_bytes: dict[bytes, int] = {}
        self._by_length: dict[int, list[tuple[bytes, int]]] = {}

    def find(self, name: str) -> int | None:
        return self._by_name.get(name)

    def intern(self, name: str) -> int:
        tid = self._by_name.get(name)
        if tid is None:
            tid = self._by_name[name] = len(self.names)
            self.names.append(name)
        return tid

    def intern_bytes(self, raw: bytes) -> int:
        tid = self._by_bytes.get(raw)
        if tid is None:
            tid = self.intern(raw.decode("utf-8", errors="replace"))
            if len(self._by_bytes) < 65536:
                self._by_bytes[raw] = tid
                self._by_length.setdefault(len(raw), []).append((raw, tid))
        return tid

    def ids(self, buf, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Ids of the topics stored at ``buf[starts[i]:starts[i] + lengths[i]]``."""
        out = np.empty(len(starts), dtype=np.int32)
        order = np.argsort(lengths, kind="stable")
        sorted_lengths = lengths[order]
        bounds = np.flatnonzero(np.diff(sorted_lengths)) + 1
        for sel in np.split(order, bounds):
            length = int(lengths[sel[0]])
            if length == 0:
                out[sel] = self.intern_bytes(b"")
            elif length > _TOPIC_VECTOR_MAX:
                for i in sel.tolist():
                    p = int(starts[i])
                    out[i] = self.intern_bytes(bytes(buf[p:p + length]))
            else:
                self._ids_of_rows(_codec.gather(buf, f"V{length}", starts[sel]), sel, out)
        return out

    def _ids_of_rows(self, rows: np.ndarray, sel: np.ndarray, out: np.ndarray) -> None:
        """Topics already seen are matched by comparing all rows with each, when few topics
        share the length; the rest are interned from their distinct values."""
        todo = np.ones(len(rows), dtype=bool)
        known = self._by_length.get(rows.dtype.itemsize, [])
        for raw, tid in known if len(known) <= 16 else ():
            same = rows == np.frombuffer(raw, rows.dtype)[0]
            out[sel[same]] = tid
            todo &= ~same
            if not todo.any():
                return
        rest = np.flatnonzero(todo)
        distinct, inverse = np.unique(rows[rest], return_inverse=True)
        ids = np.array([self.intern_bytes(bytes(row)) for row in distinct], dtype=np.int32)
        out[sel[rest]] = ids[inverse.reshape(-1)]


class RecordBatch:
    """Consecutive message records of one file, exactly those ``scan_buffer`` yields one by one
    there, as numpy columns named after :class:`MessageRecord`'s fields (all int64, except the
    flags: int8 FLAG_TRUE/FLAG_FALSE/FLAG_NONE, and ``topic_id``, an index into ``topics``).
    Positions are file positions (``position``, ``body_position``, ``properties_position``);
    add ``base`` for CommitLog offsets. ``properties_length`` is the length of
    ``properties_raw`` (a negative stored length means none).

    :meth:`record` builds one row's MessageRecord; it reads host addresses and properties from
    the file's mapping, so it works while the scan is at this batch, not after."""

    __slots__ = ("buf", "base", "topics", "_records") + _COLUMNS

    def __len__(self) -> int:
        return len(self.position)

    @property
    def offsets(self) -> np.ndarray:
        return self.position + self.base

    @property
    def start_offset(self) -> int:
        return self.base + int(self.position[0])

    def properties_raw(self, i: int) -> bytes:
        length = int(self.properties_length[i])
        if length <= 0:
            return b""
        if self._records is not None:
            return self._records[i].properties_raw
        start = int(self.properties_position[i])
        return bytes(self.buf[start:start + length])

    def properties_source(self) -> tuple:
        """(buffer, starts, ends): where the records' properties bytes are, to read them all."""
        if self._records is None:
            return (self.buf, self.properties_position,
                    self.properties_position + self.properties_length)
        ends = np.cumsum(self.properties_length)
        return (b"".join(r.properties_raw for r in self._records), ends - self.properties_length,
                ends)

    def record(self, i: int) -> MessageRecord:
        if self._records is not None:
            return self._records[i]
        pos = int(self.position[i])
        sys_flag = int(self.sys_flag[i])
        born_ip, born_port, _, store_ip, store_port, _, _, _ = \
            MIDDLE[sys_flag & HOST_FLAGS].unpack_from(self.buf, pos + HEADER.size)
        return MessageRecord(
            self.base + pos, int(self.total_size[i]), int(self.magic_code[i]),
            int(self.body_crc[i]), int(self.queue_id[i]), int(self.flag[i]),
            int(self.queue_offset[i]), int(self.physical_offset[i]), sys_flag,
            int(self.born_timestamp[i]), born_ip, born_port, int(self.store_timestamp[i]),
            store_ip, store_port, int(self.reconsume_times[i]),
            int(self.prepared_transaction_offset[i]), int(self.body_length[i]),
            self.base + int(self.body_position[i]), self.topics.names[self.topic_id[i]],
            self.properties_raw(i), _FLAG_VALUES[int(self.body_crc_ok[i])],
            _FLAG_VALUES[int(self.prop_crc_ok[i])])

    def records(self) -> list[MessageRecord]:
        """Every record, the columns converted once for the whole batch (not via record(i))."""
        if self._records is not None:
            return list(self._records)
        buf, base, names = self.buf, self.base, self.topics.names
        n = len(self)
        born_ip, born_port, store_ip, store_port = [None] * n, [0] * n, [None] * n, [0] * n
        host = (self.sys_flag & HOST_FLAGS) >> _HOST_SHIFT
        for variant in np.unique(host).tolist():
            sel = np.flatnonzero(host == variant)
            middle = _codec.gather(buf, _MIDDLE_DTYPES[variant << _HOST_SHIFT],
                                   self.position[sel] + HEADER.size)
            rows = sel.tolist()
            for column, values in ((born_ip, middle["born_host"]["ip"]),
                                   (born_port, middle["born_host"]["port"]),
                                   (store_ip, middle["store_host"]["ip"]),
                                   (store_port, middle["store_host"]["port"])):
                if len(rows) == n:
                    column[:] = values.tolist()
                else:
                    for i, value in zip(rows, values.tolist()):
                        column[i] = value
        props = [bytes(buf[p:p + length]) if length > 0 else b"" for p, length in
                 zip(self.properties_position.tolist(), self.properties_length.tolist())]
        return list(map(MessageRecord._make, zip(
            (self.position + base).tolist(), self.total_size.tolist(), self.magic_code.tolist(),
            self.body_crc.tolist(), self.queue_id.tolist(), self.flag.tolist(),
            self.queue_offset.tolist(), self.physical_offset.tolist(), self.sys_flag.tolist(),
            self.born_timestamp.tolist(), born_ip, born_port, self.store_timestamp.tolist(),
            store_ip, store_port, self.reconsume_times.tolist(),
            self.prepared_transaction_offset.tolist(), self.body_length.tolist(),
            (self.body_position + base).tolist(), [names[t] for t in self.topic_id.tolist()],
            props, map(_FLAG_VALUES.__getitem__, self.body_crc_ok.tolist()),
            map(_FLAG_VALUES.__getitem__, self.prop_crc_ok.tolist()))))

    def head(self, n: int) -> RecordBatch:
        """The first ``n`` records as a batch (valid as long as this one is)."""
        head = RecordBatch.__new__(RecordBatch)
        head.buf, head.base, head.topics = self.buf, self.base, self.topics
        head._records = None if self._records is None else self._records[:n]
        for name in _COLUMNS:
            setattr(head, name, getattr(self, name)[:n])
        return head

    @classmethod
    def from_records(cls, records: list[MessageRecord], base: int,
                     topics: TopicTable) -> RecordBatch:
        """A batch of records decoded one by one (by the reference path)."""
        batch = cls.__new__(cls)
        batch.buf, batch.base, batch.topics, batch._records = None, base, topics, list(records)
        for name in ("total_size", "magic_code", "body_crc", "queue_id", "flag", "queue_offset",
                     "physical_offset", "sys_flag", "born_timestamp", "store_timestamp",
                     "reconsume_times", "prepared_transaction_offset", "body_length"):
            setattr(batch, name, np.array([getattr(r, name) for r in records], dtype=np.int64))
        batch.position = np.array([r.offset - base for r in records], dtype=np.int64)
        batch.body_position = np.array([r.body_position - base for r in records], dtype=np.int64)
        batch.topic_id = np.array([topics.intern(r.topic) for r in records], dtype=np.int32)
        batch.properties_length = np.array([len(r.properties_raw) for r in records],
                                           dtype=np.int64)
        batch.properties_position = batch.position + batch.total_size \
            - np.maximum(batch.properties_length, 0)
        batch.body_crc_ok = np.array([_FLAG_CODES[r.body_crc_ok] for r in records], dtype=np.int8)
        batch.prop_crc_ok = np.array([_FLAG_CODES[r.prop_crc_ok] for r in records], dtype=np.int8)
        return batch


def _leading(ok: np.ndarray) -> int:
    """How many leading elements are True."""
    return len(ok) if ok.all() else int(np.argmin(ok))


def _walk(buf, pos: int, walk_end: int, max_records: int) -> list[int]:
    """Record starts from ``pos``, following TOTALSIZE while it is at least a minimal record and
    the start leaves room for a header; nothing else is checked here."""
    positions = []
    append = positions.append
    unpack = _I32.unpack_from
    for _ in repeat(None, max_records):
        if pos >= walk_end:
            break
        size = unpack(buf, pos)[0]
        if size < MIN_MESSAGE_SIZE:
            break
        append(pos)
        pos += size
    return positions


def _walk_entries(buf, pos: int, walk_end: int, limit: int, max_records: int,
                  base: int) -> list[int]:
    """:func:`_walk` for DLedger data: the record starts (entry + 48) of the entries from
    ``pos`` that :func:`entry_problem` accepts, following each entry's size."""
    positions = []
    append = positions.append
    unpack = _DL_HEADER.unpack_from
    record_size = _I32.unpack_from
    for _ in repeat(None, max_records):
        if pos >= walk_end or pos + _DL_HEADER_SIZE + HEADER.size > limit:
            break
        magic, size, _index, _term, entry_pos, _ch, _chain, _crc, body_size = unpack(buf, pos)
        if magic != dl_fmt.ENTRY_MAGIC or entry_pos != base + pos \
                or size != _DL_HEADER_SIZE + body_size or body_size < MIN_MESSAGE_SIZE \
                or pos + size > limit or record_size(buf, pos + _DL_HEADER_SIZE)[0] != body_size:
            break
        append(pos + _DL_HEADER_SIZE)
        pos += size
    return positions


def _walk_hinted(buf, pos: int, walk_end: int, max_records: int,
                 hints: np.ndarray) -> np.ndarray:
    """:func:`_walk`'s positions, taking whole runs of them from ``hints`` (sorted positions
    where records are expected, e.g. from ConsumeQueue units): a run of hints is used where
    each one's TOTALSIZE leads exactly to the next, starting from a position the walk reached,
    so wrong or missing hints cost time, never a different result."""
    lo = int(np.searchsorted(hints, pos))
    hi = int(np.searchsorted(hints, walk_end))
    window = hints[lo:min(hi, lo + max_records + 1)]
    if len(window) < 2:
        return np.array(_walk(buf, pos, walk_end, max_records), dtype=np.int64)
    sizes = _codec.gather(buf, _HEADER_DTYPE["total_size"], window).astype(np.int64)
    following = window + sizes
    chained = np.zeros(len(window), dtype=bool)
    chained[:-1] = (following[:-1] == window[1:]) & (sizes[:-1] >= MIN_MESSAGE_SIZE)
    starts = window.tolist()
    breaks = np.flatnonzero(~chained).tolist()      # the last hint of each chained run
    parts: list[np.ndarray] = []
    loose: list[int] = []                           # positions the walk found between runs
    count = 0
    unpack = _I32.unpack_from
    while count < max_records and pos < walk_end:
        i = bisect.bisect_left(starts, pos)
        if i < len(starts) and starts[i] == pos:
            j = breaks[bisect.bisect_left(breaks, i)]
            last = min(j, i + max_records - count - 1)
            if loose:
                parts.append(np.array(loose, dtype=np.int64))
                loose = []
            if last == j and sizes[j] < MIN_MESSAGE_SIZE:
                parts.append(window[i:last])
                break
            parts.append(window[i:last + 1])
            count += last + 1 - i
            pos = int(following[last])
            continue
        size = unpack(buf, pos)[0]
        if size < MIN_MESSAGE_SIZE:
            break
        loose.append(pos)
        count += 1
        pos += size
    if loose:
        parts.append(np.array(loose, dtype=np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _fast_batch(buf, pos: int, stop: int, limit: int, base: int, check_crc: bool,
                topics: TopicTable, max_records: int = _BATCH_RECORDS,
                max_bytes: int = _BATCH_BYTES,
                hints: np.ndarray | None = None,
                layout: str = COMMITLOG_LAYOUT) -> RecordBatch | None:
    """The run of records from ``pos`` that decode_message accepts, decoded as columns; None when
    the record at ``pos`` is not one (the reference path handles it)."""
    walk_end = min(stop, limit - HEADER.size + 1, pos + max_bytes)
    if layout == DLEDGER_LAYOUT:
        positions = np.array(_walk_entries(buf, pos, walk_end, limit, max_records, base),
                             dtype=np.int64)
        positions = positions[positions < stop]
    elif hints is None:
        positions = np.array(_walk(buf, pos, walk_end, max_records), dtype=np.int64)
    else:
        positions = _walk_hinted(buf, pos, walk_end, max_records, hints)
    if len(positions) == 0:
        return None
    header = _codec.gather(buf, _HEADER_DTYPE, positions)
    total = header["total_size"].astype(np.int64)
    magic = header["magic_code"].astype(np.int64)
    end = positions + total
    n = _leading(((magic == _V1) | (magic == _V2)) & (end <= limit))
    if n == 0:
        return None
    positions, header, total, magic, end = positions[:n], header[:n], total[:n], magic[:n], end[:n]
    sys_flag = header["sys_flag"].astype(np.int64)
    host = (sys_flag & HOST_FLAGS) >> _HOST_SHIFT
    middle_size = _MIDDLE_SIZES[host]
    n = _leading(total >= HEADER.size + middle_size)
    if n == 0:
        return None
    if n < len(positions):
        positions, header, total, magic, end, sys_flag, host, middle_size = (
            a[:n] for a in (positions, header, total, magic, end, sys_flag, host, middle_size))

    columns = {name: np.empty(n, dtype=np.int64) for name in (
        "store_timestamp", "reconsume_times", "prepared_transaction_offset", "body_length")}
    single = host.min() == host.max()       # nearly always: one producer/broker address family
    for variant in ([int(host[0])] if single else np.unique(host).tolist()):
        sel = slice(None) if single else np.flatnonzero(host == variant)
        middle = _codec.gather(buf, _MIDDLE_DTYPES[variant << _HOST_SHIFT],
                               positions[sel] + HEADER.size)
        for name, column in columns.items():
            column[sel] = middle[name]
    body_len = columns["body_length"]
    body_pos = positions + HEADER.size + middle_size
    q = body_pos + np.maximum(body_len, 0)
    is_v2 = magic == _V2
    topic_len_size = np.where(is_v2, _TOPIC_LENGTH_SIZES[_V2], _TOPIC_LENGTH_SIZES[_V1])
    n = _leading(q + topic_len_size <= end)
    if n == 0:
        return None
    topic_len = np.empty(n, dtype=np.int64)
    q, is_v2, topic_len_size = q[:n], is_v2[:n], topic_len_size[:n]
    if is_v2.any():
        v2 = np.flatnonzero(is_v2)
        topic_len[v2] = _codec.gather(buf, _codec.TOPIC_LENGTH_DTYPES[_V2], q[v2])
        v1 = np.flatnonzero(~is_v2)
        topic_len[v1] = _codec.gather(buf, _codec.TOPIC_LENGTH_DTYPES[_V1], q[v1])
    else:
        topic_len[:] = _codec.gather(buf, _codec.TOPIC_LENGTH_DTYPES[_V1], q)
    topic_pos = q + topic_len_size
    n = _leading((topic_len >= 0) & (topic_pos + topic_len + _PROPS_LENGTH_SIZE <= end[:n]))
    if n == 0:
        return None
    topic_len, topic_pos = topic_len[:n], topic_pos[:n]
    props_len = _codec.gather(buf, _codec.PROPERTIES_LENGTH_DTYPE,
                              topic_pos + topic_len).astype(np.int64)
    expected = (_FIXED_LENGTHS[is_v2[:n].astype(np.int64), host[:n]]
                + np.maximum(body_len[:n], 0) + topic_len + np.maximum(props_len, 0))
    n = _leading(expected == total[:n])
    if n == 0:
        return None

    batch = RecordBatch.__new__(RecordBatch)
    batch.buf, batch.base, batch.topics, batch._records = buf, base, topics, None
    header = header[:n]
    batch.position = positions[:n]
    batch.total_size = total[:n]
    batch.magic_code = magic[:n]
    for name in ("body_crc", "queue_id", "flag", "queue_offset", "physical_offset",
                 "born_timestamp"):
        setattr(batch, name, header[name].astype(np.int64))
    batch.sys_flag = sys_flag[:n]
    for name, column in columns.items():
        setattr(batch, name, column[:n])
    body_len = batch.body_length
    batch.body_position = body_pos[:n]
    batch.topic_id = topics.ids(buf, topic_pos[:n], topic_len[:n])
    batch.properties_length = np.maximum(props_len[:n], 0)
    batch.properties_position = topic_pos[:n] + topic_len[:n] + _PROPS_LENGTH_SIZE

    body_ok = np.full(n, FLAG_NONE, dtype=np.int8)
    if check_crc:
        with_body = np.flatnonzero(body_len > 0)
        if len(with_body):
            starts = batch.body_position[with_body]
            view = memoryview(buf)
            try:
                crcs = np.fromiter(
                    map(_crc32, map(view.__getitem__,
                                        map(slice, starts.tolist(),
                                            (starts + body_len[with_body]).tolist()))),
                    dtype=np.int64, count=len(with_body))
            finally:
                view.release()
            body_ok[with_body] = (crcs & 0x7FFFFFFF) == batch.body_crc[with_body]
    batch.body_crc_ok = body_ok

    prop_ok = np.full(n, FLAG_NONE, dtype=np.int8)
    tails = np.flatnonzero(batch.properties_length >= codecs.CRC32_RESERVED_LEN)
    if len(tails):
        tail_pos = end[:n][tails] - codecs.CRC32_RESERVED_LEN
        for j, byte in enumerate(_PROP_CRC_PREFIX_CODES.tolist()):
            keep = _codec.gather(buf, np.uint8, tail_pos + j) == byte
            tails, tail_pos = tails[keep], tail_pos[keep]
        for i in tails.tolist():
            start = int(batch.position[i])
            props = batch.properties_raw(i)
            prop_ok[i] = _FLAG_CODES[_prop_crc_state(buf, start, start + int(batch.total_size[i]),
                                                     props, check_crc)]
    batch.prop_crc_ok = prop_ok
    return batch


def scan_buffer_batches(buf, base: int, *, name: str = "", start: int = 0,
                        stop: int | None = None, check_crc: bool = True, resync: bool = False,
                        topics: TopicTable | None = None, batch_records: int = _BATCH_RECORDS,
                        hints: np.ndarray | None = None,
                        layout: str = COMMITLOG_LAYOUT) -> Iterator[RecordBatch | ScanEvent]:
    """:func:`scan_buffer` with the message records grouped: the same events in the same order,
    except that every run of MessageRecords comes as :class:`RecordBatch` objects (never a
    MessageRecord). Batches are only valid until the next one is requested.

    ``hints``: sorted file positions where records probably start (ConsumeQueue units say where
    most are); they spare the walk from record to record, and cannot change the result."""
    if hints is not None:
        # runs of sorted values (one per queue) merge fast in the stable sort (timsort)
        hints = np.sort(np.asarray(hints, dtype=np.int64), kind="stable")
        if len(hints) > 1:
            hints = hints[np.concatenate(([True], hints[1:] != hints[:-1]))]
    limit = len(buf)
    stop = limit if stop is None else min(stop, limit)
    topics = TopicTable() if topics is None else topics
    pos = start
    if start > 0:
        pos = find_sync_point(buf, start, limit, base, check_crc, layout)
    while pos < stop:
        batch = _fast_batch(buf, pos, stop, limit, base, check_crc, topics, batch_records,
                            hints=hints, layout=layout)
        if batch is not None:
            yield batch
            pos = int(batch.position[-1] + batch.total_size[-1])
            continue
        event, pos = _step(buf, pos, limit, base, name, check_crc, resync, layout)
        if type(event) is MessageRecord:
            if event.offset >= base + stop:
                return      # DLedger: the entry starts before stop, its record does not
            yield RecordBatch.from_records([event], base, topics)
        else:
            yield event
        if pos is None:
            return


def expand_batches(events) -> Iterator[ScanEvent]:
    """The events of :func:`scan_buffer_batches` one by one, as :func:`scan_buffer` yields them."""
    for event in events:
        if type(event) is RecordBatch:
            yield from event.records()
        else:
            yield event


# pages behind the scan go back to the kernel this often: peak RSS on 1 GiB files fell from
# ~203 to ~166 MiB going from 64 to 32 MiB, at no measurable cost (mapping the pages ahead in
# one madvise(MADV_POPULATE_READ) instead of faulting them saved < 5% of CPU for ~100 MiB more)
_RELEASE_EVERY = 32 * 1024 * 1024


def scan_segment(segment: Segment, start: int | None = None, end: int | None = None, *,
                 check_crc: bool = True, resync: bool = False,
                 progress=None) -> Iterator[ScanEvent]:
    """Events of one segment; with ``start`` inside the file, from the first record at or
    after it (a record in progress at ``start`` is skipped).

    Memory stays flat whatever the file size: only the written extents (plus room for the
    largest record) are mapped, since a preallocated file's unwritten tail is a sparse hole
    of zeros, and pages behind the scan are handed back to the kernel as it goes."""
    return _scan_mapped(segment, start, end, progress, scan_buffer,
                        {"check_crc": check_crc, "resync": resync, "layout": segment.layout})


def scan_segment_batches(segment: Segment, start: int | None = None, end: int | None = None, *,
                         check_crc: bool = True, resync: bool = False, progress=None,
                         topics: TopicTable | None = None,
                         hints: np.ndarray | None = None) -> Iterator[RecordBatch | ScanEvent]:
    """:func:`scan_segment` with runs of records as :class:`RecordBatch` objects (see
    :func:`scan_buffer_batches`; ``hints`` are CommitLog offsets here); a batch is only valid
    until the next event is requested."""
    if hints is not None:
        hints = np.asarray(hints, dtype=np.int64) - segment.base_offset
    return _scan_mapped(segment, start, end, progress, scan_buffer_batches,
                        {"check_crc": check_crc, "resync": resync, "topics": topics,
                         "hints": hints, "layout": segment.layout})


def _scan_mapped(segment: Segment, start: int | None, end: int | None, progress, scan,
                 options: dict) -> Iterator:
    if segment.length == 0:
        return
    with open(segment.path, "rb") as fh:
        written = written_extent(fh.fileno(), segment.length)
        limit = min(segment.length, written + fmt.MAX_RECORD_SIZE + dl_fmt.ENTRY_HEADER_SIZE)
        limit = min(segment.length, limit + (-limit % mmap.PAGESIZE))
        buf = map_readonly(fh.fileno(), limit) if limit else b""  # holes: no SIGBUS
    first = 0 if start is None else max(0, start - segment.base_offset)
    last = None if end is None else max(0, end - segment.base_offset)
    released = first - first % mmap.PAGESIZE
    reported = first
    try:
        for event in scan(buf, segment.base_offset, name=segment.name, start=first, stop=last,
                          **options):
            kind = type(event)
            position = (event.start_offset if kind is RecordBatch else event.offset) \
                - segment.base_offset
            if position - released >= _RELEASE_EVERY:
                upto = position - position % mmap.PAGESIZE
                buf.madvise(mmap.MADV_DONTNEED, released, upto - released)
                released = upto
            if progress is not None and position - reported >= _RELEASE_EVERY:
                progress.update(position - reported)
                reported = position
            if kind is UnwrittenTail and event.offset + event.length == \
                    segment.base_offset + limit:
                # the hole beyond the map is zeros too
                event = UnwrittenTail(event.offset, segment.base_offset + segment.length
                                      - event.offset)
            yield event
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()
        if progress is not None:
            progress.update(max(0, (last if last is not None else segment.length) - reported))


class Scanner:
    """Scans a CommitLog (all segments, or an offset range) in order."""

    def __init__(self, commitlog: CommitLog, *, check_crc: bool = True, resync: bool = False):
        self.commitlog = commitlog
        self.check_crc = check_crc
        self.resync = resync

    def segments(self, start: int | None = None, end: int | None = None) -> list[Segment]:
        return [s for s in self.commitlog.segments
                if (start is None or s.base_offset + s.length > start)
                and (end is None or s.base_offset < end)]

    def scan_segment(self, segment: Segment, start: int | None = None, end: int | None = None,
                     progress=None) -> Iterator[ScanEvent]:
        return scan_segment(segment, start, end, check_crc=self.check_crc, resync=self.resync,
                            progress=progress)

    def scan_segment_batches(self, segment: Segment, start: int | None = None,
                             end: int | None = None, progress=None,
                             topics: TopicTable | None = None) -> Iterator[RecordBatch | ScanEvent]:
        return scan_segment_batches(segment, start, end, check_crc=self.check_crc,
                                    resync=self.resync, progress=progress, topics=topics)

    def __iter__(self) -> Iterator[ScanEvent]:
        return self.scan()

    def scan(self, start: int | None = None, end: int | None = None,
             progress=None) -> Iterator[ScanEvent]:
        for seg in self.segments(start, end):
            seg_start = start if start is not None and start > seg.base_offset else None
            yield from self.scan_segment(seg, seg_start, end, progress)

    def messages(self, start: int | None = None, end: int | None = None) -> Iterator[MessageRecord]:
        for event in self.scan(start, end):
            if type(event) is MessageRecord:
                yield event


# --- DLedger entry headers ------------------------------------------------------------------------

class EntryHeader(NamedTuple):
    """One DLedger entry header as stored (nothing checked), at file position ``position``."""

    position: int
    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int


def entry_header_at(buf, position: int) -> EntryHeader | None:
    """The entry header at ``position``; None when fewer than 48 bytes remain."""
    if position < 0 or position + _DL_HEADER_SIZE > len(buf):
        return None
    return EntryHeader(position, *_DL_HEADER.unpack_from(buf, position))


def first_int(buf, position: int) -> int | None:
    """The int at ``position`` (a DLedger entry's magic, or the blank's -1); None past the end."""
    if position < 0 or position + 4 > len(buf):
        return None
    return _I32.unpack_from(buf, position)[0]


def read_body(commitlog: CommitLog, record: MessageRecord) -> bytes:
    if record.body_length <= 0:
        return b""
    return commitlog.read(record.body_position, record.body_length)


def read_record_bytes(commitlog: CommitLog, record) -> bytes:
    return commitlog.read(record.offset, record.total_size)


def message_at(commitlog: CommitLog, offset: int, check_crc: bool = True) -> MessageRecord:
    """Decode the one message at a global offset; raises ParseError when there is none."""
    seg = commitlog.segment_for(offset)
    if seg is None:
        raise ParseError(str(commitlog.directory), offset, "", "no CommitLog file holds this offset")
    with MappedFile(seg.path) as mf:
        pos = offset - seg.base_offset
        try:
            return decode_message(mf.data, pos, len(mf.data), seg.base_offset, check_crc)
        except (_Bad, struct.error) as bad:
            why = explain_corruption(mf.data, pos, len(mf.data), seg.name)
            raise ParseError(seg.name, pos, "", getattr(bad, "detail", str(bad))
                             + (f"; declaration: {why}" if why else "")) from None
