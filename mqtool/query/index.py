"""IndexFiles as the broker reads them: one file's hash slots and chains (with the broker's own
selection and mqtool's exact walk, which stops at damage), and the set of files walked newest
first."""
from __future__ import annotations

from dataclasses import dataclass

from .. import codec
from ..formats import codecs
from ..formats import indexfile as idx_fmt
from ..store import CommitLog, IndexFileInfo, MappedFile, Store
from ..scan.reader import _random_access


JAVA_LONG_MAX = 2 ** 63 - 1
# MessageStoreConfig.maxMsgsNumBatch: queryOffset never returns more
MAX_MSGS_NUM_BATCH = 64

_INDEX_HEADER = codec.INDEX_HEADER
_INDEX_SLOT = codec.INDEX_SLOT
_INDEX_ENTRY = codec.INDEX_ENTRY


# --- IndexFiles ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChainProblem:
    """Damage met while walking a hash chain; the walk stopped there."""

    file: str
    entry: int
    # loop | pointer-past-count | pointer-past-file | forward-pointer | negative-time
    kind: str
    detail: str

    def to_dict(self) -> dict:
        return {"file": self.file, "entry": self.entry, "kind": self.kind, "detail": self.detail}


@dataclass(frozen=True)
class IndexHit:
    file: str
    entry: int
    phy_offset: int
    index_time: int     # beginTimestamp + timeDiff * 1000: the broker's idea of the store time


class IndexFile:
    """One IndexFile, mapped read-only. A lookup reads the header, one slot and the entries of
    one chain; nothing else of the file is touched, whatever its size."""

    def __init__(self, info: IndexFileInfo, slots: int, entries: int):
        self.name = info.name
        self.path = info.path
        self.slots = slots
        self.entries = entries
        self._mapped = MappedFile(info.path)
        self.data = self._mapped.data
        self.size = self._mapped.size
        _random_access(self.data)
        self.problems: list[str] = []
        self.entries_read = 0           # what lookups touched, for the curious and benchmarks
        self.header_ok = self.size >= idx_fmt.INDEX_HEADER_SIZE
        if self.header_ok:
            (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
             self.end_phy_offset, self.hash_slot_count, self.index_count) = \
                _INDEX_HEADER.unpack_from(self.data, 0)
        else:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count = self.index_count = 0
            self.problems.append(f"{self.size} bytes: too short for the 40-byte header")
        expected = idx_fmt.index_file_size(slots, entries)
        if self.header_ok and self.size != expected:
            self.problems.append(f"{self.size} bytes, {expected} expected for {slots} slots and "
                                 f"{entries} entries")
        self._entries_start = idx_fmt.entry_position(slots, 0)
        self.readable_slots = max(0, min(slots, (self.size - idx_fmt.INDEX_HEADER_SIZE)
                                         // idx_fmt.HASH_SLOT_SIZE))
        self.readable_entries = max(0, min(entries, (self.size - self._entries_start)
                                           // idx_fmt.INDEX_ENTRY_SIZE))
        if self.header_ok and self.index_count > entries:
            self.problems.append(f"indexCount {self.index_count} exceeds the {entries} entries")

    def close(self) -> None:
        self._mapped.close()

    @property
    def used(self) -> bool:
        """Holds at least one entry (indexCount starts at 1)."""
        return self.header_ok and self.index_count > 1

    def is_time_matched(self, begin: int, end: int) -> bool:
        """IndexFile.isTimeMatched."""
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or b <= begin <= e or b <= end <= e

    def _slot(self, key_hash: int) -> int:
        slot = key_hash % self.slots
        if slot >= self.readable_slots:
            return 0
        return _INDEX_SLOT.unpack_from(self.data, idx_fmt.slot_position(slot))[0]

    def _entry(self, number: int):
        self.entries_read += 1
        return _INDEX_ENTRY.unpack_from(self.data, self._entries_start
                                        + number * idx_fmt.INDEX_ENTRY_SIZE)

    def _bad_pointer(self, key_hash: int, pointer_from: int | None, number: int, kind: str,
                     why: str) -> ChainProblem:
        if pointer_from is None:
            return ChainProblem(self.name, number, kind, f"slot {key_hash % self.slots} points "
                                                         f"at entry {number}, {why}")
        return ChainProblem(self.name, pointer_from, kind,
                            f"entry {pointer_from} points at entry {number}, {why}")

    def chain(self, key_hash: int, problems: list[ChainProblem]) -> list[IndexHit]:
        """Every entry of the key's chain whose hash equals ``key_hash``, newest first, without
        the broker's time window. Stops (and records why) at a pointer that is not to an
        older entry, so damaged chains cannot loop."""
        hits: list[IndexHit] = []
        if not self.used:
            return hits
        count = self.index_count
        number = self._slot(key_hash)
        pointer_from = None     # the entry whose prev pointer led to ``number`` (None: the slot)
        while number > 0:
            if number > count:
                problems.append(self._bad_pointer(key_hash, pointer_from, number,
                                                  "pointer-past-count",
                                                  f"past indexCount {count}"))
                return hits
            if pointer_from is not None and number >= pointer_from:
                kind = "loop" if number == pointer_from else "forward-pointer"
                problems.append(self._bad_pointer(key_hash, pointer_from, number, kind,
                                                  "not at an older one"))
                return hits
            if number >= self.readable_entries:
                problems.append(ChainProblem(self.name, number, "pointer-past-file",
                                             f"entry {number} lies past the end of the file"))
                return hits
            entry_hash, phy_offset, time_diff, prev = self._entry(number)
            if time_diff < 0:
                problems.append(ChainProblem(self.name, number, "negative-time",
                                             f"entry {number} has a negative time difference "
                                             f"{time_diff}"))
                return hits
            if entry_hash == key_hash:
                hits.append(IndexHit(self.name, number, phy_offset,
                                     self.begin_timestamp + time_diff * 1000))
            pointer_from, number = number, prev
        return hits

    def broker_select(self, key_hash: int, max_num: int, begin: int, end: int,
                      found: list[int], problems: list[ChainProblem]) -> None:
        """IndexFile.selectPhyOffset, step for step (the broker reads entries through the mapped
        buffer, so a pointer past the file is an exception that ends this file's walk). In a
        loop the broker goes round until maxNum offsets are collected, duplicates included; a
        loop that adds nothing in a round it would walk forever: that is cut and reported."""
        if not self.used:
            return
        count = self.index_count
        number = self._slot(key_hash)
        if number <= 0 or number > count:
            return
        seen: dict[int, int] = {}   # entry -> offsets collected when it was last visited
        while True:
            if len(found) >= max_num:
                return
            if number >= self.readable_entries:
                problems.append(ChainProblem(self.name, number, "pointer-past-file",
                                             f"entry {number} lies past the end of the file"))
                return
            entry_hash, phy_offset, time_diff, prev = self._entry(number)
            if time_diff < 0:
                return
            time_read = self.begin_timestamp + time_diff * 1000
            if entry_hash == key_hash and begin <= time_read <= end:
                found.append(phy_offset)
            if prev <= 0 or prev > count or prev == number or time_read < begin:
                return
            if seen.get(number) == len(found):
                problems.append(ChainProblem(self.name, number, "loop",
                                             f"the chain of slot {key_hash % self.slots} loops: "
                                             f"the broker would walk it forever"))
                return
            seen[number] = len(found)
            number = prev


class IndexSet:
    """All IndexFiles of a store, oldest first (the broker's load order), mapped read-only.
    Use as a context manager; repeated lookups reuse the maps."""

    def __init__(self, store: Store, skip: frozenset[str] = frozenset()):
        self.store = store
        self.files: list[IndexFile] = []
        try:
            for info in store.index_files:
                if info.name in skip:
                    continue
                self.files.append(IndexFile(info, store.index_slots, store.index_entries))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for f in self.files:
            f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def span(self) -> tuple[int, int] | None:
        """(earliest begin, latest end) store time of the used files."""
        used = [f for f in self.files if f.used]
        if not used:
            return None
        return min(f.begin_timestamp for f in used), max(f.end_timestamp for f in used)

    def covered(self) -> list[tuple[int, int]]:
        """[first, last] record offsets each used file indexed (endPhyOffset is the start of the
        last record it indexed), merged and sorted."""
        ranges = sorted((f.begin_phy_offset, f.end_phy_offset) for f in self.files
                        if f.used and f.end_phy_offset >= f.begin_phy_offset)
        merged: list[list[int]] = []
        for lo, hi in ranges:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return [(lo, hi) for lo, hi in merged]

    def uncovered(self, commitlog: CommitLog) -> list[tuple[int, int]]:
        """[start, end) CommitLog ranges whose records no IndexFile can hold."""
        if not commitlog.segments:
            return []
        low, high = commitlog.min_offset, commitlog.end_offset
        out, cursor = [], low
        for lo, hi in self.covered():
            if lo > cursor:
                out.append((cursor, min(lo, high)))
            cursor = max(cursor, hi + 1)
        if cursor < high:
            out.append((cursor, high))
        return [(a, b) for a, b in out if b > a]

    def lookup(self, key_string: str, files: list[IndexFile] | None = None
               ) -> tuple[list[IndexHit], list[ChainProblem]]:
        """Every entry carrying the key's hash, newest file first."""
        key_hash = codecs.index_key_hash(key_string)
        hits: list[IndexHit] = []
        problems: list[ChainProblem] = []
        for f in reversed(files if files is not None else self.files):
            hits.extend(f.chain(key_hash, problems))
        return hits, problems

    def broker_query_offset(self, topic: str, key: str, max_num: int = MAX_MSGS_NUM_BATCH,
                            begin: int = 0, end: int = JAVA_LONG_MAX,
                            skip: set[str] | None = None
                            ) -> tuple[list[int], list[ChainProblem]]:
        """IndexService.queryOffset: offsets in walk order (newest file first), duplicates kept.
        ``skip`` leaves out files (the ones a broker's next start deletes)."""
        max_num = min(max_num, MAX_MSGS_NUM_BATCH)
        key_hash = codecs.index_key_hash(codecs.index_key(topic, key))
        found: list[int] = []
        problems: list[ChainProblem] = []
        for f in reversed(self.files):
            if skip and f.name in skip:
                continue
            if not f.header_ok:
                continue
            if f.is_time_matched(begin, end):
                f.broker_select(key_hash, max_num, begin, end, found, problems)
            if f.begin_timestamp < begin or len(found) >= max_num:
                break
        return found, problems
