"""Scanning whole CommitLog files: a read-only map per file given back to the kernel as the scan
moves on, the :class:`Scanner` over a store's segments, and single-record reads by offset."""
from __future__ import annotations

import mmap
import struct
from typing import Iterator

import numpy as np

from ..errors import ParseError
from ..mapping import map_readonly
from ..formats import commitlog as fmt
from ..formats import dledger as dl_fmt
from ..store import CommitLog, MappedFile, Segment, written_extent
from .batches import RecordBatch, TopicTable, scan_buffer_batches
from .records import (MessageRecord, ScanEvent, UnwrittenTail, _Bad, decode_message,
                      explain_corruption, scan_buffer)


_RELEASE_EVERY = 32 * 1024 * 1024


def scan_segment(segment: Segment, start: int | None = None, end: int | None = None, *,
                 check_crc: bool = True, resync: bool = False,
                 progress=None, forensic: bool = False) -> Iterator[ScanEvent]:
    """Events of one segment; with ``start`` inside the file, from the first record at or
    after it (a record in progress at ``start`` is skipped).

    Memory stays flat whatever the file size: only the written extents (plus room for the
    largest record) are mapped, since a preallocated file's unwritten tail is a sparse hole
    of zeros, and pages behind the scan are handed back to the kernel as it goes.
    ``forensic``: see :func:`scan_buffer` (dump and salvage read on past a damaged DLedger entry
    header that still frames an intact record)."""
    options = {"check_crc": check_crc, "resync": resync, "layout": segment.layout}
    if forensic:
        options["forensic"] = True
    return _scan_mapped(segment, start, end, progress, scan_buffer, options)


def scan_segment_batches(segment: Segment, start: int | None = None, end: int | None = None, *,
                         check_crc: bool = True, resync: bool = False, progress=None,
                         topics: TopicTable | None = None,
                         hints: np.ndarray | None = None, properties: tuple[str, ...] = (),
                         hashed: str | None = None, threads: int = 1,
                         index_keys: tuple[str, str, int] | None = None
                         ) -> Iterator[RecordBatch | ScanEvent]:
    """:func:`scan_segment` with runs of records as :class:`RecordBatch` objects (see
    :func:`scan_buffer_batches`; ``hints`` are CommitLog offsets here); a batch is only valid
    until the next event is requested."""
    if hints is not None:
        hints = np.asarray(hints, dtype=np.int64) - segment.base_offset
    return _scan_mapped(segment, start, end, progress, scan_buffer_batches,
                        {"check_crc": check_crc, "resync": resync, "topics": topics,
                         "hints": hints, "layout": segment.layout, "properties": properties,
                         "hashed": hashed, "threads": threads, "index_keys": index_keys})


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

    def __init__(self, commitlog: CommitLog, *, check_crc: bool = True, resync: bool = False,
                 forensic: bool = False):
        self.commitlog = commitlog
        self.check_crc = check_crc
        self.resync = resync
        self.forensic = forensic     # scan_segment's: the batch scan has no such mode

    def segments(self, start: int | None = None, end: int | None = None) -> list[Segment]:
        return [s for s in self.commitlog.segments
                if (start is None or s.base_offset + s.length > start)
                and (end is None or s.base_offset < end)]

    def scan_segment(self, segment: Segment, start: int | None = None, end: int | None = None,
                     progress=None) -> Iterator[ScanEvent]:
        return scan_segment(segment, start, end, check_crc=self.check_crc, resync=self.resync,
                            progress=progress, forensic=self.forensic)

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
