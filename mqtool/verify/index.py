"""IndexFile structure checked with numpy over whole files: header, hash slots and chains, entries
(their order, their reach into the CommitLog), and the entries no key lookup can reach."""
from __future__ import annotations

import array
import collections
import functools
import os
from dataclasses import dataclass

import numpy as np

from ..errors import ParseError
from ..formats import indexfile as idx_fmt
from ..recovery import INDEX_ENTRY_DTYPE, INDEX_HEADER_DTYPE
from ..scan import message_at, native
from ..store import Store
from ..vocabulary import ERROR, WARNING
from .findings import _Sink, _finding
from .context import _IndexInfo
from .commitlog import _KeyHashes
from .queues import _inside_segments


_MAX_CHAIN_WALK_ENTRIES = 5_000_000   # the exact walk keeps ~17 bytes an entry
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


@dataclass
class _EntryExtent:
    """Where an IndexFile's entries point, gathered a chunk at a time."""

    first_phy: int | None = None
    last_phy: int | None = None
    in_order: bool = True           # CommitLog offsets never decrease entry to entry
    live_lo: int | None = None      # the entries at or past the CommitLog's first offset
    live_hi: int | None = None
    inside_lo: int | None = None    # ... that also land inside a CommitLog file
    inside_hi: int | None = None
    outside: int = 0                # entries pointing where no CommitLog file is


def _lower(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)


def _higher(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)


def _scan_index_entries(fd: int, entries_start: int, n: int, min_offset: int, starts, ends,
                        rel: str, slots: int, deferred: list) -> _EntryExtent:
    """The entries' CommitLog offsets, ``_INDEX_CHUNK`` entries at a time: their extent and
    order, and (into ``deferred``, up to the listing cap) the entries that point where no
    CommitLog file is."""
    extent = _EntryExtent()
    for lo in range(0, n, _INDEX_CHUNK):
        hi = min(n, lo + _INDEX_CHUNK)
        chunk = _read_entries(fd, entries_start, lo, hi)
        real = np.arange(lo, lo + len(chunk)) >= 1
        phys = chunk["phy_offset"][real].astype(np.int64)
        if len(phys) == 0:
            continue
        if extent.first_phy is None:
            extent.first_phy = int(phys[0])
        previous = extent.last_phy
        extent.last_phy = int(phys[-1])
        if (previous is not None and phys[0] < previous) or np.any(np.diff(phys) < 0):
            extent.in_order = False
        live = phys >= min_offset
        outside = (phys < 0) | (live & ~_inside_segments(phys, starts, ends))
        first_number = lo + int(np.argmax(real))
        for j in np.flatnonzero(outside).tolist():
            extent.outside += 1
            if extent.outside <= _MAX_LISTED_INDEX:
                deferred.append(_finding(
                    "IDX_DANGLING", rel, idx_fmt.entry_position(slots, first_number + j),
                    f"entry {first_number + j} points at CommitLog offset {int(phys[j])}, "
                    f"where no CommitLog file is", commitlog_offset=int(phys[j])))
        if live.any():
            extent.live_lo = _lower(extent.live_lo, int(phys[live].min()))
            extent.live_hi = _higher(extent.live_hi, int(phys[live].max()))
        good = phys[live & ~outside]
        if len(good):
            extent.inside_lo = _lower(extent.inside_lo, int(good.min()))
            extent.inside_hi = _higher(extent.inside_hi, int(good.max()))
    return extent


def _check_header_against_entries(store: Store, rel: str, header, extent: _EntryExtent,
                                  sink: _Sink) -> None:
    """The header's begin/end offsets against the first and last entries, and its begin/end
    timestamps against the records those entries point at."""
    if extent.first_phy is None:
        return
    first_phy, last_phy = extent.first_phy, extent.last_phy
    checks = ((16, "beginPhyOffset", int(header["begin_phy_offset"]), first_phy, WARNING),
              (24, "endPhyOffset", int(header["end_phy_offset"]), last_phy, ERROR))
    for pos, name, value, actual, severity in checks:
        if value != actual:
            sink.add(_finding("IDX_HEADER", rel, pos,
                              f"{name} {value} but the {'first' if pos == 16 else 'last'} "
                              f"entry points at {actual}", severity=severity))
    for pos, name, value, phy in ((0, "beginTimestamp", int(header["begin_timestamp"]), first_phy),
                                  (8, "endTimestamp", int(header["end_timestamp"]), last_phy)):
        try:
            record = message_at(store.commitlog, phy, check_crc=False)
        except ParseError:
            continue
        if record.store_timestamp != value:
            sink.add(_finding("IDX_HEADER", rel, pos,
                              f"{name} {value} but the record at {phy} was stored at "
                              f"{record.store_timestamp}"))


def _check_index_structure(store: Store, info, starts, ends, min_offset: int, sink: _Sink,
                           deferred: list, blind: list,
                           later: list | None = None) -> _IndexInfo | None:
    """Header and entries of one IndexFile, read in chunks (memory: the entries' CommitLog
    offsets a chunk at a time, not the 420 MB file): what the CommitLog files' checks need to
    join its entries, and the findings of its header and of where its entries point.

    Its hash slots and chains (:func:`_check_index_chains`) feed no CommitLog check: given
    ``later``, they are appended to it as a call to make once the CommitLog checks are under way
    (verify runs them while its workers check the files), else checked here."""
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
        count = int(header["index_count"])
        entries_start = idx_fmt.entry_position(slots, 0)
        available = max(0, (info.length - entries_start) // idx_fmt.INDEX_ENTRY_SIZE)
        n = max(0, min(count, entries, available))
        if count < 1 or count > entries:
            sink.add(_finding("IDX_HEADER", rel, 36, f"indexCount {count} is outside 1..{entries}"))
        chains = functools.partial(_check_index_chains, str(info.path), info.length, rel, slots,
                                   header, n, sink)
        extent = _scan_index_entries(fd, entries_start, n, min_offset, starts, ends, rel, slots,
                                     deferred)
        if extent.outside > _MAX_LISTED_INDEX:
            sink.add_suppressed("IDX_DANGLING", extent.outside - _MAX_LISTED_INDEX)
        if later is not None and extent.in_order:
            later.append(chains)
        else:
            # a file out of order is also checked entry by entry below: its chain findings come
            # first, as one pass over the file lists them
            chains()
        _check_header_against_entries(store, rel, header, extent, sink)
        if extent.live_lo is None:
            return None
        if not extent.in_order:
            # not in CommitLog order: cannot be merged with the scan; check entries one by one,
            # and do not look for the keys of the records it covers (its entries are not pulled)
            _check_index_entries_slowly(store, rel, _read_entries(fd, entries_start, 0,
                                                                  min(n, 10_001)),
                                        entries_start, sink)
            if extent.inside_lo is not None:
                blind.append((extent.inside_lo, extent.inside_hi))
            return None
    return _IndexInfo(info.name, rel, str(info.path), slots, entries_start, n, extent.live_lo,
                      extent.last_phy)


def _check_index_chains(path: str, length: int, rel: str, slots: int, header, n: int,
                        sink: _Sink) -> None:
    """The hash slots and chains of an IndexFile of ``n`` readable entries (``header`` already
    read): slot values and the header's count of used slots, every entry's link and timeDiff,
    and, when the chains are not the regular shape the broker builds, the entries no lookup of
    their own key reaches. Memory: the slots, a bitmap and the hash column, 5 bytes an entry."""
    count = int(header["index_count"])
    entries_start = idx_fmt.entry_position(slots, 0)
    with open(path, "rb") as fh:
        fd = fh.fileno()
        slot_values = _check_slots(fd, length, rel, slots, header, count, sink)
        if native.core is not None and native.core.index_chains_clean(
                path, entries_start, n, np.ascontiguousarray(slot_values), count, slots):
            return      # the usual answer, compiled: nothing below would find anything
        links = _check_entry_links(fd, entries_start, n, count, slots, rel, sink)
        if n > 1 and not links.regular_from(slot_values, n, slots):
            _report_unreachable(fd, rel, entries_start, slot_values, links.hashes, n, count,
                                slots, sink)


def _check_slots(fd: int, length: int, rel: str, slots: int, header, count: int,
                 sink: _Sink) -> np.ndarray:
    """The hash slots: the header's count of used slots, and slots pointing past indexCount."""
    n_slots = max(0, min(slots, (length - idx_fmt.INDEX_HEADER_SIZE) // 4))
    slot_values = np.frombuffer(os.pread(fd, 4 * n_slots, idx_fmt.INDEX_HEADER_SIZE),
                                ">i4").astype(np.int32)
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
    return slot_values


class _Links:
    """The entries' hashes and which entries a later entry links to, while the chains keep the
    regular shape: every entry referenced exactly once (by its slot or one later entry of the
    same slot), links going strictly backwards, no negative timeDiff. Then each chain is a path
    from its slot's head and every entry is found by its own hash."""

    def __init__(self, n: int):
        self.hashes = np.zeros(n, dtype=np.int32)
        self.referenced = np.zeros(n, dtype=bool)
        self.referenced_count = 0
        self.regular = True

    def add(self, numbers, h, prev, td, real, bad_prev, slots: int) -> None:
        if not self.regular:
            return
        has_prev = real & (prev > 0)
        backwards = has_prev & (prev < numbers)
        targets = prev[backwards]
        if (bad_prev.any() or np.any(has_prev & ~backwards) or np.any(td[real] < 0)
                or np.any(h[real] < 0)
                or np.any(self.hashes[targets] % slots != h[backwards] % slots)
                or self.referenced[targets].any()):
            self.regular = False
            return
        self.referenced[targets] = True
        self.referenced_count += len(targets)
        # fewer new marks than targets: an entry is the target of two links
        if np.count_nonzero(self.referenced) != self.referenced_count:
            self.regular = False

    def regular_from(self, slot_values: np.ndarray, n: int, slots: int) -> bool:
        """Whether the slots' heads complete the regular shape (each head hashes to its slot,
        no entry held twice, every entry reached)."""
        head_slots = np.flatnonzero((slot_values > 0) & (slot_values < n))
        heads = slot_values[head_slots]
        regular = self.regular and not (self.referenced[heads].any()
                                        or np.any(self.hashes[heads] % slots != head_slots))
        self.referenced[heads] = True
        if regular and np.count_nonzero(self.referenced) != self.referenced_count + len(heads):
            regular = False      # two slots hold the same entry
        return regular and bool(self.referenced[1:].all())


def _check_entry_links(fd: int, entries_start: int, n: int, count: int, slots: int, rel: str,
                       sink: _Sink) -> _Links:
    """Every entry's prev_index and timeDiff, ``_INDEX_CHUNK`` entries at a time: links past
    indexCount or looping, negative timeDiffs (lookups stop there), and the chains' shape."""
    links = _Links(n)
    listed = collections.Counter()
    for lo in range(0, n, _INDEX_CHUNK):
        hi = min(n, lo + _INDEX_CHUNK)
        chunk = _read_entries(fd, entries_start, lo, hi)
        numbers = np.arange(lo, lo + len(chunk))
        h = chunk["key_hash"].astype(np.int32)
        links.hashes[lo:lo + len(chunk)] = h
        prev = chunk["prev_index"].astype(np.int64)
        td = chunk["time_diff"]
        real = numbers >= 1
        bad_prev = real & ((prev < 0) | (prev > count) | ((prev >= numbers) & (prev != 0)))
        for i in np.flatnonzero(bad_prev).tolist():
            if listed["prev"] < _MAX_LISTED_INDEX:
                listed["prev"] += 1
                sink.add(_finding("IDX_DANGLING", rel, idx_fmt.entry_position(slots, lo + i),
                                  f"entry {lo + i} has prev_index {int(prev[i])}: "
                                  + ("the chain loops" if 0 < prev[i] <= count
                                     else "past indexCount")))
        for i in np.flatnonzero(real & (td < 0)).tolist():
            if listed["td"] < _MAX_LISTED_INDEX:
                listed["td"] += 1
                sink.add(_finding("IDX_DANGLING", rel, idx_fmt.entry_position(slots, lo + i),
                                  f"entry {lo + i} has a negative timeDiff {int(td[i])}: "
                                  f"lookups stop there"))
        links.add(numbers, h, prev, td, real, bad_prev, slots)
    return links


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
