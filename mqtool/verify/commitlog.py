"""Checking one CommitLog file, record at a time (``engine="records"``): CRCs, lengths and
self-recorded offsets, where the broker's recovery would stop, and the streaming merge of the
records with the ConsumeQueue units and index entries pointing into the file. It is the
reference the run-at-a-time checker (:mod:`.batches`) is held equal to."""
from __future__ import annotations

import bisect
import collections

from .. import queue_runs
from ..codec import CQ_UNIT as _CQ_STRUCT
from ..codec import INDEX_ENTRY as _ENTRY_STRUCT
from ..errors import ParseError
from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..formats import consumequeue as cq_fmt
from ..formats import indexfile as idx_fmt
from ..passport import own_property_batch_record
from ..recovery import FileJudge
from ..scan import CorruptRegion, MessageRecord, message_at, scan_segment
from ..store import CommitLog
from ..vocabulary import WARNING
from .findings import Finding, _finding, _prop_crc_message
from .items import _FdCache, _ItemFile, _SortedItems
from .context import (_Context, _IndexInfo, _MissingRun, _QueueInfo, _SegmentResult,
                      _worker_commitlog)


_MAX_PER_SEGMENT = 5000
_INDEX_BATCH = 2048
_V2_MAGIC = cl_fmt.MESSAGE_MAGIC_CODE_V2
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
                    props = event.properties
                    if own_property_batch_record(event.topic, event.sys_flag, "UNIQ_KEY" in props,
                                                 "CLUSTER" in props):
                        result.own_property_batch_records += 1
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
        run, gap = queue_runs.merge(
            queue_runs.Run(*span) if span is not None else None,
            queue_runs.Run(qoff, record.offset, queue_runs.advance(qoff, step), record.offset))
        spans[key] = list(run)
        if gap is not None:
            self.cl("CQ_QUEUE_GAP", record.offset,
                    queue_runs.message(record.topic, record.queue_id, *gap),
                    topic=record.topic, queue_id=record.queue_id, queue_offset=qoff,
                    details={"expected": gap[1]})
