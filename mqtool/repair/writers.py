"""The writers a repair stages files with: :mod:`mqtool.writer`'s ConsumeQueue, BatchConsumeQueue
and IndexFile writers, continuing the store's own files in the stage instead of starting empty."""
from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from ..codec import INDEX_HEADER
from ..formats import indexfile as idx_fmt
from ..queue_recovery import BATCH_CONSUME_QUEUE, CONSUME_QUEUE, QueueKind
from ..writer import BatchConsumeQueueWriter, ConsumeQueueWriter, IndexWriter, offset_file_name
from .files import _queue_rel
from .transaction import Stage, sparse_copy


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
        if hasattr(mmap, "MADV_HUGEPAGE"):
            # keys land on random slots of a 20 MB table: 2 MiB pages fault ~500x less often
            # than 4 KiB ones (a quarter of putting the keys); only touched pages are allocated
            buf.madvise(mmap.MADV_HUGEPAGE)
        if seed is not None:
            # the broker's IndexFile is a 420 MB mapping holding a few dozen MB: a plain copy
            # would write (and the backup fsync) all of it, and the store would keep it dense
            sparse_copy(seed, path)
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
