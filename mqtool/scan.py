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
"""
from __future__ import annotations

import errno
import mmap
import os
import re
import struct
import zlib
from typing import Iterator, NamedTuple

from .codec import HOST_FLAGS, MESSAGE_HEADER, MESSAGE_MIDDLE
from .errors import MqtoolError, ParseError
from .formats import codecs
from .formats import commitlog as fmt
from .store import CommitLog, MappedFile, Segment, parse_at

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
        crc_ok = (zlib.crc32(buf[body_pos:body_pos + body_len]) & 0x7FFFFFFF) == body_crc
    prop_crc_ok = None
    if props_len >= codecs.CRC32_RESERVED_LEN and props[-20:-11] == _PROP_CRC_PREFIX:
        stored = codecs.stored_prop_crc(props)
        prop_crc_ok = (stored is not None and check_crc
                       and codecs.record_prop_crc(buf[pos:end]) == stored) if check_crc else None
        if stored is None:
            prop_crc_ok = False
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


def find_sync_point(buf, start: int, limit: int, base: int, check_crc: bool = True) -> int:
    """The first plausible record position >= start, or ``limit`` when there is none."""
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


def scan_buffer(buf, base: int, *, name: str = "", start: int = 0, stop: int | None = None,
                check_crc: bool = True, resync: bool = False) -> Iterator[ScanEvent]:
    """Scan one segment's bytes. ``start``/``stop`` are file positions: events that *start* in
    [start, stop) are yielded; a ``start`` other than 0 first resynchronises (Spark splits)."""
    limit = len(buf)
    stop = limit if stop is None else min(stop, limit)
    pos = start
    if start > 0:
        pos = find_sync_point(buf, start, limit, base, check_crc)
    while pos < stop:
        if pos + 8 > limit:
            if any(buf[pos:limit]):
                yield CorruptRegion(base + pos, limit - pos, "CL_TRUNCATED",
                                    f"{limit - pos} trailing bytes are too short for a record", 0)
            else:
                yield UnwrittenTail(base + pos, limit - pos)
            return
        total_size, magic = struct.unpack_from(">iI", buf, pos)
        if magic == _BLANK:
            yield BlankRecord(base + pos, total_size)
            return
        if magic == 0 and total_size == 0:
            zeros_end = _zero_run_end(buf, pos, limit)
            if not resync or zeros_end >= limit:
                yield UnwrittenTail(base + pos, zeros_end - pos if resync else limit - pos)
                return
            nxt = find_sync_point(buf, zeros_end - 4, limit, base, check_crc) \
                if zeros_end >= 4 else find_sync_point(buf, 0, limit, base, check_crc)
            yield UnwrittenTail(base + pos, nxt - pos)
            pos = nxt
            continue
        try:
            rec = decode_message(buf, pos, limit, base, check_crc)
        except (_Bad, struct.error) as bad:
            code = getattr(bad, "code", "CL_TRUNCATED")
            detail = getattr(bad, "detail", str(bad))
            declared = getattr(bad, "total_size", total_size)
            why = explain_corruption(buf, pos, limit, name)
            if why and why not in detail:
                detail = f"{detail}; declaration: {why}"
            nxt = find_sync_point(buf, pos, limit, base, check_crc) if resync else limit
            yield CorruptRegion(base + pos, nxt - pos, code, detail, declared)
            if not resync:
                return
            pos = nxt
            continue
        yield rec
        pos += rec.total_size


_RELEASE_EVERY = 64 * 1024 * 1024


def written_extent(fd: int, size: int) -> int:
    """End of the last extent holding data (SEEK_DATA/SEEK_HOLE); ``size`` when the file
    system cannot tell."""
    end, pos = 0, 0
    try:
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as err:
                if err.errno == errno.ENXIO:
                    break
                raise
            pos = os.lseek(fd, start, os.SEEK_HOLE)
            end = pos
    except (OSError, AttributeError):
        return size
    return min(size, end)


def scan_segment(segment: Segment, start: int | None = None, end: int | None = None, *,
                 check_crc: bool = True, resync: bool = False,
                 progress=None) -> Iterator[ScanEvent]:
    """Events of one segment; with ``start`` inside the file, from the first record at or
    after it (a record in progress at ``start`` is skipped).

    Memory stays flat whatever the file size: only the written extents (plus room for the
    largest record) are mapped, since a preallocated file's unwritten tail is a sparse hole
    of zeros, and pages behind the scan are handed back to the kernel as it goes."""
    if segment.length == 0:
        return
    with open(segment.path, "rb") as fh:
        written = written_extent(fh.fileno(), segment.length)
        limit = min(segment.length, written + fmt.MAX_RECORD_SIZE)
        limit = min(segment.length, limit + (-limit % mmap.PAGESIZE))
        buf = mmap.mmap(fh.fileno(), limit, access=mmap.ACCESS_READ) if limit else b""
    first = 0 if start is None else max(0, start - segment.base_offset)
    last = None if end is None else max(0, end - segment.base_offset)
    released = first - first % mmap.PAGESIZE
    reported = first
    try:
        for event in scan_buffer(buf, segment.base_offset, name=segment.name, start=first,
                                 stop=last, check_crc=check_crc, resync=resync):
            position = event.offset - segment.base_offset
            if position - released >= _RELEASE_EVERY:
                upto = position - position % mmap.PAGESIZE
                buf.madvise(mmap.MADV_DONTNEED, released, upto - released)
                released = upto
            if progress is not None and position - reported >= _RELEASE_EVERY:
                progress.update(position - reported)
                reported = position
            if type(event) is UnwrittenTail and event.offset + event.length == \
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
