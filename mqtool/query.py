"""Offline equivalents of mqadmin's queries: by offsetMsgId, UNIQ_KEY, key, queue offset, time.

A broker answers ``queryMessage`` from its IndexFiles: slot ``hash(topic#key) % slots`` holds the
newest entry of a chain linked through ``prev_index``; the broker keeps every entry whose hash
and index time match (:meth:`IndexFile.broker_select`, ``IndexFile.selectPhyOffset``), walks
the files newest first, caps the answer at 64 and sorts it (:func:`broker_query_message`,
``IndexService.queryOffset`` + ``DefaultMessageStore.queryMessage``). The key itself is not
stored, so the broker's answer can hold other keys' messages; entries pointing past the
CommitLog's readable end are skipped.

mqtool's own answers (:func:`query_key`, :func:`query_uniq_key`) have no cap: every chain entry
with the key's hash is followed to the real record, which must carry the key (hash collisions
are counted and dropped). Where no IndexFile covers part of the CommitLog (no index, an index
that stops before the end of the data, files lost to an abnormal recovery) or a chain is
damaged, that part is scanned instead, and the result says so. Every chain walk terminates:
a healthy chain only ever points to older entries, so a pointer that does not is damage.

:func:`explain` says why the broker's own query would fail or differ from mqtool's answer.
"""
from __future__ import annotations

import calendar
import datetime as _dt
import mmap
import re
import struct
import weakref
from dataclasses import dataclass, field

import numpy as np

from . import codec
from .errors import EXIT_FINDINGS, MqtoolError
from .formats import codecs
from .formats import commitlog as cl_fmt
from .formats import consumequeue as cq_fmt
from .formats import indexfile as idx_fmt
from .recovery import RecoveryPlan, predict_recovery
from .scan import MessageRecord, Scanner, decode_message
from .store import CommitLog, ConsumeQueue, IndexFileInfo, MappedFile, Segment, Store

JAVA_LONG_MAX = 2 ** 63 - 1
# MessageStoreConfig.maxMsgsNumBatch: queryOffset never returns more
MAX_MSGS_NUM_BATCH = 64
# Topics the broker writes itself; their records are indexed under these names too.
SCHEDULE_TOPIC = codecs.SCHEDULE_TOPIC
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"
SYSTEM_TOPICS = (SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TIMER_TOPIC)
# A UNIQ_KEY's time is "ms since the start of the month" in the producer's zone, which can be
# anything from UTC-12 to UTC+14; an hour more allows for producer/broker clock skew.
_ZONE_EAST_MS = 14 * 3_600_000
_ZONE_WEST_MS = 12 * 3_600_000
_CLOCK_SKEW_MS = 3_600_000
_HEX = re.compile(r"[0-9A-Fa-f]*")

_INDEX_HEADER = codec.INDEX_HEADER
_INDEX_SLOT = codec.INDEX_SLOT
_INDEX_ENTRY = codec.INDEX_ENTRY
_CQ_UNIT = codec.CQ_UNIT
_ROLLBACK = cl_fmt.TRANSACTION_ROLLBACK_TYPE
_UNIQ_PROPERTY = ("UNIQ_KEY" + codecs.NAME_VALUE_SEPARATOR).encode()
_KEYS_PROPERTY = ("KEYS" + codecs.NAME_VALUE_SEPARATOR).encode()


class QueryError(MqtoolError):
    """A query that cannot be asked (malformed id, unknown queue, ...): exit 2."""


class NotFound(MqtoolError):
    """A well-formed query with no answer: exit 1."""

    exit_code = EXIT_FINDINGS


# --- ids -----------------------------------------------------------------------------------------

def check_hex_id(text: str, what: str) -> str:
    """``text`` upper-cased when it is 32 or 56 hex characters; QueryError otherwise."""
    value = text.strip()
    if not _HEX.fullmatch(value):
        bad = next(ch for ch in value if not _HEX.fullmatch(ch))
        raise QueryError(f"malformed {what} {text!r}: {bad!r} is not a hex digit")
    if len(value) not in (32, 56):
        raise QueryError(f"malformed {what} {text!r}: {len(value)} hex digits, expected 32 "
                         f"(IPv4) or 56 (IPv6)")
    return value.upper()


def describe_msg_id(msg_id: str) -> dict:
    host, offset = codecs.decode_offset_msg_id(msg_id)
    return {"store_host": host, "commitlog_offset": offset}


def describe_uniq_key(uniq_key: str, now_ms: int | None = None,
                      tz: _dt.tzinfo | None = None) -> dict:
    info = codecs.decode_uniq_key(uniq_key, now_ms=now_ms, tz=tz)
    return {"client_ip": info["ip"], "pid": info["pid"],
            "class_loader_hash": info["class_loader_hash"],
            "ms_since_month_start": info["ms_since_month_start"], "counter": info["counter"],
            "approx_time": info["approx_time_ms"]}


def _month_starts(lo_ms: int, hi_ms: int) -> list[int]:
    """UTC month starts from the month before ``lo_ms`` to the month after ``hi_ms``."""
    lo = _dt.datetime.fromtimestamp(max(lo_ms, 0) / 1000, _dt.timezone.utc)
    hi = _dt.datetime.fromtimestamp(max(hi_ms, 0) / 1000, _dt.timezone.utc)
    year, month = lo.year, lo.month - 1
    if month == 0:
        year, month = year - 1, 12
    out = []
    while (year, month) <= (hi.year + (hi.month == 12), hi.month % 12 + 1):
        out.append(calendar.timegm((year, month, 1, 0, 0, 0)) * 1000)
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return out


def uniq_key_windows(uniq_key: str, lo_ms: int, hi_ms: int) -> list[tuple[int, int]]:
    """Store-time windows a UNIQ_KEY can belong to, within [lo_ms, hi_ms] (the store's span).

    The id holds milliseconds since the start of *some* month in the producer's zone; each month
    start in the span, shifted by every zone and an hour of clock skew, gives one window."""
    delta = codecs.decode_uniq_key(uniq_key, now_ms=hi_ms)["ms_since_month_start"]
    windows = []
    for month in _month_starts(lo_ms, hi_ms):
        start = month + delta - _ZONE_EAST_MS - _CLOCK_SKEW_MS
        end = month + delta + _ZONE_WEST_MS + _CLOCK_SKEW_MS
        if end >= lo_ms and start <= hi_ms:
            windows.append((start, end))
    return windows


def mqadmin_uniq_key_begin(uniq_key: str, now_ms: int | None = None,
                           tz: _dt.tzinfo | None = None) -> int:
    """The ``begin`` mqadmin's queryMsgByUniqueKey asks the broker for:
    MessageClientIDSetter.getNearlyTimeFromID(id) - 1000, read in the zone and month of the
    machine running it (this one, now, unless given)."""
    tz = tz or _dt.datetime.now().astimezone().tzinfo
    return codecs.decode_uniq_key(uniq_key, now_ms=now_ms, tz=tz)["approx_time_ms"] - 1000


def _random_access(data) -> None:
    """Tell the kernel a mapping is read at random: on a cold page cache a fault would
    otherwise read ahead far more of a 420 MB IndexFile than the one chain a lookup needs."""
    if isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_RANDOM"):
        try:
            data.madvise(mmap.MADV_RANDOM)
        except OSError:
            pass


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


# --- reading records by offset -------------------------------------------------------------------

class RecordReader:
    """Decodes records at given offsets, keeping each segment mapped between reads."""

    def __init__(self, commitlog: CommitLog):
        self.commitlog = commitlog
        self._maps: dict[int, MappedFile] = {}

    def close(self) -> None:
        for mapped in self._maps.values():
            mapped.close()
        self._maps.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def buffer(self, seg: Segment):
        mapped = self._maps.get(seg.base_offset)
        if mapped is None:
            mapped = self._maps[seg.base_offset] = MappedFile(seg.path)
            _random_access(mapped.data)
        return mapped.data

    def at(self, offset: int, check_crc: bool = False) -> tuple[MessageRecord | None, str]:
        """(record, "") or (None, why there is no record starting at ``offset``)."""
        if offset < 0:
            return None, f"offset {offset} is negative"
        seg = self.commitlog.segment_for(offset)
        if seg is None:
            return None, f"no CommitLog file holds offset {offset}"
        buf = self.buffer(seg)
        try:
            record = decode_message(buf, offset - seg.base_offset, len(buf), seg.base_offset,
                                    check_crc)
        except (MqtoolError, struct.error) as bad:
            return None, f"no message starts at offset {offset}: {getattr(bad, 'detail', bad)}"
        return record, ""

    def body(self, record: MessageRecord) -> bytes:
        if record.body_length <= 0:
            return b""
        seg = self.commitlog.segment_for(record.offset)
        start = record.body_position - seg.base_offset
        return bytes(self.buffer(seg)[start:start + record.body_length])


# --- results -------------------------------------------------------------------------------------

@dataclass
class Found:
    """One message of an answer and how it was found."""

    record: MessageRecord
    found_by: str                       # index | scan | msg-id | consume-queue
    index_hits: list[IndexHit] = field(default_factory=list)

    def annotations(self) -> dict:
        out = {"found_by": self.found_by}
        if self.index_hits:
            out["index_entries"] = [{"file": h.file, "entry": h.entry,
                                     "index_time": h.index_time} for h in self.index_hits]
        return out


@dataclass
class QueryResult:
    query: dict
    found: list[Found] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scanned: list[tuple[int, int]] = field(default_factory=list)
    problems: list[ChainProblem] = field(default_factory=list)
    collisions: list[int] = field(default_factory=list)     # entries of another key, same hash
    stale: list[int] = field(default_factory=list)          # entries pointing at no such record
    duplicates: int = 0                                      # extra entries for the same record
    candidates: int = 0                                      # matches before --max
    details: dict = field(default_factory=dict)

    @property
    def offsets(self) -> list[int]:
        return [f.record.offset for f in self.found]

    def summary(self) -> dict:
        return {"query": self.query, "found": len(self.found), "offsets": self.offsets,
                "notes": self.notes, "scanned_ranges": [list(r) for r in self.scanned],
                "index_problems": [p.to_dict() for p in self.problems],
                "hash_collisions": sorted(set(self.collisions)),
                "stale_index_entries": sorted(set(self.stale)),
                "duplicate_index_entries": self.duplicates, **self.details}


# --- key and UNIQ_KEY lookups --------------------------------------------------------------------

def store_topics(store: Store) -> list[str]:
    """Topics this store knows of: queue directories, config/topics.json, the system topics."""
    topics = {q.topic for q in store.consume_queues} | {q.topic for q in
                                                        store.batch_consume_queues}
    topics_json = store.configs().get("topics.json", (None, None))[0]
    if isinstance(topics_json, dict) and isinstance(topics_json.get("topicConfigTable"), dict):
        topics |= set(topics_json["topicConfigTable"])
    topics |= set(SYSTEM_TOPICS)
    return sorted(topics)


def _carries(record: MessageRecord, key: str | None, uniq_key: str | None) -> bool:
    props = codecs.decode_properties(record.properties_raw)
    if uniq_key is not None:
        return props.get("UNIQ_KEY") == uniq_key
    return key in codecs.message_keys(props)


def _scan_ranges(store: Store, ranges: list[tuple[int, int]], needle: bytes, topic: str | None,
                 key: str | None, uniq_key: str | None
                 ) -> tuple[list[MessageRecord], dict[tuple[int, int], int]]:
    """(records in the ranges carrying the key, number of indexable records per range); the
    scan resynchronises past damage."""
    scanner = Scanner(store.commitlog, check_crc=False, resync=True)
    out = []
    indexable: dict[tuple[int, int], int] = {}
    for start, end in ranges:
        count = 0
        for record in scanner.messages(start, end):
            raw = record.properties_raw
            if record.sys_flag & cl_fmt.TRANSACTION_TYPE_MASK == _ROLLBACK:
                continue  # never indexed (IndexService.buildIndex)
            if _UNIQ_PROPERTY in raw or _KEYS_PROPERTY in raw:
                count += 1
            if needle not in raw:
                continue
            if topic is not None and record.topic != topic:
                continue
            if _carries(record, key, uniq_key):
                out.append(record)
        indexable[(start, end)] = count
    return out, indexable


def _merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


def _gap_name(lo: int, hi: int, commitlog: CommitLog) -> str:
    if hi >= commitlog.end_offset:
        return "after the newest IndexFile's last entry"
    if lo == commitlog.min_offset:
        return "before the oldest IndexFile's first entry"
    return "between IndexFiles"


def _lookup(store: Store, topics: list[str], key: str | None, uniq_key: str | None, *,
            since: int | None, until: int | None, use_index: bool, query: dict,
            windows: list[tuple[int, int]] | None = None) -> QueryResult:
    value = uniq_key if uniq_key is not None else key
    result = QueryResult(query)
    found: dict[int, Found] = {}
    commitlog = store.commitlog
    if not commitlog.segments:
        result.notes.append("the store has no CommitLog file")
        return result
    whole = (commitlog.min_offset, commitlog.end_offset)
    scan_ranges: list[tuple[int, int]] = []
    gaps: list[tuple[int, int]] = []
    damaged: list[tuple[int, int]] = []
    with IndexSet(store) as index, RecordReader(commitlog) as reader:
        usable = [f for f in index.files if f.used]
        for f in index.files:
            for problem in f.problems:
                result.notes.append(f"IndexFile {f.name}: {problem}")
        if not use_index:
            scan_ranges.append(whole)
            result.notes.append("the IndexFiles were not used (--scan): the whole CommitLog "
                                "was scanned")
        elif not usable:
            scan_ranges.append(whole)
            result.notes.append("no IndexFile: the whole CommitLog was scanned"
                                if not index.files else
                                "no IndexFile holds an entry: the whole CommitLog was scanned")
        else:
            gaps = index.uncovered(commitlog)
            first_group = usable
            if windows is not None:
                first_group = [f for f in usable
                               if any(f.is_time_matched(a, b) for a, b in windows)]
            groups = [first_group]
            if windows is not None:
                groups.append([f for f in usable if f not in first_group])
            for attempt, group in enumerate(groups):
                if attempt == 1:
                    if found or not group:
                        break
                    result.notes.append("no IndexFile of the UNIQ_KEY's possible time windows "
                                        "holds it; the other IndexFiles were searched too")
                for topic in topics:
                    hits, problems = index.lookup(codecs.index_key(topic, value), group)
                    result.problems += problems
                    for problem in problems:
                        bad = next(f for f in group if f.name == problem.file)
                        damaged.append((bad.begin_phy_offset, bad.end_phy_offset + 1))
                    for hit in hits:
                        known = found.get(hit.phy_offset)
                        if known is not None:
                            known.index_hits.append(hit)
                            result.duplicates += 1
                            continue
                        record, _why = reader.at(hit.phy_offset)
                        if record is None or not record.offset_ok:
                            result.stale.append(hit.phy_offset)
                        elif record.topic != topic or not _carries(record, key, uniq_key):
                            result.collisions.append(hit.phy_offset)
                        else:
                            found[hit.phy_offset] = Found(record, "index", [hit])
            for problem in result.problems:
                result.notes.append(f"IndexFile {problem.file}: {problem.detail}; the file's "
                                    f"range was scanned instead")
    scan_ranges = _merge_ranges(scan_ranges + gaps + damaged)
    result.scanned = scan_ranges
    if scan_ranges:
        only_topic = topics[0] if len(topics) == 1 and query.get("topic") else None
        records, indexable = _scan_ranges(store, scan_ranges, value.encode("utf-8"), only_topic,
                                          key, uniq_key)
        for record in records:
            if record.offset not in found:
                found[record.offset] = Found(record, "scan")
        for lo, hi in gaps:
            # an uncovered range that held only unindexable records (rollbacks, records
            # without keys, the rest of the last indexed record) is not a stale index
            missed = sum(n for (a, b), n in indexable.items() if a < hi and b > lo)
            if missed:
                result.notes.append(f"no IndexFile covers CommitLog offsets [{lo}, {hi}) "
                                    f"({_gap_name(lo, hi, commitlog)}), where {missed} message(s) "
                                    f"with keys lie: that range was scanned")
    matches = [f for f in found.values()
               if (since is None or f.record.store_timestamp >= since)
               and (until is None or f.record.store_timestamp <= until)]
    result.candidates = len(matches)
    matches.sort(key=lambda f: f.record.offset)
    result.found = matches
    return result


def _limit_newest(result: QueryResult, max_results: int | None) -> None:
    """Keep the ``max_results`` most recently stored messages (the broker walks newest first)."""
    if max_results is None or len(result.found) <= max_results:
        return
    keep = sorted(result.found, key=lambda f: (f.record.store_timestamp, f.record.offset))
    keep = keep[len(keep) - max_results:] if max_results else []
    result.found = sorted(keep, key=lambda f: f.record.offset)
    result.notes.append(f"{result.candidates} messages match; the {max_results} most recent "
                        f"are shown (--max)")


def query_key(store: Store, key: str, topic: str | None = None, *, since: int | None = None,
              until: int | None = None, max_results: int | None = None,
              use_index: bool = True) -> QueryResult:
    """Every message whose KEYS include ``key`` (in ``topic``, or in any topic the store knows),
    stored in [since, until]; no 64 cap. ROLLBACK records are never indexed and are left out."""
    if not key:
        raise QueryError("--key must not be empty")
    if " " in key:
        raise QueryError(f"--key {key!r} contains a space: KEYS items are separated by spaces, "
                         f"so no single key can contain one")
    topics = [topic] if topic is not None else store_topics(store)
    result = _lookup(store, topics, key, None, since=since, until=until, use_index=use_index,
                     query={"mode": "key", "key": key, "topic": topic, "since": since,
                            "until": until, "max": max_results})
    _limit_newest(result, max_results)
    return result


def query_uniq_key(store: Store, uniq_key: str, topic: str | None = None, *,
                   use_index: bool = True) -> QueryResult:
    """Every record carrying this UNIQ_KEY (the SCHEDULE_TOPIC_XXXX copy and the delivered one,
    retries, half and commit records): the IndexFiles of the id's time windows first, then the
    others, then a scan of what no IndexFile covers; exact match on the record."""
    uniq = check_hex_id(uniq_key, "UNIQ_KEY")
    topics = [topic] if topic is not None else store_topics(store)
    windows = None
    with IndexSet(store) as index:
        span = index.span()
    if span is not None:
        windows = uniq_key_windows(uniq, *span)
    result = _lookup(store, topics, None, uniq, since=None, until=None, use_index=use_index,
                     windows=windows, query={"mode": "uniq-key", "uniq_key": uniq,
                                             "topic": topic})
    result.details["uniq_key"] = describe_uniq_key(uniq)
    if windows is not None:
        result.details["time_windows"] = [list(w) for w in windows]
    if not result.found:
        swapped = _as_msg_id(store, uniq)
        if swapped is not None:
            result.notes.append(f"{uniq} is not a UNIQ_KEY here but an offsetMsgId: the message "
                                f"at CommitLog offset {swapped.offset} (use --msg-id)")
            result.details["is_offset_msg_id_of"] = swapped.offset
    return result


def _as_msg_id(store: Store, text: str) -> MessageRecord | None:
    """The record ``text`` names when read as an offsetMsgId, if one is there."""
    try:
        _host, offset = codecs.decode_offset_msg_id(text)
    except ValueError:
        return None
    with RecordReader(store.commitlog) as reader:
        record, _ = reader.at(offset)
    if record is None or not record.offset_ok:
        return None
    if codecs.offset_msg_id(record.store_ip, record.store_port, record.physical_offset) != text:
        return None
    return record


def query_msg_id(store: Store, msg_id: str) -> QueryResult:
    """offsetMsgId -> store host and CommitLog offset -> the record there."""
    text = check_hex_id(msg_id, "offsetMsgId")
    info = describe_msg_id(text)
    result = QueryResult({"mode": "msg-id", "msg_id": text}, details={"decoded": info})
    offset = info["commitlog_offset"]
    with RecordReader(store.commitlog) as reader:
        record, why = reader.at(offset, check_crc=True)
    if record is not None and not record.offset_ok:
        why = (f"the record at offset {offset} records PHYSICALOFFSET {record.physical_offset}: "
               f"not the message this id names")
        record = None
    if record is not None:
        actual = codecs.format_host(record.store_ip, record.store_port)
        if actual != info["store_host"]:
            result.notes.append(f"the id names store host {info['store_host']}, the record was "
                                f"stored by {actual} (a copy of another broker's CommitLog?)")
        result.found.append(Found(record, "msg-id"))
        return result
    result.notes.append(why)
    if store.commitlog.segments and not (store.commitlog.min_offset <= offset
                                         < store.commitlog.end_offset):
        result.notes.append(f"offset {offset} is outside this CommitLog "
                            f"[{store.commitlog.min_offset}, {store.commitlog.end_offset})")
    as_uniq = query_uniq_key(store, text)
    if as_uniq.found:
        result.notes.append(f"{text} is not an offsetMsgId here but a UNIQ_KEY (client message "
                            f"id) of {len(as_uniq.found)} record(s) (use --uniq-key)")
        result.details["is_uniq_key_of"] = as_uniq.offsets
    return result


# --- ConsumeQueue lookups ------------------------------------------------------------------------

def _queue(store: Store, topic: str, queue_id: int) -> ConsumeQueue:
    queue = store.queue(topic, queue_id)
    if queue is None:
        known = sorted(q.queue_id for q in store.consume_queues if q.topic == topic)
        if known:
            raise QueryError(f"topic {topic!r} has no queue {queue_id} (queues: "
                             f"{', '.join(map(str, known))})")
        raise QueryError(f"no ConsumeQueue for topic {topic!r} in {store.root}")
    if not queue.segments:
        raise NotFound(f"{topic}/{queue_id}: the queue directory holds no ConsumeQueue file")
    return queue


def _valid_units(path, units_per_file: int) -> np.ndarray:
    with MappedFile(path) as mf:
        usable = min(mf.size - mf.size % cq_fmt.CQ_STORE_UNIT_SIZE,
                     units_per_file * cq_fmt.CQ_STORE_UNIT_SIZE)
        if usable <= 0:
            return np.zeros(0, codec.CQ_DTYPE)
        units = np.frombuffer(mf.data, codec.CQ_DTYPE, usable // cq_fmt.CQ_STORE_UNIT_SIZE).copy()
    valid = (units["commitlog_offset"] >= 0) & (units["size"] > 0)
    end = len(units) if valid.all() else int(np.argmin(valid))
    return units[:end]


def queue_bounds(store: Store, queue: ConsumeQueue) -> tuple[int | None, int]:
    """(first queue offset whose unit points into the CommitLog, next queue offset) of a queue,
    as correctMinOffset and getMaxOffsetInQueue compute them."""
    units_per_file = store.cq_units_per_file
    low = store.commitlog.min_offset
    first = None
    for seg in queue.segments:
        units = _valid_units(seg.path, units_per_file)
        good = np.flatnonzero((units["commitlog_offset"] >= low)
                              & (units["size"] != cq_fmt.PRE_BLANK_SIZE))
        if len(good):
            first = seg.base_offset // cq_fmt.CQ_STORE_UNIT_SIZE + int(good[0])
            break
    last = queue.segments[-1]
    end = last.base_offset // cq_fmt.CQ_STORE_UNIT_SIZE + len(_valid_units(last.path,
                                                                          units_per_file))
    return first, end


def _unit_location(store: Store, queue: ConsumeQueue,
                   queue_offset: int) -> tuple[Segment | None, int]:
    """The file holding a queue offset (named floor(q*20/fileSize)*fileSize) and the unit's
    position in it."""
    file_bytes = store.cq_units_per_file * cq_fmt.CQ_STORE_UNIT_SIZE
    logical = queue_offset * cq_fmt.CQ_STORE_UNIT_SIZE
    file_start = logical - logical % file_bytes
    for seg in queue.segments:
        if seg.base_offset == file_start:
            return seg, logical - file_start
    return None, logical - file_start


def query_queue_offset(store: Store, topic: str, queue_id: int, queue_offset: int) -> QueryResult:
    """The ConsumeQueue unit at ``queue_offset`` and the message it points at."""
    if queue_offset < 0:
        raise QueryError(f"--offset must be >= 0, got {queue_offset}")
    queue = _queue(store, topic, queue_id)
    result = QueryResult({"mode": "queue-offset", "topic": topic, "queue_id": queue_id,
                          "queue_offset": queue_offset})
    first, end = queue_bounds(store, queue)
    result.details["queue"] = {"min_offset": first, "max_offset": end}
    seg, position = _unit_location(store, queue, queue_offset)
    if seg is None or position + cq_fmt.CQ_STORE_UNIT_SIZE > seg.length:
        raise NotFound(f"{topic}/{queue_id}: no ConsumeQueue file holds queue offset "
                       f"{queue_offset} (the queue holds {first}..{end - 1})"
                       if first is not None and end > first else
                       f"{topic}/{queue_id}: no ConsumeQueue file holds queue offset "
                       f"{queue_offset}")
    with open(seg.path, "rb") as fh:
        fh.seek(position)
        phy, size, tags_code = _CQ_UNIT.unpack(fh.read(cq_fmt.CQ_STORE_UNIT_SIZE))
    unit = {"file": store.relative(seg.path), "file_offset": position, "commitlog_offset": phy,
            "size": size, "tags_code": tags_code}
    result.details["unit"] = unit
    if cq_fmt.is_pre_blank(phy, size, tags_code):
        raise NotFound(f"{topic}/{queue_id} queue offset {queue_offset} is a pre-blank filler "
                       f"unit (0, 0x7FFFFFFF, 0): the queue starts at {first}")
    if not cq_fmt.is_valid_unit(phy, size):
        raise NotFound(f"{topic}/{queue_id} queue offset {queue_offset} is past the queue's "
                       f"end (next offset {end})" if queue_offset >= end else
                       f"{topic}/{queue_id} queue offset {queue_offset}: the unit is not valid "
                       f"(offset {phy}, size {size})")
    with RecordReader(store.commitlog) as reader:
        record, why = reader.at(phy, check_crc=True)
    if record is None:
        raise NotFound(f"{topic}/{queue_id} queue offset {queue_offset} points at CommitLog "
                       f"offset {phy}: {why}")
    mismatches = []
    if record.topic != topic or record.queue_id != queue_id:
        mismatches.append(f"the record is in {record.topic}/{record.queue_id}")
    if record.queue_offset != queue_offset:
        mismatches.append(f"the record's QUEUEOFFSET is {record.queue_offset}")
    if record.total_size != size:
        mismatches.append(f"the record is {record.total_size} bytes, the unit says {size}")
    if mismatches:
        result.notes.append(f"the unit and the record disagree: {'; '.join(mismatches)}")
        unit["mismatch"] = mismatches
    if queue_offset < (first if first is not None else 0):
        result.notes.append(f"queue offset {queue_offset} is below the queue's minimum {first}: "
                            f"the broker no longer serves it")
    result.found.append(Found(record, "consume-queue"))
    return result


def _store_time_of(reader: RecordReader, phy: int) -> int:
    """CommitLog.pickupStoreTimestamp: -1 when no record is readable there."""
    record, _ = reader.at(int(phy))
    return record.store_timestamp if record is not None else -1


def query_queue_time(store: Store, topic: str, queue_id: int, timestamp: int) -> QueryResult:
    """ConsumeQueue.getOffsetInQueueByTime (4.9): binary search of one file for the unit whose
    message was stored at ``timestamp``, else the nearer neighbour.

    The broker picks the first file whose *mtime* is at or after the time; mtimes do not survive
    copying a store, so the first file whose last unit's message was stored at or after it is
    taken (the same file on a store that was never copied)."""
    queue = _queue(store, topic, queue_id)
    result = QueryResult({"mode": "queue-time", "topic": topic, "queue_id": queue_id,
                          "time": timestamp})
    first, end = queue_bounds(store, queue)
    result.details["queue"] = {"min_offset": first, "max_offset": end}
    units_per_file = store.cq_units_per_file
    min_phy = store.commitlog.min_offset
    unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
    min_logic = (first if first is not None else 0) * unit_size
    with RecordReader(store.commitlog) as reader:
        chosen, units = None, None
        for seg in queue.segments:
            seg_units = _valid_units(seg.path, units_per_file)
            if not len(seg_units):
                continue
            chosen, units = seg, seg_units
            last_time = _store_time_of(reader, seg_units["commitlog_offset"][-1])
            if last_time >= timestamp:
                break
        if chosen is None:
            raise NotFound(f"{topic}/{queue_id}: the queue holds no valid unit")
        low = max(0, min_logic - chosen.base_offset)
        high = (len(units) - 1) * unit_size
        left = right = target = -1
        left_time = right_time = -1
        while high >= low:
            mid = (low + high) // (2 * unit_size) * unit_size
            phy = int(units["commitlog_offset"][mid // unit_size])
            if phy < min_phy:
                low, left = mid + unit_size, mid
                continue
            stored = _store_time_of(reader, phy)
            if stored < 0:
                raise NotFound(f"{topic}/{queue_id}: the unit at queue offset "
                               f"{(chosen.base_offset + mid) // unit_size} points at CommitLog "
                               f"offset {phy}, where no message is readable (the broker "
                               f"answers 0)")
            if stored == timestamp:
                target = mid
                break
            if stored > timestamp:
                high, right, right_time = mid - unit_size, mid, stored
            else:
                low, left, left_time = mid + unit_size, mid, stored
        if target != -1:
            pick = target
        elif left_time == -1:
            pick = right
        elif right_time == -1:
            pick = left
        else:
            pick = right if abs(timestamp - left_time) > abs(timestamp - right_time) else left
        if pick < 0:
            raise NotFound(f"{topic}/{queue_id}: no unit of {chosen.name} points into the "
                           f"CommitLog")
        queue_offset = (chosen.base_offset + pick) // unit_size
    found = query_queue_offset(store, topic, queue_id, queue_offset)
    result.found = found.found
    result.notes += found.notes
    result.details["queue_offset"] = queue_offset
    result.details["consume_queue_file"] = store.relative(chosen.path)
    result.details["unit"] = found.details.get("unit")
    return result


# --- the broker's own answer ---------------------------------------------------------------------

def readable_end(store: Store, plan: RecoveryPlan | None = None) -> int:
    """The CommitLog offset a broker started on this store reads up to (its maxOffset): the
    recovery's processOffset."""
    plan = plan or predict_recovery(store, broker_version="auto")
    return plan.process_offset


_LOST_INDEX_FILES: "weakref.WeakKeyDictionary[Store, frozenset[str]]" = weakref.WeakKeyDictionary()


def _dledger_lost_index_files(store: Store) -> frozenset[str]:
    """The IndexFiles a crashed DLedger-mode store loses for good (its abnormal start deletes
    them and nothing re-dispatches their records); predicted once per store."""
    if store.dledger is None or not store.abort_exists:
        return frozenset()
    if store not in _LOST_INDEX_FILES:
        _LOST_INDEX_FILES[store] = frozenset(predict_recovery(store).index_files_deleted)
    return _LOST_INDEX_FILES[store]


def broker_query_message(store: Store, topic: str, key: str, max_num: int = MAX_MSGS_NUM_BATCH,
                         begin: int = 0, end: int = JAVA_LONG_MAX, *,
                         max_offset: int | None = None) -> list[int]:
    """DefaultMessageStore.queryMessage(topic, key, maxNum, begin, end) on a broker running on
    this store as it is: the IndexFiles' offsets (at most 64, newest files and entries first),
    sorted ascending, duplicates kept, without the ones outside the readable CommitLog
    [minOffset, ``max_offset``) (default: the recovery's processOffset). No collision filter:
    the broker has none.

    In DLedger mode the IndexFiles an abnormal start deletes are left out: nothing re-dispatches
    their records, so the broker never finds those keys again."""
    if max_offset is None:
        max_offset = readable_end(store)
    low = store.commitlog.min_offset if store.commitlog.segments else 0
    skip = _dledger_lost_index_files(store)
    with IndexSet(store, skip) as index:
        offsets, _problems = index.broker_query_offset(topic, key, max_num, begin, end)
    return [o for o in sorted(offsets) if low <= o < max_offset]


# --- explanations --------------------------------------------------------------------------------

def explain(store: Store, result: QueryResult, *, plan: RecoveryPlan | None = None,
            now_ms: int | None = None, tz: _dt.tzinfo | None = None) -> dict:
    """Why the broker's own query (mqadmin queryMsgByKey / queryMsgByUniqueKey / queryMsgById on
    a broker started on this store) would fail or differ from ``result``.

    Returns {"broker_offsets": what queryMessage would return (per topic), "reasons": [{"reason",
    "detail", "offsets"}], "recovery": the facts used}."""
    plan = plan or predict_recovery(store, broker_version="auto")
    process_offset = plan.process_offset
    deleted = set(plan.index_files_deleted)
    redispatch = plan.redispatch_from
    mode = result.query.get("mode")
    reasons: list[dict] = []

    def add(reason: str, detail: str, offsets=()) -> None:
        reasons.append({"reason": reason, "detail": detail, "offsets": sorted(set(offsets))})

    out = {"recovery": {"mode": plan.mode, "broker_version": plan.broker_version,
                        "process_offset": process_offset,
                        "index_files_deleted": plan.index_files_deleted,
                        "redispatch_from": redispatch}}

    if mode == "msg-id":
        if result.found:
            record = result.found[0].record
            if record.offset >= process_offset:
                add("beyond-truncation", f"the message lies at or past CommitLog offset "
                    f"{process_offset}, where the broker's next start truncates: queryMsgById "
                    f"finds nothing", [record.offset])
        if "is_uniq_key_of" in result.details:
            add("uniq-key-given-as-msg-id", "the id is a UNIQ_KEY (client message id), not an "
                "offsetMsgId: queryMsgById decodes it as host+offset and reads garbage or "
                "nothing; use queryMsgByUniqueKey", result.details["is_uniq_key_of"])
        out["reasons"] = reasons
        return out
    if mode not in ("key", "uniq-key"):
        out["reasons"] = reasons
        return out

    value = result.query.get("key") if mode == "key" else result.query.get("uniq_key")
    found_topics = sorted({f.record.topic for f in result.found})
    topics = [result.query["topic"]] if result.query.get("topic") else found_topics
    begin = 0
    if mode == "key" and result.query.get("since") is not None:
        begin = result.query["since"]
    end = JAVA_LONG_MAX
    if mode == "key" and result.query.get("until") is not None:
        end = result.query["until"]
    if mode == "uniq-key":
        begin = max(0, mqadmin_uniq_key_begin(value, now_ms, tz))
        out["mqadmin_begin"] = begin
    low = store.commitlog.min_offset if store.commitlog.segments else 0
    broker: dict[str, list[int]] = {}
    walk_problems: list[ChainProblem] = []
    with IndexSet(store) as index:
        kept = [f for f in index.files if f.name not in deleted and f.used]
        # the start dispatches again from redispatch_from; IndexService.buildIndex skips what
        # lies before the last IndexFile's endPhyOffset
        index_from = max(redispatch if redispatch is not None else process_offset,
                         kept[-1].end_phy_offset if kept else 0)
        for topic in topics:
            offsets, problems = index.broker_query_offset(topic, value, MAX_MSGS_NUM_BATCH,
                                                          begin, end, skip=deleted)
            walk_problems += problems
            broker[topic] = [o for o in sorted(offsets) if low <= o < process_offset]
            raw_all, _ = index.broker_query_offset(topic, value, MAX_MSGS_NUM_BATCH, 0,
                                                   JAVA_LONG_MAX, skip=deleted)
            if len(raw_all) >= MAX_MSGS_NUM_BATCH:
                add("result-cap", f"{topic}: the broker stops at {MAX_MSGS_NUM_BATCH} index "
                    f"entries (maxMsgsNumBatch), newest first; mqtool found "
                    f"{sum(1 for f in result.found if f.record.topic == topic)} messages")
    # messages the start (re)indexes are found by the running broker too
    for f in result.found:
        offset = f.record.offset
        if index_from <= offset < process_offset and f.record.topic in broker:
            if offset not in broker[f.record.topic]:
                broker[f.record.topic] = sorted(broker[f.record.topic] + [offset])
    out["broker_offsets"] = broker
    out["indexed_on_start_from"] = index_from if index_from < process_offset else None
    broker_seen = {o for offsets in broker.values() for o in offsets}

    for problem in walk_problems:
        if problem.kind == "loop":
            add("index-chain-loops", f"IndexFile {problem.file}: {problem.detail}")
    for problem in result.problems:
        add("index-chain-damaged", f"IndexFile {problem.file}: {problem.detail}")
    if result.collisions:
        add("hash-collision", f"{len(set(result.collisions))} index entries have the same hash "
            f"but belong to other keys: the broker returns those messages too (the client drops "
            f"them) and they count toward its {MAX_MSGS_NUM_BATCH}-entry cap",
            result.collisions)
    stale_past = [o for o in result.stale if o >= process_offset]
    if stale_past:
        add("stale-index-entry", f"{len(set(stale_past))} index entries point at or past the "
            f"recovered end {process_offset}: the broker skips them", stale_past)

    beyond, unindexed, lost_index, outside_window, missing_other = [], [], [], [], []
    for f in result.found:
        offset = f.record.offset
        if offset >= process_offset:
            beyond.append(offset)
            continue
        if offset in broker_seen:
            continue
        live_hits = [h for h in f.index_hits if h.file not in deleted]
        if f.index_hits and not live_hits:
            lost_index.append(offset)
        elif not f.index_hits:
            unindexed.append(offset)
        elif live_hits and not any(begin <= h.index_time <= end for h in live_hits):
            outside_window.append(offset)
        else:
            missing_other.append(offset)
    if beyond:
        add("beyond-truncation", f"the broker's next start truncates the CommitLog at "
            f"{process_offset} ({plan.stop_reason}): these messages are gone for it", beyond)
    if lost_index:
        add("index-file-deleted-by-recovery", f"the next start is an abnormal recovery: it "
            f"deletes IndexFile(s) {', '.join(sorted(deleted))} (endTimestamp after the "
            f"checkpoint's indexMsgTimestamp) and indexes again only from CommitLog offset "
            f"{index_from}", lost_index)
    if unindexed:
        add("not-indexed", "no IndexFile holds an entry for these messages (the index was lost "
            "or stops short of them): the broker cannot find them by key", unindexed)
    if outside_window:
        if mode == "uniq-key":
            detail = (f"mqadmin searches from the id's approximate time minus 1 s "
                      f"({begin}, read in this machine's zone and current month); these "
                      f"messages' index times are earlier")
        else:
            detail = (f"the index time (whole seconds from the file's beginTimestamp) is outside "
                      f"[{begin}, {end}] although the store time may be inside")
        add("outside-time-window", detail, outside_window)
    if missing_other:
        add("not-returned", "the broker's walk stops before these entries (time order of the "
            "chain or the 64-entry cap)", missing_other)
    if mode == "uniq-key" and "is_offset_msg_id_of" in result.details:
        add("msg-id-given-as-uniq-key", "the id is an offsetMsgId, not a UNIQ_KEY: "
            "queryMsgByUniqueKey finds nothing; use queryMsgById",
            [result.details["is_offset_msg_id_of"]])
    out["reasons"] = reasons
    out["broker_finds_all"] = not (beyond or lost_index or unindexed or outside_window
                                   or missing_other)
    return out


__all__ = ["JAVA_LONG_MAX", "MAX_MSGS_NUM_BATCH", "SYSTEM_TOPICS", "QueryError", "NotFound",
           "ChainProblem", "IndexHit", "IndexFile", "IndexSet", "RecordReader", "Found",
           "QueryResult", "check_hex_id", "describe_msg_id", "describe_uniq_key",
           "uniq_key_windows", "mqadmin_uniq_key_begin", "store_topics", "query_key",
           "query_uniq_key", "query_msg_id", "query_queue_offset", "query_queue_time",
           "queue_bounds", "readable_end", "broker_query_message", "explain"]
