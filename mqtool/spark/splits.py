"""Executor side of the Spark jobs: one task scans one byte range of one CommitLog file.

No pyspark here (executors import this module by name; the functions arrive pickled by
reference). A split [start, end) owns the records that start in [first, stop):

* ``first`` is where the shared scanner resynchronises from ``start`` (the first plausible
  record: magic, self-recorded PHYSICALOFFSET equal to its position, consistent lengths, body
  CRC) - 0 for a file's first split;
* ``stop`` is where the *next* split resynchronises from ``end``.

So neighbouring splits meet exactly where the next one starts reading, and a record that does
not pass the resync checks (a bad CRC, a wrong PHYSICALOFFSET, a torn header) right after a
boundary still belongs to the split before it: every record of the sequential scan is read by
exactly one task, with the same scanner (``scan_segment``/``scan_buffer``) as ``verify``.

Local paths and ``file:`` URLs are memory-mapped as ``verify`` maps them. Other schemes are read
by byte range with fsspec or pyarrow (whichever is installed) into a buffer the size of the
file, of which only the split and an overhang are filled: the scanner then sees the file's
real length, so its findings read as ``verify``'s.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Iterator

from ..errors import MqtoolError, OptionalDependencyError
from ..formats import codecs
from ..mapping import map_readonly
from ..formats import commitlog as cl_fmt
from ..scan import (FLAG_FALSE, FLAG_NONE, FLAG_TRUE, BlankRecord, CorruptRegion, MessageRecord,
                    RecordBatch, UnwrittenTail, find_sync_point, scan_buffer,
                    scan_buffer_batches, scan_segment, scan_segment_batches, written_extent)
from ..store import Segment
from .plan import Split, is_local, local_path

#: how far past its end a remote task reads at first: the next split's first record must fit
OVERHANG = 2 * cl_fmt.MAX_RECORD_SIZE
#: non-message events a task reports in full (the rest are counted)
MAX_REGIONS_PER_SPLIT = 10_000

_TX_MASK = cl_fmt.TRANSACTION_TYPE_MASK
_TX_NAMES = cl_fmt.TRANSACTION_NAMES
_INNER_BATCH = cl_fmt.INNER_BATCH_FLAG
_EMPTY_BODY_CRC = codecs.body_crc(b"")
_VERSIONS = {cl_fmt.MESSAGE_MAGIC_CODE: "V1", cl_fmt.MESSAGE_MAGIC_CODE_V2: "V2"}


# --- reading a split -----------------------------------------------------------------------------

def _scan_limit(fd: int, length: int) -> int:
    """The mapped length ``scan_segment`` uses (written extents plus room for one record), so
    both resynchronise over the same bytes."""
    written = written_extent(fd, length)
    limit = min(length, written + cl_fmt.MAX_RECORD_SIZE)
    return min(length, limit + (-limit % mmap.PAGESIZE))


def _bounds(buf, split: Split, limit: int, check_crc: bool) -> tuple[int, int] | None:
    """(first, stop) file positions of the records this split owns; None when it owns none."""
    base = split.base_offset
    if split.start == 0:
        first = 0
    else:
        first = find_sync_point(buf, split.start, limit, base, check_crc)
        if first >= min(split.end, limit):
            return None
    stop = limit if split.end >= limit else find_sync_point(buf, split.end, limit, base, check_crc)
    return first, stop


def _local_events(split: Split, check_crc: bool, batches: bool = False) -> Iterator:
    path = local_path(split.url)
    with open(path, "rb") as fh:
        length = os.fstat(fh.fileno()).st_size
        if length != split.length:
            raise MqtoolError(f"{path}: {length} bytes now, {split.length} when the audit was "
                              f"planned; audit archived (unchanging) stores")
        limit = _scan_limit(fh.fileno(), length)
        if limit == 0 or (split.start > 0 and split.start >= limit):
            bounds = None if split.start > 0 else (0, limit)
        else:
            buf = map_readonly(fh.fileno(), limit)     # holes: no SIGBUS on a full tmpfs
            try:
                bounds = _bounds(buf, split, limit, check_crc)
            finally:
                buf.close()
    if bounds is None:
        return
    first, stop = bounds
    segment = Segment(Path(path), split.base_offset, length)
    scan = scan_segment_batches if batches else scan_segment
    yield from scan(segment, split.base_offset + first if first else None,
                    split.base_offset + stop, check_crc=check_crc, resync=True)


class _Window:
    """A remote file read into a file-sized anonymous map, [lo, hi) filled so far."""

    def __init__(self, handle, length: int, lo: int):
        self.handle = handle
        self.length = length
        self.buf = mmap.mmap(-1, length)
        self.lo = self.hi = lo

    def fill_to(self, hi: int) -> None:
        hi = min(self.length, hi)
        self.handle.seek(self.hi)
        while self.hi < hi:
            chunk = self.handle.read(min(hi - self.hi, 16 << 20))
            if not chunk:
                raise MqtoolError(f"short read at {self.hi}: the file is shorter than listed")
            self.buf[self.hi:self.hi + len(chunk)] = chunk
            self.hi += len(chunk)


def _remote_events(split: Split, check_crc: bool, opener, batches: bool = False) -> Iterator:
    base = split.base_offset
    handle = opener(split.url)
    try:
        window = _Window(handle, split.length, split.start)
        window.fill_to(split.end + OVERHANG)
        buf = window.buf
        if split.start == 0:
            first = 0
        else:
            # a candidate before ``end`` has its whole record in the window (records are at most
            # MAX_RECORD_SIZE), so it is judged as on the whole file
            first = find_sync_point(buf, split.start, window.hi, base, check_crc)
            if first >= split.end:
                return
        if split.end >= split.length:
            stop = split.length
        else:
            step = OVERHANG
            while True:
                stop = find_sync_point(buf, split.end, window.hi, base, check_crc)
                if window.hi >= split.length or stop + cl_fmt.MAX_RECORD_SIZE <= window.hi:
                    break
                step *= 2
                window.fill_to(window.hi + step)
        scan = scan_buffer_batches if batches else scan_buffer
        yield from scan(buf, base, name=split.name, start=first, stop=stop,
                        check_crc=check_crc, resync=True)
    finally:
        handle.close()


def remote_opener():
    """A function url -> binary file object for non-local schemes, or None when neither fsspec
    nor pyarrow is installed."""
    try:
        import fsspec
    except ImportError:
        pass
    else:
        return lambda url: fsspec.open(url, "rb").open()
    try:
        from pyarrow import fs as pafs
    except ImportError:
        return None

    def open_with_pyarrow(url: str):
        # pyarrow knows s3://, not Hadoop's s3a:// name for the same store
        if url.startswith("s3a://"):
            url = "s3://" + url[len("s3a://"):]
        filesystem, path = pafs.FileSystem.from_uri(url)
        return filesystem.open_input_file(path)

    return open_with_pyarrow


REMOTE_HINT = ("executors read byte ranges of non-local files with fsspec (plus its hdfs/s3 "
               "driver, e.g. s3fs) or pyarrow; install one on the driver and every executor, or "
               "give local / file:// paths (a shared mount works)")


def check_remote_reader(sources: list[str]) -> None:
    """Non-local inputs need fsspec or pyarrow to be read by byte range: say so before work."""
    remote = [s for s in sources if not is_local(s)]
    if remote and remote_opener() is None:
        raise OptionalDependencyError(f"{remote[0]}: {REMOTE_HINT}")


def split_events(split: Split, *, check_crc: bool = True, opener=None,
                 batches: bool = False) -> Iterator:
    """The scan events this split owns, in offset order (see the module docstring); with
    ``batches``, runs of messages come as :class:`mqtool.scan.RecordBatch` objects (valid
    until the next event is requested)."""
    if opener is None and is_local(split.url):
        return _local_events(split, check_crc, batches)
    opener = opener or remote_opener()
    if opener is None:
        raise OptionalDependencyError(f"{split.url}: {REMOTE_HINT}")
    return _remote_events(split, check_crc, opener, batches)


# --- what a task reports besides rows ------------------------------------------------------------

def new_side(split: Split) -> dict:
    """What the driver needs of a task besides its rows: where its chain of records entered and
    left the range, the blank record that ends a file's data, and every non-message region."""
    import mqtool

    return {"broker": split.broker, "file": split.name, "base_offset": split.base_offset,
            "length": split.length, "index": split.index, "start": split.start,
            "end": split.end, "entry": None, "exit": None, "blank": None, "messages": 0,
            "message_bytes": 0, "regions": [], "regions_dropped": 0,
            "origin": getattr(mqtool, "__file__", None)}


def note_batch(side: dict, batch: RecordBatch) -> None:
    if side["entry"] is None:
        side["entry"] = batch.base + int(batch.position[0])
    side["messages"] += len(batch)
    side["message_bytes"] += int(batch.total_size.sum())
    side["exit"] = batch.base + int(batch.position[-1] + batch.total_size[-1])


def note_event(side: dict, event) -> None:
    kind = type(event)
    if side["entry"] is None:
        side["entry"] = event.offset
    if kind is MessageRecord:
        side["messages"] += 1
        side["message_bytes"] += event.total_size
        side["exit"] = event.offset + event.total_size
        return
    if kind is BlankRecord:
        side["blank"] = (event.offset, event.total_size)
        side["exit"] = event.offset + max(event.total_size, 8)
        return
    side["exit"] = event.offset + event.length
    if len(side["regions"]) >= MAX_REGIONS_PER_SPLIT:
        side["regions_dropped"] += 1
    elif kind is CorruptRegion:
        side["regions"].append(("corrupt", event.offset, event.length, event.code, event.detail,
                                event.total_size))
    elif kind is UnwrittenTail:
        side["regions"].append(("unwritten", event.offset, event.length, None, None, None))


# --- rows ----------------------------------------------------------------------------------------

def _inner_num(sys_flag: int, props: dict) -> int | None:
    """The queue-offset step of an inner-batch record (verify's rule), None for others."""
    if not sys_flag & _INNER_BATCH:
        return None
    try:
        return max(1, int(props.get("INNER_NUM", "1")))
    except ValueError:
        return 1


def _crc_ok(flag, body_length: int, body_crc: int):
    # dump's body_crc_ok: an empty body is checked too (its CRC must be that of no bytes)
    if flag is None and body_length <= 0:
        return body_crc == _EMPTY_BODY_CRC
    return flag


def message_row(split: Split, rec: MessageRecord) -> tuple:
    """One row of the ``messages`` table (columns: :data:`mqtool.spark.schema.MESSAGE_COLUMNS`)."""
    props = codecs.decode_properties(rec.properties_raw) if rec.properties_raw else {}
    sys_flag = rec.sys_flag
    return (split.broker, split.name, rec.offset - split.base_offset, rec.offset, rec.total_size,
            _VERSIONS.get(rec.magic_code, "UNKNOWN"), rec.topic, rec.queue_id, rec.queue_offset,
            rec.physical_offset, sys_flag, _TX_NAMES[sys_flag & _TX_MASK], rec.born_timestamp,
            rec.store_timestamp, rec.reconsume_times, props.get("TAGS"), props.get("KEYS"),
            props.get("UNIQ_KEY"), rec.body_crc, _crc_ok(rec.body_crc_ok, rec.body_length,
                                                          rec.body_crc),
            rec.prop_crc_ok, rec.body_length, _inner_num(sys_flag, props))


_FLAGS = {FLAG_TRUE: True, FLAG_FALSE: False, FLAG_NONE: None}


def batch_rows(split: Split, batch: RecordBatch) -> list[tuple]:
    """:func:`message_row` of every record of a batch, from its numpy columns (the records are
    never built one by one; only the properties are decoded per record)."""
    names = batch.topics.names
    position = batch.position.tolist()
    offsets = (batch.position + batch.base).tolist()
    topics = [names[i] for i in batch.topic_id.tolist()]
    sizes, magics, queue_ids = (batch.total_size.tolist(), batch.magic_code.tolist(),
                                batch.queue_id.tolist())
    queue_offsets, physical = batch.queue_offset.tolist(), batch.physical_offset.tolist()
    sys_flags, born, stored = (batch.sys_flag.tolist(), batch.born_timestamp.tolist(),
                               batch.store_timestamp.tolist())
    reconsumes, crcs, lengths = (batch.reconsume_times.tolist(), batch.body_crc.tolist(),
                                 batch.body_length.tolist())
    crc_flags = [_FLAGS[f] for f in batch.body_crc_ok.tolist()]
    prop_flags = [_FLAGS[f] for f in batch.prop_crc_ok.tolist()]
    has_props = (batch.properties_length > 0).tolist()
    decode, properties_raw = codecs.decode_properties, batch.properties_raw
    broker, name, versions, tx_names = split.broker, split.name, _VERSIONS, _TX_NAMES
    rows = []
    for i in range(len(position)):
        props = decode(properties_raw(i)) if has_props[i] else {}
        sys_flag = sys_flags[i]
        rows.append((broker, name, position[i], offsets[i], sizes[i],
                     versions.get(magics[i], "UNKNOWN"), topics[i], queue_ids[i],
                     queue_offsets[i], physical[i], sys_flag, tx_names[sys_flag & _TX_MASK],
                     born[i], stored[i], reconsumes[i], props.get("TAGS"), props.get("KEYS"),
                     props.get("UNIQ_KEY"), crcs[i], _crc_ok(crc_flags[i], lengths[i], crcs[i]),
                     prop_flags[i], lengths[i], _inner_num(sys_flag, props)))
    return rows


def audit_partition(splits, check_crc: bool, sink) -> Iterator[tuple]:
    """mapPartitions body of the audit: message rows out, one side report per split to
    ``sink`` (an accumulator)."""
    for split in splits:
        side = new_side(split)
        for event in split_events(split, check_crc=check_crc, batches=True):
            if type(event) is RecordBatch:
                note_batch(side, event)
                yield from batch_rows(split, event)
            else:
                note_event(side, event)
        sink.add([side])


def export_row(split: Split, rec: MessageRecord, buf_body: bytes, decompress: bool,
               columns: tuple[str, ...]) -> tuple:
    """One row of the export: ``dump``'s message record (:func:`mqtool.inspect.message_to_dict`)
    with the body as bytes."""
    import base64

    from ..inspect import message_to_dict

    record = message_to_dict(rec, buf_body, file=split.name,
                             file_offset=rec.offset - split.base_offset, body_mode="base64",
                             decompress=decompress)
    record["broker"] = split.broker
    body = record.get("body")
    record["body"] = base64.b64decode(body) if body is not None else None
    return tuple(record.get(name) for name in columns)


def export_partition(splits, check_crc: bool, decompress: bool, topics: frozenset | None,
                     columns: tuple[str, ...], sink) -> Iterator[tuple]:
    for split in splits:
        side = new_side(split)
        reader = _BodyReader(split)
        try:
            for event in split_events(split, check_crc=check_crc):
                note_event(side, event)
                if type(event) is not MessageRecord:
                    continue
                if topics is not None and event.topic not in topics:
                    continue
                side["exported"] = side.get("exported", 0) + 1
                yield export_row(split, event, reader.body(event), decompress, columns)
        finally:
            reader.close()
        sink.add([side])


class _BodyReader:
    """Stored bodies of one file's records (a second read of the same bytes the scan saw)."""

    def __init__(self, split: Split):
        self.split = split
        self.handle = None

    def body(self, rec: MessageRecord) -> bytes:
        if rec.body_length <= 0:
            return b""
        if self.handle is None:
            if is_local(self.split.url):
                self.handle = open(local_path(self.split.url), "rb")
            else:
                opener = remote_opener()
                if opener is None:
                    raise OptionalDependencyError(f"{self.split.url}: {REMOTE_HINT}")
                self.handle = opener(self.split.url)
        self.handle.seek(rec.body_position - self.split.base_offset)
        return self.handle.read(rec.body_length)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def gap_finding_row(row, severity: str) -> tuple:
    """A CQ_QUEUE_GAP finding (columns: FINDING_COLUMNS) from a row of
    :func:`mqtool.spark.job.queue_steps`, worded as ``verify`` words it."""
    import json

    expected, qoff = row["expected"], row["queue_offset"]
    what = "repeats" if qoff < expected else "skips"
    message = (f"{row['topic']!r} queue {row['queue_id']}: queue offset {qoff} {what} "
               f"(expected {expected} after the record at {row['previous_offset']})")
    return (row["broker"], "CQ_QUEUE_GAP", severity, f"commitlog/{row['file']}",
            row["file_offset"], message, row["commitlog_offset"], row["topic"], row["queue_id"],
            qoff, None, json.dumps({"expected": expected}, sort_keys=True))
