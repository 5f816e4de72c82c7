"""The broker's dispatch, offline: which CommitLog records are dispatched (scanned up to the
recovered end, judged with the broker's rules) and the ConsumeQueue units and index entries each
one makes, written through the staged writers."""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass

import numpy as np

from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..formats import consumequeue as cq_fmt
from ..queue_recovery import CONSUME_QUEUE, iter_cq_units
from ..recovery import BrokerRules, FileJudge, FileVerdict
from ..scan import RecordBatch, TopicTable, scan_segment_batches
from ..consumers import QueueEnds
from ..store import Segment, Store
from .pipeline import (ParallelJudgedRecords, _segment_batches, index_keys,  # noqa: F401
                       parse_properties, tags_codes)


_UNIT = cq_fmt.CQ_STORE_UNIT_SIZE
_NOT, _COMMIT = cl_fmt.TRANSACTION_NOT_TYPE, cl_fmt.TRANSACTION_COMMIT_TYPE
_ROLLBACK = cl_fmt.TRANSACTION_ROLLBACK_TYPE
_TYPE_MASK = cl_fmt.TRANSACTION_TYPE_MASK


# --- progress ---------------------------------------------------------------------------------------

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


def _dispatch_with_bar(store: Store, start: int, stop: int, progress, **kwargs) -> DispatchStats:
    with _bar(progress, "dispatch", _commitlog_bytes(store, start, stop)) as bar:
        return dispatch(store, start, stop, progress=bar, **kwargs)


# --- scanning records to dispatch ------------------------------------------------------------------

def reput_batches(store: Store, start: int, stop: int, topics: TopicTable, progress=None):
    """The records in [start, stop) the way the broker's recovery/reput walks them, as record
    batches: file by file, a blank record moves to the next file, anything unreadable ends the
    walk in that file."""
    for seg in store.commitlog.segments:
        if seg.base_offset + seg.length <= start:
            continue
        if seg.base_offset >= stop:
            break
        done = max(start, seg.base_offset)
        for batch in _segment_batches(seg, start, stop, topics):
            yield batch
            if progress is not None:
                last = int(batch.offsets[-1])
                progress.update(max(0, last - done))
                done = max(done, last)
        if progress is not None:
            end = min(stop, seg.base_offset + seg.length)
            if end > done:
                progress.update(end - done)


def iter_records(store: Store, start: int, stop: int, progress=None):
    """:func:`reput_batches`' records one by one."""
    for batch in reput_batches(store, start, stop, TopicTable(), progress):
        yield from batch.records()


class _ReputWalk:
    """reput_batches' records for :func:`dispatch` in this process: read as batches."""

    def __init__(self, store: Store, start: int, stop: int, progress):
        self.store, self.start, self.stop, self.progress = store, start, stop, progress

    def __iter__(self):
        return iter_records(self.store, self.start, self.stop, self.progress)

    def batches(self, topics: TopicTable):
        return reput_batches(self.store, self.start, self.stop, topics, self.progress)


def reput_records(store: Store, start: int, stop: int, progress=None, workers: int = 1):
    """:func:`iter_records`, walked by ``workers`` processes (file by file) when there are
    several files to walk and more than one worker."""
    segments = [seg for seg in store.commitlog.segments
                if seg.base_offset + seg.length > start and seg.base_offset < stop]
    if workers <= 1 or len(segments) <= 1:
        return _ReputWalk(store, start, stop, progress)
    records = ParallelJudgedRecords(segments, 0, None, {}, workers, reput=(start, stop))
    records.progress = progress
    return records


_HINTS_KEPT = 2_000_000   # offsets kept in memory (16 MB); past that a file is read again


class RecordHints:
    """Where the store's ConsumeQueue units say records start, per CommitLog file: the scanner
    follows these runs instead of walking record by record. It checks every step, so a wrong,
    stale or missing unit costs time, never a different result."""

    def __init__(self, store: Store):
        self._files: list[tuple[int, int, object, np.ndarray | None]] = []
        self._units_per_file = store.cq_units_per_file   # the broker maps no more of a file
        kept = 0
        for queue in store.consume_queues:
            for seg in queue.segments:
                offsets = self._read(seg.path, self._units_per_file)
                if len(offsets) == 0:
                    continue
                keep = offsets if kept + len(offsets) <= _HINTS_KEPT else None
                kept += len(offsets) if keep is not None else 0
                self._files.append((int(offsets.min()), int(offsets.max()), seg.path, keep))

    @staticmethod
    def _read(path, units_per_file: int) -> np.ndarray:
        parts = [units["commitlog_offset"][CONSUME_QUEUE.valid(units)].astype(np.int64)
                 for _, units in iter_cq_units(path, units_per_file, CONSUME_QUEUE)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def for_segment(self, seg: Segment) -> np.ndarray | None:
        lo, hi = seg.base_offset, seg.base_offset + seg.length
        parts = []
        for first, last, path, offsets in self._files:
            if last < lo or first >= hi:
                continue
            if offsets is None:
                offsets = self._read(path, self._units_per_file)
            parts.append(offsets[(offsets >= lo) & (offsets < hi)])
        return np.concatenate(parts) if parts else None


def judged_records(store: Store, segments: list[Segment], start_index: int, rules: BrokerRules,
                   verdicts: dict[int, FileVerdict], progress=None,
                   hints: RecordHints | None = None) -> "_JudgedRecords":
    """The records abnormal recovery dispatches, found by the same scan that decides where it
    stops: each file's events go to the broker's judge (:class:`FileJudge`, CRCs included) and
    the records it accepts are yielded, so the CommitLog is read once. Each file's verdict lands
    in ``verdicts`` for :func:`predict_recovery`."""
    return _JudgedRecords(store, segments, start_index, rules, verdicts, progress, hints)


class _JudgedRecords:
    """judged_records' records: iterated one by one, or read by :func:`dispatch` as the
    scanner's record batches (cut where the judge stops)."""

    def __init__(self, store, segments, start_index, rules, verdicts, progress, hints=None):
        self.store, self.segments, self.start_index = store, segments, start_index
        self.rules, self.verdicts, self.progress = rules, verdicts, progress
        self.hints = hints

    def __iter__(self):
        for batch in self.batches(TopicTable()):
            yield from batch.records()

    def batches(self, topics: TopicTable):
        """The same records as RecordBatches, each valid until the next is asked for."""
        for i in range(self.start_index, len(self.segments)):
            seg = self.segments[i]
            judge = FileJudge(seg, self.rules)
            hints = self.hints.for_segment(seg) if self.hints is not None else None
            for event in scan_segment_batches(seg, check_crc=self.rules.check_crc, resync=True,
                                              progress=self.progress, topics=topics,
                                              hints=hints):
                if type(event) is not RecordBatch:
                    judge.feed(event)
                    continue
                # the judge accepts a leading run of records; once stopped it only counts
                accepted = judge.feed_batch(event)
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
    queue_ends: QueueEnds | None = None


def dispatch(store: Store, start: int, stop: int, *, cq, cq_from: int, index,
             index_from: int, schedule_loaded: bool = True, queues: set | None = None,
             progress=None, records=None, bcq=None,
             workers: int = 1, queue_ends_from: int | None = None) -> DispatchStats:
    """The broker's doDispatch for every record in [start, stop) (or of ``records``):
    CommitLogDispatcherBuildConsumeQueue for records at or after ``cq_from`` (optionally only for
    ``queues``; records of ``bcq``'s batch topics go to their BatchConsumeQueues, or nowhere
    without ``bcq``), BuildIndex for records at or after ``index_from``. The writers deduplicate
    as the broker's do. Without ``records``, ``workers`` > 1 processes walk the CommitLog files
    (the same walk as :func:`iter_records`) while this one dispatches, in offset order.

    With ``queue_ends_from``, ``stats.queue_ends`` counts each queue's end after the records from
    there on (:class:`QueueEnds`).

    The writers are the callers' (this room is below them): ``cq`` a
    :class:`mqtool.repair.writers.StagedConsumeQueueWriter` or a RocksDB
    :class:`mqtool.rocksdb_recovery.UnitSink`, ``bcq`` a ``StagedBatchConsumeQueueWriter``,
    ``index`` a ``RepairIndexWriter``; each may be None.

    Records are taken a chunk at a time so that the properties every record needs (TAGS, the
    index keys) are parsed and hashed with numpy for the whole chunk."""
    stats = DispatchStats()
    if queue_ends_from is not None:
        stats.queue_ends = QueueEnds(queue_ends_from,
                                     [seg.base_offset for seg in store.commitlog.segments])
    batch_topics = bcq.topics if bcq is not None else {
        q.topic for q in store.batch_consume_queues}
    if records is None:
        records = reput_records(store, start, stop, progress, workers)
    topics = TopicTable()
    prefixes: dict[int, int] = {}
    if isinstance(records, ParallelJudgedRecords):
        batches = records.parsed_batches(topics)
    else:
        batches = ((batch, None) for batch in (
            records.batches(topics) if isinstance(records, (_JudgedRecords, _ReputWalk))
            else _record_batches(records, topics)))
    for batch, keys in batches:
        offsets = batch.offsets
        props = _DispatchProperties(batch, keys, whole=index is not None and index.enabled)
        _dispatch_queues(batch, offsets, props, stats, cq=cq, bcq=bcq, cq_from=cq_from,
                         queues=queues, batch_topics=batch_topics,
                         schedule_loaded=schedule_loaded)
        if index is not None:
            _dispatch_index(batch, offsets, props, index, index_from, prefixes)
        if stats.queue_ends is not None:
            stats.queue_ends.add(batch, offsets)
        stats.records += len(batch)
        stats.last_offset = int(offsets[-1])
        stats.last_timestamp = int(batch.store_timestamp[-1])
    return stats


_DISPATCH_CHUNK = 4096


def _record_batches(records, topics: TopicTable):
    """MessageRecords as RecordBatches of up to _DISPATCH_CHUNK records."""
    records = iter(records)
    while True:
        chunk = list(itertools.islice(records, _DISPATCH_CHUNK))
        if not chunk:
            return
        yield RecordBatch.from_records(chunk, 0, topics)


class _DispatchProperties:
    """The properties dispatch reads: parsed for the whole batch when first asked for if
    ``whole`` (the index needs every record's keys), else only for the records asked about."""

    def __init__(self, batch: RecordBatch, keys: tuple | None = None, whole: bool = True):
        self.batch = batch
        self.data = self.values = None
        # hashed by a scanning worker (pipeline.index_keys) for every record but a rollback:
        # (row, hash) in put order; nothing else of the batch needs parsing then
        self.keys = keys
        self.whole = whole and keys is None

    def spans(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        if self.data is None:
            self.data, self.values = parse_properties(self.batch)
        return self.values[name]

    def decoded(self, i: int) -> dict[str, str]:
        """All properties of one record (what the rare cases read)."""
        return codecs.decode_properties(self.batch.properties_raw(i))

    def tags_hashes(self, rows: np.ndarray) -> np.ndarray:
        """hashCode of the TAGS of the records ``rows``, 0 without: tags_code outside
        SCHEDULE_TOPIC."""
        if self.whole or self.data is not None:
            self.spans("TAGS")
            return tags_codes(self.data, self.values, rows)
        return tags_codes(*parse_properties(self.batch, ("TAGS",), rows))


def _dispatch_queues(batch: RecordBatch, offsets: np.ndarray, props: _DispatchProperties,
                     stats: DispatchStats, *, cq, bcq, cq_from: int, queues, batch_topics,
                     schedule_loaded: bool) -> None:
    """CommitLogDispatcherBuildConsumeQueue for the records of a batch, in order. A unit holds
    the offset its record states (PHYSICALOFFSET: the dispatch request's commitLogOffset), which
    only a damaged field makes differ from ``offsets``, the positions that say which records
    are dispatched."""
    to_bcq, to_cq = _dispatch_targets(batch, offsets, cq=cq, bcq=bcq, cq_from=cq_from,
                                      queues=queues, batch_topics=batch_topics)
    offered = np.flatnonzero(to_bcq | to_cq)
    if len(offered) == 0:
        return
    # putMessagePositionInfoWrapper sets logicsMsgTimestamp even for a repeated unit
    stats.last_cq_timestamp = int(batch.store_timestamp[offered[-1]])
    rows = np.flatnonzero(_not_covered(batch, cq, to_bcq, to_cq, stats))
    if len(rows) == 0:
        return
    _put_batch_units(batch, rows, to_bcq, props, bcq, stats)
    rows = rows[to_cq[rows]]
    if len(rows) == 0:
        return
    _put_queue_units(batch, rows, props, cq, stats, schedule_loaded)


def _dispatch_targets(batch: RecordBatch, offsets: np.ndarray, *, cq, bcq, cq_from: int,
                      queues, batch_topics) -> tuple[np.ndarray, np.ndarray]:
    """(to the BatchConsumeQueue, to the ConsumeQueue) per record: normal and COMMIT records
    at or past ``cq_from`` (of the selected ``queues``), by their topic's kind."""
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
    return to_bcq, to_cq


def _not_covered(batch: RecordBatch, cq, to_bcq: np.ndarray, to_cq: np.ndarray,
                 stats: DispatchStats) -> np.ndarray:
    """The records still to put: every BatchConsumeQueue one, and the ConsumeQueue ones their
    queue does not already cover (its max physical offset or write position)."""
    sizes, stated = batch.total_size, batch.physical_offset
    names = batch.topics.names
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
        covered = (stated[cq_rows] + sizes[cq_rows] <= max_physic[inverse]) | (
            has_pos[inverse] & (batch.queue_offset[cq_rows] * _UNIT < write_pos[inverse]))
        live = live.copy()
        live[cq_rows[~covered]] = True
    return live


def _put_batch_units(batch: RecordBatch, rows: np.ndarray, to_bcq: np.ndarray,
                     props: _DispatchProperties, bcq, stats: DispatchStats) -> None:
    """BatchConsumeQueue units for the batch-topic records among ``rows``."""
    sizes, stamps, stated = batch.total_size, batch.store_timestamp, batch.physical_offset
    names = batch.topics.names
    for i in np.flatnonzero(to_bcq[rows]).tolist():
        i = int(rows[i])
        topic, stamp = names[batch.topic_id[i]], int(stamps[i])
        record_props = props.decoded(i)
        if bcq.put(topic, int(batch.queue_id[i]), int(stated[i]), int(sizes[i]),
                   codecs.tags_code(topic, record_props, stamp), stamp,
                   *codecs.batch_position(record_props, int(batch.queue_offset[i]))):
            stats.cq_written += 1


def _put_queue_units(batch: RecordBatch, rows: np.ndarray, props: _DispatchProperties, cq,
                     stats: DispatchStats, schedule_loaded: bool) -> None:
    """ConsumeQueue units for ``rows``, a queue at a time, with their tagsCode (a delay
    message's delivery time, or 4.9's TAGS hash when recovery runs before the schedule
    service loads)."""
    sizes, stamps, stated = batch.total_size, batch.store_timestamp, batch.physical_offset
    names = batch.topics.names
    schedule = batch.topics.find(codecs.SCHEDULE_TOPIC)
    codes = props.tags_hashes(rows).astype(np.int64)
    topic_ids = batch.topic_id[rows]
    for k in np.flatnonzero(topic_ids == schedule).tolist() if schedule is not None else ():
        i = int(rows[k])
        record_props = props.decoded(i)
        if schedule_loaded:
            codes[k] = codecs.tags_code(codecs.SCHEDULE_TOPIC, record_props, int(stamps[i]))
        else:
            # 4.9 recovers before ScheduleMessageService.load(): maxDelayLevel is still 0,
            # so the level clamps to 0 and the unit keeps the TAGS hash instead of the
            # delivery time (crash-lost-small/recovered shows it)
            tags = record_props.get("TAGS")
            codes[k] = codecs.java_string_hash(tags) if tags else 0
    # each queue's units in record order, a queue at a time (its files are its own); the
    # writer skips what the broker's putMessagePositionInfo skips
    keys = (topic_ids.astype(np.int64) << 32) | (batch.queue_id[rows] & 0xFFFFFFFF)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(first) + 1))
    for u in np.argsort(first, kind="stable").tolist():
        members = order[bounds[u]:bounds[u + 1]]
        sel = rows[members]
        topic, queue_id = names[batch.topic_id[sel[0]]], int(batch.queue_id[sel[0]])
        stats.cq_written += cq.put_run(topic, queue_id, stated[sel], sizes[sel],
                                       codes[members], batch.queue_offset[sel])


def _dispatch_index(batch: RecordBatch, offsets: np.ndarray, props: _DispatchProperties,
                    index, index_from: int, prefixes: dict[int, int]) -> None:
    """BuildIndex for the records of a batch: UNIQ_KEY then each KEYS item of every record,
    hashed as ``topic#key`` together and put in that order.

    The dispatch request carries the offset the record states (its PHYSICALOFFSET field): that
    is what an entry holds and what buildIndex compares with the IndexFile's endPhyOffset. Only
    a damaged field makes it differ from the record's position; the records of such a batch
    are then judged one by one (``offsets``, the positions, still say which are dispatched)."""
    wanted = (offsets >= index_from) & ((batch.sys_flag & _TYPE_MASK) != _ROLLBACK)
    stated = batch.physical_offset
    damaged = not np.array_equal(stated, offsets)
    # offsets grow through the dispatch, so only records before the writer's last one (a
    # seeded file's) are already indexed
    if index.has_file and not damaged:
        wanted &= offsets >= index.end_phy_offset
    rows = np.flatnonzero(wanted)
    if len(rows) == 0 or not index.enabled:
        return
    if props.keys is not None:
        # hashed by the scanning worker for every non-rollback record: keep the wanted ones
        owners, hashes = props.keys
        keep = wanted[owners]
        owners, hashes = owners[keep], hashes[keep]
    else:
        props.spans("KEYS")   # parses the batch's properties

        def prefix_of(t: int) -> int:
            if t not in prefixes:
                prefixes[t] = codecs.index_key_prefix_hash(batch.topics.names[t])
            return prefixes[t]

        owner, hashes = index_keys(props.data, props.values, rows, batch.topic_id, prefix_of)
        owners = rows[owner]
    if damaged:
        owners, hashes = _stated_guard(rows, owners, hashes, stated, index)
    if len(owners) == 0:
        return
    # keys held back by an earlier build_index go first
    index.put_held()
    index.put_many(hashes, stated[owners], batch.store_timestamp[owners])


def _stated_guard(rows: np.ndarray, owners: np.ndarray, hashes: np.ndarray, stated: np.ndarray,
                  index) -> tuple[np.ndarray, np.ndarray]:
    """buildIndex's ``commitLogOffset < endPhyOffset`` test, record by record in dispatch order,
    with the offsets the records state: each record that puts a key moves endPhyOffset to its
    stated offset (a damaged one may move it back, or far ahead of the records after it)."""
    end = index.end_phy_offset if index.has_file else None
    putting = set(owners.tolist())
    kept = set()
    for row in rows.tolist():
        offset = int(stated[row])
        if end is not None and offset < end:
            continue
        kept.add(row)
        if row in putting:
            end = offset
    keep = np.fromiter((o in kept for o in owners.tolist()), dtype=bool, count=len(owners))
    return owners[keep], hashes[keep]


def last_record_before(store: Store, offset: int):
    """The last message record that starts before ``offset`` (None if there is none)."""
    earlier = [s for s in store.commitlog.segments if s.base_offset < offset]
    for seg in reversed(earlier):
        last = None
        for batch in _segment_batches(seg, seg.base_offset, offset, TopicTable()):
            last = batch.record(len(batch) - 1)
        if last is not None:
            return last
    return None
