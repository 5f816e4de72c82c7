"""IndexFiles in a repair: reading the store's files (state, entries), the broker's key lookup over
them, and setting up / finishing the staged IndexFiles a recover, truncate or rebuild writes."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..codec import INDEX_HEADER
from ..formats import indexfile as idx_fmt
from ..recovery import INDEX_ENTRY_DTYPE
from ..query import JAVA_LONG_MAX, MAX_MSGS_NUM_BATCH, IndexSet, broker_query_message
from ..store import Store
from .transaction import Stage
from .writers import RepairIndexWriter


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


def _written_entries(fh, slots: int, entries_per_file: int) -> int:
    """How many entries (1 .. indexCount-1) an open IndexFile holds: its header's count, capped
    by the file's size and geometry."""
    header = os.pread(fh.fileno(), idx_fmt.INDEX_HEADER_SIZE, 0)
    if len(header) < idx_fmt.INDEX_HEADER_SIZE:
        return 0
    available = max(0, (os.fstat(fh.fileno()).st_size - idx_fmt.entry_position(slots, 1))
                    // idx_fmt.INDEX_ENTRY_SIZE)
    return max(0, min(INDEX_HEADER.unpack_from(header, 0)[5] - 1, available,
                      entries_per_file - 1))


def _index_entry_batches(path: Path, slots: int, entries_per_file: int):
    """The written entries (1 .. indexCount-1) of an IndexFile, in batches read into one reused
    array: a full default-geometry file has 20 million of them (400 MB)."""
    with open(path, "rb") as fh:
        n = _written_entries(fh, slots, entries_per_file)
        first = idx_fmt.entry_position(slots, 1)
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
