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
from urllib.parse import urlparse

from .. import jsontext
from ..errors import MqtoolError, OptionalDependencyError
from ..mapping import map_readonly
from ..formats import commitlog as cl_fmt
from ..formats import dledger as dl_fmt
from ..scan import (BlankRecord, CorruptRegion, MessageRecord, RecordBatch, UnwrittenTail,
                    find_sync_point, scan_buffer, scan_buffer_batches, scan_segment,
                    scan_segment_batches)
from ..store import DLEDGER_LAYOUT, Segment, layout_of, written_extent
from .plan import Split, is_local, local_path

#: how far past its end a remote task reads at first: the next split's first record must fit
OVERHANG = 2 * cl_fmt.MAX_RECORD_SIZE
#: non-message events a task reports in full (the rest are counted)
MAX_REGIONS_PER_SPLIT = 10_000



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
        first = find_sync_point(buf, split.start, limit, base, check_crc, layout_of(split.url))
        if first >= min(split.end, limit):
            return None
    stop = limit if split.end >= limit else find_sync_point(buf, split.end, limit, base, check_crc,
                                                            layout_of(split.url))
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
            first = find_sync_point(buf, split.start, window.hi, base, check_crc,
                                    layout_of(split.url))
            if first >= split.end:
                return
        if split.end >= split.length:
            stop = split.length
        else:
            step = OVERHANG
            while True:
                stop = find_sync_point(buf, split.end, window.hi, base, check_crc,
                                       layout_of(split.url))
                if window.hi >= split.length or stop + cl_fmt.MAX_RECORD_SIZE <= window.hi:
                    break
                step *= 2
                window.fill_to(window.hi + step)
        scan = scan_buffer_batches if batches else scan_buffer
        yield from scan(buf, base, name=split.name, start=first, stop=stop,
                        check_crc=check_crc, resync=True, layout=layout_of(split.url))
    finally:
        handle.close()


_PYARROW_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "hdfs": "hdfs"}
#: the fsspec driver of a scheme, named in errors
FSSPEC_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "abfs": "adlfs",
                   "abfss": "adlfs", "az": "adlfs", "hdfs": "pyarrow (with libhdfs)"}


def fsspec_can_open(scheme: str) -> bool:
    try:
        import fsspec

        fsspec.get_filesystem_class(scheme)
    except (ImportError, ValueError):
        return False
    return True


def _pyarrow_can_open(scheme: str) -> bool:
    if scheme not in _PYARROW_SCHEMES:
        return False
    try:
        from pyarrow import fs  # noqa: F401
    except ImportError:
        return False
    return True


def _open_with_fsspec(url: str):
    import fsspec

    return fsspec.open(url, "rb").open()


def _open_with_pyarrow(url: str):
    from pyarrow import fs as pafs

    scheme, rest = url.split("://", 1)
    # pyarrow knows s3:// and gs://, not Hadoop's s3a:// and gcs:// names for the same stores
    filesystem, path = pafs.FileSystem.from_uri(f"{_PYARROW_SCHEMES[scheme]}://{rest}")
    return filesystem.open_input_file(path)


def reader_for(url: str):
    """A function url -> binary file object for a non-local URL (fsspec with the scheme's
    driver, else pyarrow's own file systems), or None when nothing installed reads it."""
    scheme = urlparse(url).scheme
    if fsspec_can_open(scheme):
        return _open_with_fsspec
    if _pyarrow_can_open(scheme):
        return _open_with_pyarrow
    return None


def remote_opener():
    """A function url -> binary file object for non-local URLs, choosing the reader by scheme;
    it raises OptionalDependencyError for a scheme nothing installed reads."""
    def open_url(url: str):
        opener = reader_for(url)
        if opener is None:
            raise OptionalDependencyError(missing_reader(url))
        return opener(url)

    return open_url


def missing_reader(url: str) -> str:
    scheme = urlparse(url).scheme
    package = FSSPEC_PACKAGES.get(scheme, f"the fsspec driver of {scheme}://")
    return (f"{url}: nothing installed reads {scheme}:// by byte range; install fsspec and "
            f"{package} on the driver and every executor, or give local / file:// paths "
            f"(a shared mount works)")


def fsspec_lister():
    """A lister (:data:`mqtool.spark.plan.Lister`) of non-local URLs through fsspec, for readers
    that have no Hadoop FileSystem at hand (the ``rocketmq`` data source)."""
    from .plan import ListedEntry

    try:
        import fsspec
    except ImportError:
        raise OptionalDependencyError("listing non-local paths needs fsspec (and the driver of "
                                      "their scheme, e.g. s3fs)") from None

    def list_dir(url: str):
        from ..errors import StoreLayoutError

        scheme = urlparse(url).scheme
        try:
            fs = fsspec.filesystem(scheme)
        except (ImportError, ValueError):
            raise OptionalDependencyError(missing_reader(url)) from None
        try:
            if not fs.exists(url):
                return None
            is_dir = fs.isdir(url)
            listed = fs.ls(url, detail=True) if is_dir else []
        except Exception as err:   # each file system raises its own (credentials, network)
            text = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise StoreLayoutError(f"{url}: cannot list it: {type(err).__name__}"
                                   + (f": {text}" if text else "")) from None
        if not is_dir:
            raise StoreLayoutError(f"{url}: not a directory (give a store root or a CommitLog "
                                   f"directory)")
        entries = []
        for info in listed:
            path = info["name"].rstrip("/")
            full = path if "://" in path else f"{scheme}://{path}"
            entries.append(ListedEntry(path.rsplit("/", 1)[-1], full,
                                       info.get("type") == "directory", int(info.get("size") or 0)))
        return entries

    return list_dir


def check_remote_reader(sources: list[str]) -> None:
    """Non-local inputs need a reader of their scheme (fsspec and its driver, or pyarrow): say
    so before any work."""
    for source in sources:
        if not is_local(source) and reader_for(source) is None:
            raise OptionalDependencyError(missing_reader(source))


def split_events(split: Split, *, check_crc: bool = True, opener=None,
                 batches: bool = False) -> Iterator:
    """The scan events this split owns, in offset order (see the module docstring); with
    ``batches``, runs of messages come as :class:`mqtool.scan.RecordBatch` objects (valid
    until the next event is requested)."""
    if opener is None and is_local(split.url):
        return _local_events(split, check_crc, batches)
    opener = opener or remote_opener()
    return _remote_events(split, check_crc, opener, batches)


# --- what a task reports besides rows ------------------------------------------------------------

def new_side(split: Split) -> dict:
    """What the driver needs of a task besides its rows: where its chain of records entered and
    left the range, the blank record that ends a file's data, and every non-message region."""
    import mqtool

    return {"broker": split.broker, "file": split.name, "base_offset": split.base_offset,
            "length": split.length, "index": split.index, "start": split.start,
            "end": split.end, "entry": None, "exit": None, "blank": None, "messages": 0,
            # a DLedger entry's header lies before its record: where the chain of entries
            # continues is the record's offset less this (chain_check compares those)
            "header": dl_fmt.ENTRY_HEADER_SIZE if layout_of(split.url) == DLEDGER_LAYOUT else 0,
            "message_bytes": 0, "regions": [], "regions_dropped": 0,
            "origin": getattr(mqtool, "__file__", None)}


def note_done(side: dict) -> None:
    """Close a side report: the task process's peak memory so far (tasks reuse Python workers,
    so it is the worker's peak over the splits it read)."""
    try:
        import resource

        side["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    except (ImportError, OSError):
        side["peak_rss"] = None


def note_batch(side: dict, batch: RecordBatch) -> None:
    if side["entry"] is None:
        side["entry"] = batch.base + int(batch.position[0]) - side.get("header", 0)
    side["messages"] += len(batch)
    side["message_bytes"] += int(batch.total_size.sum())
    side["exit"] = batch.base + int(batch.position[-1] + batch.total_size[-1])


def note_event(side: dict, event) -> None:
    kind = type(event)
    if side["entry"] is None:
        side["entry"] = event.offset - (side.get("header", 0) if kind is MessageRecord else 0)
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


# --- export rows -------------------------------------------------------------------------------

def export_rows(split: Split, rec: MessageRecord, buf_body: bytes, decompress: bool,
                columns: tuple[str, ...], unwrap: bool = True) -> list[tuple]:
    """The export's rows of one record: ``dump``'s message record
    (:func:`mqtool.inspect.message_to_dict`) with the body as bytes; with ``unwrap``, an inner
    batch's inner messages as ``dump`` gives them
    (:func:`mqtool.inspect.unwrap_message_dict`), each saying where it lies."""
    import base64

    from ..inspect import message_to_dict, unwrap_message_dict

    record = message_to_dict(rec, buf_body, file=split.name,
                             file_offset=rec.offset - split.base_offset, body_mode="base64",
                             decompress=decompress)
    record["broker"] = split.broker
    messages = unwrap_message_dict(record, rec, buf_body) if unwrap else [record]
    rows = []
    for message in messages:
        body = message.get("body")
        message["body"] = base64.b64decode(body) if body is not None else None
        if message.get("system") is not None:
            message["system"] = jsontext.dumps(message["system"], separators=(",", ":"))
        where = message.get("inner_batch")
        if where is not None:
            message["inner_position"] = where["position"]
            message["outer_commitlog_offset"] = where["commitlog_offset"]
        rows.append(tuple(message.get(name) for name in columns))
    return rows


def export_partition(splits, check_crc: bool, decompress: bool, topics: frozenset | None,
                     columns: tuple[str, ...], sink, unwrap: bool = True) -> Iterator[tuple]:
    for split in splits:
        side = new_side(split)
        reader = BodyReader(split)
        try:
            for event in split_events(split, check_crc=check_crc):
                note_event(side, event)
                if type(event) is not MessageRecord:
                    continue
                if topics is not None and event.topic not in topics:
                    continue
                rows = export_rows(split, event, reader.body(event), decompress, columns,
                                   unwrap)
                side["exported"] = side.get("exported", 0) + len(rows)
                yield from rows
        finally:
            reader.close()
        note_done(side)
        sink.add([side])


class BodyReader:
    """Stored bodies of one file's records (a second read of the same bytes the scan saw)."""

    def __init__(self, split: Split, opener=None):
        self.split = split
        self.opener = opener
        self.handle = None

    def body(self, rec: MessageRecord) -> bytes:
        if rec.body_length <= 0:
            return b""
        if self.handle is None:
            if self.opener is None and is_local(self.split.url):
                self.handle = open(local_path(self.split.url), "rb")
            else:
                opener = self.opener or remote_opener()
                self.handle = opener(self.split.url)
        self.handle.seek(rec.body_position - self.split.base_offset)
        return self.handle.read(rec.body_length)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
