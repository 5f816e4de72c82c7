"""Offline repair: the broker's startup recovery, truncation, ConsumeQueue and IndexFile rebuilds.

Every mutating command works in three steps that never overlap:

1. **plan** - the new content of every file that changes is computed into a *stage* folder
   (``STORE/.mqtool-stage-<stamp>/``, or a temporary folder for ``--dry-run``) with the one
   writer (:mod:`mqtool.writer`), fed by the one scanner (:mod:`mqtool.scan`) and driven by the
   recovery prediction (:mod:`mqtool.recovery`). Comparing the stage with the store gives a
   :class:`RepairPlan`: files created, changed (byte ranges) and deleted, messages, ConsumeQueue
   units and index entries affected, and what is lost. Nothing in the store is touched.
2. **backup** - every byte an operation changes or removes is copied into the backup folder with a
   manifest (:mod:`mqtool.backup`) before the first operation runs; a journal names it.
3. **apply** - operations run in a fixed order (CommitLog, ConsumeQueues, IndexFiles, checkpoint,
   and the ``abort`` file last, since its absence is what tells the broker the store is clean).
   Rewritten files go through temp file + fsync + rename + fsync of the directory. Every operation
   is idempotent, so a repair killed at any point is finished by running any repair command again,
   and ``mqtool undo BACKUP`` restores the store byte for byte.

Where mqtool goes beyond the broker (all optional except the first, and all reported):

* bytes past the recovered end are erased (the broker only moves its write positions and leaves
  them, so a later scan - or verify - still meets the damaged record and the records after it).
  ``keep_stale=True`` leaves them exactly as the broker does; they are in the backup either way;
* index entries pointing past the recovered end are removed (the broker leaves them and its
  queryMessage skips them) by rebuilding the affected IndexFiles under their own names;
* ``reindex_all`` indexes every message instead of losing the entries of a deleted IndexFile;
* CommitLog and ConsumeQueue files of the wrong size (the broker refuses to start) are padded.

Rewriting a 1 GiB CommitLog file to erase its tail would double the I/O of a repair, so the
CommitLog alone is changed in place: erasing bytes past the recovered end, padding a short file
with zeros, deleting later files. Each of those bytes is in the backup before it is touched, none
of them is live data, and repeating the write is harmless, so a torn write is finished by a re-run.
"""
from __future__ import annotations

import contextlib
import errno
import itertools
import mmap
import os
import shutil
import signal
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import backup as bk
from . import codec as _codec
from .codec import INDEX_HEADER, struct_format
from .errors import MqtoolError, StoreLockedError
from .formats import checkpoint as ckpt_fmt
from .formats import codecs
from .formats import commitlog as cl_fmt
from .formats import consumequeue as cq_fmt
from .formats import indexfile as idx_fmt
from .recovery import (BATCH_CONSUME_QUEUE, CONSUME_QUEUE, INDEX_ENTRY_DTYPE, VERSION_49, VERSION_532, BrokerRules, FileJudge, QueueKind,
                       FileVerdict, RecoveryPlan, deleted_on_load, predict_recovery, queue_kinds,
                       recover_consume_queue, truncate_dirty_logic)
from .passport import store_passport
from .query import JAVA_LONG_MAX, MAX_MSGS_NUM_BATCH, IndexSet, broker_query_message
from .scan import MessageRecord, RecordBatch, Scanner, TopicTable, scan_buffer
from .store import ConsumeQueue, MappedFile, Segment, Store
from .writer import (BatchConsumeQueueWriter, ConsumeQueueWriter, IndexWriter, checkpoint_bytes,
                     fsync_dir, offset_file_name)

KILL_ENV = "MQTOOL_TEST_KILL_AFTER_STEP"
MAX_LISTED_RANGES = 64
_UNIT = cq_fmt.CQ_STORE_UNIT_SIZE
_NOT, _COMMIT = cl_fmt.TRANSACTION_NOT_TYPE, cl_fmt.TRANSACTION_COMMIT_TYPE
_ROLLBACK = cl_fmt.TRANSACTION_ROLLBACK_TYPE
_TYPE_MASK = cl_fmt.TRANSACTION_TYPE_MASK
_BLANK_MAGIC = cl_fmt.BLANK_MAGIC_CODE.to_bytes(4, "big")
_CHUNK = 1 << 20
_RELEASE_STEP = 64 << 20
# the checkpoint's five longs, as formats/checkpoint declares them
CHECKPOINT_LONGS = struct.Struct(
    ">" + "".join(struct_format(sc) for sc in ckpt_fmt.checkpoint.subcons[:5]))

# apply order: CommitLog first (the broker deletes the same files), the abort file last
_ORDER = {("commitlog", "edit"): 1, ("commitlog", "delete"): 2,
          ("consumequeue", "delete"): 3, ("consumequeue", "write"): 4,
          ("batchconsumequeue", "delete"): 3, ("batchconsumequeue", "write"): 4, ("index", "delete"): 5,
          ("index", "write"): 6, ("checkpoint", "write"): 7, ("abort", "delete"): 9}


class RepairError(MqtoolError):
    """A repair that cannot be planned as asked (bad --to offset, unusable --out folder...)."""


def _bar(progress, desc: str, total: int):
    """A progress bar from the caller's factory ``progress(desc, total)``, or a null context."""
    if progress is None:
        return contextlib.nullcontext(None)
    return progress(desc, total)


def _commitlog_bytes(store: Store, start: int = 0, stop: int | None = None) -> int:
    total = 0
    for seg in store.commitlog.segments:
        lo = max(start, seg.base_offset)
        hi = seg.base_offset + seg.length if stop is None else min(stop, seg.base_offset + seg.length)
        total += max(0, hi - lo)
    return total


def _predict(store: Store, progress, **kwargs) -> RecoveryPlan:
    with _bar(progress, "scan", _commitlog_bytes(store)) as bar:
        return predict_recovery(store, progress=bar, **kwargs)


def _dispatch_with_bar(store: Store, start: int, stop: int, progress, **kwargs) -> "DispatchStats":
    with _bar(progress, "dispatch", _commitlog_bytes(store, start, stop)) as bar:
        return dispatch(store, start, stop, progress=bar, **kwargs)


class DigestCache:
    """sha256 of files the repair will delete, computed by a background thread while the plan is
    being made (hashlib releases the GIL, so the hashing of a 1 GiB preallocated file overlaps
    the dispatch instead of adding to it). A digest is used only if the file is unchanged."""

    def __init__(self):
        self._pool = None
        self._futures: dict[str, tuple[int, int, object]] = {}

    def prefetch(self, paths) -> None:
        import concurrent.futures
        for path in paths:
            path = Path(path)
            if not path.is_file() or str(path) in self._futures:
                continue
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(1, "mqtool-sha256")
            st = path.stat()
            self._futures[str(path)] = (st.st_size, st.st_mtime_ns,
                                        self._pool.submit(bk.sha256_file, path))

    def get(self, path: Path) -> str | None:
        entry = self._futures.get(str(path))
        if entry is None:
            return None
        size, mtime, future = entry
        st = Path(path).stat()
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            return None
        return future.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


# --- the plan --------------------------------------------------------------------------------------

@dataclass
class FileOp:
    """One change to one file of the store."""

    op: str                     # write (new content from the stage) | edit (in place) | delete
    path: str                   # relative to the store root, '/'-separated
    kind: str                   # commitlog | consumequeue | index | checkpoint | abort
    old_size: int | None        # None: the file is created
    new_size: int | None        # None: the file is deleted
    ranges: list[list[int]]     # [start, end) byte ranges that change or go away
    reason: str
    start: int | None = None    # edit: bytes [start, end) become zeros, then size new_size
    end: int | None = None
    stage_file: str | None = None
    detail: dict = field(default_factory=dict)

    @property
    def action(self) -> str:
        if self.op == "delete":
            return "delete"
        if self.old_size is None:
            return "create"
        return "change"

    @property
    def bytes_changed(self) -> int:
        return sum(e - s for s, e in self.ranges)

    def to_dict(self) -> dict:
        ranges = self.ranges
        data = {"action": self.action, "op": self.op, "path": self.path, "kind": self.kind,
                "old_size": self.old_size, "new_size": self.new_size,
                "bytes_changed": self.bytes_changed, "reason": self.reason,
                "ranges": ranges[:MAX_LISTED_RANGES]}
        if len(ranges) > MAX_LISTED_RANGES:
            data["ranges_total"] = len(ranges)
        data.update(self.detail)
        return data


@dataclass
class RepairPlan:
    """What a repair command will change; built without touching the store."""

    command: str
    store: Path
    ops: list[FileOp]
    summary: dict
    lost: list[str]
    notes: list[str]
    data_loss: bool
    recovery: RecoveryPlan | None = None
    stage: Path | None = None
    options: dict = field(default_factory=dict)
    digests: DigestCache = field(default_factory=DigestCache, repr=False)
    passport: dict | None = None   # recover: what wrote the store, before its rules are applied

    @property
    def nothing_to_do(self) -> bool:
        return not self.ops

    def ordered_ops(self) -> list[FileOp]:
        return sorted(self.ops, key=lambda op: (_ORDER.get((op.kind, op.op), 8), op.path))

    def to_dict(self) -> dict:
        data = {"command": self.command, "store": str(self.store), "options": self.options,
                "nothing_to_do": self.nothing_to_do, "data_loss": self.data_loss,
                "summary": self.summary, "lost": self.lost, "notes": self.notes,
                "files": [op.to_dict() for op in self.ordered_ops()]}
        if self.recovery is not None:
            data["recovery"] = self.recovery.to_dict()
        if self.passport is not None:
            data["passport"] = self.passport
        return data


# --- the stage -------------------------------------------------------------------------------------

class Stage:
    """New file contents, next to (never inside) the store's data directories."""

    def __init__(self, store_root: Path, root: Path, for_apply: bool = False):
        self.store_root = Path(store_root)
        self.root = Path(root)
        self.for_apply = for_apply   # False for --dry-run: nothing is prepared for a backup
        self.files = self.root / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self.staged: set[str] = set()
        self.deleted: set[str] = set()

    def path(self, rel: str) -> Path:
        return self.files / rel

    def copy_in(self, rel: str) -> Path:
        """The staged copy of a store file (the original's bytes unless it was deleted)."""
        target = self.path(rel)
        if rel in self.staged:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        source = self.store_root / rel
        if rel not in self.deleted and source.is_file():
            sparse_copy(source, target)
        self.staged.add(rel)
        return target

    def mark_written(self, rel: str) -> None:
        self.staged.add(rel)

    def delete(self, rel: str) -> None:
        self.deleted.add(rel)
        if rel in self.staged:
            self.staged.discard(rel)
            try:
                self.path(rel).unlink()
            except FileNotFoundError:
                pass

    def current(self, rel: str) -> Path | None:
        """Where the file's content is after the changes so far (None: gone)."""
        if rel in self.staged:
            return self.path(rel)
        if rel in self.deleted:
            return None
        source = self.store_root / rel
        return source if source.exists() else None

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def sparse_copy(source: Path, target: Path) -> None:
    """Copy a file leaving its zero blocks as holes: a 6 MB ConsumeQueue file that holds a few
    units costs a few KB to stage and to fsync, not 6 MB."""
    block_size = 1 << 16
    zeros = bytes(block_size)
    with open(source, "rb") as src, open(target, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        pos = 0
        while True:
            block = src.read(block_size)
            if not block:
                break
            if block != (zeros if len(block) == block_size else bytes(len(block))):
                dst.seek(pos)
                dst.write(block)
            pos += len(block)
        dst.truncate(size)


# --- writers continuing the store's own files -------------------------------------------------------

class _StagedQueueFiles:
    """A queue writer over staged copies of the store's queue files, seeded with each queue's
    recovered state (write position, maxPhysicOffset) so it continues them exactly as the
    broker's putMessagePositionInfo would."""

    kind: QueueKind
    _max_physic_key: str

    def __init__(self, stage: Stage, units_per_file: int):
        super().__init__(stage.path(self.kind.directory), units_per_file)
        self.stage = stage
        self.touched: set[tuple[str, int]] = set()

    def seed(self, topic: str, queue_id: int, write_units: int | None, max_physic: int) -> None:
        state = self.state(topic, queue_id)
        if write_units is not None or self.kind.batch:
            state["write_pos"] = (write_units or 0) * self.unit_size
        state[self._max_physic_key] = max_physic

    def _file(self, state, topic, queue_id, logical):
        base = logical - logical % self.file_size
        if state["base"] != base:
            self.stage.copy_in(_queue_rel(topic, queue_id, offset_file_name(base), self.kind))
            self.touched.add((topic, queue_id))
        return super()._file(state, topic, queue_id, logical)


class StagedConsumeQueueWriter(_StagedQueueFiles, ConsumeQueueWriter):
    kind = CONSUME_QUEUE
    _max_physic_key = "max_physic"


class StagedBatchConsumeQueueWriter(_StagedQueueFiles, BatchConsumeQueueWriter):
    """Also knows the store's batch topics: their records go here, not to a ConsumeQueue."""

    kind = BATCH_CONSUME_QUEUE
    _max_physic_key = "max_start"

    def __init__(self, stage: Stage, units_per_file: int, topics: set[str]):
        super().__init__(stage, units_per_file)
        self.topics = topics


class RepairIndexWriter(IndexWriter):
    """IndexWriter continuing the store's last kept IndexFile (buildIndex after IndexService.load),
    optionally reusing given names for the files it creates (a rebuilt file keeps its name).

    Each file's buffer is an anonymous mapping rather than a bytearray of the whole file (420 MB
    at the default geometry, zeroed up front): only the slots and entries written are touched, so
    memory stays small whatever the geometry, and the file is written once, when it is done."""

    def __init__(self, directory: Path, slot_count: int, entry_count: int, *,
                 kept: list[str] = (), seed: tuple[str, Path] | None = None,
                 index_msg_timestamp: int = 0, reuse_names: list[str] = (),
                 batch: int = 1 << 12):
        # keys of 4096 records at a time: as fast as larger batches, and little memory
        super().__init__(directory, slot_count, entry_count, batch=batch)
        self.files = list(kept)
        self.index_msg_timestamp = index_msg_timestamp
        self.rolled = False
        self.created: list[str] = []
        self._reuse = list(reuse_names)
        self._skip_offset = None
        self._skip_count = 0
        self._mapped_path = None
        self._seed_source = None
        if seed is not None:
            name, source = seed
            with open(source, "rb") as fh:
                header = fh.read(idx_fmt.INDEX_HEADER_SIZE).ljust(idx_fmt.INDEX_HEADER_SIZE, b"\0")
            begin_ts, end_ts, begin_phy, end_phy, slots_used, count = \
                INDEX_HEADER.unpack_from(header, 0)
            # copied into the stage only when a key goes into it (a full one never is); the
            # hook is an instance attribute so later puts pay nothing for it
            self._seed_source = Path(source)
            self._current = self._current_after_seed
            self._buf = b""
            self._name = name
            # IndexHeader.load: a count <= 0 reads as 1
            self._h = {"begin_timestamp": begin_ts, "end_timestamp": end_ts,
                       "begin_phy_offset": begin_phy, "end_phy_offset": end_phy,
                       "hash_slot_count": slots_used, "index_count": max(1, count),
                       "hash_slot_count_disk": slots_used, "index_count_disk": count}
            if name not in self.files:
                self.files.append(name)

    def _map(self, name: str, seed: Path | None = None) -> None:
        """An anonymous mapping as the file's buffer: pages are allocated (zeroed) only when
        touched, and nothing is written back while keys go in; flush() writes the used part."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / name
        buf = mmap.mmap(-1, self.file_size)
        if seed is not None:
            shutil.copyfile(seed, path)
            with open(path, "rb") as fh:
                count = max(1, INDEX_HEADER.unpack_from(fh.read(idx_fmt.INDEX_HEADER_SIZE)
                                                        .ljust(idx_fmt.INDEX_HEADER_SIZE,
                                                               b"\0"), 0)[5])
                fh.seek(0)
                used = min(self.file_size, idx_fmt.entry_position(self.slot_count, count))
                fh.readinto(memoryview(buf)[:used])
        with open(path, "r+b" if path.exists() else "w+b") as fh:
            if os.fstat(fh.fileno()).st_size != self.file_size:
                fh.truncate(self.file_size)
        self._mapped_path = path
        self._buf = buf

    def _write_back(self) -> None:
        """Header, slot table and the entries written so far; the rest of the file is zeros (a
        new file) or the seed's own bytes (a continued one)."""
        used = min(self.file_size, idx_fmt.entry_position(self.slot_count,
                                                          self._h["index_count"]))
        with open(self._mapped_path, "r+b") as fh:
            fh.write(memoryview(self._buf)[:used])

    def _unmap(self) -> None:
        if self._mapped_path is not None:
            self._buf.close()
            self._mapped_path = None
            self._buf = None

    def _current_after_seed(self, now_ms: int) -> None:
        del self._current
        if self._seed_source is not None and self._h["index_count"] < self.entry_count:
            self._map(self._name, self._seed_source)
        self._seed_source = None
        self._current(now_ms)

    def skip_first_keys(self, offset: int, count: int) -> None:
        """Drop the first ``count`` keys put for the record at ``offset``: they already sit in the
        seeded file (the record that did not fit when that file filled up), so a file rebuilt
        under its own name gets only the keys the broker had put there."""
        self._skip_offset, self._skip_count = offset, count
        if count:
            self.put_hashed = self._put_hashed_skipping

    def _put_hashed_skipping(self, key_hash: int, phy_offset: int, store_timestamp: int) -> None:
        if self._skip_count and phy_offset == self._skip_offset:
            self._skip_count -= 1
            if not self._skip_count:
                del self.put_hashed
            return
        IndexWriter.put_hashed(self, key_hash, phy_offset, store_timestamp)

    def put_many(self, key_hashes, phy_offsets, store_timestamps) -> None:
        if self._skip_count:
            phy_offsets = np.asarray(phy_offsets, dtype=np.int64)
            skipped = np.flatnonzero(phy_offsets == self._skip_offset)[:self._skip_count]
            if len(skipped):
                self._skip_count -= len(skipped)
                if not self._skip_count:
                    self.__dict__.pop("put_hashed", None)
                keep = np.ones(len(phy_offsets), dtype=bool)
                keep[skipped] = False
                key_hashes = np.asarray(key_hashes)[keep]
                phy_offsets = phy_offsets[keep]
                store_timestamps = np.asarray(store_timestamps)[keep]
        super().put_many(key_hashes, phy_offsets, store_timestamps)

    def _new_file(self, now_ms: int, end_phy: int, end_ts: int) -> None:
        if self._h is not None:
            self.rolled = True
        self._seed_source = None
        self.__dict__.pop("_current", None)
        self.flush()
        self._unmap()
        # the parent builds the header and the name; its whole-file bytearray is replaced by a
        # mapping of the new file (file_size 0 keeps it from allocating one first)
        size, self.file_size = self.file_size, 0
        try:
            super()._new_file(now_ms, end_phy, end_ts)
        finally:
            self.file_size = size
        if self._reuse:
            name = self._reuse.pop(0)
            self.files[-1] = name
            self._name = name
        path = self.directory / self._name
        if path.exists():
            path.unlink()
        self._map(self._name)
        self.created.append(self._name)

    def flush(self) -> None:
        self.put_held()
        if self._mapped_path is not None and self._name is not None:
            self._put_header()
            self._write_back()
        elif self._buf is not None and len(self._buf):
            super().flush()

    def finish(self) -> None:
        self.flush()
        self._unmap()

    close = finish


# --- reading index files ----------------------------------------------------------------------------

@dataclass
class IndexFileState:
    name: str
    rel: str
    size: int
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int          # as on disk

    @property
    def entries(self) -> int:
        return max(0, self.index_count - 1)


def read_index_states(store: Store, paths: dict[str, Path] | None = None) -> list[IndexFileState]:
    out = []
    for info in store.index_files:
        path = paths.get(info.name, info.path) if paths else info.path
        with open(path, "rb") as fh:
            raw = fh.read(idx_fmt.INDEX_HEADER_SIZE)
        if len(raw) < idx_fmt.INDEX_HEADER_SIZE:
            raw = raw.ljust(idx_fmt.INDEX_HEADER_SIZE, b"\0")
        fields = INDEX_HEADER.unpack_from(raw, 0)
        out.append(IndexFileState(info.name, store.relative(info.path), info.length, *fields))
    return out


_ENTRY_BATCH = 1 << 18


def _index_entry_batches(path: Path, slots: int, entries_per_file: int):
    """The written entries (1 .. indexCount-1) of an IndexFile, in batches read into one reused
    array: a full default-geometry file has 20 million of them (400 MB)."""
    with open(path, "rb") as fh:
        header = fh.read(idx_fmt.INDEX_HEADER_SIZE)
        if len(header) < idx_fmt.INDEX_HEADER_SIZE:
            return
        size = os.fstat(fh.fileno()).st_size
        first = idx_fmt.entry_position(slots, 1)
        available = max(0, (size - first) // idx_fmt.INDEX_ENTRY_SIZE)
        n = max(0, min(INDEX_HEADER.unpack_from(header, 0)[5] - 1, available,
                       entries_per_file - 1))
        buf = bytearray(min(n, _ENTRY_BATCH) * idx_fmt.INDEX_ENTRY_SIZE)
        done = 0
        fh.seek(first)
        while done < n:
            count = min(_ENTRY_BATCH, n - done)
            view = memoryview(buf)[:count * idx_fmt.INDEX_ENTRY_SIZE]
            fh.readinto(view)
            yield np.frombuffer(view, INDEX_ENTRY_DTYPE)
            done += count


def _count_entries(path: Path, slots: int, entries_per_file: int, predicate) -> int:
    return sum(int(predicate(batch).sum())
               for batch in _index_entry_batches(path, slots, entries_per_file))


# --- the broker's lookup -----------------------------------------------------------------------------

def query_index(store: Store, topic: str, key: str, max_num: int = MAX_MSGS_NUM_BATCH,
                begin: int = 0, end: int = JAVA_LONG_MAX) -> list[int]:
    """IndexService.queryOffset + IndexFile.selectPhyOffset: CommitLog offsets indexed under
    ``topic#key``, newest files first, at most ``max_num`` (capped at 64), ascending, duplicates
    kept, no collision filter (the broker has none). The walk is mqtool.query's, which also ends
    on chains that loop."""
    with IndexSet(store) as index:
        offsets, _problems = index.broker_query_offset(topic, key, max_num, begin, end)
    return sorted(offsets)


def query_message_offsets(store: Store, topic: str, key: str, max_offset: int,
                          max_num: int = MAX_MSGS_NUM_BATCH, begin: int = 0,
                          end: int = JAVA_LONG_MAX) -> list[int]:
    """What DefaultMessageStore.queryMessage returns: query_index's offsets that lie inside the
    CommitLog's readable range [min offset, ``max_offset``) (stale entries are skipped)."""
    return broker_query_message(store, topic, key, max_num, begin, end, max_offset=max_offset)


# --- scanning records to dispatch ------------------------------------------------------------------

def _segment_records(seg: Segment, start: int, stop: int):
    """Message records of one segment whose offset is in [start, stop), in order; a blank ends
    the segment (the broker moves to the next file)."""
    with MappedFile(seg.path) as mf:
        buf = mf.data
        pos = max(0, start - seg.base_offset)
        limit = min(len(buf), max(0, stop - seg.base_offset))
        if pos >= limit:
            return
        first_scan = 0
        if pos:
            head = bytes(buf[pos:pos + 8])
            if len(head) < 8 or head[4:8] == _BLANK_MAGIC or head == bytes(8):
                return
            first_scan = pos
        events = scan_buffer(buf, seg.base_offset, name=seg.name, start=first_scan, stop=limit,
                             check_crc=False, resync=False, layout=seg.layout)
        first = True
        released = 0
        for event in events:
            done = event.offset - seg.base_offset
            if done - released >= _RELEASE_STEP and isinstance(buf, mmap.mmap):
                # pages already read leave the resident set (they stay in the page cache), so a
                # 1 GiB file does not count as 1 GiB of memory
                cut = done - done % mmap.PAGESIZE
                buf.madvise(mmap.MADV_DONTNEED, 0, cut)
                released = cut
            if type(event) is not MessageRecord:
                return
            if first and first_scan and event.offset != seg.base_offset + pos:
                # the record at the start position failed the resynchronisation test (a
                # damaged PHYSICALOFFSET): read the file from its start instead
                events.close()
                yield from _records_from_file_start(buf, seg, pos, limit)
                return
            first = False
            if event.offset - seg.base_offset >= limit:
                return
            yield event


def _records_from_file_start(buf, seg: Segment, pos: int, limit: int):
    for event in scan_buffer(buf, seg.base_offset, name=seg.name, start=0, stop=limit,
                             check_crc=False, resync=False, layout=seg.layout):
        if type(event) is not MessageRecord:
            return
        if event.offset - seg.base_offset >= pos:
            yield event


def iter_records(store: Store, start: int, stop: int, progress=None):
    """Records in [start, stop) the way the broker's recovery/reput walks them: file by file,
    a blank record moves to the next file, anything unreadable ends the walk."""
    for seg in store.commitlog.segments:
        if seg.base_offset + seg.length <= start:
            continue
        if seg.base_offset >= stop:
            break
        done = max(start, seg.base_offset)
        for rec in _segment_records(seg, start, stop):
            if progress is not None and rec.offset - done >= 1 << 22:
                progress.update(rec.offset - done)
                done = rec.offset
            yield rec
        if progress is not None:
            end = min(stop, seg.base_offset + seg.length)
            if end > done:
                progress.update(end - done)


def judged_records(store: Store, segments: list[Segment], start_index: int, rules: BrokerRules,
                   verdicts: dict[int, FileVerdict], progress=None) -> "_JudgedRecords":
    """The records abnormal recovery dispatches, found by the same scan that decides where it
    stops: each file's events go to the broker's judge (:class:`FileJudge`, CRCs included) and
    the records it accepts are yielded, so the CommitLog is read once. Each file's verdict lands
    in ``verdicts`` for :func:`predict_recovery`."""
    return _JudgedRecords(store, segments, start_index, rules, verdicts, progress)


class _JudgedRecords:
    """judged_records' records: iterated one by one, or read by :func:`dispatch` as the
    scanner's record batches (cut where the judge stops)."""

    def __init__(self, store, segments, start_index, rules, verdicts, progress):
        self.store, self.segments, self.start_index = store, segments, start_index
        self.rules, self.verdicts, self.progress = rules, verdicts, progress

    def __iter__(self):
        for batch in self.batches(TopicTable()):
            yield from batch.records()

    def batches(self, topics: TopicTable):
        """The same records as RecordBatches, each valid until the next is asked for."""
        scanner = Scanner(self.store.commitlog, check_crc=self.rules.check_crc, resync=True)
        for i in range(self.start_index, len(self.segments)):
            seg = self.segments[i]
            judge = FileJudge(seg, self.rules)
            for event in scanner.scan_segment_batches(seg, progress=self.progress,
                                                      topics=topics):
                if type(event) is not RecordBatch:
                    judge.feed(event)
                    continue
                # the judge accepts a leading run of records; once stopped it only counts
                accepted = 0
                for rec in event.records():
                    judge.feed(rec)
                    if not judge.stopped:
                        accepted += 1
                if accepted:
                    yield event if accepted == len(event) else event.head(accepted)
            self.verdicts[seg.base_offset] = judge.verdict
            if not (judge.verdict.continues and i + 1 < len(self.segments)):
                return


@dataclass
class DispatchStats:
    records: int = 0
    cq_offered: int = 0
    cq_written: int = 0
    last_cq_timestamp: int | None = None
    last_offset: int | None = None
    last_timestamp: int | None = None


def dispatch(store: Store, start: int, stop: int, *, cq: StagedConsumeQueueWriter | None,
             cq_from: int, index: RepairIndexWriter | None, index_from: int,
             schedule_loaded: bool = True, queues: set | None = None,
             progress=None, records=None,
             bcq: StagedBatchConsumeQueueWriter | None = None) -> DispatchStats:
    """The broker's doDispatch for every record in [start, stop) (or of ``records``):
    CommitLogDispatcherBuildConsumeQueue for records at or after ``cq_from`` (optionally only for
    ``queues``; records of ``bcq``'s batch topics go to their BatchConsumeQueues, or nowhere
    without ``bcq``), BuildIndex for records at or after ``index_from``. The writers deduplicate
    as the broker's do.

    Records are taken a chunk at a time so that the properties every record needs (TAGS, the
    index keys) are parsed and hashed with numpy for the whole chunk."""
    stats = DispatchStats()
    batch_topics = bcq.topics if bcq is not None else {
        q.topic for q in store.batch_consume_queues}
    if records is None:
        records = iter_records(store, start, stop, progress)
    topics = TopicTable()
    prefixes: dict[int, int] = {}
    batches = records.batches(topics) if isinstance(records, _JudgedRecords) \
        else _record_batches(records, topics)
    for batch in batches:
        offsets = batch.offsets
        props = _DispatchProperties(batch)
        _dispatch_queues(batch, offsets, props, stats, cq=cq, bcq=bcq, cq_from=cq_from,
                         queues=queues, batch_topics=batch_topics,
                         schedule_loaded=schedule_loaded)
        if index is not None:
            _dispatch_index(batch, offsets, props, index, index_from, prefixes)
        stats.records += len(batch)
        stats.last_offset = int(offsets[-1])
        stats.last_timestamp = int(batch.store_timestamp[-1])
    return stats


_DISPATCH_CHUNK = 4096
_KEY_SEPARATOR = ord(" ")


def _record_batches(records, topics: TopicTable):
    """MessageRecords as RecordBatches of up to _DISPATCH_CHUNK records."""
    records = iter(records)
    while True:
        chunk = list(itertools.islice(records, _DISPATCH_CHUNK))
        if not chunk:
            return
        yield RecordBatch.from_records(chunk, 0, topics)


class _DispatchProperties:
    """The properties dispatch reads, parsed for a whole batch when first asked for."""

    def __init__(self, batch: RecordBatch):
        self.batch = batch
        self.data = self.values = None

    def spans(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        if self.data is None:
            self.data, begins = _codec.property_blob(*self.batch.properties_source())
            self.values = _codec.property_values(self.data, begins, ("TAGS", "UNIQ_KEY", "KEYS"))
        return self.values[name]

    def decoded(self, i: int) -> dict[str, str]:
        """All properties of one record (what the rare cases read)."""
        return codecs.decode_properties(self.batch.properties_raw(i))

    def tags_hashes(self) -> np.ndarray:
        """hashCode of each record's TAGS, 0 without: tags_code outside SCHEDULE_TOPIC."""
        starts, ends = self.spans("TAGS")   # parses the batch's properties
        return _codec.string_hash_codes(self.data, starts, ends)


def _dispatch_queues(batch: RecordBatch, offsets: np.ndarray, props: _DispatchProperties,
                     stats: DispatchStats, *, cq, bcq, cq_from: int, queues, batch_topics,
                     schedule_loaded: bool) -> None:
    """CommitLogDispatcherBuildConsumeQueue for the records of a batch, in order."""
    sizes, stamps = batch.total_size, batch.store_timestamp
    tran = batch.sys_flag & _TYPE_MASK
    names = batch.topics.names
    queued = (offsets >= cq_from) & ((tran == _NOT) | (tran == _COMMIT))
    if queues is not None:
        rows = np.flatnonzero(queued)
        queued[rows] = [(names[t], q) in queues for t, q in
                        zip(batch.topic_id[rows].tolist(), batch.queue_id[rows].tolist())]
    batch_ids = [t for t in map(batch.topics.find, batch_topics) if t is not None] \
        if batch_topics else []
    in_batch_topic = np.isin(batch.topic_id, batch_ids)
    to_bcq = queued & in_batch_topic if bcq is not None else np.zeros(len(batch), dtype=bool)
    to_cq = queued & ~in_batch_topic if cq is not None else np.zeros(len(batch), dtype=bool)
    offered = np.flatnonzero(to_bcq | to_cq)
    if len(offered) == 0:
        return
    # putMessagePositionInfoWrapper sets logicsMsgTimestamp even for a repeated unit
    stats.last_cq_timestamp = int(stamps[offered[-1]])
    live = to_bcq
    cq_rows = np.flatnonzero(to_cq)
    if len(cq_rows):
        stats.cq_offered += len(cq_rows)
        # a queue's state only grows (max_physic, write_pos), so a record it already covers
        # when the batch starts is skipped by the loop below too; states are asked for in
        # record order (that order lists the queues)
        keys = (batch.topic_id[cq_rows].astype(np.int64) << 32) | (batch.queue_id[cq_rows]
                                                                    & 0xFFFFFFFF)
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        max_physic = np.empty(len(first), dtype=np.int64)
        write_pos = np.empty(len(first), dtype=np.int64)
        has_pos = np.zeros(len(first), dtype=bool)
        for u in np.argsort(first, kind="stable").tolist():
            row = int(cq_rows[first[u]])
            state = cq.state(names[batch.topic_id[row]], int(batch.queue_id[row]))
            max_physic[u] = state["max_physic"]
            if state["write_pos"] is not None:
                write_pos[u], has_pos[u] = state["write_pos"], True
        inverse = inverse.reshape(-1)
        covered = (offsets[cq_rows] + sizes[cq_rows] <= max_physic[inverse]) | (
            has_pos[inverse] & (batch.queue_offset[cq_rows] * _UNIT < write_pos[inverse]))
        live = live.copy()
        live[cq_rows[~covered]] = True
    rows = np.flatnonzero(live)
    if len(rows) == 0:
        return
    schedule = batch.topics.find(codecs.SCHEDULE_TOPIC)
    hashes = props.tags_hashes() if to_cq[rows].any() else None
    for i, topic_id, queue_id, offset, size, queue_offset, stamp in zip(
            rows.tolist(), batch.topic_id[rows].tolist(), batch.queue_id[rows].tolist(),
            offsets[rows].tolist(), sizes[rows].tolist(), batch.queue_offset[rows].tolist(),
            stamps[rows].tolist()):
        topic = names[topic_id]
        if to_bcq[i]:
            record_props = props.decoded(i)
            if bcq.put(topic, queue_id, offset, size,
                       codecs.tags_code(topic, record_props, stamp), stamp,
                       *codecs.batch_position(record_props, queue_offset)):
                stats.cq_written += 1
            continue
        state = cq.state(topic, queue_id)
        write_pos = state["write_pos"]
        if offset + size <= state["max_physic"] or (
                write_pos is not None and queue_offset * _UNIT < write_pos):
            continue
        if topic_id == schedule:
            record_props = props.decoded(i)
            if schedule_loaded:
                code = codecs.tags_code(topic, record_props, stamp)
            else:
                # 4.9 recovers before ScheduleMessageService.load(): maxDelayLevel is still 0,
                # so the level clamps to 0 and the unit keeps the TAGS hash instead of the
                # delivery time (crash-lost-small/recovered shows it)
                tags = record_props.get("TAGS")
                code = codecs.java_string_hash(tags) if tags else 0
        else:
            code = int(hashes[i])
        if cq.put(topic, queue_id, offset, size, code, queue_offset):
            stats.cq_written += 1


def _dispatch_index(batch: RecordBatch, offsets: np.ndarray, props: _DispatchProperties,
                    index: RepairIndexWriter, index_from: int, prefixes: dict[int, int]) -> None:
    """BuildIndex for the records of a batch: UNIQ_KEY then each KEYS item of every record,
    hashed as ``topic#key`` together and put in that order."""
    wanted = (offsets >= index_from) & ((batch.sys_flag & _TYPE_MASK) != _ROLLBACK)
    # offsets grow through the dispatch, so only records before the writer's last one (a
    # seeded file's) are already indexed
    if index.has_file:
        wanted &= offsets >= index.end_phy_offset
    rows = np.flatnonzero(wanted)
    if len(rows) == 0 or not index.enabled:
        return
    uniq = tuple(a[rows] for a in props.spans("UNIQ_KEY"))   # parses the batch's properties
    keys = tuple(a[rows] for a in props.spans("KEYS"))
    owner, starts, ends = _codec.index_key_spans(props.data, uniq, keys, _KEY_SEPARATOR)
    if len(owner) == 0:
        return
    topic_ids = batch.topic_id[rows]
    for t in np.unique(topic_ids[owner]).tolist():
        if t not in prefixes:
            prefixes[t] = codecs.index_key_prefix_hash(batch.topics.names[t])
    prefix_of = np.zeros(int(topic_ids.max()) + 1, dtype=np.uint32)
    for t, h in prefixes.items():
        if t < len(prefix_of):
            prefix_of[t] = h
    hashes = _codec.index_key_hashes(props.data, starts, ends, prefix_of[topic_ids[owner]])
    # keys held back by an earlier build_index go first
    index.put_held()
    index.put_many(hashes, offsets[rows][owner], batch.store_timestamp[rows][owner])


# --- helpers on files ------------------------------------------------------------------------------

def data_end(path: Path, start: int = 0) -> int:
    """One past the last non-zero byte of a file at or after ``start`` (``start`` if none).
    Read backwards into one reused buffer (a mapping would count the whole file as resident)."""
    size = path.stat().st_size
    if size <= start:
        return start
    step = 16 << 20
    buf = bytearray(min(step, size - start))
    with open(path, "rb", buffering=0) as fh:
        pos = size
        while pos > start:
            lo = max(start, pos - step)
            fh.seek(lo)
            view = memoryview(buf)[:pos - lo]
            got = fh.readinto(view)
            block = np.frombuffer(view[:got], np.uint8)
            if block.any():
                # the last non-zero byte, found in 64 KiB pieces from the end
                piece = 1 << 16
                hi = len(block)
                while hi > 0:
                    part = block[max(0, hi - piece):hi]
                    nonzero = np.flatnonzero(part)
                    if len(nonzero):
                        return lo + max(0, hi - piece) + int(nonzero[-1]) + 1
                    hi -= piece
            pos = lo
    return start


def diff_ranges(old: Path | None, new: Path | None) -> list[list[int]]:
    """[start, end) ranges where two files differ (bytes only one of them has included)."""
    old_size = old.stat().st_size if old is not None else 0
    new_size = new.stat().st_size if new is not None else 0
    if old is None or new is None:
        return [[0, max(old_size, new_size)]] if max(old_size, new_size) else []
    ranges: list[list[int]] = []

    def add(s: int, e: int) -> None:
        if ranges and s - ranges[-1][1] <= 16:
            ranges[-1][1] = max(ranges[-1][1], e)
        else:
            ranges.append([s, e])

    common = min(old_size, new_size)
    with open(old, "rb") as fa, open(new, "rb") as fb:
        pos = 0
        while pos < common:
            n = min(_CHUNK, common - pos)
            a, b = fa.read(n), fb.read(n)
            if a != b:
                diff = np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8)
                idx = np.flatnonzero(diff)
                breaks = np.flatnonzero(np.diff(idx) > 16)
                starts = np.concatenate(([idx[0]], idx[breaks + 1]))
                ends = np.concatenate((idx[breaks], [idx[-1]])) + 1
                for s, e in zip(starts.tolist(), ends.tolist()):
                    add(pos + s, pos + e)
            pos += n
    if old_size != new_size:
        add(common, max(old_size, new_size))
    return ranges


def _rel(store: Store, path: Path) -> str:
    return store.relative(path)


def _queue_rel(topic: str, queue_id: int, name: str, kind: QueueKind = CONSUME_QUEUE) -> str:
    return f"{kind.directory}/{topic}/{queue_id}/{name}"


def _store_queues(store: Store, kind: QueueKind) -> list[ConsumeQueue]:
    return store.batch_consume_queues if kind.batch else store.consume_queues


def _queue_view(stage: Stage, store: Store, topic: str, queue_id: int,
                kind: QueueKind = CONSUME_QUEUE) -> ConsumeQueue:
    """The queue's files as they stand in the stage (originals not deleted, plus staged ones)."""
    names = set()
    original = next((q for q in _store_queues(store, kind)
                     if q.topic == topic and q.queue_id == queue_id), None)
    if original is not None:
        names.update(s.name for s in original.segments)
    staged_dir = stage.path(f"{kind.directory}/{topic}/{queue_id}")
    if staged_dir.is_dir():
        names.update(p.name for p in staged_dir.iterdir() if p.is_file())
    segments = []
    for name in sorted(names, key=int):
        current = stage.current(_queue_rel(topic, queue_id, name, kind))
        if current is not None:
            segments.append(Segment(current, int(name), current.stat().st_size))
    directory = (original.directory if original is not None
                 else store.root / kind.directory / topic / str(queue_id))
    return ConsumeQueue(topic, queue_id, directory, segments)


def _delete_queue_files_after(stage: Stage, view: ConsumeQueue, end_units: int,
                              keep_equal: bool, kind: QueueKind = CONSUME_QUEUE) -> None:
    """Queue files past a queue's end. The broker's truncateDirtyFiles keeps a file that
    starts exactly at the end (write position 0); ``keep_equal=False`` deletes it too."""
    end = end_units * kind.unit_size
    for seg in view.segments:
        if seg.base_offset > end or (seg.base_offset == end and not keep_equal):
            stage.delete(_queue_rel(view.topic, view.queue_id, seg.name, kind))


def _zero_queue_tail(stage: Stage, view: ConsumeQueue, end_units: int, file_size: int,
                     kind: QueueKind = CONSUME_QUEUE) -> None:
    """Erase units at or past the queue's end in the file holding it."""
    end = end_units * kind.unit_size
    for seg in view.segments:
        if seg.base_offset < end < seg.base_offset + file_size or (
                seg.base_offset == end and end_units == 0):
            rel = _queue_rel(view.topic, view.queue_id, seg.name, kind)
            source = stage.current(rel)
            if source is None:
                continue
            cut = end - seg.base_offset
            if data_end(source, cut) <= cut:
                continue
            path = stage.copy_in(rel)
            with open(path, "r+b") as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(cut)
                remaining = size - cut
                while remaining > 0:
                    n = min(_CHUNK, remaining)
                    fh.write(bytes(n))
                    remaining -= n


def _fix_queue_file_sizes(stage: Stage, store: Store, version: str, notes: list[str]) -> None:
    """A queue file of the wrong size makes the broker refuse to load; pad or cut it (an empty
    last file, which 5.1.3+ deletes on load, is deleted as it does)."""
    for kind, queues, upf in queue_kinds(store):
        _fix_file_sizes(stage, kind, queues, upf * kind.unit_size, version, notes)


def _fix_file_sizes(stage: Stage, kind: QueueKind, queues: list[ConsumeQueue], size: int,
                    version: str, notes: list[str]) -> None:
    for queue in queues:
        for seg in queue.segments:
            if seg.length != size:
                rel = _queue_rel(queue.topic, queue.queue_id, seg.name, kind)
                if deleted_on_load(queue.segments, seg, version):
                    stage.delete(rel)
                    notes.append(f"{rel}: empty last file deleted, as 5.1.3+ does on load")
                    continue
                path = stage.copy_in(rel)
                with open(path, "r+b") as fh:
                    fh.truncate(size)
                notes.append(f"{rel}: {seg.length} bytes resized to {size} (the broker refuses to "
                             "load a queue file of another size)")


def commitlog_gaps(store: Store) -> list[tuple[int, int]]:
    """[start, end) ranges between CommitLog files that are missing (a deleted middle file)."""
    gaps = []
    size = store.commitlog.file_size
    segments = store.commitlog.segments
    for a, b in zip(segments, segments[1:]):
        if a.base_offset + size < b.base_offset:
            gaps.append((a.base_offset + size, b.base_offset))
    return gaps


def queues_with_holes(store: Store) -> list[tuple[str, int, str]]:
    """Queues whose files show that some are missing: a queue directory without files, missing
    names between the first and the last file, or a first file past 0 while no CommitLog file
    has expired yet. The broker never regenerates such files."""
    size = store.cq_units_per_file * _UNIT
    found = []
    nothing_expired = bool(store.commitlog.segments) and store.commitlog.min_offset == 0
    for queue in store.consume_queues:
        bases = [s.base_offset for s in queue.segments]
        if not bases:
            found.append((queue.topic, queue.queue_id, "the queue directory holds no file"))
        elif any(b - a != size for a, b in zip(bases, bases[1:])):
            found.append((queue.topic, queue.queue_id, "files are missing between its first "
                                                       "and last file"))
        elif bases[0] > 0 and nothing_expired:
            found.append((queue.topic, queue.queue_id,
                          f"its first file starts at {bases[0]:,} although no CommitLog file "
                          "has expired"))
    return found


def last_record_before(store: Store, offset: int):
    """The last message record that starts before ``offset`` (None if there is none)."""
    earlier = [s for s in store.commitlog.segments if s.base_offset < offset]
    for seg in reversed(earlier):
        last = None
        for rec in _segment_records(seg, seg.base_offset, offset):
            last = rec
        if last is not None:
            return last
    return None


# --- the recovered state of the queues ---------------------------------------------------------------

@dataclass
class QueueState:
    end: int                 # logical unit index of the write position
    max_physic: int
    has_files: bool


def _recover_queues(stage: Stage, store: Store, upf: int,
                    kind: QueueKind = CONSUME_QUEUE) -> tuple[dict, int]:
    """recover() for every queue of the kind (files past the valid end are deleted, as the
    broker's truncateDirtyFiles does); returns the states and their maxPhysicOffset."""
    states: dict[tuple[str, int], QueueState] = {}
    max_phy = -1
    for queue in _store_queues(store, kind):
        view = _queue_view(stage, store, queue.topic, queue.queue_id, kind)
        if not view.segments:
            continue
        qr = recover_consume_queue(view, upf, kind)
        _delete_queue_files_after(stage, view, qr.valid_end, keep_equal=True, kind=kind)
        remaining = [s for s in view.segments if s.base_offset <= qr.valid_end * kind.unit_size]
        states[(queue.topic, queue.queue_id)] = QueueState(qr.valid_end, qr.max_physic_offset,
                                                           bool(remaining))
        max_phy = max(max_phy, qr.max_physic_offset)
    return states, max_phy


def _truncate_queues(stage: Stage, store: Store, upf: int, offset: int,
                     states: dict, kind: QueueKind = CONSUME_QUEUE) -> int:
    """truncateDirtyLogicFiles(offset) on every queue; returns the units removed."""
    removed = 0
    for key in list(states):
        topic, queue_id = key
        view = _queue_view(stage, store, topic, queue_id, kind)
        if not view.segments:
            states[key] = QueueState(0, offset, False)
            continue
        t = truncate_dirty_logic(view, offset, upf, kind)
        removed += t.units
        for name in t.files_deleted:
            stage.delete(_queue_rel(topic, queue_id, name, kind))
        left = len(view.segments) > len(t.files_deleted)
        states[key] = QueueState(t.new_end if left else 0, t.max_physic_offset, left)
    return removed


def _queue_keys(stage: Stage, store: Store, extra, kind: QueueKind = CONSUME_QUEUE) -> set:
    keys = {(q.topic, q.queue_id) for q in _store_queues(store, kind)}
    keys.update(extra)
    return keys


def _finish_queues(stage: Stage, store: Store, upf: int, ends: dict[tuple[str, int], int],
                   keep_stale: bool, kind: QueueKind = CONSUME_QUEUE) -> None:
    """Default mode: nothing valid-looking stays past a queue's end (zeroed units, no files)."""
    if keep_stale:
        return
    for (topic, queue_id), end in ends.items():
        view = _queue_view(stage, store, topic, queue_id, kind)
        if not view.segments:
            continue
        _delete_queue_files_after(stage, view, end, keep_equal=False, kind=kind)
        view = _queue_view(stage, store, topic, queue_id, kind)
        _zero_queue_tail(stage, view, end, upf * kind.unit_size, kind)


def _seed_writers(cq_writer: StagedConsumeQueueWriter, states: dict,
                  bcq_writer: StagedBatchConsumeQueueWriter, batch_states: dict) -> None:
    for writer, kind_states in ((cq_writer, states), (bcq_writer, batch_states)):
        for (topic, queue_id), st in kind_states.items():
            writer.seed(topic, queue_id, st.end if st.has_files else None, st.max_physic)


def _settle_queues(stage: Stage, store: Store, writer: _StagedQueueFiles, states: dict,
                   upf: int, truncate_at: int | None, keep_stale: bool) -> None:
    """After the dispatch: the writer's files join the stage, truncateDirtyLogicFiles runs at
    ``truncate_at`` (None: not now), and by default nothing valid-looking stays past an end."""
    kind = writer.kind
    writer.close()
    ends = {key: st.end for key, st in states.items()}
    for key in writer.queue_keys():
        state = writer.state(*key)
        if state["write_pos"] is not None:
            ends[key] = state["write_pos"] // kind.unit_size
    for topic, queue_id in writer.touched:
        for path in stage.path(f"{kind.directory}/{topic}/{queue_id}").glob("*"):
            stage.mark_written(_queue_rel(topic, queue_id, path.name, kind))
    if truncate_at is not None:
        truncated = {key: QueueState(ends.get(key, 0), 0, True)
                     for key in _queue_keys(stage, store, writer.touched, kind)}
        _truncate_queues(stage, store, upf, truncate_at, truncated, kind)
        ends = {key: st.end for key, st in truncated.items()}
    _finish_queues(stage, store, upf, ends, keep_stale, kind)


# --- IndexFiles -------------------------------------------------------------------------------------

@dataclass
class IndexSetup:
    writer: RepairIndexWriter | None
    dispatch_from: int | None
    deleted: list[str]
    rebuilt: list[str]           # files rebuilt under their own names (stale entries removed)
    rebuild_from: int | None


def _setup_index(stage: Stage, store: Store, *, deleted: list[str], cut: int | None,
                 reindex_all: bool, index_msg_timestamp: int, slots: int | None = None,
                 entries: int | None = None) -> IndexSetup:
    """Delete IndexFiles (abnormal load, or all for a full rebuild) and, when ``cut`` is given,
    rebuild the kept files holding entries at or past it under their own names; seed a writer
    that continues the last file left."""
    slots = slots or store.index_slots
    entries = entries or store.index_entries
    index_dir = stage.path("index")
    states = read_index_states(store)
    if reindex_all:
        for s in states:
            stage.delete(s.rel)
        # the rebuilt files take the old names in order: an unchanged file is then no change
        writer = RepairIndexWriter(index_dir, slots, entries, index_msg_timestamp=0,
                                   reuse_names=[s.name for s in states])
        return IndexSetup(writer, store.commitlog.min_offset, [s.name for s in states], [], None)
    kept = [s for s in states if s.name not in deleted]
    for s in states:
        if s.name in deleted:
            stage.delete(s.rel)
    rebuilt: list[IndexFileState] = []
    if cut is not None:
        for i, s in enumerate(kept):
            if s.index_count > 1 and s.end_phy_offset >= cut:
                rebuilt = kept[i:]
                kept = kept[:i]
                break
    for s in rebuilt:
        stage.delete(s.rel)
    seed = None
    if kept:
        last = kept[-1]
        seed = (last.name, store.root / last.rel)
    writer = RepairIndexWriter(index_dir, slots, entries, kept=[s.name for s in kept], seed=seed,
                               index_msg_timestamp=index_msg_timestamp,
                               reuse_names=[s.name for s in rebuilt])
    if rebuilt and kept:
        last = kept[-1]
        boundary = last.end_phy_offset
        writer.skip_first_keys(boundary, _count_entries(
            store.root / last.rel, slots, entries, lambda e: e["phy_offset"] == boundary))
    rebuild_from = rebuilt[0].begin_phy_offset if rebuilt else None
    return IndexSetup(writer, rebuild_from, [s for s in deleted], [s.name for s in rebuilt],
                      rebuild_from)


def _finish_index(stage: Stage, store: Store, writer: RepairIndexWriter) -> None:
    writer.finish()
    for name in writer.files:
        if stage.path(f"index/{name}").exists():
            stage.mark_written(f"index/{name}")


def _last_full_end_timestamp(stage: Stage, store: Store, writer: RepairIndexWriter) -> int:
    """End time of the newest full IndexFile left: what indexMsgTimestamp says once files fill."""
    best = 0
    for name in writer.files:
        path = stage.current(f"index/{name}")
        if path is None:
            continue
        with open(path, "rb") as fh:
            raw = fh.read(idx_fmt.INDEX_HEADER_SIZE)
        if len(raw) < idx_fmt.INDEX_HEADER_SIZE:
            continue
        header = INDEX_HEADER.unpack_from(raw, 0)
        if header[5] >= writer.entry_count:
            best = header[1]
    return best


# --- the checkpoint ----------------------------------------------------------------------------------

def _stage_checkpoint(stage: Stage, store: Store, *, version: str | None, logics: int | None = None,
                      index: int | None = None, confirm: int | None = None,
                      physic_cap: int | None = None, logics_cap: int | None = None,
                      index_cap: int | None = None, create: bool = True) -> None:
    path = store.checkpoint_path
    old = path.read_bytes() if path.is_file() else None
    if old is None and not create:
        return
    padded = (old or b"").ljust(40, b"\0")
    fields = list(CHECKPOINT_LONGS.unpack_from(padded, 0))
    if logics is not None:
        fields[1] = logics
    if index is not None:
        fields[2] = index
    if confirm is not None and version not in (None, VERSION_49):
        fields[4] = confirm
    if physic_cap is not None and fields[0] > physic_cap:
        fields[0] = physic_cap
    if logics_cap is not None and fields[1] > logics_cap:
        fields[1] = logics_cap
    if index_cap is not None and fields[2] > index_cap:
        fields[2] = index_cap
    fresh = checkpoint_bytes(*fields)
    # 4.x writes three longs and never touches the rest of the page
    width = 24 if version == VERSION_49 else 40
    new = fresh[:width] + (old[width:] if old is not None and len(old) > width else fresh[width:])
    if old is not None and len(old) < len(fresh):
        new = new.ljust(len(fresh), b"\0")
    if new == old:
        return
    target = stage.path("checkpoint")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(new)
    stage.mark_written("checkpoint")


# --- turning the stage into a plan -------------------------------------------------------------------

_QUEUE_KINDS = {k.directory: k for k in (CONSUME_QUEUE, BATCH_CONSUME_QUEUE)}


def _kind_of(rel: str) -> str:
    first = rel.split("/", 1)[0]
    if first == "abort.bak":
        return "abort"
    if first in ("commitlog", "consumequeue", "batchconsumequeue", "index", "checkpoint", "abort",
                 "compaction"):
        return first
    return "other"


def _cq_unit_delta(old: Path | None, new: Path | None, upf: int, ranges: list[list[int]],
                   kind: QueueKind = CONSUME_QUEUE) -> tuple[int, int]:
    """(units removed, units added) between two versions of a queue file, looking only at
    the units the changed byte ranges touch."""
    removed = added = 0
    unit = kind.unit_size
    limit = upf * unit
    for lo, hi in ranges:
        first, last = lo // unit, min(hi, limit) // unit + (1 if min(hi, limit) % unit else 0)
        if first >= last:
            continue
        a = _units_between(old, first, last, kind)
        b = _units_between(new, first, last, kind)
        changed = a != b
        removed += int((changed & kind.valid(a)).sum())
        added += int((changed & kind.valid(b)).sum())
    return removed, added


def _units_between(path: Path | None, first: int, last: int, kind: QueueKind) -> np.ndarray:
    """Units [first, last) of a queue file, zeros where the file has none."""
    raw = bytearray((last - first) * kind.unit_size)
    if path is not None:
        with open(path, "rb") as fh:
            fh.seek(first * kind.unit_size)
            data = fh.read(len(raw))
        raw[:len(data)] = data
    return np.frombuffer(bytes(raw), kind.dtype)


def _index_entry_delta(old: Path | None, new: Path | None, slots: int,
                       entries: int) -> tuple[int, int]:
    """(entries removed, entries added): entries are appended, so what differs is what follows
    the longest common prefix."""
    a = _index_entry_batches(old, slots, entries) if old is not None else iter(())
    b = _index_entry_batches(new, slots, entries) if new is not None else iter(())
    same = total_a = total_b = 0
    diverged = False
    pending_a = pending_b = None
    while True:
        if pending_a is None:
            pending_a = next(a, None)
            if pending_a is not None:
                total_a += len(pending_a)
                pending_a = pending_a.copy()
        if pending_b is None:
            pending_b = next(b, None)
            if pending_b is not None:
                total_b += len(pending_b)
                pending_b = pending_b.copy()
        if pending_a is None or pending_b is None:
            break
        if not diverged:
            n = min(len(pending_a), len(pending_b))
            mismatch = np.flatnonzero(pending_a[:n] != pending_b[:n])
            if len(mismatch):
                same += int(mismatch[0])
                diverged = True
            else:
                same += n
        n = min(len(pending_a), len(pending_b))
        pending_a = pending_a[n:] if len(pending_a) > n else None
        pending_b = pending_b[n:] if len(pending_b) > n else None
    for batch in a:
        total_a += len(batch)
    for batch in b:
        total_b += len(batch)
    return total_a - same, total_b - same


def build_plan(command: str, store: Store, stage: Stage, *, cl_ops: list[FileOp],
               extra_ops: list[FileOp], lost: list[str], notes: list[str], data_loss: bool,
               recovery: RecoveryPlan | None, options: dict, summary_extra: dict,
               index_geometry: tuple[int, int] | None = None) -> RepairPlan:
    """Compare the stage with the store: one operation per file that really changes."""
    ops: list[FileOp] = list(cl_ops)
    upf = store.cq_units_per_file
    slots, entries = index_geometry or (store.index_slots, store.index_entries)
    cq_removed = cq_added = idx_removed = idx_added = 0
    for rel in sorted(stage.staged | stage.deleted):
        original = store.root / rel
        old = original if original.is_file() else None
        new = stage.path(rel) if rel in stage.staged else None
        if old is None and new is None:
            continue
        kind = _kind_of(rel)
        if old is not None and new is not None:
            ranges = diff_ranges(old, new)
            if not ranges:
                new.unlink()
                continue
        else:
            ranges = diff_ranges(old, new)
        detail = {}
        reason = None
        if kind in _QUEUE_KINDS:
            queue_kind = _QUEUE_KINDS[kind]
            removed, added = _cq_unit_delta(
                old, new, store.bcq_units_per_file if queue_kind.batch else upf, ranges,
                queue_kind)
            cq_removed += removed
            cq_added += added
            detail = {"units_removed": removed, "units_added": added}
            if old is not None and new is not None and command != "rebuild-queues":
                reason = ("units of dispatched records written" if added and not removed else
                          "units pointing at or past the end removed" if removed and not added
                          else "units removed and written" if removed else
                          "stale bytes past the queue's end erased")
        elif kind == "index":
            removed, added = _index_entry_delta(old, new, slots, entries)
            idx_removed += removed
            idx_added += added
            detail = {"entries_removed": removed, "entries_added": added}
        old_size = old.stat().st_size if old is not None else None
        if new is None:
            ops.append(FileOp("delete", rel, kind, old_size, None, ranges,
                              _reason(kind, "delete", command), detail=detail))
        else:
            ops.append(FileOp("write", rel, kind, old_size, new.stat().st_size, ranges,
                              reason or _SERVICE_REASONS.get(rel)
                              or _reason(kind, "create" if old is None else "change", command),
                              stage_file=str(new), detail=detail))
    ops.extend(extra_ops)
    summary = {
        **_file_counts(ops),
        "cq_units_removed": cq_removed, "cq_units_added": cq_added,
        "index_entries_removed": idx_removed, "index_entries_added": idx_added,
    }
    summary.update(summary_extra)
    return RepairPlan(command, store.root, ops, summary, lost, notes, data_loss and bool(ops),
                      recovery, stage.root, options)


def _file_counts(ops: list[FileOp]) -> dict:
    return {"files_created": sum(1 for op in ops if op.action == "create"),
            "files_changed": sum(1 for op in ops if op.action == "change"),
            "files_deleted": sum(1 for op in ops if op.action == "delete"),
            "bytes_changed": sum(op.bytes_changed for op in ops if op.action == "change"),
            "bytes_deleted": sum(op.old_size or 0 for op in ops if op.action == "delete")}


_REASONS = {
    ("consumequeue", "delete"): "ConsumeQueue file past the recovered end",
    ("consumequeue", "create"): "new ConsumeQueue file for dispatched records",
    ("consumequeue", "change"): "ConsumeQueue units truncated / dispatched",
    ("batchconsumequeue", "delete"): "BatchConsumeQueue file past the recovered end",
    ("batchconsumequeue", "create"): "new BatchConsumeQueue file for dispatched records",
    ("batchconsumequeue", "change"): "BatchConsumeQueue units truncated / dispatched",
    ("index", "delete"): "IndexFile dropped (abnormal load, or rebuilt)",
    ("index", "create"): "IndexFile built by re-dispatch",
    ("index", "change"): "IndexFile continued / rebuilt",
    ("checkpoint", "change"): "checkpoint timestamps / confirm offset",
    ("checkpoint", "create"): "checkpoint (the broker creates a zeroed one)",
}
# the 5.x bookkeeping files recover writes (see _stage_5x_service_files)
_SERVICE_REASONS = {
    "abort.bak": "the 5.x start copies abort here (the crashed broker's PID)",
    "compaction/position-checkpoint": "compaction position checkpoint the 5.x shutdown persists",
    "compaction/position-checkpoint.bak": "the 5.x shutdown keeps the previous compaction "
                                          "position checkpoint",
}


def _reason(kind: str, action: str, command: str) -> str:
    if command == "rebuild-queues" and kind == "consumequeue":
        return {"delete": "ConsumeQueue file not produced by the rebuild",
                "create": "ConsumeQueue file regenerated from the CommitLog",
                "change": "ConsumeQueue file regenerated from the CommitLog"}[action]
    if command == "rebuild-index" and kind == "index":
        return {"delete": "IndexFile replaced by the rebuild",
                "create": "IndexFile regenerated from the CommitLog",
                "change": "IndexFile regenerated from the CommitLog"}[action]
    return _REASONS.get((kind, action), f"{kind} {action}")


# --- CommitLog operations ----------------------------------------------------------------------------

def _commitlog_ops(store: Store, *, cut: int, delete_names: list[str], erase_tail: bool,
                   pad: bool, reason: str) -> list[FileOp]:
    """Delete files past ``cut``; edit the others in place: erase the cut file's bytes past it
    and bring a file of the wrong size to the file size (one ``edit`` per file)."""
    ops = []
    size = store.commitlog.file_size
    where = "the recovered end" if reason == "recover" else "the cut"
    for seg in store.commitlog.segments:
        rel = _rel(store, seg.path)
        if seg.name in delete_names:
            ops.append(FileOp("delete", rel, "commitlog", seg.length, None,
                              [[0, seg.length]] if seg.length else [],
                              f"starts past {where} ({cut:,})"))
            continue
        new_size = size if pad and seg.length != size else seg.length
        why = []
        ranges = []
        if new_size > seg.length:
            why.append(f"padded with zeros to the file size {size:,} (the broker refuses to load "
                       "a short file)")
        elif new_size < seg.length:
            why.append(f"cut to the file size {size:,} (the broker refuses to load a longer "
                       "file)")
        zero_start = zero_end = min(seg.length, new_size)
        if erase_tail and seg.base_offset <= cut < seg.base_offset + max(size, seg.length):
            pos = cut - seg.base_offset
            with open(seg.path, "rb") as fh:
                fh.seek(pos)
                head = fh.read(8)
            if len(head) == 8 and head[4:8] == _BLANK_MAGIC:
                # the end-of-file blank record marks the end of a full file: it stays
                pos += 8
            end = min(data_end(seg.path, pos), new_size)
            if end > pos:
                zero_start, zero_end = pos, end
                ranges.append([pos, end])
                why.insert(0, f"bytes past {where} ({cut:,}) erased")
        if new_size < seg.length:
            ranges.append([new_size, seg.length])
        if why:
            ops.append(FileOp("edit", rel, "commitlog", seg.length, new_size, ranges,
                              "; ".join(why), start=zero_start, end=zero_end))
    return ops


POSITION_CHECKPOINT = "compaction/position-checkpoint"   # a key of _SERVICE_REASONS
# CompactionPositionMgr's JSON (fastjson, pretty) while no compaction topic has run
EMPTY_POSITION_CHECKPOINT = b'{\n\t"empty":true,\n\t"queueOffsetMap":{}\n}'


def _stage_bytes(stage: Stage, rel: str, data: bytes) -> None:
    target = stage.path(rel)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    stage.mark_written(rel)


def _stage_5x_service_files(stage: Stage, store: Store) -> set[str]:
    """The files a 5.x broker's start and clean shutdown leave besides the store proper.

    Both go through MixAll.string2File, which first copies the file's previous content into
    FILE.bak: the start writes its PID into ``abort`` (so ``abort.bak`` keeps the crashed broker's
    PID, or nothing when the start created the file), and the shutdown persists
    ``compaction/position-checkpoint`` (the loaded offsets again, the old text in ``.bak``)."""
    abort = store.root / "abort"
    _stage_bytes(stage, "abort.bak", abort.read_bytes() if abort.is_file() else b"")
    staged = {"abort.bak"}
    position = store.root / POSITION_CHECKPOINT
    if position.is_file():
        _stage_bytes(stage, POSITION_CHECKPOINT + ".bak", position.read_bytes())
        staged.add(POSITION_CHECKPOINT + ".bak")
    else:
        _stage_bytes(stage, POSITION_CHECKPOINT, EMPTY_POSITION_CHECKPOINT)
        staged.add(POSITION_CHECKPOINT)
    return staged


def _abort_op(store: Store) -> list[FileOp]:
    path = store.root / "abort"
    if not path.exists():
        return []
    size = path.stat().st_size
    return [FileOp("delete", "abort", "abort", size, None, [[0, size]] if size else [],
                   "the store is consistent again: the next start is a normal one")]


# --- recover ------------------------------------------------------------------------------------------

def _starts_with_zeros(path: Path) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(8)
    return len(head) == 8 and head == bytes(8)


def _unscanned(segment: Segment) -> FileVerdict:
    """A placeholder verdict: lets predict_recovery choose the start file without scanning."""
    return FileVerdict(segment.base_offset, segment.name, segment.base_offset, "end-of-file")


def plan_recover(store: Store, stage: Stage, *, mode: str = "auto", broker_version: str = "auto",
                 check_crc: bool = True, message_index_safe: bool = False,
                 force_verify_prop_crc: bool = False, reindex_all: bool = False,
                 keep_stale: bool = False, progress=None) -> RepairPlan:
    """The broker's startup recovery (spec §7), offline: see the module docstring.

    Abnormal recovery dispatches every record its scan accepts, so there the scan and the
    dispatch are one pass (:func:`judged_records`); normal recovery first predicts where the scan
    ends, then dispatches the (usually short) range the broker re-dispatches."""
    rules_options = dict(mode=mode, broker_version=broker_version, check_crc=check_crc,
                         message_index_safe=message_index_safe,
                         force_verify_prop_crc=force_verify_prop_crc)
    if store.dledger is not None:   # DLedger mode: DLedger's own recovery (mqtool.dledger_repair)
        from .dledger_repair import plan_dledger_recover
        return plan_dledger_recover(store, stage, mode=mode, keep_stale=keep_stale,
                                    progress=progress, options=rules_options)
    segments = store.commitlog.segments
    passport = store_passport(store)
    if broker_version == "auto":
        rules_options["broker_version"] = passport["recovery_rules"]
    first = predict_recovery(store, file_verdicts={s.base_offset: _unscanned(s) for s in segments},
                             **rules_options)
    version = first.broker_version
    abnormal = first.mode == "abnormal"
    upf = store.cq_units_per_file
    notes: list[str] = []
    lost: list[str] = []
    options = {**rules_options, "broker_version": version, "reindex_all": reindex_all,
               "keep_stale": keep_stale,
               "broker_version_from": "passport" if broker_version == "auto"
               else "--broker-version"}
    _fix_queue_file_sizes(stage, store, version, notes)
    if not segments:
        plan = _recover_without_commitlog(store, stage, first, notes, options)
        plan.passport = passport
        return plan

    # files the repair will most likely delete (an abnormal load's IndexFiles, preallocated
    # CommitLog files) are hashed for the backup by a thread while the scan runs
    digests = DigestCache()
    if stage.for_apply:
        digests.prefetch([seg.path for seg in segments[1:] if _starts_with_zeros(seg.path)]
                         + [store.root / "index" / name for name in first.index_files_deleted])
    ckpt = store.read_checkpoint() if store.checkpoint_path.is_file() else None
    index_ts = ckpt.index_msg_timestamp if ckpt is not None else 0
    min_offset = store.commitlog.min_offset
    states, max_phy_cq = _recover_queues(stage, store, upf)
    cq_writer = StagedConsumeQueueWriter(stage, upf)
    bupf = store.bcq_units_per_file
    batch_states, max_phy_bcq = _recover_queues(stage, store, bupf, BATCH_CONSUME_QUEUE)
    # getMaxPhyOffsetInConsumeQueue spans both kinds (a BatchConsumeQueue's is a record start)
    max_phy_cq = max(max_phy_cq, max_phy_bcq)
    bcq_writer = StagedBatchConsumeQueueWriter(stage, bupf,
                                               {q.topic for q in store.batch_consume_queues})
    stats = DispatchStats()
    schedule_loaded = not (abnormal and version == VERSION_49)
    setup = None
    if abnormal:
        # every record accepted from the start file on is dispatched, before the ConsumeQueue
        # truncation; the index goes in the same pass unless a kept IndexFile may reach past
        # the recovered end (then it is rebuilt under its name once that end is known)
        cq_from = index_from = first.start_offset
        kept = [s for s in read_index_states(store) if s.name not in first.index_files_deleted]
        index_inline = keep_stale or reindex_all or all(
            s.index_count <= 1 or s.end_phy_offset < first.start_offset for s in kept)
        if index_inline:
            setup = _setup_index(stage, store, deleted=list(first.index_files_deleted), cut=None,
                                 reindex_all=reindex_all, index_msg_timestamp=index_ts)
            if setup.dispatch_from is not None:
                index_from = min(index_from, setup.dispatch_from)
        _seed_writers(cq_writer, states, bcq_writer, batch_states)
        usable = segments[:-1] if (version != VERSION_49 and segments[-1].length == 0) \
            else segments
        start_index = next(i for i, seg in enumerate(usable) if seg.name == first.start_file)
        rules = BrokerRules(version, check_crc, force_verify_prop_crc, True)
        verdicts: dict[int, FileVerdict] = {}
        early = index_from < first.start_offset
        with _bar(progress, "scan + dispatch", _commitlog_bytes(store, first.start_offset)) as bar:
            records = judged_records(store, usable, start_index, rules, verdicts, bar)
            if early:
                # a full reindex starts before the start file: those records first
                records = itertools.chain(iter_records(store, index_from, first.start_offset),
                                          records)
            stats = dispatch(store, 0, 0, cq=cq_writer, cq_from=cq_from,
                             index=setup.writer if setup else None, index_from=index_from,
                             schedule_loaded=schedule_loaded, records=records, bcq=bcq_writer)
        rp = _predict(store, progress, file_verdicts=verdicts, **rules_options)
        po = rp.process_offset
        if setup is None:
            setup = _setup_index(stage, store, deleted=list(rp.index_files_deleted),
                                 cut=None if keep_stale else po, reindex_all=reindex_all,
                                 index_msg_timestamp=index_ts)
            index_from = min(index_from, setup.dispatch_from if setup.dispatch_from is not None
                             else po)
            if index_from < po:
                _dispatch_with_bar(store, index_from, po, progress, cq=None, cq_from=po,
                                   index=setup.writer, index_from=index_from)
    else:
        rp = _predict(store, progress, **rules_options)
        po = rp.process_offset
        # 4.9 and 5.0-5.3.1 truncate the queues before any dispatch (4.9 reputs in start());
        # 5.3.2+ dispatches inside recoverNormally, before truncating
        if max_phy_cq >= po and version != VERSION_532:
            _truncate_queues(stage, store, upf, po, states)
            _truncate_queues(stage, store, bupf, po, batch_states, BATCH_CONSUME_QUEUE)
        if version == VERSION_49:
            cq_from = max([min_offset] + [s.max_physic for s in states.values()])
        elif version == VERSION_532:
            cq_from = max(min_offset, max_phy_cq + 1)
        else:
            cq_from = po
        cq_from = min(cq_from, po)
        setup = _setup_index(stage, store, deleted=list(rp.index_files_deleted),
                             cut=None if keep_stale else po, reindex_all=reindex_all,
                             index_msg_timestamp=index_ts)
        index_from = cq_from
        if setup.dispatch_from is not None:
            index_from = min(index_from, setup.dispatch_from)
        index_from = min(index_from, po)
        _seed_writers(cq_writer, states, bcq_writer, batch_states)
        start = min(cq_from, index_from)
        if start < po:
            stats = _dispatch_with_bar(store, start, po, progress, cq=cq_writer, cq_from=cq_from,
                                       index=setup.writer, index_from=index_from,
                                       schedule_loaded=schedule_loaded, bcq=bcq_writer)
    notes[:0] = rp.notes
    if rp.refuses_to_start:
        notes.append("the broker would refuse to start (" + "; ".join(rp.refuses_to_start)
                     + "); mqtool resizes those files first")

    deleted_cl = list(rp.commitlog_files_deleted)
    if version != VERSION_49 and segments[-1].length == 0 and segments[-1].name not in deleted_cl:
        deleted_cl.append(segments[-1].name)
    cl_ops = _commitlog_ops(store, cut=po, delete_names=deleted_cl, erase_tail=not keep_stale,
                            pad=True, reason="recover")
    if stage.for_apply:
        digests.prefetch([store.commitlog.directory / name for name in deleted_cl]
                         + [store.root / "index" / name for name in rp.index_files_deleted])

    # abnormal recovery and 5.3.2+ truncate the queues after dispatching into them
    truncate_at = po if max_phy_cq >= po and (abnormal or version == VERSION_532) else None
    _settle_queues(stage, store, cq_writer, states, upf, truncate_at, keep_stale)
    _settle_queues(stage, store, bcq_writer, batch_states, bupf, truncate_at, keep_stale)
    _finish_index(stage, store, setup.writer)
    if stage.for_apply:
        digests.prefetch(stage.path(f"index/{name}") for name in setup.writer.created)
    regenerated = _regenerate_queues_with_holes(stage, store, upf, po, notes, progress)
    for start_gap, end_gap in commitlog_gaps(store):
        if start_gap < po:
            notes.append(f"CommitLog files are missing between {start_gap:,} and {end_gap:,} "
                         f"({end_gap - start_gap:,} bytes): the broker reads on past the gap, "
                         "so ConsumeQueue units and index entries pointing into it stay "
                         f"dangling; 'mqtool truncate --to {start_gap}' cuts the store there "
                         "instead")

    # the checkpoint the broker writes at shutdown
    index_value = None
    if setup.writer.rolled:
        index_value = setup.writer.index_msg_timestamp
    elif setup.rebuilt or reindex_all:
        index_value = _last_full_end_timestamp(stage, store, setup.writer)
    cap = None if keep_stale else _checkpoint_cap(store, stats, po, notes)
    _stage_checkpoint(stage, store, version=version, logics=stats.last_cq_timestamp,
                      index=index_value, confirm=rp.confirm_offset, physic_cap=cap,
                      logics_cap=cap, index_cap=cap)

    # what is lost
    data_loss = False
    if rp.messages_lost or rp.bytes_dropped:
        data_loss = True
        lost.append(f"{rp.messages_lost:,} message(s) at or past processOffset {po:,} "
                    f"({rp.bytes_dropped:,} bytes; first at {rp.first_lost_offset}; "
                    f"stop: {rp.stop_reason})")
    for name in deleted_cl:
        # what these files held is counted in the messages above (a preallocated file is empty)
        notes.append(f"commitlog/{name} is deleted: it starts past processOffset {po:,}")
    entries_lost = 0
    if setup.deleted and not reindex_all:
        idx_low = min(index_from, po)
        for name in setup.deleted:
            path = store.root / "index" / name
            if path.exists():
                entries_lost += _count_entries(
                    path, store.index_slots, store.index_entries,
                    lambda e: (e["phy_offset"] < idx_low) & (e["phy_offset"] >= min_offset))
    if entries_lost:
        data_loss = True
        lost.append(f"{entries_lost:,} index entr(y/ies) of the deleted IndexFile(s) point at "
                    f"messages before the re-dispatch start {index_from:,} and are not rebuilt "
                    "(--reindex-all rebuilds them)")
    if keep_stale and rp.index_entries_stale:
        notes.append(f"{rp.index_entries_stale:,} index entr(y/ies) still point past processOffset "
                     "(--keep-stale; queryMessage skips them)")
    if keep_stale:
        notes.append("--keep-stale: bytes past the recovered end are left as the broker leaves "
                     "them")
    extra = _recover_summary(rp)
    extra.update({"records_dispatched": stats.records, "cq_units_written": stats.cq_written,
                  "queues_regenerated": regenerated,
                  "index_entries_not_rebuilt": entries_lost,
                  "index_files_rebuilt_in_place": setup.rebuilt})
    service = _stage_5x_service_files(stage, store) if version != VERSION_49 else set()
    plan = build_plan("recover", store, stage, cl_ops=cl_ops, extra_ops=_abort_op(store),
                      lost=lost, notes=notes, data_loss=data_loss, recovery=rp, options=options,
                      summary_extra=extra)
    plan.digests = digests
    plan.passport = passport
    _drop_if_only(plan, service)
    return plan


def _drop_if_only(plan: RepairPlan, service: set[str]) -> None:
    """A store that needs no recovery is left alone: the broker's bookkeeping files are written
    only along with a real change, so a second run finds nothing to do."""
    if plan.ops and all(op.path in service for op in plan.ops):
        plan.ops = []
        plan.summary.update(_file_counts(plan.ops))


def _recover_without_commitlog(store: Store, stage: Stage, rp: RecoveryPlan, notes: list[str],
                               options: dict) -> RepairPlan:
    """recoverNormally/Abnormally without a CommitLog file: every ConsumeQueue is destroyed."""
    for queue in store.consume_queues:
        for seg in queue.segments:
            stage.delete(_queue_rel(queue.topic, queue.queue_id, seg.name))
    lost = []
    if rp.cq_units_truncated:
        lost.append(f"{rp.cq_units_truncated:,} ConsumeQueue unit(s): there is no CommitLog")
    return build_plan("recover", store, stage, cl_ops=[], extra_ops=_abort_op(store), lost=lost,
                      notes=list(rp.notes) + notes, data_loss=bool(rp.cq_units_truncated),
                      recovery=rp, options=options, summary_extra=_recover_summary(rp))


def _regenerate_queues_with_holes(stage: Stage, store: Store, upf: int, po: int, notes: list[str],
                                  progress) -> list[str]:
    """Beyond the broker: a queue with missing files is regenerated from the CommitLog."""
    holes = queues_with_holes(store)
    if not holes or not store.commitlog.segments:
        return []
    keys = set()
    for topic, queue_id, why in holes:
        keys.add((topic, queue_id))
        view = _queue_view(stage, store, topic, queue_id)
        for seg in view.segments:
            stage.delete(_queue_rel(topic, queue_id, seg.name))
    writer = StagedConsumeQueueWriter(stage, upf)
    low = store.commitlog.min_offset
    _dispatch_with_bar(store, low, po, progress, cq=writer, cq_from=low, index=None,
                       index_from=po, queues=keys)
    writer.close()
    regenerated = []
    for topic, queue_id, why in holes:
        written = list(stage.path(f"consumequeue/{topic}/{queue_id}").glob("*"))
        if not written:
            # no record of the queue below the recovered end: an empty queue (a truncation
            # deletes files and leaves the directory), nothing is missing
            continue
        for path in written:
            stage.mark_written(_queue_rel(topic, queue_id, path.name))
        regenerated.append(f"{topic}-{queue_id}")
        notes.append(f"{topic} queue {queue_id}: {why}; regenerated from the CommitLog")
    return regenerated


def _checkpoint_cap(store: Store, stats: DispatchStats, po: int, notes: list[str]) -> int | None:
    """Beyond the broker: checkpoint timestamps later than the newest message kept (a clock
    jump, a copied checkpoint) would make a later abnormal recovery start too late."""
    ckpt = store.read_checkpoint() if store.checkpoint_path.is_file() else None
    if ckpt is None:
        return None
    highest = max(ckpt.physic_msg_timestamp, ckpt.logics_msg_timestamp, ckpt.index_msg_timestamp)
    if stats.last_offset is not None and stats.last_timestamp is not None and \
            highest <= stats.last_timestamp:
        return None
    last = last_record_before(store, po)
    if last is None or highest <= last.store_timestamp:
        return None
    notes.append(f"checkpoint timestamps later than the newest kept message "
                 f"({last.store_timestamp}) are lowered to it")
    return last.store_timestamp


def _recover_summary(rp: RecoveryPlan) -> dict:
    return {"mode": rp.mode, "broker_version": rp.broker_version,
            "process_offset": rp.process_offset, "start_file": rp.start_file,
            "messages_removed": rp.messages_lost, "commitlog_bytes_dropped": rp.bytes_dropped}


# --- truncate -----------------------------------------------------------------------------------------

def record_boundaries_ok(store: Store, offset: int) -> tuple[bool, str]:
    """Is ``offset`` a place a CommitLog can end: a file start, a record start, or the end of the
    last record before a blank / unwritten space?"""
    seg = store.commitlog.segment_for(offset)
    if seg is None:
        if offset == store.commitlog.min_offset or any(
                s.base_offset + s.length == offset for s in store.commitlog.segments):
            return True, ""
        return False, f"no CommitLog file holds offset {offset:,}"
    if offset == seg.base_offset:
        return True, ""
    with MappedFile(seg.path) as mf:
        for event in scan_buffer(mf.data, seg.base_offset, name=seg.name, check_crc=False,
                                 resync=True):
            if event.offset == offset:
                return True, ""
            if type(event) is MessageRecord:
                if event.offset < offset < event.end:
                    return False, (f"offset {offset:,} is inside the record at "
                                   f"{event.offset:,} ({event.total_size} bytes); use "
                                   f"{event.offset:,} or {event.end:,}")
                if event.end == offset:
                    return True, ""
            elif event.offset > offset:
                break
    return False, f"offset {offset:,} is not at a record boundary"


def plan_truncate(store: Store, stage: Stage, *, to: int | None = None,
                  broker_version: str = "auto", mode: str = "auto", check_crc: bool = True,
                  force_verify_prop_crc: bool = False, progress=None) -> RepairPlan:
    """Cut the CommitLog at ``to`` (default: the broker's processOffset), with the ConsumeQueue
    units and index entries pointing at or past it."""
    rp = _predict(store, progress, mode=mode, broker_version=broker_version, check_crc=check_crc,
                  force_verify_prop_crc=force_verify_prop_crc)
    po = rp.process_offset
    cut = po if to is None else to
    if cut < 0:
        raise RepairError("--to must be >= 0")
    if cut > po:
        raise RepairError(f"--to {cut:,} is past the broker's recovered end {po:,}: the records "
                          "there would be dropped anyway (run 'mqtool recover')")
    if cut < store.commitlog.min_offset:
        raise RepairError(f"--to {cut:,} is before the first CommitLog file "
                          f"({store.commitlog.min_offset:,})")
    ok, why = record_boundaries_ok(store, cut)
    if not ok:
        raise RepairError(why)
    notes: list[str] = []
    lost: list[str] = []
    delete_names = [s.name for s in store.commitlog.segments if s.base_offset > cut]
    cl_ops = _commitlog_ops(store, cut=cut, delete_names=delete_names, erase_tail=True,
                            pad=False, reason="truncate")

    # messages removed: live records in [cut, po)
    removed = 0
    last_kept_ts = None
    for rec in iter_records(store, cut, po):
        removed += 1
    if cut > store.commitlog.min_offset:
        last = last_record_before(store, cut)
        last_kept_ts = last.store_timestamp if last is not None else None

    cq_units = 0
    for kind, _, kind_upf in queue_kinds(store):
        states, _ = _recover_queues(stage, store, kind_upf, kind)
        cq_units += _truncate_queues(stage, store, kind_upf, cut, states, kind)
        _finish_queues(stage, store, kind_upf, {k: s.end for k, s in states.items()},
                       keep_stale=False, kind=kind)

    ckpt = store.read_checkpoint() if store.checkpoint_path.is_file() else None
    setup = _setup_index(stage, store, deleted=[], cut=cut, reindex_all=False,
                         index_msg_timestamp=ckpt.index_msg_timestamp if ckpt else 0)
    if setup.dispatch_from is not None and setup.dispatch_from < cut:
        _dispatch_with_bar(store, setup.dispatch_from, cut, progress, cq=None, cq_from=cut,
                           index=setup.writer, index_from=setup.dispatch_from)
    _finish_index(stage, store, setup.writer)
    index_value = None
    if setup.rebuilt:
        index_value = (setup.writer.index_msg_timestamp if setup.writer.rolled
                       else _last_full_end_timestamp(stage, store, setup.writer))
    cap = last_kept_ts if last_kept_ts is not None else 0
    _stage_checkpoint(stage, store, version=rp.broker_version, index=index_value,
                      physic_cap=cap, logics_cap=cap, index_cap=cap, create=False)
    if removed:
        lost.append(f"{removed:,} message(s) in [{cut:,}, {po:,})")
    for name in delete_names:
        lost.append(f"commitlog/{name}: deleted (starts past {cut:,})")
    if rp.messages_lost:
        notes.append(f"{rp.messages_lost:,} record(s) past the recovered end {po:,} were already "
                     "lost to the broker; their bytes are erased too")
    plan = build_plan("truncate", store, stage, cl_ops=cl_ops, extra_ops=[], lost=lost,
                      notes=notes, data_loss=bool(removed) or bool(delete_names and cut < po),
                      recovery=rp, options={"to": cut}, summary_extra={
                          "cut": cut, "process_offset": po, "messages_removed": removed,
                          "cq_units_truncated": cq_units,
                          "index_files_rebuilt_in_place": setup.rebuilt})
    return plan


# --- rebuild-queues -----------------------------------------------------------------------------------

def plan_rebuild_queues(store: Store, stage: Stage, *, topic: str | None = None,
                        queue_id: int | None = None, cq_units: int | None = None,
                        broker_version: str = "auto", progress=None) -> RepairPlan:
    """ConsumeQueue files regenerated from the CommitLog records up to the recovered end."""
    rp = _predict(store, progress, broker_version=broker_version)
    po = rp.process_offset
    upf = cq_units or store.cq_units_per_file
    notes: list[str] = []

    def selected(t: str, q: int) -> bool:
        return (topic is None or t == topic) and (queue_id is None or q == queue_id)

    writer = StagedConsumeQueueWriter(stage, upf)
    batch_writer = StagedBatchConsumeQueueWriter(stage, store.bcq_units_per_file,
                                                 {q.topic for q in store.batch_consume_queues})
    # fresh files: the writers must not continue the store's copies
    existing = [(kind, q.topic, q.queue_id, s.name) for kind, queues, _ in queue_kinds(store)
                for q in queues for s in q.segments if selected(q.topic, q.queue_id)]
    for kind, t, q, name in existing:
        stage.delete(_queue_rel(t, q, name, kind))

    class _Selected:
        def __contains__(self, key):
            return selected(*key)

    stats = _dispatch_with_bar(store, store.commitlog.min_offset, po, progress, cq=writer,
                               cq_from=store.commitlog.min_offset, index=None, index_from=po,
                               queues=_Selected(), bcq=batch_writer)
    produced = set()
    for w in (writer, batch_writer):
        w.close()
        for t, q in w.queue_keys():
            produced.add((w.kind, t, q))
            for path in stage.path(f"{w.kind.directory}/{t}/{q}").glob("*"):
                stage.mark_written(_queue_rel(t, q, path.name, w.kind))
    # a selected queue without any record keeps its files: deleting them would reset its offsets
    for kind, t, q, name in existing:
        if (kind, t, q) not in produced:
            stage.deleted.discard(_queue_rel(t, q, name, kind))
    untouched = sorted({(t, q) for kind, t, q, _ in existing if (kind, t, q) not in produced})
    for t, q in untouched:
        notes.append(f"{t} queue {q}: no record in the CommitLog (up to {po:,}); files left as "
                     "they are")
    if topic is not None and not produced and not existing:
        raise RepairError(f"no record and no ConsumeQueue of topic {topic!r}"
                          + (f" queue {queue_id}" if queue_id is not None else ""))
    if not cq_units and not store.inferred_cq_units_per_file:
        notes.append(f"no ConsumeQueue file to infer the units per file from: {upf} (the "
                     "broker's default) is used; pass --cq-units to match the broker's "
                     "mappedFileSizeConsumeQueue")
    if cq_units and store.inferred_cq_units_per_file and cq_units != store.inferred_cq_units_per_file:
        notes.append(f"--cq-units {cq_units} differs from the store's {store.inferred_cq_units_per_file}"
                     " units per file: the broker must run with the same mappedFileSizeConsumeQueue")
    return build_plan("rebuild-queues", store, stage, cl_ops=[], extra_ops=[], lost=[],
                      notes=notes, data_loss=False, recovery=rp,
                      options={"topic": topic, "queue": queue_id, "cq_units": upf},
                      summary_extra={"process_offset": po, "records_scanned": stats.records,
                                     "queues_rebuilt": len(produced)})


# --- rebuild-index ------------------------------------------------------------------------------------

def plan_rebuild_index(store: Store, stage: Stage, *, slots: int | None = None,
                       entries: int | None = None, broker_version: str = "auto",
                       progress=None) -> RepairPlan:
    """Every IndexFile regenerated from the CommitLog records up to the recovered end."""
    rp = _predict(store, progress, broker_version=broker_version)
    po = rp.process_offset
    slots_given, entries_given = slots is not None, entries is not None
    slots = slots or store.index_slots
    entries = entries or store.index_entries
    if slots < 1 or entries < 2:
        raise RepairError("--slots must be >= 1 and --entries >= 2")
    setup = _setup_index(stage, store, deleted=[], cut=None, reindex_all=True,
                         index_msg_timestamp=0, slots=slots, entries=entries)
    stats = _dispatch_with_bar(store, store.commitlog.min_offset, po, progress, cq=None,
                               cq_from=po, index=setup.writer,
                               index_from=store.commitlog.min_offset)
    _finish_index(stage, store, setup.writer)
    _stage_checkpoint(stage, store, version=rp.broker_version,
                      index=setup.writer.index_msg_timestamp, create=False)
    notes = []
    if not store.index_files and not (slots_given and entries_given):
        notes.append(f"no IndexFile to infer the geometry from: {slots} slots x {entries} "
                     "entries (the broker's defaults unless given) are used; pass --slots and "
                     "--entries to match maxHashSlotNum/maxIndexNum")
    if (slots, entries) != (store.index_slots, store.index_entries):
        notes.append(f"new geometry {slots} slots x {entries} entries: the broker must run with "
                     "maxHashSlotNum/maxIndexNum set to match")
    return build_plan("rebuild-index", store, stage, cl_ops=[], extra_ops=[], lost=[],
                      notes=notes, data_loss=False, recovery=rp,
                      options={"slots": slots, "entries": entries},
                      summary_extra={"process_offset": po, "records_scanned": stats.records,
                                     "index_files": list(setup.writer.files)},
                      index_geometry=(slots, entries))


# --- apply ---------------------------------------------------------------------------------------------

def _kill_point(step: int) -> None:
    """Test hook: SIGKILL this process after ``step`` (-1: backup data saved, manifest not yet
    written; 0: journal written, nothing changed; n: n operations applied)."""
    wanted = os.environ.get(KILL_ENV)
    if wanted is not None and wanted.strip() == str(step):
        os.kill(os.getpid(), signal.SIGKILL)


def _zeros_sha256(length: int) -> str:
    import hashlib
    digest = hashlib.sha256()
    block = bytes(min(_CHUNK, max(length, 0)))
    remaining = length
    while remaining > 0:
        n = min(len(block), remaining)
        digest.update(block[:n])
        remaining -= n
    return digest.hexdigest()


def _op_record(op: FileOp, index: int, store_root: Path, backup_dir: Path | None,
               blob, digests: DigestCache | None = None) -> dict:
    """The manifest entry of one operation, with the original bytes saved first."""
    record = {"n": index, "op": op.op, "path": op.path, "kind": op.kind,
              "old_size": op.old_size, "new_size": op.new_size, "reason": op.reason,
              "ranges": op.ranges[:MAX_LISTED_RANGES], "saved": []}
    path = store_root / op.path
    blob_name = f"data/{index}.bin"
    if op.old_size is not None and path.exists():
        record["mode"] = path.stat().st_mode & 0o7777
    if op.op == "write":
        record["stage_file"] = op.stage_file
        known = digests.get(Path(op.stage_file)) if digests is not None else None
        record["new_sha256"] = known or bk.sha256_file(Path(op.stage_file))
        if op.old_size is not None:
            if blob is not None:
                record["saved"], record["old_sha256"] = bk.save_range(path, 0, op.old_size, blob,
                                                                      blob_name)
            else:
                record["old_sha256"] = bk.sha256_file(path)
    elif op.op == "delete":
        known = digests.get(path) if digests is not None else None
        if blob is not None:
            record["saved"], record["old_sha256"] = bk.save_range(path, 0, op.old_size or 0,
                                                                  blob, blob_name, known)
        else:
            record["old_sha256"] = known or bk.sha256_file(path)
    if op.op == "edit":
        # bytes [start, end) become zeros, then the file takes new_size
        record.update(start=op.start, end=op.end)
        record["old_file_sha256"], record["new_file_sha256"] = bk.in_place_digests(
            path, op.start, op.end, op.new_size)
        if blob is not None:
            saved, _ = bk.save_range(path, op.start, min(op.end, op.old_size), blob, blob_name)
            if op.new_size < op.old_size:
                tail, _ = bk.save_range(path, max(op.new_size, op.end), op.old_size, blob,
                                        blob_name)
                saved += tail
            record["saved"] = saved
    return record


def _apply_one(store_root: Path, record: dict) -> None:
    """One operation; running it again after it completed changes nothing."""
    path = store_root / record["path"]
    op = record["op"]
    if op == "write":
        staged = Path(record["stage_file"])
        if not staged.exists():
            if path.exists() and bk.sha256_file(path) == record["new_sha256"]:
                return
            raise bk.BackupError(f"{staged}: the staged content of {record['path']} is gone and the "
                                 "file does not hold it; undo the backup instead")
        if record.get("mode") is not None:
            os.chmod(staged, record["mode"])
        bk.fsync_file(staged)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(staged, path)
        except OSError as err:
            if err.errno != errno.EXDEV:
                raise
            tmp = path.with_name(f".{path.name}.mqtool-tmp")
            shutil.copyfile(staged, tmp)
            bk.fsync_file(tmp)
            os.replace(tmp, path)
            staged.unlink()
        fsync_dir(path.parent)
    elif op == "delete":
        try:
            path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(path.parent)
    elif op == "edit":
        with open(path, "r+b") as fh:
            size = os.fstat(fh.fileno()).st_size
            pos, end = record["start"], min(record["end"], size)
            fh.seek(pos)
            while pos < end:
                n = min(_CHUNK, end - pos)
                fh.write(bytes(n))
                pos += n
            if size != record["new_size"]:
                fh.truncate(record["new_size"])
            fh.flush()
            os.fsync(fh.fileno())
    else:
        raise bk.BackupError(f"unknown operation {op!r} in the manifest")


def _dirs_created(store_root: Path, ops: list[FileOp]) -> list[str]:
    created = set()
    for op in ops:
        if op.op != "write":
            continue
        parent = (store_root / op.path).parent
        while not parent.exists() and parent != store_root:
            created.add(parent.relative_to(store_root).as_posix())
            parent = parent.parent
    return sorted(created)


def apply_plan(plan: RepairPlan, *, backup_dir: Path | None, argv: list[str] | None = None,
               progress=None) -> Path | None:
    """Back up, then apply every operation of ``plan`` in order. ``backup_dir=None`` (a repaired
    copy made with --out) skips the backup and the journal."""
    store_root = Path(plan.store)
    ops = plan.ordered_ops()
    manifest = {"format": bk.MANIFEST_FORMAT, "command": plan.command, "argv": argv or [],
                "created": bk.utc_stamp(), "store": str(store_root.resolve()),
                "status": "prepared", "stage": str(plan.stage) if plan.stage else None,
                "data_loss": plan.data_loss, "summary": plan.summary, "lost": plan.lost,
                "dirs_created": _dirs_created(store_root, ops), "ops": []}
    blob = None
    if backup_dir is not None:
        backup_dir = Path(backup_dir)
        if backup_dir.exists() and any(backup_dir.iterdir()):
            raise RepairError(f"{backup_dir}: backup folder exists and is not empty")
        (backup_dir / "data").mkdir(parents=True, exist_ok=True)
    for i, op in enumerate(ops, 1):
        if backup_dir is not None:
            with open(backup_dir / f"data/{i}.bin", "wb") as blob:
                record = _op_record(op, i, store_root, backup_dir, blob, plan.digests)
                blob.flush()
                os.fsync(blob.fileno())
            if not record["saved"]:
                (backup_dir / f"data/{i}.bin").unlink()
        else:
            record = _op_record(op, i, store_root, None, None, plan.digests)
        manifest["ops"].append(record)
        if progress is not None:
            progress.update(1)
    if backup_dir is not None:
        fsync_dir(backup_dir / "data")
        _kill_point(-1)
        bk.write_json_atomically(backup_dir / bk.MANIFEST, manifest)
        fsync_dir(backup_dir.parent)
        bk.write_pending(store_root, backup_dir)
    _kill_point(0)
    for step, record in enumerate(manifest["ops"], 1):
        _apply_one(store_root, record)
        _kill_point(step)
    if backup_dir is not None:
        manifest["status"] = "applied"
        manifest["applied"] = bk.utc_stamp()
        bk.write_json_atomically(backup_dir / bk.MANIFEST, manifest)
        bk.clear_pending(store_root)
    if plan.stage is not None:
        shutil.rmtree(plan.stage, ignore_errors=True)
    return backup_dir


def resume_pending(store_root: Path) -> dict | None:
    """Finish a repair that was interrupted after its backup was complete. Returns its manifest
    (None when nothing was pending)."""
    pending = bk.read_pending(store_root)
    if pending is None:
        return None
    manifest_path = Path(pending["manifest"])
    manifest = bk.load_manifest(manifest_path.parent)
    manifest["backup_dir"] = str(manifest_path.parent)
    if manifest.get("status") == "applied":
        bk.clear_pending(store_root)
        return manifest
    for record in manifest["ops"]:
        _apply_one(Path(store_root), record)
    manifest["status"] = "applied"
    manifest["applied"] = bk.utc_stamp()
    manifest["resumed"] = True
    bk.write_json_atomically(manifest_path, manifest)
    bk.clear_pending(store_root)
    stage = manifest.get("stage")
    if stage:
        shutil.rmtree(stage, ignore_errors=True)
    manifest["backup_dir"] = str(manifest_path.parent)
    return manifest


def remove_stale_stages(store_root: Path) -> None:
    """Stage folders left by a repair killed before its backup was complete: nothing in the store
    was changed by them, and no journal refers to them."""
    pending = bk.read_pending(store_root)
    keep = None
    if pending is not None:
        try:
            keep = bk.load_manifest(Path(pending["manifest"]).parent).get("stage")
        except bk.BackupError:
            keep = None
    for path in Path(store_root).glob(bk.STAGE_PREFIX + "*"):
        if path.is_dir() and str(path) != keep:
            shutil.rmtree(path, ignore_errors=True)
    # a default backup folder without a manifest belongs to a repair killed while it was still
    # copying: it never changed the store
    for path in (Path(store_root) / bk.BACKUP_DIR).glob("*"):
        if path.is_dir() and not (path / bk.MANIFEST).exists():
            shutil.rmtree(path, ignore_errors=True)


# --- orchestration ----------------------------------------------------------------------------------

PLANNERS = {"recover": plan_recover, "truncate": plan_truncate,
            "rebuild-queues": plan_rebuild_queues, "rebuild-index": plan_rebuild_index}


@dataclass
class RepairResult:
    plan: RepairPlan | None
    status: str                      # nothing to do | planned | repaired
    backup: Path | None = None
    out: Path | None = None
    resumed: dict | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def data_loss(self) -> bool:
        lost = self.plan is not None and self.plan.data_loss and self.status != "nothing to do"
        return lost or bool(self.resumed and self.resumed.get("data_loss"))

    @property
    def exit_code(self) -> int:
        return 1 if self.data_loss else 0

    def to_dict(self) -> dict:
        data = {"status": self.status, "exit_code": self.exit_code, "data_loss": self.data_loss,
                "backup": str(self.backup) if self.backup else None,
                "out": str(self.out) if self.out else None, "warnings": self.warnings}
        if self.resumed is not None:
            data["resumed"] = {"backup": self.resumed.get("backup_dir"),
                               "command": self.resumed.get("command"),
                               "data_loss": self.resumed.get("data_loss"),
                               "summary": self.resumed.get("summary")}
        if self.plan is not None:
            data.update(self.plan.to_dict())
        return data


def _copy_store(source: Path, dest: Path) -> None:
    ignore = shutil.ignore_patterns(bk.BACKUP_DIR, bk.STAGE_PREFIX + "*", bk.PENDING)
    shutil.copytree(source, dest, ignore=ignore, dirs_exist_ok=True)


def refuse_if_locked(root: Path) -> None:
    store_lock = Path(root) / "lock"
    from .store import lock_holder
    if store_lock.is_file() and lock_holder(store_lock):
        raise StoreLockedError(f"{root}: a live process (a running broker?) holds the store's "
                               "lock file; stop it before repairing the store")


def _check_backup_dir(store_root: Path, backup_dir: Path) -> Path:
    backup_dir = backup_dir.absolute()
    if backup_dir.exists() and (not backup_dir.is_dir() or any(backup_dir.iterdir())):
        raise RepairError(f"--backup-dir {backup_dir}: exists and is not an empty folder")
    for data_dir in ("commitlog", "consumequeue", "index", "batchconsumequeue"):
        inside = (store_root / data_dir).resolve()
        if backup_dir.resolve() == inside or inside in backup_dir.resolve().parents:
            raise RepairError(f"--backup-dir {backup_dir}: inside {data_dir}/, which the broker "
                              "loads; choose a folder outside the store's data directories")
    return backup_dir


def run_repair(command: str, store_path: Path, *, dry_run: bool = False,
               backup_dir: Path | None = None, out: Path | None = None,
               store_options: dict | None = None, progress=None, argv=None,
               **options) -> RepairResult:
    """Plan ``command`` on a store and, unless ``dry_run``, back up and apply it (on a copy with
    ``out``). Refuses (exit 3) a store whose lock a live process holds."""
    store_options = store_options or {}
    source = Path(store_path).absolute()
    Store.refuse_unexplained_layout(source, command)
    if Store(source, **store_options).is_bare_commitlog:
        raise RepairError(f"{source}: a bare CommitLog directory; {command} needs the store root "
                          "(the folder holding commitlog/, consumequeue/, index/, checkpoint)")
    warnings: list[str] = []
    locked = (source / "lock").is_file() and Store(source, **store_options).lock_held()
    if out is not None:
        out = Path(out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise RepairError(f"--out {out}: exists and is not an empty folder")
        if out.resolve() == source.resolve() or source.resolve() in out.resolve().parents:
            raise RepairError("--out must be outside the store")
        if locked:
            warnings.append(f"{source}: a live process holds the lock; the copy may be "
                            "inconsistent")
    elif locked and not dry_run:
        raise StoreLockedError(f"{source}: a live process (a running broker?) holds the store's "
                               f"lock file; refusing to {command} it (stop the broker, or use "
                               "--dry-run / --out)")
    elif locked:
        warnings.append(f"{source}: a live process holds the lock; the plan may be stale")

    if backup_dir is not None and not dry_run and out is None:
        backup_dir = _check_backup_dir(source, Path(backup_dir))
    resumed = None
    if not dry_run and out is None:
        resumed = resume_pending(source)
        remove_stale_stages(source)
    elif bk.read_pending(source) is not None:
        warnings.append("an interrupted repair is pending; it is finished before anything else "
                        "when a repair runs without --dry-run")
    target = source
    if out is not None and not dry_run:
        out.mkdir(parents=True, exist_ok=True)
        _copy_store(source, out)
        target = out
    stamp = bk.utc_stamp()
    if dry_run:
        stage_root = Path(tempfile.mkdtemp(prefix="mqtool-stage-"))
    else:
        stage_root = target / f"{bk.STAGE_PREFIX}{stamp}"
    stage = Stage(target, stage_root, for_apply=not dry_run)
    try:
        store = Store(target, **store_options)
        plan = PLANNERS[command](store, stage, progress=progress, **options)
    except BaseException:
        stage.cleanup()
        raise
    try:
        return _finish_repair(plan, stage, target, dry_run=dry_run, out=out,
                              backup_dir=backup_dir, stamp=stamp, argv=argv, resumed=resumed,
                              warnings=warnings)
    finally:
        plan.digests.close()


def _finish_repair(plan: RepairPlan, stage: Stage, target: Path, *, dry_run: bool,
                   out: Path | None, backup_dir: Path | None, stamp: str, argv, resumed,
                   warnings: list[str]) -> RepairResult:
    if plan.nothing_to_do:
        stage.cleanup()
        return RepairResult(plan, "nothing to do", out=out if out is not None and not dry_run
                            else None, resumed=resumed, warnings=warnings)
    if dry_run:
        stage.cleanup()
        plan.stage = None
        return RepairResult(plan, "planned", resumed=resumed, warnings=warnings)
    if out is not None:
        apply_plan(plan, backup_dir=None, argv=argv)
        return RepairResult(plan, "repaired", out=out, resumed=resumed, warnings=warnings)
    if backup_dir is None:
        backup_dir = target / bk.BACKUP_DIR / stamp
    try:
        used = apply_plan(plan, backup_dir=backup_dir, argv=argv)
    except BaseException:
        if bk.read_pending(target) is None:
            stage.cleanup()
        raise
    return RepairResult(plan, "repaired", backup=used, resumed=resumed, warnings=warnings)


def run_undo(backup: Path, *, force: bool = False, dry_run: bool = False) -> bk.UndoReport:
    def check(root: Path) -> None:
        Store.refuse_unexplained_layout(root, "undo")
        if not dry_run:
            refuse_if_locked(root)
    return bk.undo_backup(backup, force=force, dry_run=dry_run, check_lock=check)


__all__ = ["RepairPlan", "FileOp", "Stage", "RepairResult", "RepairError", "run_repair",
           "run_undo", "plan_recover", "plan_truncate", "plan_rebuild_queues",
           "plan_rebuild_index", "apply_plan", "resume_pending", "query_index",
           "query_message_offsets", "dispatch", "iter_records", "StagedConsumeQueueWriter",
           "RepairIndexWriter", "KILL_ENV"]
