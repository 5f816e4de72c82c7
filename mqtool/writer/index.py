"""IndexFiles as IndexService.buildIndex and IndexFile.putKey write them, one key at a time or
many at once with numpy (the same bytes)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..codec import (INDEX_ENTRY, INDEX_ENTRY_DTYPE, INDEX_HEADER, INDEX_SLOT, INDEX_SLOT_DTYPE,
                     index_key_hashes)
from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..formats import indexfile as idx_fmt
from .files import index_file_millis, index_file_name


class IndexWriter:
    """IndexService.buildIndex and IndexFile.putKey, with roll-over to a new file when full.

    ``enabled=False`` makes it a no-op (stores made without index/, e.g. for benchmarks).

    With ``batch`` > 0, build_index holds the keys of up to that many records back and puts them
    together (:meth:`put_many`: hashes, slot chains and entries computed with numpy), which
    writes the same bytes as putting each key at once; flush() puts what is held. Keys put
    directly (put_hashed, put_many) do not wait for held ones: use one way or the other."""

    def __init__(self, directory: Path, slot_count: int, entry_count: int, enabled: bool = True,
                 batch: int = 0):
        self.directory = Path(directory)
        self.slot_count = slot_count
        self.entry_count = entry_count
        self.enabled = enabled
        self.file_size = idx_fmt.index_file_size(slot_count, entry_count)
        self._entries_start = idx_fmt.entry_position(slot_count, 0)
        self.files: list[str] = []
        self._buf: bytearray | None = None
        self._name: str | None = None
        self.index_msg_timestamp = 0  # set when a file fills (the checkpoint's indexMsgTimestamp)
        self._h: dict | None = None   # header of the current file
        self._prefix_hashes: dict[str, int] = {}
        self.batch = batch
        # held records: their keys in order, and per record the unsigned hash of "topic#", the
        # number of keys, the CommitLog offset and the store time
        self._held_keys: list[str] = []
        self._held_prefixes: list[int] = []
        self._held_counts: list[int] = []
        self._held_offsets: list[int] = []
        self._held_timestamps: list[int] = []

    def _put_header(self) -> None:
        h = self._h
        INDEX_HEADER.pack_into(self._buf, 0, h["begin_timestamp"], h["end_timestamp"],
                               h["begin_phy_offset"], h["end_phy_offset"],
                               h["hash_slot_count_disk"], h["index_count_disk"])

    def _new_file(self, now_ms: int, end_phy: int, end_ts: int) -> None:
        self.flush()
        name = index_file_name(now_ms)
        if self.files and name <= self.files[-1]:
            # names order as times do: the first free one is a millisecond after the last
            try:
                now_ms = index_file_millis(self.files[-1]) + 1
            except ValueError:          # a kept file named by no time: step past it
                while name <= self.files[-1]:
                    now_ms += 1
                    name = index_file_name(now_ms)
            name = index_file_name(now_ms)
        self._name = name
        self.files.append(name)
        self._buf = bytearray(self.file_size)
        # A new file starts with the previous file's end values (IndexFile's constructor); the
        # counts on disk stay 0 until the first key, as IndexHeader only writes on change.
        self._h = {"begin_timestamp": 0, "end_timestamp": 0, "begin_phy_offset": 0,
                   "end_phy_offset": 0, "hash_slot_count": 0, "index_count": 1,
                   "hash_slot_count_disk": 0, "index_count_disk": 0}
        if end_phy > 0:
            self._h["begin_phy_offset"] = self._h["end_phy_offset"] = end_phy
        if end_ts > 0:
            self._h["begin_timestamp"] = self._h["end_timestamp"] = end_ts

    def _current(self, now_ms: int) -> None:
        if self._buf is None:
            self._new_file(now_ms, 0, 0)
        elif self._h["index_count"] >= self.entry_count:
            self.index_msg_timestamp = self._h["end_timestamp"]
            self._new_file(now_ms, self._h["end_phy_offset"], self._h["end_timestamp"])

    @property
    def has_file(self) -> bool:
        return self._h is not None or bool(self._held_offsets)

    @property
    def end_phy_offset(self) -> int:
        """The CommitLog offset of the last key put (or held)."""
        if self._held_offsets:
            return self._held_offsets[-1]
        return self._h["end_phy_offset"] if self._h else 0

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> None:
        self.put_hashed(codecs.index_key_hash(key), phy_offset, store_timestamp)

    def put_hashed(self, key_hash: int, phy_offset: int, store_timestamp: int) -> None:
        """IndexFile.putKey for a key whose index hash is already known."""
        if not self.enabled:
            return
        self._current(store_timestamp)
        h, buf = self._h, self._buf
        slot_pos = idx_fmt.INDEX_HEADER_SIZE + idx_fmt.HASH_SLOT_SIZE * (key_hash % self.slot_count)
        slot_value = INDEX_SLOT.unpack_from(buf, slot_pos)[0]
        count = h["index_count"]
        if slot_value <= 0 or slot_value > count:
            slot_value = 0
        begin = h["begin_timestamp"]
        if begin <= 0:
            time_diff = 0
        else:
            delta = store_timestamp - begin
            # Java long division truncates toward zero; negatives are then clamped to 0
            time_diff = delta // 1000 if delta >= 0 else -((-delta) // 1000)
            time_diff = 0 if time_diff < 0 else min(time_diff, 0x7FFFFFFF)
        INDEX_ENTRY.pack_into(buf, self._entries_start + idx_fmt.INDEX_ENTRY_SIZE * count,
                              key_hash, phy_offset, time_diff, slot_value)
        INDEX_SLOT.pack_into(buf, slot_pos, count)
        if count <= 1:
            h["begin_phy_offset"] = phy_offset
            h["begin_timestamp"] = store_timestamp
        if slot_value == 0:
            h["hash_slot_count"] += 1
            h["hash_slot_count_disk"] = h["hash_slot_count"]
        h["index_count"] = h["index_count_disk"] = count + 1
        h["end_phy_offset"] = phy_offset
        h["end_timestamp"] = store_timestamp
        # the header reaches the buffer in flush(): nothing reads the buffer before that

    def put_many(self, key_hashes, phy_offsets, store_timestamps) -> None:
        """put_hashed for each key in turn, the keys going into one file at once."""
        if not self.enabled:
            return
        key_hashes = np.asarray(key_hashes, dtype=np.int64)
        phy_offsets = np.asarray(phy_offsets, dtype=np.int64)
        store_timestamps = np.asarray(store_timestamps, dtype=np.int64)
        done = 0
        while done < len(key_hashes):
            self._current(int(store_timestamps[done]))
            room = max(1, self.entry_count - self._h["index_count"])
            stop = min(len(key_hashes), done + room)
            self._put_into_current(key_hashes[done:stop], phy_offsets[done:stop],
                                   store_timestamps[done:stop])
            done = stop

    def _put_into_current(self, hashes: np.ndarray, phys: np.ndarray, stamps: np.ndarray) -> None:
        """putKey for keys that all fit in the current file."""
        h = self._h
        count, n = h["index_count"], len(hashes)
        numbers = np.arange(count, count + n, dtype=np.int64)
        slots = hashes % self.slot_count
        # in slot order (stable, so put order within a slot), each key links to the one before
        # it in its slot; the first of a slot to what the slot held, if that passes putKey's test
        # slot * n + put number is unique, so numpy's fast unstable sort gives the stable order
        # (a stable sort of the slots alone is ~5x slower)
        order = np.argsort(slots * n + np.arange(n, dtype=np.int64))
        by_slot = slots[order]
        first = np.ones(n, dtype=bool)
        first[1:] = by_slot[1:] != by_slot[:-1]
        last = np.ones(n, dtype=bool)
        last[:-1] = first[1:]
        table = np.frombuffer(self._buf, INDEX_SLOT_DTYPE, self.slot_count,
                              idx_fmt.INDEX_HEADER_SIZE)
        held = table[by_slot[first]].astype(np.int64)
        prev_by_slot = np.empty(n, dtype=np.int64)
        prev_by_slot[1:] = numbers[order[:-1]]
        prev_by_slot[first] = np.where((held > 0) & (held <= numbers[order[first]]), held, 0)
        prev = np.empty(n, dtype=np.int64)
        prev[order] = prev_by_slot
        table[by_slot[last]] = numbers[order[last]]
        # timeDiff against beginTimestamp, which the first key of a fresh file sets
        begin = np.full(n, h["begin_timestamp"], dtype=np.int64)
        if count <= 1:
            begin[1:] = stamps[0]
        ahead = (begin > 0) & (stamps > begin)
        time_diff = np.zeros(n, dtype=np.int64)
        time_diff[ahead] = np.minimum((stamps[ahead] - begin[ahead]) // 1000, 0x7FFFFFFF)
        entries = np.frombuffer(self._buf, INDEX_ENTRY_DTYPE, n,
                                self._entries_start + idx_fmt.INDEX_ENTRY_SIZE * count)
        entries["key_hash"] = hashes
        entries["phy_offset"] = phys
        entries["time_diff"] = time_diff
        entries["prev_index"] = prev
        del table, entries  # a mapped buffer cannot close while views of it live
        if count <= 1:
            h["begin_phy_offset"] = int(phys[0])
            h["begin_timestamp"] = int(stamps[0])
        new_slots = int(np.count_nonzero(prev == 0))
        if new_slots:
            h["hash_slot_count"] += new_slots
            h["hash_slot_count_disk"] = h["hash_slot_count"]
        h["index_count"] = h["index_count_disk"] = count + n
        h["end_phy_offset"] = int(phys[-1])
        h["end_timestamp"] = int(stamps[-1])

    def key_hash(self, topic: str, key: str) -> int:
        """index_key_hash(topic#key), continuing a cached hash of ``topic#``."""
        prefix = self._prefix_hashes.get(topic)
        if prefix is None:
            prefix = self._prefix_hashes[topic] = codecs.index_key_prefix_hash(topic)
        return codecs.index_key_hash_after(prefix, key)

    def build_index(self, topic: str, commitlog_offset: int, sys_flag: int, store_timestamp: int,
                    properties: dict[str, str]) -> None:
        """IndexService.buildIndex for one dispatched record."""
        if not self.enabled:
            return
        if self.has_file and commitlog_offset < self.end_phy_offset:
            return
        if cl_fmt.transaction_type(sys_flag) == cl_fmt.TRANSACTION_ROLLBACK_TYPE:
            return
        if self.batch:
            self._hold(topic, commitlog_offset, store_timestamp, properties)
            return
        uniq = properties.get("UNIQ_KEY")
        if uniq is not None:
            self.put_hashed(self.key_hash(topic, uniq), commitlog_offset, store_timestamp)
        keys = properties.get("KEYS")
        if keys:
            for key in keys.split(" "):
                if key:
                    self.put_hashed(self.key_hash(topic, key), commitlog_offset, store_timestamp)

    def _hold(self, topic: str, commitlog_offset: int, store_timestamp: int,
              properties: dict[str, str]) -> None:
        uniq = properties.get("UNIQ_KEY")
        keys = properties.get("KEYS")
        items = [] if uniq is None else [uniq]
        if keys:
            items += [key for key in keys.split(" ") if key]
        if not items:
            return
        prefix = self._prefix_hashes.get(topic)
        if prefix is None:
            prefix = self._prefix_hashes[topic] = codecs.index_key_prefix_hash(topic)
        self._held_keys += items
        self._held_prefixes.append(prefix)
        self._held_counts.append(len(items))
        self._held_offsets.append(commitlog_offset)
        self._held_timestamps.append(store_timestamp)
        if len(self._held_offsets) >= self.batch:
            self.put_held()

    def put_held(self) -> None:
        """Put the keys build_index holds back."""
        if not self._held_offsets:
            return
        keys, counts = self._held_keys, np.array(self._held_counts, dtype=np.int64)
        prefixes = np.repeat(np.array(self._held_prefixes, dtype=np.uint32), counts)
        offsets = np.repeat(np.array(self._held_offsets, dtype=np.int64), counts)
        stamps = np.repeat(np.array(self._held_timestamps, dtype=np.int64), counts)
        # emptied first: putting may roll over to a new file, which flushes
        self._held_keys, self._held_prefixes, self._held_counts = [], [], []
        self._held_offsets, self._held_timestamps = [], []
        raw = [key.encode("utf-8") for key in keys]
        lengths = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
        ends = np.cumsum(lengths)
        self.put_many(index_key_hashes(np.frombuffer(b"".join(raw), dtype=np.uint8),
                                       ends - lengths, ends, prefixes), offsets, stamps)

    def flush(self) -> None:
        self.put_held()
        if self._buf is not None and self._name is not None:
            self._put_header()
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.directory / self._name, "wb") as fh:
                fh.write(self._buf)

    close = flush
