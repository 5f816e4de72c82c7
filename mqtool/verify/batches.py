"""The same checks as :mod:`.commitlog`, a run of records at a time: the scanner's record columns
joined with the sorted ConsumeQueue units and index entries; only records that fail a check are
decoded, and their findings made by the reference checker's own methods."""
from __future__ import annotations

import bisect
import itertools

import numpy as np

from .. import codec as _codec
from .. import queue_runs
from ..codec import CQ_DTYPE as CQ_UNIT_DTYPE
from ..codec import CQ_UNIT as _CQ_STRUCT
from ..codec import INDEX_ENTRY as _ENTRY_STRUCT
from ..formats import codecs
from ..formats import consumequeue as cq_fmt
from ..formats import indexfile as idx_fmt
from ..consumers import QueueEnds
from ..passport import own_property_batch_rows
from ..recovery import INDEX_ENTRY_DTYPE, FileJudge
from ..scan import (FLAG_FALSE, FLAG_NONE, FLAG_TRUE, CorruptRegion, RecordBatch, native,
                    scan_segment_batches)
from .findings import Finding, _finding, _prop_crc_message
from .items import _END, _FdCache, _ItemFile, _SortedItems, _next_present
from .context import _MissingRun, _SegmentResult
from .commitlog import _COMMIT, _INNER_BATCH, _NOT, _ROLLBACK, _TX_MASK, _V2_MAGIC, _SegmentChecker


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
_MAX_PRELOADED = 1 << 19        # units read for the hints kept for the merge (~18 MB at most)
_KEY_SEPARATOR = ord(" ")       # MessageConst.KEY_SEPARATOR
_PROPERTY_NAMES = ("TAGS", "KEYS", "UNIQ_KEY", "DELAY", "CLUSTER")
_INDEX_KEYS = ("UNIQ_KEY", "KEYS", _KEY_SEPARATOR)   # the keys buildIndex puts


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

    @classmethod
    def loaded(cls, numbers: np.ndarray, items: np.ndarray, key_field: str) -> _ItemCursor:
        """A cursor over items already read (all of them up to its key_hi)."""
        cursor = cls.__new__(cls)
        cursor.files, cursor.firsts, cursor.fds = [], [], None
        cursor.dtype, cursor.key_field = items.dtype, key_field
        cursor.index = cursor.hi = cursor.key_hi = 0
        cursor.done = True
        cursor.numbers, cursor.items, cursor.pos = numbers, items, 0
        cursor.keys = items[key_field].astype(np.int64)
        return cursor

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


def _join_sorted(records: np.ndarray, probes: np.ndarray, first_only: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The join of sorted record offsets with the offsets units or entries point at: (j, hit,
    after) - the record each probe names where ``hit``, and for the others the insertion point
    after their equals (where the reference meets them). ``first_only``: a probe equal to the
    one before it names no record (a duplicate unit is left over, as the merge does). The
    native core joins in one pass; numpy (the reference) in a few."""
    core = native.core
    if core is not None:
        j, after = core.join_sorted(np.ascontiguousarray(records, dtype=np.int64),
                                    np.ascontiguousarray(probes, dtype=np.int64), first_only)
        return j, j >= 0, after
    n = len(records)
    j = np.searchsorted(records, probes, side="left")
    hit = (j < n) & (records[np.minimum(j, n - 1)] == probes)
    if first_only:
        hit[1:] &= probes[1:] != probes[:-1]
    after = np.full(len(probes), -1, dtype=np.int64)
    after[~hit] = np.searchsorted(records, probes[~hit], side="right")
    return j, hit, after


def _join_groups(records: np.ndarray, rstarts: np.ndarray, probes: np.ndarray,
                 pstarts: np.ndarray, first_only: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_join_sorted` of every group g - ``records[rstarts[g]:rstarts[g+1]]`` with
    ``probes[pstarts[g]:pstarts[g+1]]`` (a queue's records of a batch with its units) - with
    answers that index ``records`` as a whole: (j, hit, after), j -1 where no hit, after -1
    where one. The native core joins every group in one call; numpy (the reference) one group
    at a time."""
    core = native.core
    if core is not None:
        j, after = core.join_groups(np.ascontiguousarray(records, dtype=np.int64),
                                    np.ascontiguousarray(rstarts, dtype=np.int64),
                                    np.ascontiguousarray(probes, dtype=np.int64),
                                    np.ascontiguousarray(pstarts, dtype=np.int64), first_only)
        return j, j >= 0, after
    js, hits, afters = [], [], []
    for r0, r1, p0, p1 in zip(rstarts[:-1].tolist(), rstarts[1:].tolist(),
                              pstarts[:-1].tolist(), pstarts[1:].tolist()):
        if p1 == p0:
            continue
        j, hit, after = _join_sorted(records[r0:r1], probes[p0:p1], first_only)
        js.append(np.where(hit, j + r0, -1))
        hits.append(hit)
        afters.append(np.where(hit, -1, after + r0))
    return _joined(js, np.int64), _joined(hits, bool), _joined(afters, np.int64)


def _joined(parts: list, dtype) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


class _BatchProperties:
    """The properties of a batch's records, parsed only as far as the checks need them: by the
    scanner's native pass (spans in the file's buffer, TAGS hashed on the way), else copied into
    one blob and parsed here."""

    def __init__(self, batch: RecordBatch):
        parsed = batch.parsed
        if parsed is not None and set(parsed[0]) >= set(_PROPERTY_NAMES):
            self.source, self.blob = batch.buf, None
            self.values, self.tag_hashes, self.keys = parsed[0], parsed[1:3], parsed[3]
        else:
            self.blob, _, self.values = _codec.property_spans(*batch.properties_source(),
                                                              _PROPERTY_NAMES)
            self.source, self.tag_hashes, self.keys = self.blob, None, None
        self._tags_codes = None

    @property
    def data(self) -> np.ndarray:
        """The bytes the spans index (uint8); a view of the file's mapping is only to be held
        while the scan is at this batch (the mapping cannot close while it exists)."""
        return self.blob if self.blob is not None else np.frombuffer(self.source, np.uint8)

    def raw(self, start: int, end: int) -> bytes:
        return bytes(self.source[start:end])

    def tags_codes(self, batch: RecordBatch, delays: dict) -> np.ndarray:
        """The tagsCode each record's ConsumeQueue unit should carry (codecs.tags_code)."""
        if self._tags_codes is None:
            codes = _codec.string_hash_codes(self.data, *self.values["TAGS"],
                                             hashed=self.tag_hashes)
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

    #: called with every scan event first (:func:`mqtool.verify.run.check_file`'s ``observe``)
    observe = None

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
        self.preloaded: dict = {}       # key -> (numbers, units) the hints read, or None
        self.prefixes: dict[int, int] = {}
        self.delays: dict[bytes, int] = {}
        self.seq = 0
        self.newest = None
        self.queue_ends = QueueEnds(seg.base_offset, [seg.base_offset]) \
            if ctx.count_queue_ends else None
        try:
            for event in scan_segment_batches(seg, check_crc=ctx.check_crc, resync=True,
                                              progress=self.progress, hints=self._hints(),
                                              properties=_PROPERTY_NAMES, hashed="TAGS",
                                              index_keys=_INDEX_KEYS, threads=ctx.threads):
                if self.observe is not None:
                    self.observe(event)
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
        result.queue_ends = self.queue_ends.summary() if self.queue_ends is not None else None
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
        for key, info in self.ctx.queues.items():
            if info.max_offset < seg.base_offset or info.min_offset >= end:
                continue
            start = self._seek(list(info.files), _CQ_STRUCT, 0, info.first_valid,
                               info.valid_end, end)
            if start is None:
                self.preloaded[key] = None
                continue
            cursor = _ItemCursor(list(info.files), CQ_UNIT_DTYPE, "commitlog_offset", self.fds,
                                 start, info.valid_end, end)
            numbers, units = cursor.rest()
            parts.append(units["commitlog_offset"].astype(np.int64))
            total += len(units)
            if total <= _MAX_PRELOADED:
                # the merge reads exactly these units again: keep them (a seek and a read less)
                self.preloaded[key] = (numbers, units)
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
        self.result.own_property_batch_records += own_property_batch_rows(
            batch, self._properties(batch).values)
        live = self._judge(batch, judge, offsets)
        # what an abnormal recovery re-dispatches from this file: the consumer findings need
        # each queue's end after it (consumers.ends_over_files)
        if self.queue_ends is not None:
            self.queue_ends.add(batch, offsets, live)
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
            merged, every = [], []
            for k in np.argsort(order[first], kind="stable").tolist():
                members = dispatched[order[first[k]:last[k]]]
                i0 = int(members[0])
                key = (batch.topics.names[batch.topic_id[i0]], int(batch.queue_id[i0]))
                if key[0] in self.ctx.batch_topics:
                    self.result.batch_records.setdefault(key, []).extend(
                        offsets[members].tolist())
                elif key not in self.ctx.unchecked_queues:
                    merged.append((key, members))
                every.append((key, members))
            self._merge_queues(batch, merged, live)
            self._queue_offsets(batch, every)
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
        if key in self.preloaded:
            loaded = self.preloaded.pop(key)
            if loaded is not None:
                cursor = _ItemCursor.loaded(*loaded, "commitlog_offset")
        elif info is not None and info.max_offset >= seg.base_offset and info.min_offset < end:
            start = self._seek(list(info.files), _CQ_STRUCT, 0, info.first_valid,
                               info.valid_end, end)
            if start is not None:
                cursor = _ItemCursor(list(info.files), CQ_UNIT_DTYPE, "commitlog_offset",
                                     self.fds, start, info.valid_end, end)
        self.queue_cursors[key] = cursor
        return cursor

    def _merge_queues(self, batch: RecordBatch, merged: list, live: np.ndarray) -> None:
        """The units of every queue of the batch up to its last record in it, joined with the
        queue's records: one join (one native call) and one comparison for all queues."""
        if not merged:
            return
        offsets = self.offsets
        member_parts, number_parts, unit_parts = [], [], []
        mstarts, ustarts = [0], [0]
        for key, group in merged:
            member_parts.append(group)
            mstarts.append(mstarts[-1] + len(group))
            cursor = self._queue_cursor(key)
            count = 0
            if cursor is not None:
                numbers, units = cursor.take_through(int(offsets[group[-1]]), all_equal=False)
                count = len(units)
                if count:
                    number_parts.append(numbers)
                    unit_parts.append(units)
            ustarts.append(ustarts[-1] + count)
        members = _joined(member_parts, np.int64)
        matched = np.zeros(len(members), dtype=bool)
        if unit_parts:
            numbers = _joined(number_parts, np.int64)
            units = _joined(unit_parts, CQ_UNIT_DTYPE)
            u = units["commitlog_offset"].astype(np.int64)
            ustarts = np.array(ustarts, dtype=np.int64)
            # a duplicate is left over, as the merge does
            j, hit, after = _join_groups(offsets[members], np.array(mstarts, dtype=np.int64), u,
                                         ustarts, first_only=True)
            seq = self.seq
            left = np.flatnonzero(~hit)
            for k, g in zip(left.tolist(), (np.searchsorted(ustarts, left, side="right") - 1
                                            ).tolist()):
                at = members[int(after[k])]
                self.ordered.append(((seq + int(at), 4, int(numbers[k]), 0, 0),
                                     self._leftover_unit_finding(merged[g][0], int(numbers[k]),
                                                                 int(u[k]))))
            took = np.flatnonzero(hit)
            rows = j[took]
            hits = members[rows]
            self._compare_units(batch, merged, ustarts, took, hits, numbers[took], units[took])
            matched[rows] = True
            alive = int(live[hits].sum())
            self.result.matched_before_stop += alive
            self.result.matched_after_stop += len(hits) - alive
        unmatched = np.add.reduceat((~matched).astype(np.int64), mstarts[:-1]).tolist()
        for g, (key, group) in enumerate(merged):
            if unmatched[g]:
                self._missing_runs(batch, key, group, matched[mstarts[g]:mstarts[g + 1]], live)
            elif key in self.runs:
                self._log_run(self.runs.pop(key), int(group[0]))

    def _compare_units(self, batch: RecordBatch, merged: list, ustarts: np.ndarray,
                       took: np.ndarray, records: np.ndarray, numbers: np.ndarray,
                       units: np.ndarray) -> None:
        """The matched units (their places ``took`` among all units, queue by ``ustarts``)
        against their records: size, queue offset and tagsCode."""
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
        odd = np.flatnonzero(suspect)
        for k, g in zip(odd.tolist(), (np.searchsorted(ustarts, took[odd], side="right") - 1
                                       ).tolist()):
            i = int(records[k])
            rec = batch.record(i)
            finding = self._compare_unit_finding(
                merged[g][0], int(numbers[k]), (int(units["commitlog_offset"][k]), int(sizes[k]),
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

    def _queue_offsets(self, batch: RecordBatch, groups: list) -> None:
        """_queue_offset over the live dispatchable records of every queue of the batch
        (``groups``: (key, its records), in the order the reference meets the keys), folded for
        all queues at once (:mod:`mqtool.queue_runs`), each joined to its run so far."""
        members = _joined([records for _, records in groups], np.int64)
        group = np.repeat(np.arange(len(groups)), [len(records) for _, records in groups])
        qoffs = batch.queue_offset[members]
        offsets = self.offsets[members]
        steps = np.ones(len(members), dtype=np.int64)
        for k in np.flatnonzero(batch.sys_flag[members] & _INNER_BATCH).tolist():
            props = batch.record(int(members[k])).properties
            try:
                steps[k] = max(1, int(props.get("INNER_NUM", "1")))
            except ValueError:
                steps[k] = 1
        expected, gaps, firsts, lasts = queue_runs.fold(qoffs, steps, group)
        spans = self.result.spans
        found = []
        for (key, _), first, last in zip(groups, firsts.tolist(), lasts.tolist()):
            span = spans.get(key)
            run, boundary = queue_runs.merge(
                queue_runs.Run(*span) if span is not None else None,
                queue_runs.piece(qoffs, offsets, steps, first, last))
            spans[key] = list(run)
            if boundary is not None:
                found.append((first, *boundary))
        found += [(k, int(qoffs[k]), int(expected[k]), int(offsets[k - 1]))
                  for k in np.flatnonzero(gaps).tolist()]
        for k, qoff, exp, previous in found:
            key = groups[int(group[k])][0]
            self.ordered.append(((self.seq + int(members[k]), 6, 0, 0, 0), self._cl_finding(
                "CQ_QUEUE_GAP", int(offsets[k]),
                queue_runs.message(key[0], key[1], qoff, exp, previous), topic=key[0],
                queue_id=key[1], queue_offset=qoff, details={"expected": exp})))

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
            j, hit, after = _join_sorted(offsets, phy, first_only=False)
            for k in np.flatnonzero(~hit).tolist():
                at = int(after[k])
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
        hashed = None
        if props.keys is not None:
            # split and hashed by the scanner's pass: the indexed records' keys
            owner, starts, ends, hashes, exact = props.keys
            keep = indexed[owner]
            records, starts, ends = owner[keep], starts[keep], ends[keep]
            hashed = (hashes[keep], exact[keep])
        else:
            u_start, u_end = props.values["UNIQ_KEY"]
            k_start, k_end = props.values["KEYS"]
            records, starts, ends = _codec.index_key_spans(
                props.data, (np.where(indexed, u_start, -1), u_end),
                (np.where(indexed, k_start, -1), k_end), _KEY_SEPARATOR)
        if len(records) == 0:
            return records, records
        prefixes = np.array([self._prefix(batch, t) for t in range(len(batch.topics.names))],
                            dtype=np.uint32)[batch.topic_id[records]]
        return records, _codec.index_key_hashes(props.data, starts, ends, prefixes,
                                                hashed=hashed)

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
