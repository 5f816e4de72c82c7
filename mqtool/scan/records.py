"""One record at a time: the scan events, decoding a record with the struct codecs (the
interpreted declaration names the failing field), finding the next plausible record, stepping over
DLedger entry headers, and :func:`scan_buffer`, the reference walk."""
from __future__ import annotations

import re
import struct
from typing import Iterator, NamedTuple


from .. import codec as _codec
from ..crc import crc32 as _crc32
from ..codec import HOST_FLAGS, MESSAGE_HEADER, MESSAGE_MIDDLE
from ..errors import MqtoolError, ParseError
from ..formats import codecs
from ..formats import commitlog as fmt
from ..formats import dledger as dl_fmt
from ..store import COMMITLOG_LAYOUT, DLEDGER_LAYOUT, parse_at


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
    is exactly as long as the record it holds declares. A broken header gets a DL_ENTRY_* code;
    a record inside whose TOTALSIZE disagrees with the entry is the record's CL_LENGTH_MISMATCH."""
    if pos < 0 or pos + _DL_HEADER_SIZE > limit:
        return ("DL_ENTRY_TRUNCATED", f"{max(limit - pos, 0)} bytes remain, fewer than a DLedger "
                "entry header", 0)
    magic, size, index, _term, entry_pos, _ch, _chain, _crc, body_size = \
        _DL_HEADER.unpack_from(buf, pos)
    if magic != dl_fmt.ENTRY_MAGIC:
        return "DL_ENTRY_MAGIC", f"DLedger entry magic {magic} is not {dl_fmt.ENTRY_MAGIC}", size
    if entry_pos != base + pos:
        return ("DL_ENTRY_POS", f"DLedger entry {index} records pos {entry_pos} but lies at "
                f"{base + pos}", size)
    if size != _DL_HEADER_SIZE + body_size or body_size < MIN_MESSAGE_SIZE:
        return ("DL_ENTRY_SIZE", f"DLedger entry {index}: size {size} but body size "
                f"{body_size} + {_DL_HEADER_SIZE}", size)
    if pos + size > limit:
        return ("DL_ENTRY_TRUNCATED", f"DLedger entry {index} of {size} bytes but {limit - pos} "
                "bytes remain in the file", size)
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


def framed_record(buf, pos: int, limit: int, base: int,
                  check_crc: bool = True) -> tuple[CorruptRegion, MessageRecord] | None:
    """A DLedger entry at file position ``pos`` whose header is damaged (DL_ENTRY_* of the magic,
    pos or body size) but whose size field still frames an intact record: the header as a
    48-byte CorruptRegion and the record behind it. None when the header is sound, or when its
    size frames no intact record (wrong length, PHYSICALOFFSET not its position, bad CRC).

    The broker's DLedger recovery ends the log at such an entry; a forensic read (dump,
    salvage) lists the record all the same, after the region that says why."""
    if pos < 0 or pos + 8 > limit:
        return None
    first, second = struct.unpack_from(">iI", buf, pos)
    if first == dl_fmt.BLANK_MAGIC or (first == 0 and second == 0):
        return None
    problem = entry_problem(buf, pos, limit, base)
    if problem is None or not problem[0].startswith("DL_ENTRY") \
            or problem[0] == "DL_ENTRY_TRUNCATED":
        return None
    code, detail, size = problem
    end = pos + size
    if size < _DL_HEADER_SIZE + MIN_MESSAGE_SIZE or end > limit:
        return None
    try:
        rec = decode_message(buf, pos + _DL_HEADER_SIZE, end, base, check_crc)
    except (_Bad, struct.error):
        return None
    if rec.total_size != size - _DL_HEADER_SIZE or not rec.offset_ok \
            or rec.body_crc_ok is False or rec.prop_crc_ok is False:
        return None
    header = CorruptRegion(base + pos, _DL_HEADER_SIZE, code,
                           f"{detail}; its size ({size}) frames an intact record, read on "
                           "(the broker's DLedger recovery ends the log here)", size)
    return header, rec


def entry_damage(buf, record_pos: int, base: int) -> dict | None:
    """``{"code", "detail"}`` of the damaged DLedger entry header in front of the record at file
    position ``record_pos`` (a record :func:`framed_record` read on to); None when it is sound."""
    problem = entry_problem(buf, record_pos - _DL_HEADER_SIZE, len(buf), base)
    if problem is None or not problem[0].startswith("DL_ENTRY"):
        return None
    return {"code": problem[0], "detail": problem[1]}


def scan_buffer(buf, base: int, *, name: str = "", start: int = 0, stop: int | None = None,
                check_crc: bool = True, resync: bool = False,
                layout: str = COMMITLOG_LAYOUT, forensic: bool = False) -> Iterator[ScanEvent]:
    """Scan one segment's bytes. ``start``/``stop`` are file positions: events that *start* in
    [start, stop) are yielded; a ``start`` other than 0 first resynchronises (Spark splits).
    ``layout``: the segment's (:attr:`Segment.layout`). ``forensic`` (DLedger data): read on
    past a damaged entry header whose size frames an intact record (:func:`framed_record`):
    the header comes as a CorruptRegion, then the record; without it the scan treats the
    entry as the broker's recovery does."""
    limit = len(buf)
    stop = limit if stop is None else min(stop, limit)
    pos = start
    if start > 0:
        pos = find_sync_point(buf, start, limit, base, check_crc, layout)
    forensic = forensic and layout == DLEDGER_LAYOUT
    while pos < stop:
        framed = framed_record(buf, pos, limit, base, check_crc) if forensic else None
        if framed is not None:
            header, rec = framed
            yield header
            if rec.offset >= base + stop:
                return
            yield rec
            pos = rec.end - base
            continue
        event, pos = _step(buf, pos, limit, base, name, check_crc, resync, layout)
        if type(event) is MessageRecord and event.offset >= base + stop:
            return      # DLedger: the entry starts before stop, its record does not
        yield event
        if pos is None:
            return



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
