"""``verify``: every consistency check of a store, as findings with stable codes.

The CommitLog is streamed once, file by file, in offset order with the shared scanner. Each file
is checked on its own (records never cross files), so files can go to worker processes:

* the records themselves (CRCs, lengths, self-recorded offsets) and, with the broker's rules
  (:class:`mqtool.recovery.FileJudge`), where recovery would stop in that file;
* a streaming merge with the ConsumeQueues: each queue's units are in CommitLog order, so a
  cursor per queue (positioned by binary search at the file's first offset) walks alongside the
  scan; nothing is kept per record;
* the same merge with the IndexFile entries (entries are in CommitLog order inside a file).

The scan comes in runs of records as numpy columns (:class:`mqtool.scan.RecordBatch`), and the
merges are joins of sorted arrays per run (:class:`_BatchChecker`); the record-at-a-time checker
(:class:`_SegmentChecker`, ``engine="records"``) is the reference the tests hold it equal to.

Structure that does not need the records (file sizes, unit validity and order, index headers and
hash chains) is checked with numpy over whole files. The recovery prediction is then made from
the per-file verdicts, and decides how serious what lies past the recovered end is.

Memory is bounded by the number of queues, the run length and the read chunk size, not by the
store size.
"""
from __future__ import annotations

import array
import bisect
import collections
import itertools
import os
import struct
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import codec as _codec
from .batchcq import check_batch_consume_queues
from .codec import CQ_DTYPE as CQ_UNIT_DTYPE
from .codec import CQ_UNIT as _CQ_STRUCT
from .codec import INDEX_ENTRY as _ENTRY_STRUCT
from .errors import ParseError
from .formats import codecs
from .formats import commitlog as cl_fmt
from .formats import consumequeue as cq_fmt
from .formats import indexfile as idx_fmt
from .recovery import (INDEX_ENTRY_DTYPE, INDEX_HEADER_DTYPE, BrokerRules, FileJudge,
                       FileVerdict, RecoveryPlan, deleted_on_load, predict_recovery, read_cq_units,
                       resolve_broker_version)
from .scan import (FLAG_FALSE, FLAG_NONE, FLAG_TRUE, CorruptRegion, MessageRecord, RecordBatch, message_at,
                   scan_segment, scan_segment_batches)
from .timer import check_timer_store
from .dledger import check_dledger
from .store import CommitLog, Segment, Store

# --- the codes -----------------------------------------------------------------------------------

# in mqtool.vocabulary so that the CLI's help can list the codes without importing numpy
from .vocabulary import CODES, ERROR, INFO, WARNING

SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}
#: findings listed per code (all are counted in the summary)
MAX_LISTED_PER_CODE = 1000
_MAX_PER_SEGMENT = 5000
_MAX_CHAIN_WALK_ENTRIES = 5_000_000   # the exact walk keeps ~17 bytes an entry
_CHUNK_ITEMS = 512
_INDEX_BATCH = 2048
_END = 1 << 63   # a key past every CommitLog offset


@dataclass
class Finding:
    """One problem, located by (code, file, offset): file relative to the store root, offset a
    byte position in that file."""

    code: str
    severity: str
    file: str
    offset: int
    message: str
    commitlog_offset: int | None = None
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    count: int | None = None
    details: dict | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.code, self.file, self.offset)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class VerifyReport:
    store: str
    geometry: dict
    findings: list[Finding]
    summary: dict
    recovery: RecoveryPlan

    @property
    def errors(self) -> int:
        return self.summary["errors"]

    def to_dict(self) -> dict:
        return {
            "store": self.store,
            "geometry": self.geometry,
            "findings": [f.to_dict() for f in self.findings],
            "summary": self.summary,
            "recovery": self.recovery.to_dict(),
        }


def _prop_crc_message(offset: int) -> str:
    return (f"__CRC32# property CRC does not match the record at {offset} (the broker checks it "
            "only with forceVerifyPropCRC, and then cuts the store here: mqtool recover "
            "--force-verify-prop-crc)")


def _finding(code: str, file: str, offset: int, message: str, severity: str | None = None,
             **extra) -> Finding:
    return Finding(code, severity or CODES[code][0], file, int(offset), message, **extra)


# --- sorted fixed-size items in files (CQ units, index entries), read by chunks ---------------------



class _FdCache:
    """A few read-only descriptors kept open; queues can outnumber the process's fd limit."""

    def __init__(self, size: int = 128):
        self.size = size
        self.fds: collections.OrderedDict[str, int] = collections.OrderedDict()

    def pread(self, path: str, length: int, position: int) -> bytes:
        fd = self.fds.get(path)
        if fd is None:
            fd = os.open(path, os.O_RDONLY)
            self.fds[path] = fd
            if len(self.fds) > self.size:
                _, old = self.fds.popitem(last=False)
                os.close(old)
        else:
            self.fds.move_to_end(path)
        return os.pread(fd, length, position)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


@dataclass(frozen=True)
class _ItemFile:
    path: str
    data_start: int     # byte position of item ``first``
    first: int          # global item index of the first item in the file
    count: int


def _next_present(files: list[_ItemFile], firsts: list[int], index: int) -> int:
    """``index``, or the first item of the next file that has one when ``index`` lies past the
    end of a file shorter than its slot (a truncated ConsumeQueue: the rest of its units are
    missing, and the next file still starts where the geometry puts it)."""
    k = max(bisect.bisect_right(firsts, index) - 1, 0)
    while k < len(files) and index >= files[k].first + files[k].count:
        k += 1
        if k < len(files):
            index = max(index, files[k].first)
    return index if k < len(files) else _END


class _SortedItems:
    """Items ``[lo, hi)`` of a logical array spread over files, sorted by field ``key_field``;
    a cursor over those whose key lies in ``[key_lo, key_hi)``. ``head``/``head_key`` are the
    current item and its key (None and :data:`_END` past the last one)."""

    __slots__ = ("files", "firsts", "codec", "key_field", "fds", "lo", "hi", "key_hi", "index",
                 "chunk", "chunk_pos", "head", "head_key")

    def __init__(self, files: list[_ItemFile], codec: struct.Struct, key_field: int, fds: _FdCache,
                 lo: int, hi: int):
        self.files = files
        self.firsts = [f.first for f in files]
        self.codec = codec
        self.key_field = key_field
        self.fds = fds
        self.lo, self.hi = lo, hi
        self.key_hi = 0
        self.index = hi
        self.chunk: list = []
        self.chunk_pos = 0
        self.head = None
        self.head_key = _END

    def _file_of(self, index: int) -> _ItemFile:
        return self.files[bisect.bisect_right(self.firsts, index) - 1]

    def _read(self, index: int, limit: int) -> list:
        f = self._file_of(index)
        n = min(limit - index, f.first + f.count - index, _CHUNK_ITEMS)
        size = self.codec.size
        raw = self.fds.pread(f.path, n * size, f.data_start + (index - f.first) * size)
        return list(self.codec.iter_unpack(raw[:len(raw) - len(raw) % size]))

    def _key(self, index: int) -> int:
        # a missing item takes the key of the next present one: the keys stay sorted
        index = _next_present(self.files, self.firsts, index)
        if index >= self.hi:
            return _END
        return self._read(index, index + 1)[0][self.key_field]

    def seek(self, key_lo: int, key_hi: int) -> bool:
        """Position on the first item with key >= key_lo; False when none lies below key_hi."""
        lo, hi = self.lo, self.hi
        while lo < hi:
            mid = (lo + hi) // 2
            if self._key(mid) < key_lo:
                lo = mid + 1
            else:
                hi = mid
        self.index = min(_next_present(self.files, self.firsts, lo), self.hi)
        self.key_hi = key_hi
        self.chunk, self.chunk_pos = [], 0
        self._load()
        return self.head is not None

    def _load(self) -> None:
        if self.chunk_pos >= len(self.chunk):
            # chunks end at file ends, so only here can the next item lie in the next file
            self.index = min(_next_present(self.files, self.firsts, self.index), self.hi)
            if self.index >= self.hi:
                self.head, self.head_key = None, _END
                return
            self.chunk = self._read(self.index, self.hi)
            self.chunk_pos = 0
            if not self.chunk:
                self.index = self.hi
                self.head, self.head_key = None, _END
                return
        item = self.chunk[self.chunk_pos]
        key = item[self.key_field]
        if key < self.key_hi:
            self.head, self.head_key = item, key
        else:
            self.head, self.head_key = None, _END

    def advance(self) -> None:
        self.chunk_pos += 1
        self.index += 1
        self._load()


# --- what the workers need to know about queues and index files ------------------------------------

@dataclass(frozen=True)
class _QueueInfo:
    topic: str
    queue_id: int
    files: tuple        # of _ItemFile (CQ files; data_start 0, first = base unit)
    rels: tuple         # relative path per file
    first_valid: int    # first unit that is neither pre-blank nor expired-looking
    valid_end: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class _IndexInfo:
    name: str
    rel: str
    path: str
    slots: int
    entries_start: int
    index_count: int
    min_phy: int
    max_phy: int


@dataclass
class _Context:
    commitlog_dir: str
    file_size: int
    root: str
    segments: list[Segment]
    check_crc: bool
    rules: BrokerRules
    queues: dict            # (topic, qid) -> _QueueInfo, the queues merged with the scan
    unchecked_queues: set   # (topic, qid) whose records are not matched (irregular / batch CQ)
    indexes: list           # _IndexInfo of regular index files
    index_blind: list = field(default_factory=list)  # (lo, hi) ranges of unmerged index files
    engine: str = "batches"  # or "records": the record-at-a-time reference checker
    batch_topics: frozenset = frozenset()  # topics with batchconsumequeue/ dirs (5.x)


@dataclass
class _MissingRun:
    topic: str
    queue_id: int
    file: str
    position: int
    first_offset: int
    first_queue_offset: int
    last_offset: int
    last_queue_offset: int
    count: int
    live: bool


@dataclass
class _SegmentResult:
    index: int
    verdict: FileVerdict
    findings: list = field(default_factory=list)
    suppressed: collections.Counter = field(default_factory=collections.Counter)
    messages: int = 0
    newest_timestamp: int | None = None
    # per queue, over live dispatchable records: (first qoff, first offset, next expected, last offset)
    spans: dict = field(default_factory=dict)
    missing: list = field(default_factory=list)
    matched_before_stop: int = 0     # records a ConsumeQueue unit references, before the file's stop
    matched_after_stop: int = 0
    leftover_units: int = 0
    bytes: int = 0
    v2_records: int = 0             # evidence for the store passport
    prop_crc_records: int = 0       # records whose __CRC32# property was checked
    # (topic, qid) of a BatchConsumeQueue topic -> offsets of its dispatchable records
    batch_records: dict = field(default_factory=dict)


_WORKER_CONTEXT: _Context | None = None
_WORKER_COMMITLOG: CommitLog | None = None


def _init_worker(context: _Context) -> None:
    global _WORKER_CONTEXT, _WORKER_COMMITLOG
    _WORKER_CONTEXT = context
    _WORKER_COMMITLOG = None


def _worker_commitlog(ctx: _Context) -> CommitLog:
    """One CommitLog listing per worker process (listing is a stat per file)."""
    global _WORKER_COMMITLOG
    if _WORKER_COMMITLOG is None:
        _WORKER_COMMITLOG = CommitLog(Path(ctx.commitlog_dir), ctx.file_size)
    return _WORKER_COMMITLOG


def _worker_check(index: int) -> _SegmentResult:
    return _checker_class(_WORKER_CONTEXT)(_WORKER_CONTEXT, index).run()


def _checker_class(ctx: _Context):
    return _SegmentChecker if ctx.engine == "records" else _BatchChecker


_NOT = cl_fmt.TRANSACTION_NOT_TYPE
_COMMIT = cl_fmt.TRANSACTION_COMMIT_TYPE
_ROLLBACK = cl_fmt.TRANSACTION_ROLLBACK_TYPE
_TX_MASK = cl_fmt.TRANSACTION_TYPE_MASK
_INNER_BATCH = cl_fmt.INNER_BATCH_FLAG
_TX_NAMES = cl_fmt.TRANSACTION_NAMES


class _KeyHashes:
    """Index key hashes and tag codes of records, with small caches for repeated values."""

    def __init__(self):
        self.tags: dict[str, int] = {}
        self.keys: dict[tuple, int] = {}
        self.prefixes: dict[str, int] = {}

    def prefix(self, topic: str) -> int:
        """The unsigned hashCode of ``topic#``."""
        prefix = self.prefixes.get(topic)
        if prefix is None:
            if len(self.prefixes) > 4096:
                self.prefixes.clear()
            prefix = self.prefixes[topic] = codecs.index_key_prefix_hash(topic)
        return prefix

    def key_hash(self, topic: str, key: str) -> int:
        return codecs.index_key_hash_after(self.prefix(topic), key)

    def tags_code(self, record: MessageRecord, props: dict) -> int:
        if record.topic == codecs.SCHEDULE_TOPIC:
            return codecs.tags_code(record.topic, props, record.store_timestamp)
        return self.plain_tags_code(props)

    def plain_tags_code(self, props: dict) -> int:
        """The TAGS hash, whatever the topic."""
        tags = props.get("TAGS")
        if not tags:
            return 0
        code = self.tags.get(tags)
        if code is None:
            if len(self.tags) > 4096:
                self.tags.clear()
            code = self.tags[tags] = codecs.java_string_hash_fast(tags)
        return code

    def index_hashes_batch(self, batch: list) -> list[dict[int, str]]:
        """:meth:`index_hashes` for (record, properties or None) pairs."""
        return [{} if record.sys_flag & _TX_MASK == _ROLLBACK else
                self.index_hashes(record, record.properties if props is None else props)
                for record, props in batch]

    def index_hashes(self, record: MessageRecord, props: dict) -> dict[int, str]:
        """hash -> key for every key the broker indexes for this record (none for ROLLBACK)."""
        if record.sys_flag & _TX_MASK == _ROLLBACK:
            return {}
        out = {}
        uniq = props.get("UNIQ_KEY")
        topic = record.topic
        if uniq:
            out[self.key_hash(topic, uniq)] = uniq
        if props.get("KEYS"):
            cache = self.keys
            for key in codecs.message_keys(props):
                h = cache.get((topic, key))
                if h is None:
                    if len(cache) > 8192:
                        cache.clear()
                    h = cache[(topic, key)] = self.key_hash(topic, key)
                out[h] = key
        return out


class _SegmentChecker:
    """All record-level checks of one CommitLog file."""

    def __init__(self, ctx: _Context, index: int, progress=None, commitlog: CommitLog | None = None):
        self.ctx = ctx
        self.index = index
        self.segment = ctx.segments[index]
        self.rel = self.segment.store_path
        self.progress = progress
        self.fds = _FdCache()
        self.hashes = _KeyHashes()
        self.result = _SegmentResult(index, None)  # type: ignore[arg-type]
        self.cursors: dict = {}
        self.runs: dict = {}
        self.listed = collections.Counter()
        self.pending: list = []
        self.commitlog = commitlog if commitlog is not None else _worker_commitlog(ctx)

    # -- findings
    def add(self, finding: Finding) -> None:
        listed = self.listed
        if listed[finding.code] >= _MAX_PER_SEGMENT:
            self.result.suppressed[finding.code] += 1
            return
        listed[finding.code] += 1
        self.result.findings.append(finding)

    def cl(self, code: str, offset: int, message: str, **extra) -> None:
        self.add(_finding(code, self.rel, offset - self.segment.base_offset, message,
                          commitlog_offset=offset, **extra))

    # -- ConsumeQueue merge
    def _cursor(self, key):
        info = self.ctx.queues.get(key)
        cursor = None
        seg = self.segment
        end = seg.base_offset + seg.length
        if info is not None and info.max_offset >= seg.base_offset and info.min_offset < end:
            cursor = _SortedItems(list(info.files), _CQ_STRUCT, 0, self.fds, info.first_valid,
                                  info.valid_end)
            if not cursor.seek(seg.base_offset, end):
                cursor = None
        self.cursors[key] = cursor
        return cursor

    def _cq_file_of(self, info: _QueueInfo, unit: int) -> tuple[str, int]:
        i = bisect.bisect_right([f.first for f in info.files], unit) - 1
        f = info.files[i]
        return info.rels[i], (unit - f.first) * cq_fmt.CQ_STORE_UNIT_SIZE

    def _leftover_unit(self, key, number: int, offset: int) -> None:
        self.add(self._leftover_unit_finding(key, number, offset))

    def _leftover_unit_finding(self, key, number: int, offset: int) -> Finding:
        """Unit ``number`` of this file's range, which matched no record of its queue."""
        self.result.leftover_units += 1
        info = self.ctx.queues[key]
        rel, pos = self._cq_file_of(info, number)
        extra = dict(commitlog_offset=offset, topic=info.topic, queue_id=info.queue_id,
                     queue_offset=number)
        try:
            record = message_at(self.commitlog, offset, check_crc=False)
        except ParseError as err:
            return _finding("CQ_DANGLING", rel, pos,
                            f"unit {number} points at CommitLog offset {offset}, where no "
                            f"record starts ({err.detail})", **extra)
        if (record.topic, record.queue_id) != key:
            return _finding("CQ_MISMATCH", rel, pos,
                            f"unit {number} points at a record of {record.topic!r} queue "
                            f"{record.queue_id} at {offset}", **extra)
        if record.sys_flag & _TX_MASK not in (_NOT, _COMMIT):
            kind = _TX_NAMES[record.sys_flag & _TX_MASK]
            return _finding("CQ_MISMATCH", rel, pos,
                            f"unit {number} points at a {kind} record at {offset}, which "
                            f"the broker never dispatches", **extra)
        return _finding("CQ_MISMATCH", rel, pos,
                        f"unit {number} points at the record at {offset} "
                        f"(queue offset {record.queue_offset}) out of order or twice", **extra)

    def _compare_unit(self, key, number: int, unit, record: MessageRecord, props) -> None:
        finding = self._compare_unit_finding(key, number, unit, record, props)
        if finding is not None:
            self.add(finding)

    def _compare_unit_finding(self, key, number: int, unit, record: MessageRecord,
                              props) -> Finding | None:
        """Unit ``number`` against the record it points at."""
        offset, size, tags = unit
        problems = []
        if size != record.total_size:
            problems.append(f"size {size} but the record is {record.total_size} bytes")
        if number != record.queue_offset:
            problems.append(f"it is unit {number} but the record's queue offset is "
                            f"{record.queue_offset}")
        severity = None
        if not cq_fmt.is_ext_address(tags):
            expected = self.hashes.tags_code(record, props)
            if expected != tags:
                if (record.topic == codecs.SCHEDULE_TOPIC and not problems
                        and tags == self.hashes.plain_tags_code(props)):
                    # Seen in crash-lost-small/recovered: 4.9 loads the schedule service after
                    # recover(), so units re-dispatched by abnormal recovery see maxDelayLevel 0
                    # and keep the TAGS hash where the delivery time belongs.
                    severity = WARNING
                    problems.append(f"tagsCode {tags} is the TAGS hash, not the delivery time "
                                    f"{expected}: written by a 4.9 abnormal recovery (the "
                                    f"schedule service was not loaded yet); the scheduler will "
                                    f"deliver it at once")
                else:
                    problems.append(f"tagsCode {tags} but the record's is {expected}")
        if not problems:
            return None
        info = self.ctx.queues[key]
        rel, pos = self._cq_file_of(info, number)
        return _finding("CQ_MISMATCH", rel, pos,
                        f"unit {number} of {info.topic!r} queue {info.queue_id}: "
                        + "; ".join(problems), severity=severity,
                        commitlog_offset=offset, topic=info.topic, queue_id=info.queue_id,
                        queue_offset=number)

    def _missing(self, record: MessageRecord, key, live: bool) -> None:
        run = self.runs.get(key)
        if run is not None and run.live == live:
            run.last_offset = record.offset
            run.last_queue_offset = record.queue_offset
            run.count += 1
            return
        if run is not None:
            self.result.missing.append(run)
        self.runs[key] = _MissingRun(record.topic, record.queue_id, self.rel,
                                     record.offset - self.segment.base_offset, record.offset,
                                     record.queue_offset, record.offset, record.queue_offset, 1,
                                     live)

    def _close_run(self, key) -> None:
        run = self.runs.pop(key, None)
        if run is not None:
            self.result.missing.append(run)

    def merge_cq(self, record: MessageRecord, key, props, live: bool) -> bool:
        cursor = self.cursors.get(key, False)
        if cursor is False:
            cursor = self._cursor(key)
        if cursor is None:
            if key not in self.ctx.unchecked_queues:
                self._missing(record, key, live)
            return False
        offset = record.offset
        while cursor.head_key < offset:
            self._leftover_unit(key, cursor.index, cursor.head_key)
            cursor.advance()
        if cursor.head_key == offset:
            self._compare_unit(key, cursor.index, cursor.head, record, props)
            cursor.advance()
            if key in self.runs:
                self._close_run(key)
            return True
        self._missing(record, key, live)
        return False

    def finish_cq(self) -> None:
        seg = self.segment
        end = seg.base_offset + seg.length
        for key, info in self.ctx.queues.items():
            if key in self.cursors:
                cursor = self.cursors[key]
            elif info.max_offset >= seg.base_offset and info.min_offset < end:
                cursor = self._cursor(key)
            else:
                continue
            if cursor is None:
                continue
            while cursor.head is not None:
                self._leftover_unit(key, cursor.index, cursor.head_key)
                cursor.advance()
        for key in list(self.runs):
            self._close_run(key)

    # -- index merge
    def _index_cursors(self) -> list:
        seg = self.segment
        end = seg.base_offset + seg.length
        cursors = []
        for info in self.ctx.indexes:
            if info.max_phy < seg.base_offset or info.min_phy >= end:
                continue
            cursor = _SortedItems([_ItemFile(info.path, info.entries_start, 0, info.index_count)],
                                  _ENTRY_STRUCT, 1, self.fds, 1, info.index_count)
            if cursor.seek(seg.base_offset, end):
                cursors.append((info, cursor))
        return cursors

    def _entry_pos(self, info: _IndexInfo, number: int) -> int:
        return info.entries_start + idx_fmt.INDEX_ENTRY_SIZE * number

    def _leftover_entry(self, info: _IndexInfo, number: int, entry) -> None:
        finding = self._leftover_entry_finding(info, number, entry[0], entry[1])
        if finding is not None:
            self.add(finding)

    def _leftover_entry_finding(self, info: _IndexInfo, number: int, key_hash: int,
                                phy: int) -> Finding | None:
        """Entry ``number``, which points at no record of this file's scan."""
        pos = self._entry_pos(info, number)
        try:
            record = message_at(self.commitlog, phy, check_crc=False)
        except ParseError as err:
            return _finding("IDX_DANGLING", info.rel, pos,
                            f"entry {number} points at CommitLog offset {phy}, where no record "
                            f"starts ({err.detail})", commitlog_offset=phy)
        hashes = self.hashes.index_hashes(record, record.properties)
        if key_hash not in hashes:
            return _finding("IDX_HASH_MISMATCH", info.rel, pos,
                            f"entry {number} hash {key_hash} matches no key of the record at "
                            f"{phy}", commitlog_offset=phy, topic=record.topic)
        return None

    def queue_index(self, record: MessageRecord, props) -> None:
        """Index checks wait for a batch: the key hashes of many records are computed at once."""
        self.pending.append((record, props))
        if len(self.pending) >= _INDEX_BATCH:
            self.flush_index()

    def flush_index(self) -> None:
        batch, self.pending = self.pending, []
        for (record, _), expected in zip(batch, self.hashes.index_hashes_batch(batch)):
            self.merge_index(record, expected)

    def merge_index(self, record: MessageRecord, expected: dict[int, str]) -> None:
        offset = record.offset
        found = set()
        for info, cursor in self.index_cursors:
            while cursor.head_key < offset:
                self._leftover_entry(info, cursor.index, cursor.head)
                cursor.advance()
            while cursor.head_key == offset:
                entry = cursor.head
                found.add(entry[0])
                if entry[0] not in expected:
                    self.add(_finding("IDX_HASH_MISMATCH", info.rel,
                                      self._entry_pos(info, cursor.index),
                                      f"entry {cursor.index} hash {entry[0]} matches no key of the "
                                      f"record at {offset}", commitlog_offset=offset,
                                      topic=record.topic))
                cursor.advance()
        covering = None
        for info in self.covering:
            if info.min_phy <= offset <= info.max_phy:
                covering = info
        if covering is None:
            return
        for lo, hi in self.ctx.index_blind:
            if lo <= offset <= hi:
                return
        for key_hash, key in expected.items():
            if key_hash not in found:
                slot = key_hash % covering.slots
                self.add(_finding("IDX_MISSING_KEY", covering.rel, idx_fmt.slot_position(slot),
                                  f"key {key!r} of the record at {offset} has no entry in its slot "
                                  f"chain (slot {slot})", commitlog_offset=offset,
                                  topic=record.topic, details={"key": key}))

    def finish_index(self) -> None:
        for info, cursor in self.index_cursors:
            while cursor.head is not None:
                self._leftover_entry(info, cursor.index, cursor.head)
                cursor.advance()

    # -- the scan
    def run(self) -> _SegmentResult:
        ctx, seg, result = self.ctx, self.segment, self.result
        judge = FileJudge(seg, ctx.rules)
        feed = judge.feed
        self.index_cursors = self._index_cursors()
        end = seg.base_offset + seg.length
        self.covering = [i for i in ctx.indexes if i.max_phy >= seg.base_offset and i.min_phy < end]
        has_index = bool(self.index_cursors or self.covering)
        spans = result.spans
        newest = None
        try:
            for event in scan_segment(seg, check_crc=ctx.check_crc, resync=True,
                                      progress=self.progress):
                feed(event)
                kind = type(event)
                if kind is MessageRecord:
                    result.messages += 1
                    if event.magic_code == _V2_MAGIC:
                        result.v2_records += 1
                    if event.prop_crc_ok is not None:
                        result.prop_crc_records += 1
                    offset = event.offset
                    live = not judge.stopped
                    if event.body_crc_ok is False:
                        self.cl("CL_CRC_MISMATCH", offset,
                                f"body CRC {event.body_crc} does not match the {event.body_length}-byte "
                                f"body of the record at {offset}", topic=event.topic,
                                queue_id=event.queue_id, queue_offset=event.queue_offset)
                    if event.prop_crc_ok is False:
                        self.cl("CL_PROP_CRC_MISMATCH", offset,
                                _prop_crc_message(offset), topic=event.topic,
                                queue_id=event.queue_id,
                                queue_offset=event.queue_offset)
                    if event.physical_offset != offset:
                        self.cl("CL_OFFSET_MISMATCH", offset,
                                f"PHYSICALOFFSET field says {event.physical_offset} but the record "
                                f"is at {offset}; a re-dispatch would point its ConsumeQueue unit "
                                f"and index entries there", topic=event.topic,
                                queue_id=event.queue_id)
                    ts = event.store_timestamp
                    if newest is None or ts > newest:
                        newest = ts
                    props = None
                    tx = event.sys_flag & _TX_MASK
                    if tx == _NOT or tx == _COMMIT:
                        key = (event.topic, event.queue_id)
                        if event.topic in ctx.batch_topics:
                            result.batch_records.setdefault(key, []).append(offset)
                        elif key not in ctx.unchecked_queues:
                            props = event.properties
                            if self.merge_cq(event, key, props, live):
                                if live:
                                    result.matched_before_stop += 1
                                else:
                                    result.matched_after_stop += 1
                        # every record counts for queue-offset continuity: a stop of this
                        # file's judge is not where the broker's recovery stops, and gaps at or
                        # past processOffset are dropped when the results are merged
                        self._queue_offset(event, key, props, spans)
                    if has_index:
                        self.queue_index(event, props)
                elif kind is CorruptRegion:
                    self.cl(event.code, event.offset, f"{event.detail} ({event.length} bytes "
                            f"until the next plausible record)",
                            details={"length": event.length, "declared_size": event.total_size})
            self.finish_cq()
            self.flush_index()
            self.finish_index()
        finally:
            self.fds.close()
        result.verdict = judge.verdict
        result.newest_timestamp = newest
        result.bytes = seg.length
        return result

    def _queue_offset(self, record: MessageRecord, key, props, spans) -> None:
        qoff = record.queue_offset
        step = 1
        if record.sys_flag & _INNER_BATCH:
            if props is None:
                props = record.properties
            try:
                step = max(1, int(props.get("INNER_NUM", "1")))
            except ValueError:
                step = 1
        span = spans.get(key)
        if span is None:
            spans[key] = [qoff, record.offset, qoff + step, record.offset]
            return
        expected = span[2]
        if qoff != expected:
            what = "repeats" if qoff < expected else "skips"
            self.cl("CQ_QUEUE_GAP", record.offset,
                    f"{record.topic!r} queue {record.queue_id}: queue offset {qoff} {what} "
                    f"(expected {expected} after the record at {span[3]})",
                    topic=record.topic, queue_id=record.queue_id, queue_offset=qoff,
                    details={"expected": expected})
        span[2] = qoff + step
        span[3] = record.offset


# --- the same checks, a run of records at a time ------------------------------------------------------
#
# The scanner hands out runs of records as columns (scan.RecordBatch). The cross-checks become
# joins of sorted arrays: a queue's units against its records by CommitLog offset, index entries
# against all records; key and tag hashes are computed for a whole run at once. Only records
# that fail a check (or need the broker's exact per-record rules: delay-level tags, inner
# batches) are decoded into MessageRecord objects, and their findings are made by the same
# methods as the record-at-a-time checker above, which stays the reference (verify_store's
# engine="records"; the tests hold the two equal).
#
# Findings are collected with the place the reference would emit them - (record number in the
# scan, step, ...) - and added in that order, so the per-file listing cap keeps the same ones.

_LATE = 1 << 62                 # after every record: the finish steps
_CURSOR_CHUNK = 65536           # units / index entries read at a time
_MAX_HINTS = 1 << 22            # record starts taken from the ConsumeQueues per CommitLog file
_KEY_SEPARATOR = ord(" ")       # MessageConst.KEY_SEPARATOR
_PROPERTY_NAMES = ("TAGS", "KEYS", "UNIQ_KEY", "DELAY")
_V2_MAGIC = cl_fmt.MESSAGE_MAGIC_CODE_V2


class _ItemCursor:
    """Items ``[start, hi)`` of a sorted logical array spread over files (ConsumeQueue units,
    index entries) whose key is below ``key_hi``, handed out as numpy arrays."""

    def __init__(self, files: list[_ItemFile], dtype: np.dtype, key_field: str, fds: _FdCache,
                 start: int, hi: int, key_hi: int):
        self.files = files
        self.firsts = [f.first for f in files]
        self.dtype = dtype
        self.key_field = key_field
        self.fds = fds
        self.index = start          # next item to read
        self.hi = hi
        self.key_hi = key_hi
        self.done = False
        self.numbers = self.keys = self.items = None
        self.pos = 0

    def _load(self) -> bool:
        """Read the next chunk; False at the end (what _SortedItems would reach as well)."""
        if not self.done:
            self.index = min(_next_present(self.files, self.firsts, self.index), self.hi)
        if self.done or self.index >= self.hi:
            self.done = True
            return False
        f = self.files[bisect.bisect_right(self.firsts, self.index) - 1]
        n = min(self.hi - self.index, f.first + f.count - self.index, _CURSOR_CHUNK)
        size = self.dtype.itemsize
        raw = self.fds.pread(f.path, max(n, 0) * size,
                             f.data_start + (self.index - f.first) * size) if n > 0 else b""
        items = np.frombuffer(raw, self.dtype, len(raw) // size)
        if len(items) == 0:
            self.done = True
            return False
        keys = items[self.key_field].astype(np.int64)
        inside = int(np.searchsorted(keys, self.key_hi, side="left"))
        if inside < len(items):
            self.done = True
            items, keys = items[:inside], keys[:inside]
        self.numbers = np.arange(self.index, self.index + len(items), dtype=np.int64)
        self.items, self.keys, self.pos = items, keys, 0
        self.index += n
        return len(items) > 0

    def take_through(self, bound: int, all_equal: bool) -> tuple[np.ndarray, np.ndarray]:
        """(numbers, items) with key < bound, then the first item with key == bound, or every
        one with ``all_equal``."""
        numbers, items = [], []
        while True:
            if (self.keys is None or self.pos >= len(self.keys)) and not self._load():
                break
            keys, pos = self.keys, self.pos
            stop = pos + int(np.searchsorted(keys[pos:], bound, side="left"))
            equal = stop < len(keys) and keys[stop] == bound
            if equal:
                stop = pos + int(np.searchsorted(keys[pos:], bound, side="right")) \
                    if all_equal else stop + 1
            numbers.append(self.numbers[pos:stop])
            items.append(self.items[pos:stop])
            self.pos = stop
            if stop < len(keys) or (equal and not all_equal):
                break
        return _joined(numbers, np.int64), _joined(items, self.dtype)

    def rest(self) -> tuple[np.ndarray, np.ndarray]:
        return self.take_through(_END, all_equal=True)


def _within(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """np.isin by sorting (numpy's hashed unique is several times slower on these sizes)."""
    if len(members) == 0:
        return np.zeros(len(values), dtype=bool)
    members = np.sort(members)
    at = np.minimum(np.searchsorted(members, values), len(members) - 1)
    return members[at] == values


def _joined(parts: list, dtype) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


class _BatchProperties:
    """The properties of a batch's records, parsed only as far as the checks need them."""

    def __init__(self, batch: RecordBatch):
        self.data, self.begins = _codec.property_blob(*batch.properties_source())
        self.values = _codec.property_values(self.data, self.begins, _PROPERTY_NAMES)

        self._tags_codes = None

    def raw(self, start: int, end: int) -> bytes:
        return self.data[start:end].tobytes()

    def tags_codes(self, batch: RecordBatch, delays: dict) -> np.ndarray:
        """The tagsCode each record's ConsumeQueue unit should carry (codecs.tags_code)."""
        if self._tags_codes is None:
            codes = _codec.string_hash_codes(self.data, *self.values["TAGS"])
            schedule = batch.topics.find(codecs.SCHEDULE_TOPIC)
            if schedule is not None:
                d_starts, d_ends = self.values["DELAY"]
                for i in np.flatnonzero((batch.topic_id == schedule) & (d_starts >= 0)).tolist():
                    delay = self.raw(int(d_starts[i]), int(d_ends[i]))
                    after = delays.get(delay)
                    if after is None:
                        # tags_code reads TAGS and DELAY only: without TAGS it returns 0, or
                        # the (positive) delay itself from store time 0
                        after = delays[delay] = codecs.tags_code(
                            codecs.SCHEDULE_TOPIC,
                            {"DELAY": delay.decode("utf-8", errors="replace")}, 0)
                    if after > 0:
                        codes[i] = int(batch.store_timestamp[i]) + after
            self._tags_codes = codes
        return self._tags_codes


class _BatchChecker(_SegmentChecker):
    """The checks of :class:`_SegmentChecker`, made on the scanner's record batches."""

    def run(self) -> _SegmentResult:
        ctx, seg, result = self.ctx, self.segment, self.result
        judge = FileJudge(seg, ctx.rules)
        end = seg.base_offset + seg.length
        self.index_cursors = []
        for info in ctx.indexes:
            if info.max_phy < seg.base_offset or info.min_phy >= end:
                continue
            start = self._seek(_ItemFile(info.path, info.entries_start, 0, info.index_count),
                               _ENTRY_STRUCT, 1, 1, info.index_count, end)
            if start is not None:
                self.index_cursors.append((info, _ItemCursor(
                    [_ItemFile(info.path, info.entries_start, 0, info.index_count)],
                    INDEX_ENTRY_DTYPE, "phy_offset", self.fds, start, info.index_count, end)))
        self.covering = [i for i in ctx.indexes if i.max_phy >= seg.base_offset and i.min_phy < end]
        self.has_index = bool(self.index_cursors or self.covering)
        self.ordered: list = []
        self.run_log: list = []
        self.queue_cursors: dict = {}
        self.prefixes: dict[int, int] = {}
        self.delays: dict[bytes, int] = {}
        self.seq = 0
        self.newest = None
        try:
            for event in scan_segment_batches(seg, check_crc=ctx.check_crc, resync=True,
                                              progress=self.progress, hints=self._hints()):
                if type(event) is RecordBatch:
                    self._batch(event, judge)
                    self.seq += len(event)
                    continue
                judge.feed(event)
                if type(event) is CorruptRegion:
                    self.ordered.append(((self.seq, 0, 0, 0, 0), self._cl_finding(
                        event.code, event.offset, f"{event.detail} ({event.length} bytes until "
                        f"the next plausible record)",
                        details={"length": event.length, "declared_size": event.total_size})))
                self.seq += 1
            self._finish_queues()
            self._finish_index()
        finally:
            self.fds.close()
        self.ordered.sort(key=lambda item: item[0])
        for _, finding in self.ordered:
            self.add(finding)
        result.missing = [run for _, run in sorted(self.run_log, key=lambda item: item[0])]
        result.verdict = judge.verdict
        result.newest_timestamp = self.newest
        result.bytes = seg.length
        return result

    def _hints(self) -> np.ndarray | None:
        """Where the ConsumeQueues say this file's records start: the scanner follows these
        instead of walking record by record (it checks every step, so a wrong unit costs
        nothing but time)."""
        seg = self.segment
        end = seg.base_offset + seg.length
        parts, total = [], 0
        for info in self.ctx.queues.values():
            if info.max_offset < seg.base_offset or info.min_offset >= end:
                continue
            start = self._seek(list(info.files), _CQ_STRUCT, 0, info.first_valid,
                               info.valid_end, end)
            if start is None:
                continue
            cursor = _ItemCursor(list(info.files), CQ_UNIT_DTYPE, "commitlog_offset", self.fds,
                                 start, info.valid_end, end)
            _, units = cursor.rest()
            parts.append(units["commitlog_offset"].astype(np.int64))
            total += len(units)
            if total > _MAX_HINTS:
                return None
        return np.concatenate(parts) if parts else None

    def _cl_finding(self, code: str, offset: int, message: str, **extra) -> Finding:
        return _finding(code, self.rel, offset - self.segment.base_offset, message,
                        commitlog_offset=offset, **extra)

    def _seek(self, item_file: _ItemFile, codec, key_field: int, lo: int, hi: int,
              end: int) -> int | None:
        cursor = _SortedItems([item_file] if isinstance(item_file, _ItemFile) else item_file,
                              codec, key_field, self.fds, lo, hi)
        return cursor.index if cursor.seek(self.segment.base_offset, end) else None

    # -- one batch
    def _batch(self, batch: RecordBatch, judge: FileJudge) -> None:
        n = len(batch)
        self.result.messages += n
        self.result.v2_records += int(np.count_nonzero(batch.magic_code == _V2_MAGIC))
        self.result.prop_crc_records += int(np.count_nonzero(batch.prop_crc_ok != FLAG_NONE))
        offsets = batch.offsets
        self.offsets = offsets
        self.props = None
        live = self._judge(batch, judge, offsets)
        newest = int(batch.store_timestamp.max())
        if self.newest is None or newest > self.newest:
            self.newest = newest
        self._record_findings(batch, offsets)

        tx = batch.sys_flag & _TX_MASK
        dispatched = np.flatnonzero((tx == _NOT) | (tx == _COMMIT))
        if len(dispatched):
            codes = (batch.topic_id[dispatched].astype(np.int64) << 32) \
                | (batch.queue_id[dispatched] & 0xFFFFFFFF)
            order = np.argsort(codes, kind="stable")
            grouped = codes[order]
            first = np.flatnonzero(np.concatenate(([True], grouped[1:] != grouped[:-1])))
            last = np.append(first[1:], len(grouped))
            # keys in the order their first record comes, as the reference meets them
            for k in np.argsort(order[first], kind="stable").tolist():
                members = dispatched[order[first[k]:last[k]]]
                i0 = int(members[0])
                key = (batch.topics.names[batch.topic_id[i0]], int(batch.queue_id[i0]))
                if key[0] in self.ctx.batch_topics:
                    self.result.batch_records.setdefault(key, []).extend(
                        offsets[members].tolist())
                elif key not in self.ctx.unchecked_queues:
                    self._merge_queue(batch, key, members, live)
                self._queue_offsets(batch, key, members)
        if self.has_index:
            self._merge_index(batch, tx)

    def _judge(self, batch: RecordBatch, judge: FileJudge, offsets: np.ndarray) -> np.ndarray:
        """FileJudge.feed over the batch: records the judge could refuse are fed one by one, the
        runs between them (accepted, or counted past the stop) in one step each."""
        n = len(batch)
        rules = judge.rules
        suspect = np.zeros(n, dtype=bool)
        if not rules.accepts_v2:
            suspect |= batch.magic_code == _V2_MAGIC
        if rules.check_crc and rules.crc_scanned:
            if rules.verifies_prop_crc:
                suspect |= batch.prop_crc_ok != FLAG_TRUE
            else:
                suspect |= batch.body_crc_ok == FLAG_FALSE
        ends = offsets + batch.total_size
        live = np.empty(n, dtype=bool)
        v = judge.verdict
        i = 0
        for s in np.flatnonzero(suspect).tolist() + [n]:
            if s > i:
                last = s - 1
                if judge.stopped:
                    v.after += s - i
                    if v.first_after is None:
                        v.first_after = int(offsets[i])
                else:
                    v.accepted += s - i
                    v.last_accepted = int(offsets[last])
                    v.stop_offset = int(ends[last])
                v.data_end = int(ends[last])
                live[i:s] = not judge.stopped
            if s < n:
                judge.feed(batch.record(s))
                live[s] = not judge.stopped
            i = s + 1
        return live

    def _record_findings(self, batch: RecordBatch, offsets: np.ndarray) -> None:
        seq = self.seq
        for i in np.flatnonzero(batch.body_crc_ok == FLAG_FALSE).tolist():
            rec = batch.record(i)
            self.ordered.append(((seq + i, 1, 0, 0, 0), self._cl_finding(
                "CL_CRC_MISMATCH", rec.offset,
                f"body CRC {rec.body_crc} does not match the {rec.body_length}-byte body of the "
                f"record at {rec.offset}", topic=rec.topic, queue_id=rec.queue_id,
                queue_offset=rec.queue_offset)))
        for i in np.flatnonzero(batch.prop_crc_ok == FLAG_FALSE).tolist():
            rec = batch.record(i)
            self.ordered.append(((seq + i, 2, 0, 0, 0), self._cl_finding(
                "CL_PROP_CRC_MISMATCH", rec.offset,
                _prop_crc_message(rec.offset), topic=rec.topic,
                queue_id=rec.queue_id, queue_offset=rec.queue_offset)))
        for i in np.flatnonzero(batch.physical_offset != offsets).tolist():
            rec = batch.record(i)
            self.ordered.append(((seq + i, 3, 0, 0, 0), self._cl_finding(
                "CL_OFFSET_MISMATCH", rec.offset,
                f"PHYSICALOFFSET field says {rec.physical_offset} but the record is at "
                f"{rec.offset}; a re-dispatch would point its ConsumeQueue unit and index "
                f"entries there", topic=rec.topic, queue_id=rec.queue_id)))

    # -- ConsumeQueues
    def _queue_cursor(self, key) -> _ItemCursor | None:
        if key in self.queue_cursors:
            return self.queue_cursors[key]
        info = self.ctx.queues.get(key)
        seg = self.segment
        end = seg.base_offset + seg.length
        cursor = None
        if info is not None and info.max_offset >= seg.base_offset and info.min_offset < end:
            start = self._seek(list(info.files), _CQ_STRUCT, 0, info.first_valid,
                               info.valid_end, end)
            if start is not None:
                cursor = _ItemCursor(list(info.files), CQ_UNIT_DTYPE, "commitlog_offset",
                                     self.fds, start, info.valid_end, end)
        self.queue_cursors[key] = cursor
        return cursor

    def _merge_queue(self, batch: RecordBatch, key, members: np.ndarray, live: np.ndarray) -> None:
        """The units of one queue up to its last record in the batch, joined with its records."""
        offsets = self.offsets
        R = offsets[members]
        matched = np.zeros(len(members), dtype=bool)
        cursor = self._queue_cursor(key)
        if cursor is not None:
            numbers, units = cursor.take_through(int(R[-1]), all_equal=False)
            if len(units):
                u = units["commitlog_offset"].astype(np.int64)
                j = np.searchsorted(R, u, side="left")
                hit = (j < len(R)) & (R[np.minimum(j, len(R) - 1)] == u)
                hit[1:] &= u[1:] != u[:-1]      # a duplicate is left over, as the merge does
                seq = self.seq
                for k in np.flatnonzero(~hit).tolist():
                    at = members[int(np.searchsorted(R, u[k], side="right"))]
                    self.ordered.append(((seq + int(at), 4, int(numbers[k]), 0, 0),
                                         self._leftover_unit_finding(key, int(numbers[k]),
                                                                     int(u[k]))))
                self._compare_units(batch, key, members[j[hit]], numbers[hit], units[hit])
                matched[j[hit]] = True
                hits = members[j[hit]]
                alive = int(live[hits].sum())
                self.result.matched_before_stop += alive
                self.result.matched_after_stop += len(hits) - alive
        self._missing_runs(batch, key, members, matched, live)

    def _compare_units(self, batch: RecordBatch, key, records: np.ndarray, numbers: np.ndarray,
                       units: np.ndarray) -> None:
        if len(records) == 0:
            return
        sizes = units["size"].astype(np.int64)
        tags = units["tags_code"].astype(np.int64)
        suspect = (sizes != batch.total_size[records]) | (numbers != batch.queue_offset[records])
        plain = ~suspect & (tags > cq_fmt.MAX_EXT_ADDR)
        if plain.any():
            expected = self._properties(batch).tags_codes(batch, self.delays)
            suspect[plain] = tags[plain] != expected[records[plain]]
        seq = self.seq
        for k in np.flatnonzero(suspect).tolist():
            i = int(records[k])
            rec = batch.record(i)
            finding = self._compare_unit_finding(
                key, int(numbers[k]), (int(units["commitlog_offset"][k]), int(sizes[k]),
                                       int(tags[k])), rec, rec.properties)
            if finding is not None:
                self.ordered.append(((seq + i, 5, 0, 0, 0), finding))

    def _properties(self, batch: RecordBatch) -> _BatchProperties:
        if self.props is None:
            self.props = _BatchProperties(batch)
        return self.props

    def _missing_runs(self, batch: RecordBatch, key, members: np.ndarray, matched: np.ndarray,
                      live: np.ndarray) -> None:
        """_missing / _close_run over the queue's records of the batch, a block at a time."""
        if matched.all():
            if key in self.runs:
                self._log_run(self.runs.pop(key), int(members[0]))
            return
        missing = ~matched
        lv = live[members]
        change = np.ones(len(members), dtype=bool)
        change[1:] = (missing[1:] != missing[:-1]) | (missing[1:] & (lv[1:] != lv[:-1]))
        bounds = np.flatnonzero(change).tolist() + [len(members)]
        offsets, qoffs = self.offsets, batch.queue_offset
        for b, e in itertools.pairwise(bounds):
            first, last = int(members[b]), int(members[e - 1])
            if not missing[b]:
                if key in self.runs:
                    self._log_run(self.runs.pop(key), first)
                continue
            run = self.runs.get(key)
            block_live = bool(lv[b])
            if run is not None and run.live == block_live:
                run.count += e - b
            else:
                if run is not None:
                    self._log_run(run, first)
                run = self.runs[key] = _MissingRun(
                    key[0], key[1], self.rel, int(offsets[first]) - self.segment.base_offset,
                    int(offsets[first]), int(qoffs[first]), 0, 0, e - b, block_live)
            run.last_offset = int(offsets[last])
            run.last_queue_offset = int(qoffs[last])

    def _log_run(self, run: _MissingRun, at: int) -> None:
        self.run_log.append(((self.seq + at, 0), run))

    def _queue_offsets(self, batch: RecordBatch, key, members: np.ndarray) -> None:
        """_queue_offset over the live dispatchable records of one queue."""
        qoffs = batch.queue_offset[members]
        offsets = self.offsets[members]
        steps = np.ones(len(members), dtype=np.int64)
        for k in np.flatnonzero(batch.sys_flag[members] & _INNER_BATCH).tolist():
            props = batch.record(int(members[k])).properties
            try:
                steps[k] = max(1, int(props.get("INNER_NUM", "1")))
            except ValueError:
                steps[k] = 1
        spans = self.result.spans
        span = spans.get(key)
        if span is None:
            span = spans[key] = [int(qoffs[0]), int(offsets[0]), int(qoffs[0] + steps[0]),
                                 int(offsets[0])]
            qoffs, offsets, steps, members = qoffs[1:], offsets[1:], steps[1:], members[1:]
            if len(members) == 0:
                return
        expected = np.empty(len(members), dtype=np.int64)
        expected[0] = span[2]
        expected[1:] = (qoffs + steps)[:-1]
        for k in np.flatnonzero(qoffs != expected).tolist():
            previous = span[3] if k == 0 else int(offsets[k - 1])
            qoff, exp = int(qoffs[k]), int(expected[k])
            what = "repeats" if qoff < exp else "skips"
            self.ordered.append(((self.seq + int(members[k]), 6, 0, 0, 0), self._cl_finding(
                "CQ_QUEUE_GAP", int(offsets[k]),
                f"{key[0]!r} queue {key[1]}: queue offset {qoff} {what} (expected {exp} after "
                f"the record at {previous})", topic=key[0], queue_id=key[1], queue_offset=qoff,
                details={"expected": exp})))
        span[2] = int(qoffs[-1] + steps[-1])
        span[3] = int(offsets[-1])

    def _finish_queues(self) -> None:
        seg = self.segment
        end = seg.base_offset + seg.length
        for order, (key, info) in enumerate(self.ctx.queues.items()):
            if key not in self.queue_cursors and not (
                    info.max_offset >= seg.base_offset and info.min_offset < end):
                continue
            cursor = self._queue_cursor(key)
            if cursor is None:
                continue
            numbers, units = cursor.rest()
            for number, offset in zip(numbers.tolist(), units["commitlog_offset"].tolist()):
                self.ordered.append(((_LATE, 0, order, number, 0),
                                     self._leftover_unit_finding(key, number, offset)))
        for key in list(self.runs):
            self._log_run(self.runs.pop(key), _LATE - self.seq)

    # -- index files
    def _merge_index(self, batch: RecordBatch, tx: np.ndarray) -> None:
        offsets = self.offsets
        n = len(offsets)
        seq = self.seq
        found_rec, found_hash, found_where = [], [], []
        for c, (info, cursor) in enumerate(self.index_cursors):
            numbers, entries = cursor.take_through(int(offsets[-1]), all_equal=True)
            if len(entries) == 0:
                continue
            phy = entries["phy_offset"].astype(np.int64)
            hashes = entries["key_hash"].astype(np.int64)
            j = np.searchsorted(offsets, phy, side="left")
            hit = (j < n) & (offsets[np.minimum(j, n - 1)] == phy)
            for k in np.flatnonzero(~hit).tolist():
                at = int(np.searchsorted(offsets, phy[k], side="right"))
                finding = self._leftover_entry_finding(info, int(numbers[k]), int(hashes[k]),
                                                       int(phy[k]))
                if finding is not None:
                    self.ordered.append(((seq + at, 7, c, 0, int(numbers[k])), finding))
            found_rec.append(j[hit])
            found_hash.append(hashes[hit])
            found_where.append(np.stack([np.full(int(hit.sum()), c), numbers[hit]]))
        expected_rec, expected_hash = self._expected_hashes(batch, tx)
        expected_pairs = (expected_rec << 32) | (expected_hash & 0xFFFFFFFF)
        if found_rec:
            found_rec = np.concatenate(found_rec)
            found_hash = np.concatenate(found_hash)
            where = np.concatenate(found_where, axis=1)
        else:
            found_rec = found_hash = np.zeros(0, dtype=np.int64)
            where = np.zeros((2, 0), dtype=np.int64)
        found_pairs = (found_rec << 32) | (found_hash & 0xFFFFFFFF)
        # the usual case: the entries are the batch's keys, in the order buildIndex put them
        same = len(found_pairs) == len(expected_pairs) and np.array_equal(found_pairs,
                                                                           expected_pairs)
        strays = [] if same else np.flatnonzero(~_within(found_pairs, expected_pairs)).tolist()
        for k in strays:
            i, c, number = int(found_rec[k]), int(where[0, k]), int(where[1, k])
            info = self.index_cursors[c][0]
            offset = int(offsets[i])
            self.ordered.append(((seq + i, 7, c, 1, number), _finding(
                "IDX_HASH_MISMATCH", info.rel, self._entry_pos(info, number),
                f"entry {number} hash {int(found_hash[k])} matches no key of the record at "
                f"{offset}", commitlog_offset=offset,
                topic=batch.topics.names[batch.topic_id[i]])))
        if same or not self.covering:
            return
        covering = np.full(n, -1, dtype=np.int64)
        for k, info in enumerate(self.covering):
            covering[(offsets >= info.min_phy) & (offsets <= info.max_phy)] = k
        for lo, hi in self.ctx.index_blind:
            covering[(offsets >= lo) & (offsets <= hi)] = -1
        lacking = ~_within(expected_pairs, found_pairs) & (covering[expected_rec] >= 0)
        for i in sorted(set(expected_rec[lacking].tolist())):
            rec = batch.record(i)
            found = set(found_hash[found_rec == i].tolist())
            info = self.covering[int(covering[i])]
            expected = self.hashes.index_hashes(rec, rec.properties)
            for order, (key_hash, key) in enumerate(expected.items()):
                if key_hash not in found:
                    slot = key_hash % info.slots
                    self.ordered.append(((seq + i, 8, order, 0, 0), _finding(
                        "IDX_MISSING_KEY", info.rel, idx_fmt.slot_position(slot),
                        f"key {key!r} of the record at {rec.offset} has no entry in its slot "
                        f"chain (slot {slot})", commitlog_offset=rec.offset, topic=rec.topic,
                        details={"key": key})))

    def _expected_hashes(self, batch: RecordBatch, tx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(record, index hash) of every key the broker indexes for the batch's records: UNIQ_KEY
        and the KEYS items of all but ROLLBACK records, hashed as ``topic#key``."""
        props = self._properties(batch)
        indexed = tx != _ROLLBACK
        u_start, u_end = props.values["UNIQ_KEY"]
        k_start, k_end = props.values["KEYS"]
        records, starts, ends = _codec.index_key_spans(
            props.data, (np.where(indexed, u_start, -1), u_end),
            (np.where(indexed, k_start, -1), k_end), _KEY_SEPARATOR)
        if len(records) == 0:
            return records, records
        prefixes = np.array([self._prefix(batch, t) for t in range(len(batch.topics.names))],
                            dtype=np.uint32)[batch.topic_id[records]]
        return records, _codec.index_key_hashes(props.data, starts, ends, prefixes)

    def _prefix(self, batch: RecordBatch, topic_id: int) -> int:
        prefix = self.prefixes.get(topic_id)
        if prefix is None:
            prefix = self.prefixes[topic_id] = self.hashes.prefix(batch.topics.names[topic_id])
        return prefix

    def _finish_index(self) -> None:
        for c, (info, cursor) in enumerate(self.index_cursors):
            numbers, entries = cursor.rest()
            for number, key_hash, phy in zip(numbers.tolist(), entries["key_hash"].tolist(),
                                              entries["phy_offset"].tolist()):
                finding = self._leftover_entry_finding(info, number, key_hash, phy)
                if finding is not None:
                    self.ordered.append(((_LATE, 1, c, number, 0), finding))


# --- structure checks (numpy over whole files) ------------------------------------------------------

class _Sink:
    def __init__(self):
        self.findings: list[Finding] = []
        self.extra = collections.Counter()   # (code, severity) of findings beyond the listing cap

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    def add_suppressed(self, code: str, count: int) -> None:
        self.extra[(code, CODES[code][0])] += count


def _segment_ranges(segments: list[Segment]) -> tuple[np.ndarray, np.ndarray]:
    starts = np.array([s.base_offset for s in segments], dtype=np.int64)
    ends = np.array([s.base_offset + s.length for s in segments], dtype=np.int64)
    return starts, ends


def _inside_segments(offsets: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    if len(starts) == 0:
        return np.zeros(len(offsets), dtype=bool)
    i = np.searchsorted(starts, offsets, side="right") - 1
    ok = i >= 0
    i = np.clip(i, 0, len(starts) - 1)
    return ok & (offsets < ends[i])


def _check_queue_structure(store: Store, queue, starts, ends, min_offset: int, sink: _Sink,
                           deferred: list, version: str) -> _QueueInfo | None:
    """Unit validity, order and reach of one queue; returns what a worker needs to merge it, or
    None when the queue cannot be merged (then its units are checked one by one)."""
    unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
    upf = store.cq_units_per_file
    files, rels = [], []
    regular = True
    first_valid = valid_end = None
    min_off = max_off = None
    previous_last = None
    expected_base = None
    for k, seg in enumerate(queue.segments):
        rel = store.relative(seg.path)
        last_file = k == len(queue.segments) - 1
        base = seg.base_offset // unit_size
        if deleted_on_load(queue.segments, seg, version):
            sink.add(_finding("CQ_FILE_SIZE", rel, 0, "an empty last file: 5.1.3+ deletes it on "
                              "load (mqtool recover does too)", severity=WARNING,
                              topic=queue.topic, queue_id=queue.queue_id))
        elif seg.length % unit_size or seg.length != upf * unit_size:
            lost = ""
            if not last_file and seg.length < upf * unit_size:
                # the next file starts where the geometry says, so these units are simply gone
                lost = (f"; units {base + seg.length // unit_size}..{base + upf - 1} of the queue "
                        f"are missing")
            sink.add(_finding("CQ_FILE_SIZE", rel, seg.length - seg.length % unit_size,
                              f"{seg.length} bytes, expected {upf * unit_size} ({upf} units); the "
                              f"broker refuses to load it{lost}", topic=queue.topic,
                              queue_id=queue.queue_id))
        if seg.base_offset % unit_size:
            sink.add(_finding("CQ_FILE_SIZE", rel, 0,
                              f"file name {seg.name} is not a multiple of the {unit_size}-byte unit",
                              topic=queue.topic, queue_id=queue.queue_id))
        if expected_base is not None and base != expected_base:
            sink.add(_finding("CQ_FILE_SIZE", rel, 0,
                              f"files are not contiguous: {base - expected_base} units missing "
                              f"before this file", topic=queue.topic, queue_id=queue.queue_id))
            regular = False
        units = read_cq_units(seg.path)
        expected_base = base + max(len(units), upf)
        files.append(_ItemFile(str(seg.path), 0, base, len(units)))
        rels.append(rel)
        if len(units) == 0:
            continue
        offs, sizes, tags = units["commitlog_offset"], units["size"], units["tags_code"]
        valid = (offs >= 0) & (sizes > 0)
        pre_blank = (offs == 0) & (sizes == cq_fmt.PRE_BLANK_SIZE) & (tags == 0)
        n = len(units)
        valid_idx = np.flatnonzero(valid)
        if len(valid_idx) == 0:
            last_valid = -1
        else:
            last_valid = int(valid_idx[-1])
        # pre-blank units are legitimate only as the first units of the queue
        lead = 0
        if first_valid is None:
            while lead < n and pre_blank[lead]:
                lead += 1
        real = valid & ~pre_blank
        real[:lead] = False
        limit = n if not last_file else last_valid + 1
        holes = np.flatnonzero(~valid[lead:limit]) + lead
        stray_pre = np.flatnonzero(pre_blank[lead:limit]) + lead
        for i in list(holes[:20]) + list(stray_pre[:20]):
            sink.add(_finding("CQ_DANGLING", rel, int(i) * unit_size,
                              f"unit {base + int(i)} is ({int(offs[i])}, {int(sizes[i])}): not a "
                              f"valid unit inside the queue; ConsumeQueue.recover stops here",
                              topic=queue.topic, queue_id=queue.queue_id,
                              queue_offset=base + int(i)))
        if len(holes) or len(stray_pre):
            regular = False
            hidden = max(0, len(holes) - 20) + max(0, len(stray_pre) - 20)
            if hidden:
                sink.add_suppressed("CQ_DANGLING", hidden)
        idx = np.flatnonzero(real)
        if len(idx) == 0:
            continue
        if first_valid is None:
            first_valid = base + int(idx[0])
        valid_end = base + int(idx[-1]) + 1
        o = offs[idx]
        if previous_last is not None and o[0] < previous_last:
            regular = False
            sink.add(_finding("CQ_MISMATCH", rel, int(idx[0]) * unit_size,
                              f"unit {base + int(idx[0])} points at {int(o[0])}, before the "
                              f"previous unit ({previous_last}): units out of CommitLog order",
                              topic=queue.topic, queue_id=queue.queue_id))
        back = np.flatnonzero(np.diff(o) < 0)
        if len(back):
            regular = False
            i = int(idx[int(back[0]) + 1])
            sink.add(_finding("CQ_MISMATCH", rel, i * unit_size,
                              f"unit {base + i} points at {int(offs[i])}, before the previous "
                              f"unit: units out of CommitLog order", topic=queue.topic,
                              queue_id=queue.queue_id))
        previous_last = int(o[-1])
        live = o >= min_offset
        if live.any():
            lo, hi = int(o[live].min()), int(o[live].max())
            min_off = lo if min_off is None else min(min_off, lo)
            max_off = hi if max_off is None else max(max_off, hi)
        outside = live & ~_inside_segments(o, starts, ends)
        for j in np.flatnonzero(outside)[:50]:
            i = int(idx[j])
            deferred.append(_finding("CQ_DANGLING", rel, i * unit_size,
                                     f"unit {base + i} points at CommitLog offset {int(offs[i])}, "
                                     f"past the CommitLog data" if len(ends) and offs[i] >= ends[-1]
                                     else f"unit {base + i} points at CommitLog offset "
                                          f"{int(offs[i])}, where no CommitLog file is",
                                     commitlog_offset=int(offs[i]), topic=queue.topic,
                                     queue_id=queue.queue_id, queue_offset=base + i))
        extra = int(outside.sum()) - min(50, int(outside.sum()))
        if extra > 0:
            sink.add_suppressed("CQ_DANGLING", extra)
    if first_valid is None:
        return None
    info = _QueueInfo(queue.topic, queue.queue_id, tuple(files), tuple(rels), first_valid,
                      valid_end, min_off if min_off is not None else 0,
                      max_off if max_off is not None else -1)
    return info if regular else _Irregular(info)


class _Irregular:
    """A queue whose units cannot be merged with the scan (holes, out of order)."""

    def __init__(self, info: _QueueInfo):
        self.info = info


def _check_irregular_queue(store: Store, info: _QueueInfo, min_offset: int, sink: _Sink,
                           limit: int = 10_000) -> None:
    """Units of a queue that cannot be merged, checked one record read each."""
    checked = 0
    for f, rel in zip(info.files, info.rels):
        units = read_cq_units(f.path)
        for i, (offset, size, tags) in enumerate(units.tolist()):
            if offset < min_offset or size <= 0 or cq_fmt.is_pre_blank(offset, size, tags):
                continue
            if checked >= limit:
                return
            checked += 1
            unit = f.first + i
            extra = dict(commitlog_offset=offset, topic=info.topic, queue_id=info.queue_id,
                         queue_offset=unit)
            try:
                record = message_at(store.commitlog, offset, check_crc=False)
            except ParseError as err:
                sink.add(_finding("CQ_DANGLING", rel, i * cq_fmt.CQ_STORE_UNIT_SIZE,
                                  f"unit {unit} points at CommitLog offset {offset}, where no "
                                  f"record starts ({err.detail})", **extra))
                continue
            problems = []
            if (record.topic, record.queue_id) != (info.topic, info.queue_id):
                problems.append(f"the record belongs to {record.topic!r} queue {record.queue_id}")
            if size != record.total_size:
                problems.append(f"size {size} but the record is {record.total_size} bytes")
            if record.queue_offset != unit:
                problems.append(f"the record's queue offset is {record.queue_offset}")
            if problems:
                sink.add(_finding("CQ_MISMATCH", rel, i * cq_fmt.CQ_STORE_UNIT_SIZE,
                                  f"unit {unit}: " + "; ".join(problems), **extra))


_INDEX_CHUNK = 1 << 18          # entries read at a time (5 MiB)
_MAX_LISTED_INDEX = 50


def _walk_chains(slot_values: np.ndarray, hashes: np.ndarray, prev: np.ndarray, td: np.ndarray,
                 count: int, slots: int) -> np.ndarray:
    """Entry numbers a lookup of their own hash cannot reach, walking every slot chain as
    IndexFile.selectPhyOffset does (it stops on timeDiff < 0, and on a prev_index <= 0, past
    indexCount or equal to the current entry)."""
    n = len(hashes)
    reach = np.zeros(n, dtype=bool)
    # array('i') indexing is fast and costs 4 bytes an entry (a list would cost ~36)
    hash_at = array.array("i", hashes.astype(np.int32).tobytes())
    prev_at = array.array("i", prev.astype(np.int32).tobytes())
    td_at = array.array("i", td.astype(np.int32).tobytes())
    for slot in np.flatnonzero(slot_values > 0).tolist():
        nxt = int(slot_values[slot])
        if nxt > count:
            continue
        seen = set()
        while 0 < nxt < n and nxt not in seen:
            seen.add(nxt)
            if td_at[nxt] < 0:
                break
            if hash_at[nxt] >= 0 and hash_at[nxt] % slots == slot:
                reach[nxt] = True
            p = prev_at[nxt]
            if p <= 0 or p > count or p == nxt:
                break
            nxt = p
    reach[0] = True
    return np.flatnonzero(~reach)


def _read_entries(fd: int, start: int, lo: int, hi: int) -> np.ndarray:
    raw = os.pread(fd, (hi - lo) * idx_fmt.INDEX_ENTRY_SIZE, start + lo * idx_fmt.INDEX_ENTRY_SIZE)
    return np.frombuffer(raw, INDEX_ENTRY_DTYPE, len(raw) // idx_fmt.INDEX_ENTRY_SIZE)


def _check_index_structure(store: Store, info, starts, ends, min_offset: int, sink: _Sink,
                           deferred: list, blind: list) -> _IndexInfo | None:
    """Header, slots and entries of one IndexFile, read in chunks (memory: a bitmap and the hash
    column, 5 bytes an entry, not the 420 MB file)."""
    slots, entries = store.index_slots, store.index_entries
    rel = store.relative(info.path)
    expected_size = idx_fmt.index_file_size(slots, entries)
    if info.length != expected_size:
        sink.add(_finding("IDX_HEADER", rel, 0,
                          f"{info.length} bytes, expected {expected_size} for {slots} slots and "
                          f"{entries} entries"))
    with open(info.path, "rb") as fh:
        fd = fh.fileno()
        raw = os.pread(fd, idx_fmt.INDEX_HEADER_SIZE, 0)
        if len(raw) < idx_fmt.INDEX_HEADER_SIZE:
            return None
        header = np.frombuffer(raw, INDEX_HEADER_DTYPE, 1)[0]
        n_slots = max(0, min(slots, (info.length - idx_fmt.INDEX_HEADER_SIZE) // 4))
        slot_values = np.frombuffer(os.pread(fd, 4 * n_slots, idx_fmt.INDEX_HEADER_SIZE),
                                    ">i4").astype(np.int32)
        count = int(header["index_count"])
        entries_start = idx_fmt.entry_position(slots, 0)
        available = max(0, (info.length - entries_start) // idx_fmt.INDEX_ENTRY_SIZE)
        n = max(0, min(count, entries, available))
        if count < 1 or count > entries:
            sink.add(_finding("IDX_HEADER", rel, 36, f"indexCount {count} is outside 1..{entries}"))
        nonzero = int((slot_values != 0).sum())
        hsc = int(header["hash_slot_count"])
        if hsc != nonzero:
            sink.add(_finding("IDX_HEADER", rel, 32,
                              f"hashSlotCount {hsc} but {nonzero} slots are in use",
                              severity=WARNING if hsc <= slots else ERROR))
        bad_slots = np.flatnonzero((slot_values < 0) | (slot_values >= max(count, 1))
                                   & (slot_values != 0))
        for s in bad_slots[:_MAX_LISTED_INDEX].tolist():
            sink.add(_finding("IDX_DANGLING", rel, idx_fmt.slot_position(s),
                              f"slot {s} holds {int(slot_values[s])}, past indexCount {count}"))

        def entry_pos(number: int) -> int:
            return entries_start + idx_fmt.INDEX_ENTRY_SIZE * number

        hashes = np.zeros(n, dtype=np.int32)
        referenced = np.zeros(n, dtype=bool)
        referenced_count = 0
        regular_chains = True
        first_phy = last_phy = previous_phy = None
        in_order = True
        live_lo = live_hi = inside_lo = inside_hi = None
        listed = collections.Counter()
        outside_total = 0
        for lo in range(0, n, _INDEX_CHUNK):
            hi = min(n, lo + _INDEX_CHUNK)
            chunk = _read_entries(fd, entries_start, lo, hi)
            numbers = np.arange(lo, lo + len(chunk))
            h = chunk["key_hash"].astype(np.int32)
            hashes[lo:lo + len(chunk)] = h
            prev = chunk["prev_index"].astype(np.int64)
            td = chunk["time_diff"]
            real = numbers >= 1
            bad_prev = real & ((prev < 0) | (prev > count) | ((prev >= numbers) & (prev != 0)))
            for i in np.flatnonzero(bad_prev).tolist():
                if listed["prev"] < _MAX_LISTED_INDEX:
                    listed["prev"] += 1
                    sink.add(_finding("IDX_DANGLING", rel, entry_pos(lo + i),
                                      f"entry {lo + i} has prev_index {int(prev[i])}: "
                                      + ("the chain loops" if 0 < prev[i] <= count
                                         else "past indexCount")))
            for i in np.flatnonzero(real & (td < 0)).tolist():
                if listed["td"] < _MAX_LISTED_INDEX:
                    listed["td"] += 1
                    sink.add(_finding("IDX_DANGLING", rel, entry_pos(lo + i),
                                      f"entry {lo + i} has a negative timeDiff {int(td[i])}: "
                                      f"lookups stop there"))
            # Every entry referenced exactly once (by its slot or one later entry of the same
            # slot), links going strictly backwards, no negative timeDiff: then each chain is a
            # path from its slot's head and every entry is found by its own hash.
            has_prev = real & (prev > 0)
            backwards = has_prev & (prev < numbers)
            if regular_chains:
                targets = prev[backwards]
                if (bad_prev.any() or np.any(has_prev & ~backwards) or np.any(td[real] < 0)
                        or np.any(h[real] < 0)
                        or np.any(hashes[targets] % slots != h[backwards] % slots)
                        or referenced[targets].any()):
                    regular_chains = False
                else:
                    referenced[targets] = True
                    referenced_count += len(targets)
                    # fewer new marks than targets: an entry is the target of two links
                    if np.count_nonzero(referenced) != referenced_count:
                        regular_chains = False
            phys = chunk["phy_offset"][real].astype(np.int64)
            if len(phys) == 0:
                continue
            if first_phy is None:
                first_phy = int(phys[0])
            last_phy = int(phys[-1])
            if (previous_phy is not None and phys[0] < previous_phy) or np.any(np.diff(phys) < 0):
                in_order = False
            previous_phy = last_phy
            live = phys >= min_offset
            outside = (phys < 0) | (live & ~_inside_segments(phys, starts, ends))
            first_number = lo + int(np.argmax(real))
            for j in np.flatnonzero(outside).tolist():
                outside_total += 1
                if outside_total <= _MAX_LISTED_INDEX:
                    deferred.append(_finding(
                        "IDX_DANGLING", rel, entry_pos(first_number + j),
                        f"entry {first_number + j} points at CommitLog offset {int(phys[j])}, "
                        f"where no CommitLog file is", commitlog_offset=int(phys[j])))
            if live.any():
                lo_live, hi_live = int(phys[live].min()), int(phys[live].max())
                live_lo = lo_live if live_lo is None else min(live_lo, lo_live)
                live_hi = hi_live if live_hi is None else max(live_hi, hi_live)
            good = phys[live & ~outside]
            if len(good):
                inside_lo = int(good.min()) if inside_lo is None else min(inside_lo, int(good.min()))
                inside_hi = int(good.max()) if inside_hi is None else max(inside_hi, int(good.max()))
        if outside_total > _MAX_LISTED_INDEX:
            sink.add_suppressed("IDX_DANGLING", outside_total - _MAX_LISTED_INDEX)

        if n > 1:
            head_slots = np.flatnonzero((slot_values > 0) & (slot_values < n))
            heads = slot_values[head_slots]
            if regular_chains and (referenced[heads].any()
                                   or np.any(hashes[heads] % slots != head_slots)):
                regular_chains = False
            referenced[heads] = True
            if regular_chains and np.count_nonzero(referenced) != referenced_count + len(heads):
                regular_chains = False      # two slots hold the same entry
            if regular_chains and not referenced[1:].all():
                regular_chains = False
            if not regular_chains:
                _report_unreachable(fd, rel, entries_start, slot_values, hashes, n, count, slots,
                                    sink)
        del hashes, referenced

        if first_phy is not None:
            checks = ((16, "beginPhyOffset", int(header["begin_phy_offset"]), first_phy, WARNING),
                      (24, "endPhyOffset", int(header["end_phy_offset"]), last_phy, ERROR))
            for pos, name, value, actual, severity in checks:
                if value != actual:
                    sink.add(_finding("IDX_HEADER", rel, pos,
                                      f"{name} {value} but the {'first' if pos == 16 else 'last'} "
                                      f"entry points at {actual}", severity=severity))
            for pos, name, value, phy in ((0, "beginTimestamp", int(header["begin_timestamp"]),
                                           first_phy),
                                          (8, "endTimestamp", int(header["end_timestamp"]),
                                           last_phy)):
                try:
                    record = message_at(store.commitlog, phy, check_crc=False)
                except ParseError:
                    continue
                if record.store_timestamp != value:
                    sink.add(_finding("IDX_HEADER", rel, pos,
                                      f"{name} {value} but the record at {phy} was stored at "
                                      f"{record.store_timestamp}"))
        if live_lo is None:
            return None
        if not in_order:
            # not in CommitLog order: cannot be merged with the scan; check entries one by one,
            # and do not look for the keys of the records it covers (its entries are not pulled)
            _check_index_entries_slowly(store, rel, _read_entries(fd, entries_start, 0,
                                                                  min(n, 10_001)),
                                        entries_start, sink)
            if inside_lo is not None:
                blind.append((inside_lo, inside_hi))
            return None
    return _IndexInfo(info.name, rel, str(info.path), slots, entries_start, n, live_lo, last_phy)


def _report_unreachable(fd: int, rel: str, entries_start: int, slot_values, hashes, n: int,
                        count: int, slots: int, sink: _Sink) -> None:
    if n > _MAX_CHAIN_WALK_ENTRIES:
        sink.add(_finding("IDX_MISSING_KEY", rel, entries_start,
                          f"the hash chains are irregular; {n} entries are too many to walk "
                          f"one by one, so unreachable entries are not listed", severity=WARNING))
        return
    prev = np.zeros(n, dtype=np.int32)
    td = np.zeros(n, dtype=np.int32)
    for lo in range(0, n, _INDEX_CHUNK):
        chunk = _read_entries(fd, entries_start, lo, min(n, lo + _INDEX_CHUNK))
        prev[lo:lo + len(chunk)] = chunk["prev_index"]
        td[lo:lo + len(chunk)] = chunk["time_diff"]
    unreachable = _walk_chains(slot_values, hashes, prev, td, count, slots)
    for i in unreachable[:200].tolist():
        entry = _read_entries(fd, entries_start, i, i + 1)[0]
        sink.add(_finding("IDX_MISSING_KEY", rel, entries_start + idx_fmt.INDEX_ENTRY_SIZE * i,
                          f"entry {i} (hash {int(entry['key_hash'])}, offset "
                          f"{int(entry['phy_offset'])}) cannot be reached from slot "
                          f"{int(entry['key_hash']) % slots}",
                          commitlog_offset=int(entry["phy_offset"])))
    if len(unreachable) > 200:
        sink.add_suppressed("IDX_MISSING_KEY", len(unreachable) - 200)


def _check_index_entries_slowly(store: Store, rel: str, table, entries_start: int, sink: _Sink,
                                limit: int = 10_000) -> None:
    hashes = _KeyHashes()
    for i, (key_hash, phy, _, _) in enumerate(table.tolist()[1:limit + 1], start=1):
        try:
            record = message_at(store.commitlog, phy, check_crc=False)
        except ParseError as err:
            if store.commitlog.segment_for(phy) is not None:
                sink.add(_finding("IDX_DANGLING", rel, entries_start + 20 * i,
                                  f"entry {i} points at {phy}, where no record starts "
                                  f"({err.detail})", commitlog_offset=phy))
            continue
        if key_hash not in hashes.index_hashes(record, record.properties):
            sink.add(_finding("IDX_HASH_MISMATCH", rel, entries_start + 20 * i,
                              f"entry {i} hash {key_hash} matches no key of the record at {phy}",
                              commitlog_offset=phy, topic=record.topic))


# --- the whole store -----------------------------------------------------------------------------

def store_geometry(store: Store) -> dict:
    return {
        "commitlog_file_size": store.commitlog.file_size,
        "commitlog_files": len(store.commitlog.segments),
        "commitlog_min_offset": store.commitlog.min_offset,
        "cq_units_per_file": store.cq_units_per_file,
        "consume_queues": len(store.consume_queues),
        "cq_files": sum(len(q.segments) for q in store.consume_queues),
        "index_slots": store.index_slots,
        "index_entries": store.index_entries,
        "index_files": len(store.index_files),
    }


def _layout_findings(store: Store, sink: _Sink, version: str) -> None:
    commitlog = store.commitlog
    size = commitlog.file_size
    segments = commitlog.segments
    for i, seg in enumerate(segments):
        rel = seg.store_path
        if seg.length != size:
            last_empty = i == len(segments) - 1 and seg.length == 0
            sink.add(_finding("CL_FILE_SIZE", rel, 0,
                              f"{seg.length} bytes, but the store's files are {size} bytes"
                              + ("; 5.1.3+ deletes an empty last file on load" if last_empty
                                 and version != "4.9" else "; the broker refuses to load the store"),
                              severity=WARNING if last_empty and version != "4.9" else ERROR))
        if i:
            prev = segments[i - 1]
            if seg.base_offset != prev.base_offset + size:
                delta = seg.base_offset - (prev.base_offset + size)
                sink.add(_finding("CL_GAP", rel, 0,
                                  f"starts at {seg.base_offset}, but the previous file ends at "
                                  f"{prev.base_offset + size}: "
                                  + (f"{delta} bytes missing" if delta > 0 else
                                     f"overlaps by {-delta} bytes"),
                                  commitlog_offset=seg.base_offset))
    strays = [*commitlog.stray_files, *store.index_stray]
    strays += [p for q in store.consume_queues for p in q.stray_files]
    for path in strays:
        sink.add(_finding("CL_STRAY_FILE", store.relative(path), 0,
                          "not named as the broker names its files; the broker ignores it "
                          "(or fails on it)"))
    try:
        ckpt = store.read_checkpoint()
    except ParseError as err:
        sink.add(_finding("CKPT_MISSING", "checkpoint", 0, f"unreadable: {err.detail}",
                          severity=ERROR))
    else:
        if ckpt is None and not store.is_bare_commitlog:
            sink.add(_finding("CKPT_MISSING", "checkpoint", 0,
                              "no checkpoint: the broker starts from a zeroed one, and an "
                              "abnormal recovery from the first file"))
    if store.abort_exists:
        content = store.abort_content()
        sink.add(_finding("ABORT_PRESENT", "abort", 0,
                          "the abort file exists: the last shutdown was abnormal; the next start "
                          "runs abnormal recovery" + (f" (PID {content})" if content else "")))
    if store.lock_held():
        sink.add(_finding("LOCK_HELD", "lock", 0,
                          "a live process holds the lock file: a broker is probably running on "
                          "this store, which may change while it is read"))


def _auto_workers(store: Store, workers: int | None) -> int:
    # Serial unless asked: on the 2-vCPU machines this was measured on, two processes ran no
    # faster than one (the vCPUs share a core), and each worker pays an interpreter start.
    return max(1, workers) if workers is not None else 1


def verify_store(store: Store, *, quick: bool = False, progress=None, broker_version: str = "auto",
                 mode: str = "auto", force_verify_prop_crc: bool = False,
                 message_index_safe: bool = False, workers: int | None = None,
                 engine: str = "batches") -> VerifyReport:
    """Check everything in ``store``; see :data:`CODES` for what each finding means.

    ``quick`` skips CRCs (records, and the prediction: it then assumes every CRC is good).
    ``progress`` is a tqdm-like object advanced by CommitLog bytes. ``engine`` "records" checks
    the CommitLog a record at a time: the slow reference the default "batches" must equal."""
    if engine not in ("batches", "records"):
        raise ValueError(f"engine must be 'batches' or 'records', not {engine!r}")
    version = resolve_broker_version(store, broker_version)
    sink = _Sink()
    deferred: list[Finding] = []          # findings whose severity depends on the recovery plan
    _layout_findings(store, sink, version)
    commitlog = store.commitlog
    segments = list(commitlog.segments)
    starts, ends = _segment_ranges(segments)
    min_offset = commitlog.min_offset

    batch_keys = {(q.topic, q.queue_id) for q in store.batch_consume_queues}
    queues, unchecked = {}, set(batch_keys)
    irregular = []
    for queue in store.consume_queues:
        key = (queue.topic, queue.queue_id)
        if queue.topic.startswith("%LMQ%"):
            unchecked.add(key)  # LMQ units point at records of other topics by design
            continue
        info = _check_queue_structure(store, queue, starts, ends, min_offset, sink, deferred,
                                      version)
        if isinstance(info, _Irregular):
            irregular.append(info.info)
            unchecked.add(key)
        elif info is not None:
            queues[key] = info
    for info in irregular:
        _check_irregular_queue(store, info, min_offset, sink)
    indexes, blind = [], []
    for info in store.index_files:
        checked = _check_index_structure(store, info, starts, ends, min_offset, sink, deferred,
                                         blind)
        if checked is not None:
            indexes.append(checked)

    rules = BrokerRules(version, True, force_verify_prop_crc, crc_scanned=not quick)
    ctx = _Context(str(commitlog.directory), commitlog.file_size, str(store.root), segments,
                   not quick, rules, queues, unchecked, indexes, blind, engine,
                   frozenset(topic for topic, _ in batch_keys))
    results = _run_segments(store, ctx, progress, workers)

    verdicts = {r.verdict.base_offset: r.verdict for r in results}
    plan = predict_recovery(store, mode=mode, broker_version=version, check_crc=True,
                            message_index_safe=message_index_safe,
                            force_verify_prop_crc=force_verify_prop_crc, file_verdicts=verdicts,
                            crc_verified=not quick)
    _merge_results(store, plan, results, sink, deferred, _short_file_holes(queues))
    # 5.x side stores: BatchConsumeQueues and the timer store, checked unit by unit
    batch_records: dict = {}
    for r in results:
        for key, found in r.batch_records.items():
            batch_records.setdefault(key, []).extend(o for o in found if o < plan.process_offset)
    for found in (check_batch_consume_queues(store, batch_records, plan.redispatch_from)
                  + check_timer_store(store) + check_dledger(store)):
        extra = {k: found[k] for k in ("commitlog_offset", "topic", "queue_id", "count")
                 if k in found}
        sink.add(_finding(found["code"], found["file"], found["offset"], found["message"],
                          severity=found["severity"], **extra))
    return _report(store, sink, plan, results)


def _run_segments(store: Store, ctx: _Context, progress, workers: int | None) -> list[_SegmentResult]:
    n = len(ctx.segments)
    count = _auto_workers(store, workers)
    if count <= 1 or n <= 1:
        checker = _checker_class(ctx)
        return [checker(ctx, i, progress, store.commitlog).run() for i in range(n)]
    results = []
    with ProcessPoolExecutor(max_workers=count, initializer=_init_worker, initargs=(ctx,)) as pool:
        for result in pool.map(_worker_check, range(n)):
            if progress is not None:
                progress.update(result.bytes)
            results.append(result)
    return results


def _short_file_holes(queues: dict) -> dict:
    """(topic, qid) -> [(first missing unit, next file's first unit, file)]: the units a
    ConsumeQueue file shorter than its slot lacks (its queue's cursors step over them)."""
    holes: dict = {}
    for key, info in queues.items():
        for f, g, rel in zip(info.files, info.files[1:], info.rels):
            if f.first + f.count < g.first:
                holes.setdefault(key, []).append((f.first + f.count, g.first, rel))
    return holes


def _merge_results(store: Store, plan: RecoveryPlan, results: list[_SegmentResult], sink: _Sink,
                   deferred: list[Finding], holes: dict) -> None:
    P = plan.process_offset
    beyond_total = plan.messages_lost
    stale = (beyond_total > 0 and plan.last_exit_ok and plan.cq_units_truncated == 0
             and _matched_beyond(results, plan) == 0)
    torn_tail = (not plan.last_exit_ok and beyond_total == 0)
    deleted_index = {f"index/{name}" for name in plan.index_files_deleted}

    # CommitLog and cross-checks from the scan
    for r in results:
        for f in r.findings:
            cl_offset = f.commitlog_offset
            beyond = cl_offset is not None and cl_offset >= P
            if f.code.startswith("CL_") and beyond:
                if stale:
                    f.severity = INFO
                    f.message += " (past the recovered end: stale data the broker ignores)"
                elif torn_tail and f.code in ("CL_TRUNCATED", "CL_BAD_MAGIC", "CL_LENGTH_MISMATCH"):
                    f.severity = WARNING
                    f.message += " (a torn write at the end of a crashed store; recovery cuts it)"
            elif f.code in ("CQ_QUEUE_GAP", "IDX_MISSING_KEY") and beyond:
                continue
            if f.code.startswith("IDX_") and f.file in deleted_index:
                f.severity = WARNING
                f.message += " (the broker deletes this index file on start and rebuilds it)"
            sink.add(f)
        for code, count in r.suppressed.items():
            sink.add_suppressed(code, count)
    for f in deferred:
        if f.file in deleted_index:
            f.severity = WARNING
            f.message += " (the broker deletes this index file on start and rebuilds it)"
        sink.add(f)

    # queue offsets across files
    last: dict = {}
    for r in results:
        for key, (first_qoff, first_offset, next_expected, last_offset) in r.spans.items():
            if first_offset >= P:
                continue
            if key in last:
                expected, previous_offset = last[key]
                if first_qoff != expected:
                    seg = store.commitlog.segment_for(first_offset)
                    what = "repeats" if first_qoff < expected else "skips"
                    sink.add(_finding("CQ_QUEUE_GAP", f"commitlog/{seg.name}" if seg else "commitlog",
                                      first_offset - (seg.base_offset if seg else 0),
                                      f"{key[0]!r} queue {key[1]}: queue offset {first_qoff} {what} "
                                      f"(expected {expected} after the record at {previous_offset})",
                                      commitlog_offset=first_offset, topic=key[0], queue_id=key[1],
                                      queue_offset=first_qoff, details={"expected": expected}))
            last[key] = (next_expected, last_offset)

    # records without a ConsumeQueue unit
    queue_ends = {(q.topic, q.queue_id): q.valid_end for q in plan.queue_recoveries}
    queue_ends.update({(t.topic, t.queue_id): t.new_end for t in plan.cq_truncations})
    for run in _joined_runs(results):
        if run.first_offset >= P:
            continue
        end = queue_ends.get((run.topic, run.queue_id), 0)
        tail = run.first_queue_offset >= end
        rebuilt = (plan.redispatch_from is not None and run.first_offset >= plan.redispatch_from)
        # a short file stops the broker at load (refuses_to_start): no recovery fills the hole
        short = next((rel for lo, hi, rel in holes.get((run.topic, run.queue_id), ())
                      if run.first_queue_offset < hi and run.last_queue_offset >= lo), None)
        severity = WARNING if tail and rebuilt and short is None else ERROR
        if run.count == 1:
            what = (f"the record of {run.topic!r} queue {run.queue_id} at queue offset "
                    f"{run.first_queue_offset} (CommitLog {run.first_offset}) has no "
                    f"ConsumeQueue unit")
        else:
            what = (f"{run.count} records of {run.topic!r} queue {run.queue_id} (queue offsets "
                    f"{run.first_queue_offset}..{run.last_queue_offset}, CommitLog "
                    f"{run.first_offset}..{run.last_offset}) have no ConsumeQueue unit")
        it = "it" if run.count == 1 else "them"
        if short is not None:
            units = "its unit" if run.count == 1 else "their units"
            what += f"; {short} is cut short before {units} (the broker refuses to load it)"
        elif severity == WARNING:
            what += f"; the broker's recovery dispatches {it} again"
        elif tail:
            what += f"; recovery does not dispatch {it} again"
        else:
            what += "; the queue has later units, so the broker never fills the hole"
        sink.add(_finding("CQ_MISSING", run.file, run.position, what, severity=severity,
                          commitlog_offset=run.first_offset, topic=run.topic,
                          queue_id=run.queue_id, queue_offset=run.first_queue_offset,
                          count=run.count))

    # what lies past the recovered end
    if plan.stop_file is not None and (beyond_total or plan.cq_units_truncated or plan.bytes_dropped):
        rel = next((s.store_path for s in store.commitlog.segments if s.name == plan.stop_file),
                   f"commitlog/{plan.stop_file}")
        if stale:
            first = plan.first_lost_offset
            seg = store.commitlog.segment_for(first) if first is not None else None
            sink.add(_finding("CL_STALE_DATA", seg.store_path if seg else rel,
                              first - seg.base_offset if seg else plan.stop_position,
                              f"{beyond_total} plausible record{'s' if beyond_total != 1 else ''} "
                              f"past the end of the written data ({P}), referenced by no "
                              f"ConsumeQueue: left by an earlier truncation or overwritten "
                              f"writes; the broker ignores them", commitlog_offset=first,
                              count=beyond_total))
        elif beyond_total or plan.cq_units_truncated:
            parts = [f"{beyond_total} message{'s' if beyond_total != 1 else ''}",
                     f"{plan.bytes_dropped} bytes"]
            if plan.cq_units_truncated:
                parts.append(f"{plan.cq_units_truncated} ConsumeQueue units")
            if plan.commitlog_files_deleted:
                parts.append(f"{len(plan.commitlog_files_deleted)} CommitLog file(s) deleted")
            sink.add(_finding("RECOVERY_TRUNCATES", rel, plan.stop_position,
                              f"{plan.mode} recovery stops at {P} ({plan.stop_reason}) and drops "
                              + ", ".join(parts),
                              commitlog_offset=P, count=beyond_total,
                              details={"bytes": plan.bytes_dropped, "messages": beyond_total,
                                       "cq_units": plan.cq_units_truncated,
                                       "files_deleted": plan.commitlog_files_deleted,
                                       "reason": plan.stop_reason}))

    # checkpoint timestamps against the newest message on disk
    ckpt = plan.checkpoint
    newest = None
    for r in results:
        if r.newest_timestamp is not None:
            newest = r.newest_timestamp if newest is None else max(newest, r.newest_timestamp)
    if ckpt is not None and newest is not None:
        for pos, name in ((0, "physic_msg_timestamp"), (8, "logics_msg_timestamp"),
                          (16, "index_msg_timestamp")):
            value = ckpt[name]
            if value > newest:
                sink.add(_finding("CKPT_AHEAD", "checkpoint", pos,
                                  f"{name} {value} is {value - newest} ms after the newest stored "
                                  f"message ({newest}); an abnormal recovery may start too late"))


def _joined_runs(results: list[_SegmentResult]) -> list[_MissingRun]:
    """Runs of records without a unit, joined across CommitLog files when a queue's run simply
    continues (contiguous queue offsets) in the next file."""
    joined: list[_MissingRun] = []
    open_runs: dict = {}
    for r in results:
        for run in r.missing:
            key = (run.topic, run.queue_id)
            previous = open_runs.get(key)
            if (previous is not None and previous.live == run.live
                    and run.first_queue_offset == previous.last_queue_offset + 1
                    and run.first_offset > previous.last_offset):
                previous.last_offset = run.last_offset
                previous.last_queue_offset = run.last_queue_offset
                previous.count += run.count
                continue
            joined.append(run)
            open_runs[key] = run
    return joined


def _matched_beyond(results: list[_SegmentResult], plan: RecoveryPlan) -> int:
    """Records at or past processOffset that a ConsumeQueue unit references."""
    if plan.stop_file is None:
        return 0
    stop_base = int(plan.stop_file)
    total = 0
    for r in results:
        base = r.verdict.base_offset
        if base == stop_base:
            total += r.matched_after_stop
        elif base > stop_base:
            total += r.matched_after_stop + r.matched_before_stop
    return total


def _report(store: Store, sink: _Sink, plan: RecoveryPlan, results) -> VerifyReport:
    findings = sorted(sink.findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.code, f.file,
                                                    f.offset))
    listed: list[Finding] = []
    per_code = collections.Counter()
    by_code = collections.Counter()
    severities = collections.Counter()
    for f in findings:
        by_code[f.code] += 1
        severities[f.severity] += 1
        per_code[f.code] += 1
        if per_code[f.code] <= MAX_LISTED_PER_CODE:
            listed.append(f)
    for (code, severity), count in sink.extra.items():
        by_code[code] += count
        severities[severity] += count
    listed.sort(key=lambda f: (f.file, f.offset, f.code))
    summary = {
        "errors": severities[ERROR],
        "warnings": severities[WARNING],
        "infos": severities[INFO],
        "by_code": dict(sorted(by_code.items())),
        "messages_scanned": sum(r.messages for r in results),
        "v2_records": sum(r.v2_records for r in results),
        "prop_crc_records_checked": sum(r.prop_crc_records for r in results),
        "commitlog_bytes": sum(r.bytes for r in results),
        "listed": len(listed),
    }
    geometry = store_geometry(store)
    geometry["broker_version"] = plan.broker_version
    return VerifyReport(str(store.root), geometry, listed, summary, plan)


# --- comparing with an expectation ------------------------------------------------------------------

def finding_keys(document) -> set[tuple[str, str, int]]:
    """(code, file, offset) of every finding in a ``--json`` document or a list of findings."""
    items = document.get("findings") if isinstance(document, dict) else document
    if not isinstance(items, list):
        raise ValueError("expected a verify --json document or a list of findings")
    keys = set()
    for item in items:
        if not isinstance(item, dict) or not {"code", "file", "offset"} <= item.keys():
            raise ValueError("every finding needs code, file and offset")
        keys.add((str(item["code"]), str(item["file"]), int(item["offset"])))
    return keys


def compare_findings(report: VerifyReport, expected_document) -> tuple[list, list]:
    """(missing, unexpected): expected findings not found, and findings not expected."""
    expected = finding_keys(expected_document)
    actual = {f.key for f in report.findings}
    return sorted(expected - actual), sorted(actual - expected)
