"""Consumer forensics: who had consumed what, and what the broker's next start does to each group.

The committed offsets come from ``config/consumerOffset.json`` (read as the broker reads it,
:mod:`mqtool.config`); the queues from the ConsumeQueue / BatchConsumeQueue files; the queue ends
after the next start from the same recovery prediction ``verify`` makes
(:func:`mqtool.recovery.predict_recovery`), plus what that start dispatches again.

What the start does to a group's offset ``X`` is decided at the group's first pull, by
``DefaultMessageStore.getMessage`` against the queue's min ``m`` and max ``M`` (the same code in
4.9.8 and 5.3.3), answered by PullMessageProcessor:

* ``M == 0`` -> NO_MESSAGE_IN_QUEUE, next offset 0 (PULL_OFFSET_MOVED when X != 0);
* ``X < m``  -> OFFSET_TOO_SMALL, next offset m (PULL_OFFSET_MOVED);
* ``X == M`` -> OFFSET_OVERFLOW_ONE, next offset X (PULL_NOT_FOUND: the group waits);
* ``X > M``  -> OFFSET_OVERFLOW_BADLY, next offset M (PULL_OFFSET_MOVED);
* otherwise the messages from X are delivered.

``nextOffsetCorrection`` applies the new offset only on a master (brokerRole != SLAVE) or with
offsetCheckInSlave; a slave keeps X. A push consumer then stores the corrected offset (the broker
commits it with the next pull); 5.x pop consumption commits it on the broker at once
(PopMessageProcessor). Nothing changes consumerOffset.json at load time. The scheduler's
delayOffset.json is different: ScheduleMessageService.load clamps each level's offset into its
SCHEDULE_TOPIC_XXXX queue's [min, max] right after the store's recover() (correctDelayOffset,
4.9.8 and 5.3.3), before 4.9's start() re-dispatches anything.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from . import config as cfg
from .errors import MqtoolError, OptionalDependencyError, ParseError
from .finding import Finding
from .formats import codecs
from .formats import commitlog as cl_fmt
from .formats import consumequeue as cq_fmt
from .queue_recovery import (BATCH_CONSUME_QUEUE, CONSUME_QUEUE, iter_cq_units, queue_kinds,
                             recover_consume_queue)
from .recovery import RecoveryPlan
from .scan import MessageRecord, RecordBatch, Scanner, TopicTable, message_at
from .store import ConsumeQueue, Store
from .vocabulary import CONSUMER_CODES, ERROR, VERSION_49, WARNING

SCHEDULE_TOPIC = codecs.SCHEDULE_TOPIC
#: topics the broker adds to its topic table itself (TopicConfigManager's constructor / init in
#: 4.9.8 and 5.3.3, or on demand): missing from topics.json is normal for them
BROKER_OWN_TOPICS = frozenset({
    "TBW102", SCHEDULE_TOPIC, "BenchmarkTest", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
    "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC"})
BROKER_OWN_PREFIX = "rmq_sys_"

# the codes live in mqtool.vocabulary (the CLI lists them without importing numpy)

RULES = {
    "4.9": ("DefaultMessageStore.getMessage (4.9.8): maxOffset == 0 -> NO_MESSAGE_IN_QUEUE, next 0; "
            "offset < min -> OFFSET_TOO_SMALL, next min; offset == max -> OFFSET_OVERFLOW_ONE, "
            "next offset; offset > max -> OFFSET_OVERFLOW_BADLY, next max; nextOffsetCorrection "
            "applies it unless the broker is a SLAVE without offsetCheckInSlave. "
            "PullMessageProcessor answers PULL_OFFSET_MOVED (the client stores the new offset "
            "and the broker commits it with the next pull) or PULL_NOT_FOUND for "
            "OFFSET_OVERFLOW_ONE."),
    "5.x": ("DefaultMessageStore.getMessage (5.3.3): the same four rules and the same "
            "nextOffsetCorrection; PullMessageProcessor answers as in 4.9; a pop consumer's "
            "PopMessageProcessor commits the corrected offset on the broker itself "
            "(OFFSET_TOO_SMALL / OFFSET_OVERFLOW_BADLY / OFFSET_FOUND_NULL)."),
}


# --- queue bounds -------------------------------------------------------------------------------

@dataclass
class QueueBounds:
    """A queue's min/max offsets now and through the next start (all in queue offsets)."""

    topic: str
    queue_id: int
    kind: str | None                 # consumequeue | batchconsumequeue | None (no files)
    min_offset: int = 0              # getMinOffsetInQueue now
    max_offset: int = 0              # getMaxOffsetInQueue as ConsumeQueue.recover finds it now
    max_at_load: int = 0             # after recover()'s truncation, before any re-dispatch
    max_after_start: int = 0         # once the start has dispatched again what it will
    min_after_start: int = 0

    @property
    def truncated(self) -> int:
        """Messages of this queue the next start drops for good."""
        return max(0, self.max_offset - self.max_after_start)


def _chunks_of(queue: ConsumeQueue, upf: int, batch: bool):
    """(base unit of the file, first unit index in it, units) of a queue's files, a bounded
    chunk at a time."""
    kind = BATCH_CONSUME_QUEUE if batch else CONSUME_QUEUE
    for seg in queue.segments:
        for first, units in iter_cq_units(seg.path, upf, kind):
            yield seg.base_offset // kind.unit_size, first, units


def _cq_min(queue: ConsumeQueue, upf: int, commitlog_min: int, valid_end: int) -> int:
    """correctMinOffset: the first unit of the first file pointing at or past the CommitLog's
    first offset (read up to the queue's written end)."""
    if not queue.segments:
        return 0
    seg = queue.segments[0]
    base = seg.base_offset // cq_fmt.CQ_STORE_UNIT_SIZE
    for first, units in iter_cq_units(seg.path, upf):
        units = units[:max(0, valid_end - base - first)]
        hits = np.flatnonzero(units["commitlog_offset"] >= commitlog_min)
        if len(hits):
            return base + first + int(hits[0])
        if len(units) == 0:
            break
    return base


def _bcq_offset_at(queue: ConsumeQueue, upf: int, unit_end: int) -> tuple[int, int]:
    """(min, next) queue offsets of a BatchConsumeQueue whose valid units end at ``unit_end``."""
    lowest, following = None, 0
    for base, first, units in _chunks_of(queue, upf, True):
        keep = units[:max(0, unit_end - base - first)]
        ok = (keep["commitlog_offset"] >= 0) & (keep["size"] > 0) & (keep["batch_size"] > 0)
        keep = keep[ok]
        if len(keep):
            if lowest is None:
                lowest = int(keep["msg_base_offset"][0])
            following = int(keep["msg_base_offset"][-1]) + int(keep["batch_size"][-1])
    return (lowest if lowest is not None else following), following


def _redispatched_ends(store: Store, plan: RecoveryPlan) -> dict[tuple[str, int], int]:
    """(topic, queue) -> next queue offset after the records the start dispatches again
    (``redispatch_from`` .. processOffset): PREPARED/ROLLBACK records get no unit, an inner
    batch advances by INNER_NUM. Recover's dispatch already walked those records and may have
    left their ends on the plan (reput.dispatching.QueueEnds); else the range is scanned."""
    start, end = plan.redispatch_from, plan.process_offset
    ends: dict[tuple[str, int], int] = {}
    if start is None or start >= end:
        return ends
    if plan.redispatched_ends is not None:   # counted by recover's dispatch
        return dict(plan.redispatched_ends)
    scanner = Scanner(store.commitlog, check_crc=False)
    topics = TopicTable()
    dispatched = (cl_fmt.TRANSACTION_NOT_TYPE, cl_fmt.TRANSACTION_COMMIT_TYPE)
    for seg in scanner.segments(start, end):
        lo = start if start > seg.base_offset else None
        for event in scanner.scan_segment_batches(seg, lo, end, topics=topics):
            if not isinstance(event, RecordBatch):
                continue
            offsets = event.offsets
            keep = (offsets >= start) & (offsets < end)
            tran = event.sys_flag & cl_fmt.TRANSACTION_TYPE_MASK
            keep &= np.isin(tran, dispatched)
            inner = keep & ((event.sys_flag & cl_fmt.INNER_BATCH_FLAG) != 0)
            plain = keep & ~inner
            following = event.queue_offset[plain] + 1
            keys = (event.topic_id[plain].astype(np.int64) << 32) | \
                (event.queue_id[plain].astype(np.int64) & 0xFFFFFFFF)
            if len(keys):
                order = np.lexsort((following, keys))
                last = np.concatenate((keys[order][1:] != keys[order][:-1], [True]))
                for key, top in zip(keys[order][last].tolist(), following[order][last].tolist()):
                    _raise(ends, (topics.names[key >> 32], _signed32(key & 0xFFFFFFFF)), top)
            for i in np.flatnonzero(inner).tolist():
                step = codecs.batch_position(event.record(i).properties,
                                             int(event.queue_offset[i]))[1]
                _raise(ends, (topics.names[int(event.topic_id[i])], int(event.queue_id[i])),
                       int(event.queue_offset[i]) + max(1, step))
    return ends


class QueueEnds:
    """Each queue's next queue offset after the dispatched records from ``start`` on, as the
    broker's dispatch leaves it: records of a queue, PREPARED/ROLLBACK excepted, each move it
    to their queue offset + 1 (an inner batch: + INNER_NUM). Recovery's consumer forensics need
    these for the re-dispatched range; the dispatch sees those records anyway, so it counts
    them instead of a second CommitLog scan.

    ``contiguous`` stays True while the records from ``start`` follow each other without a
    gap, a gap being allowed only where the next record starts a CommitLog file (the walk
    left the previous one at its blank end): only then are they every record a scan of the
    range finds, and only then may the ends stand for that scan's."""

    def __init__(self, start: int, file_starts):
        self.start = start
        self._file_starts = np.asarray(sorted(file_starts), dtype=np.int64)
        self._ends: dict[int, int] = {}
        self.end: int | None = None     # end of the last record counted
        self.contiguous = True
        self._topics: TopicTable | None = None

    def _starts_file(self, offsets: np.ndarray) -> np.ndarray:
        at = np.searchsorted(self._file_starts, offsets)
        at = np.minimum(at, len(self._file_starts) - 1)
        return self._file_starts[at] == offsets

    def add(self, batch: RecordBatch, offsets: np.ndarray, counted: np.ndarray | None = None
            ) -> None:
        """Count the records of ``batch`` from ``start`` on (only the ``counted`` ones)."""
        first = int(np.searchsorted(offsets, self.start))   # a batch's offsets grow
        rows = np.arange(first, len(batch))
        if counted is not None:
            rows = rows[counted[first:]]
        if len(rows) == 0:
            return
        self._topics = batch.topics
        offsets = offsets[rows]
        sizes = batch.total_size[rows].astype(np.int64)
        previous_end = self.end if self.end is not None else self.start
        follows = np.empty(len(offsets), dtype=np.int64)
        follows[0] = previous_end
        follows[1:] = offsets[:-1] + sizes[:-1]
        gaps = offsets != follows
        if gaps.any() and not self._starts_file(offsets[gaps]).all():
            self.contiguous = False
        self.end = int(offsets[-1] + sizes[-1])
        tran = batch.sys_flag[rows] & cl_fmt.TRANSACTION_TYPE_MASK
        kept = (tran == cl_fmt.TRANSACTION_NOT_TYPE) | (tran == cl_fmt.TRANSACTION_COMMIT_TYPE)
        inner = kept & ((batch.sys_flag[rows] & cl_fmt.INNER_BATCH_FLAG) != 0)
        plain = rows[kept & ~inner]
        if len(plain):
            keys = (batch.topic_id[plain].astype(np.int64) << 32) | \
                (batch.queue_id[plain].astype(np.int64) & 0xFFFFFFFF)
            following = batch.queue_offset[plain].astype(np.int64) + 1
            order = np.lexsort((following, keys))
            keys, following = keys[order], following[order]
            last = np.concatenate((keys[1:] != keys[:-1], [True]))
            for key, top in zip(keys[last].tolist(), following[last].tolist()):
                self._raise(key, top)
        for i in rows[inner].tolist():
            offset = int(batch.queue_offset[i])
            step = codecs.batch_position(codecs.decode_properties(batch.properties_raw(i)),
                                         offset)[1]
            self._raise((int(batch.topic_id[i]) << 32) | (int(batch.queue_id[i]) & 0xFFFFFFFF),
                        offset + max(1, step))

    def _raise(self, key: int, value: int) -> None:
        if value > self._ends.get(key, -1):
            self._ends[key] = value

    def by_queue(self) -> dict[tuple[str, int], int]:
        """(topic, queue id) -> next queue offset."""
        return {(self._topics.names[key >> 32], _signed32(key & 0xFFFFFFFF)): value
                for key, value in self._ends.items()}

    def summary(self) -> tuple[int, bool, int | None, dict]:
        """(start, contiguous, end, by_queue()): what a verify worker hands back for its file."""
        return self.start, self.contiguous, self.end, self.by_queue() if self._ends else {}

    def for_range(self, start: int | None, stop: int) -> dict[tuple[str, int], int] | None:
        """The ends for the records in [start, stop), or None when what was counted is not
        provably that range's records (another start, a gap, records past ``stop``, or a
        walk that stopped short of it other than at a file's end)."""
        if start != self.start or not self.contiguous or self.end is None:
            return None
        if self.end > stop:
            return None
        if self.end < stop and not self._starts_file(np.array([stop], dtype=np.int64))[0]:
            return None
        return self.by_queue()


def ends_over_files(parts: list[tuple], start: int | None, stop: int,
                    file_starts) -> dict[tuple[str, int], int] | None:
    """The re-dispatched ends of an abnormal recovery's range [start, stop) put together from
    each CommitLog file's :meth:`QueueEnds.summary` (files in order, each counted from its
    first byte over the records the broker's judge accepted), or None when they do not
    provably cover the range as a scan of it would: ``start`` must begin a file, every file
    from there must be counted without a gap, and the last record must end at ``stop`` (or
    ``stop`` begins a file)."""
    bases = {part[0] for part in parts}
    if start is None or start not in bases:
        return None
    ends: dict[tuple[str, int], int] = {}
    last_end = None
    for base, contiguous, end, by_queue in parts:
        if base < start or base >= stop:
            continue
        if not contiguous:
            return None
        if end is not None:
            last_end = end
        for key, value in by_queue.items():
            if value > ends.get(key, -1):
                ends[key] = value
    if last_end is None or last_end > stop or (last_end < stop and stop not in set(file_starts)):
        return None
    return ends


def _raise(ends: dict, key, value: int) -> None:
    if value > ends.get(key, -1):
        ends[key] = value


def _signed32(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def start_predicted(store: Store, plan: RecoveryPlan | None) -> bool:
    """False without a plan: queue ends are then taken as the files have them. DLedger-mode
    stores are predicted too (recovery.predict_recovery follows DLedger's own recovery there)."""
    return plan is not None


def queue_bounds(store: Store, plan: RecoveryPlan | None) -> dict[tuple[str, int], QueueBounds]:
    """Every queue's bounds now, at the start's load, and after its dispatching (the same as
    now where the start is not predicted, see :func:`start_predicted`)."""
    predicted = start_predicted(store, plan)
    if plan is not None:
        recoveries = plan.queue_recoveries
    else:   # ConsumeQueue.recover alone: where each queue ends as its files are now
        recoveries = [recover_consume_queue(q, upf, kind) for kind, queues, upf
                      in queue_kinds(store) for q in queues]
    recovered = {(q.topic, q.queue_id, q.kind): q for q in recoveries}
    truncated = {(t.topic, t.queue_id, t.kind): t for t in plan.cq_truncations} \
        if predicted else {}
    redispatched = _redispatched_ends(store, plan) if predicted else {}
    cl_min = store.commitlog.min_offset
    out: dict[tuple[str, int], QueueBounds] = {}
    for queues, kind, upf in ((store.consume_queues, CONSUME_QUEUE, store.cq_units_per_file),
                              (store.batch_consume_queues, BATCH_CONSUME_QUEUE,
                               store.bcq_units_per_file)):
        for queue in queues:
            rec = recovered.get((queue.topic, queue.queue_id, kind.directory))
            valid_end = rec.valid_end if rec is not None else 0
            cut = truncated.get((queue.topic, queue.queue_id, kind.directory))
            load_end = cut.new_end if cut is not None else valid_end
            if kind.batch:
                low, now = _bcq_offset_at(queue, upf, valid_end)
                _, at_load = _bcq_offset_at(queue, upf, load_end)
            else:
                low, now, at_load = _cq_min(queue, upf, cl_min, valid_end), valid_end, load_end
            key = (queue.topic, queue.queue_id)
            after = max(at_load, redispatched.get(key, 0))
            out[key] = QueueBounds(queue.topic, queue.queue_id, kind.directory, low, now,
                                   at_load, after, min(low, after))
    if store.queues_in_rocksdb:
        out.update(_rocksdb_bounds(store, plan, redispatched))
    for key, following in redispatched.items():
        if key not in out:   # a queue with no files yet: the start creates it
            out[key] = QueueBounds(key[0], key[1], None, 0, 0, 0, following, 0)
    return out


ROCKSDB_KIND = "rocksdb"   # QueueBounds.kind of a queue of a RocksDB ConsumeQueue


def _rocksdb_bounds(store: Store, plan: RecoveryPlan | None, redispatched: dict
                    ) -> dict[tuple[str, int], QueueBounds]:
    """Bounds of the queues of a RocksDB ConsumeQueue: minOffset/maxOffset as the broker's
    RocksDB CQ serves them, and after the start what its re-dispatch reaches (its recovery
    cuts no unit of a queue that ends before processOffset)."""
    from .rocksdb_cq import load_rocksdb_cq
    table = load_rocksdb_cq(store)
    out = {}
    for key, queue in table.queues.items():
        low, now = queue.min_offset, queue.max_offset
        at_load = now
        if plan is not None:
            end = plan.process_offset
            at_load = next((u.queue_offset for u in queue.served
                            if u.commitlog_offset + u.size > end), now)
        after = max(at_load, redispatched.get(key, 0))
        out[key] = QueueBounds(queue.topic, queue.queue_id, ROCKSDB_KIND, low, now, at_load,
                               after, min(low, after))
    return out


# --- what is unconsumed -------------------------------------------------------------------------

def _unit_range(queue: ConsumeQueue, upf: int, batch: bool, lo: int, hi: int):
    """Chunks of the units covering queue offsets [lo, hi), in order; a ConsumeQueue reads only
    the files holding them (its unit index is its queue offset)."""
    if batch:
        for _, _, units in _chunks_of(queue, upf, True):
            units = units[(units["batch_size"] > 0) & (units["size"] > 0)]
            top = units["msg_base_offset"] + units["batch_size"]
            yield units[(top > lo) & (units["msg_base_offset"] < hi)]
        return
    for seg in queue.segments:
        base = seg.base_offset // cq_fmt.CQ_STORE_UNIT_SIZE
        if base >= hi or base + upf <= lo:
            continue
        for first, units in iter_cq_units(seg.path, upf):
            start = base + first
            if start >= hi:
                break
            if start + len(units) > lo:
                yield units[max(0, lo - start):max(0, hi - start)]


def unconsumed(store: Store, bounds: QueueBounds, offset: int) -> dict:
    """Lag of a committed offset against the queue as it is on disk: messages, bytes (record
    sizes), and the store time of the oldest unconsumed message."""
    lo = max(offset, bounds.min_offset)
    hi = bounds.max_offset
    out = {"lag_messages": max(0, hi - max(offset, bounds.min_offset)) if hi else 0,
           "lag_bytes": 0, "oldest_unconsumed_store_time": None}
    if hi <= lo or bounds.kind is None:
        return out
    if bounds.kind == ROCKSDB_KIND:
        from .rocksdb_cq import load_rocksdb_cq
        queue = load_rocksdb_cq(store).queue(bounds.topic, bounds.queue_id)
        units = [u for u in queue.served if lo <= u.queue_offset < hi]
        out["lag_bytes"] = sum(u.size for u in units)
        if units:
            out["oldest_unconsumed_store_time"] = units[0].store_timestamp
        return out
    batch = bounds.kind == BATCH_CONSUME_QUEUE.directory
    queue = _find_queue(store, bounds)
    upf = store.bcq_units_per_file if batch else store.cq_units_per_file
    oldest = None
    for units in _unit_range(queue, upf, batch, lo, hi):
        if len(units) and oldest is None:
            oldest = units[0]
        out["lag_bytes"] += int(units["size"].astype(np.int64).sum())
    if oldest is None:
        return out
    if batch:
        out["oldest_unconsumed_store_time"] = int(oldest["store_timestamp"])
    else:
        try:
            record = message_at(store.commitlog, int(oldest["commitlog_offset"]),
                                check_crc=False)
            out["oldest_unconsumed_store_time"] = int(record.store_timestamp)
        except ParseError:
            pass   # the unit points at no record: verify reports it (CQ_DANGLING)
    return out


def _find_queue(store: Store, bounds: QueueBounds) -> ConsumeQueue:
    queues = store.batch_consume_queues if bounds.kind == BATCH_CONSUME_QUEUE.directory \
        else store.consume_queues
    for q in queues:
        if q.topic == bounds.topic and q.queue_id == bounds.queue_id:
            return q
    raise KeyError((bounds.topic, bounds.queue_id))


# --- the next start, per group and queue ----------------------------------------------------------

@dataclass
class NextStart:
    """What the group's first pull after the next start does with its committed offset."""

    status: str                 # FOUND | OFFSET_OVERFLOW_ONE | OFFSET_OVERFLOW_BADLY |
                                # OFFSET_TOO_SMALL | NO_MESSAGE_IN_QUEUE | NO_OFFSET
    next_offset: int            # on a master (or a slave with offsetCheckInSlave)
    slave_next_offset: int      # on a slave without offsetCheckInSlave
    delivers: int               # messages delivered from next_offset up to the queue end
    skips: int                  # messages the group certainly never gets (deleted by retention)
    skips_if_refilled: int      # OFFSET_OVERFLOW_BADLY: new messages skipped if written before
                                # the first pull (always on a slave without offsetCheckInSlave)
    consumed_then_dropped: int  # messages the group had consumed that the start drops
    unconsumed_dropped: int     # messages the group had NOT consumed that the start drops
    sentence: str


def next_start(offset: int, bounds: QueueBounds) -> NextStart:
    """getMessage's rule for ``offset`` against the queue after the next start."""
    low, high, now = bounds.min_after_start, bounds.max_after_start, bounds.max_offset
    consumed_dropped = max(0, min(offset, now) - high)
    unconsumed_dropped = max(0, now - max(offset, high))
    dropped = (f"; the start drops {unconsumed_dropped} message(s) the group had not consumed "
               f"(offsets {max(offset, high)}..{now - 1})" if unconsumed_dropped else "")
    if offset < 0:
        return NextStart("NO_OFFSET", offset, offset, 0, 0, 0, 0, 0,
                         f"offset {offset} is negative: the broker treats the group as new "
                         "(consumeFromWhere decides)")
    if high == 0:
        if offset == 0:
            return NextStart("NO_MESSAGE_IN_QUEUE", 0, 0, 0, 0, 0, consumed_dropped,
                             unconsumed_dropped, "queue empty after the start; nothing to "
                             "deliver" + dropped)
        return NextStart("NO_MESSAGE_IN_QUEUE", 0, offset, 0, 0, offset, consumed_dropped,
                         unconsumed_dropped,
                         f"queue empty after the start: the first pull moves offset {offset} "
                         f"back to 0 (a slave keeps {offset} and skips the first {offset} new "
                         "messages)" + dropped)
    if offset < low:
        return NextStart("OFFSET_TOO_SMALL", low, offset, high - low, low - offset, 0,
                         consumed_dropped, unconsumed_dropped,
                         f"offset {offset} is below the queue minimum {low}: moved up to {low}; "
                         f"skips {low - offset} message(s) already deleted, then delivers "
                         f"{high - low}" + dropped)
    if offset == high:
        return NextStart("OFFSET_OVERFLOW_ONE", offset, offset, 0, 0, 0, consumed_dropped,
                         unconsumed_dropped, f"caught up at {offset}: nothing to deliver"
                         + dropped)
    if offset > high:
        gap = offset - high
        return NextStart("OFFSET_OVERFLOW_BADLY", high, offset, 0, 0, gap, consumed_dropped,
                         unconsumed_dropped,
                         f"offset {offset} is past the queue end {high} after the start: the "
                         f"first pull moves it back to {high}, and the {gap} message(s) "
                         f"written next at {high}..{offset - 1} are delivered; it skips them "
                         f"if they are written before that pull (and always on a slave "
                         "without offsetCheckInSlave)" + dropped)
    return NextStart("FOUND", offset, offset, high - offset, 0, 0, consumed_dropped,
                     unconsumed_dropped,
                     f"delivers {high - offset} message(s) from offset {offset} (those read "
                     "but not yet committed come again)" + dropped)


# --- the report ---------------------------------------------------------------------------------

@dataclass
class ConsumerRow:
    group: str
    topic: str
    queue_id: int
    committed_offset: int
    min_offset: int
    max_offset: int
    max_after_start: int
    queue_on_disk: bool
    topic_in_config: bool | None
    lag_messages: int
    lag_bytes: int
    oldest_unconsumed_store_time: int | None
    below_min: int
    next_start: NextStart

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class DelayRow:
    level: int
    queue_id: int
    offset: int
    min_offset: int
    max_offset: int
    max_at_load: int
    corrected_offset: int       # what correctDelayOffset sets at load
    pending_after_start: int    # delay messages the scheduler still has to deliver
    sentence: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ConsumerReport:
    store: str
    broker_version: str | None
    recovery_mode: str | None
    offsets_source: str | None       # the file the broker loads, "rocksdb", or None
    configs: dict
    rows: list[ConsumerRow]
    delay: list[DelayRow]
    problems: list[str]
    notes: list[str] = field(default_factory=list)
    start_predicted: bool = True

    def groups(self) -> list[dict]:
        """One summary per group: queues, lag, what the start does."""
        out: dict[str, dict] = {}
        for row in self.rows:
            g = out.setdefault(row.group, {"group": row.group, "topics": set(), "queues": 0,
                                           "lag_messages": 0, "lag_bytes": 0,
                                           "moved_back": 0, "below_min": 0,
                                           "unconsumed_dropped": 0, "consumed_then_dropped": 0})
            g["topics"].add(row.topic)
            g["queues"] += 1
            g["lag_messages"] += row.lag_messages
            g["lag_bytes"] += row.lag_bytes
            g["below_min"] += row.below_min > 0
            g["moved_back"] += row.next_start.status == "OFFSET_OVERFLOW_BADLY"
            g["unconsumed_dropped"] += row.next_start.unconsumed_dropped
            g["consumed_then_dropped"] += row.next_start.consumed_then_dropped
        result = []
        for g in out.values():
            g["topics"] = sorted(g["topics"])
            result.append(g)
        return sorted(result, key=lambda g: g["group"])

    def to_dict(self) -> dict:
        return {"store": self.store, "broker_version": self.broker_version,
                "recovery_mode": self.recovery_mode, "start_predicted": self.start_predicted,
                "offsets_source": self.offsets_source,
                "configs": self.configs, "groups": self.groups(),
                "queues": [r.to_dict() for r in self.rows],
                "delay_levels": [d.to_dict() for d in self.delay],
                "problems": self.problems, "notes": self.notes,
                "rules": RULES}


def group_summary_lines(report: ConsumerReport) -> list[str]:
    """One line per group (what ``info`` can show)."""
    lines = []
    for g in report.groups():
        text = (f"{g['group']}: {g['queues']} queue(s) of {len(g['topics'])} topic(s), lag "
                f"{g['lag_messages']:,} message(s) / {g['lag_bytes']:,} bytes")
        if g["moved_back"] and report.start_predicted:
            text += f"; {g['moved_back']} queue(s) moved back by the next start"
        elif g["moved_back"]:
            text += f"; {g['moved_back']} queue(s) with the offset past the queue end"
        if g["unconsumed_dropped"]:
            text += f"; the next start drops {g['unconsumed_dropped']:,} unconsumed message(s)"
        if g["below_min"]:
            text += f"; {g['below_min']} queue(s) below the queue minimum"
        lines.append(text)
    return lines


def _delay_rows(store: Store, plan: RecoveryPlan, bounds, table: dict[int, int]) -> list[DelayRow]:
    rows = []
    # 4.9 loads the scheduler after recover() and before start() re-dispatches: a normal start
    # clamps against the truncated queue; abnormal recovery (and 5.x) dispatched already
    before_reput = plan is not None and plan.broker_version == VERSION_49 and \
        plan.mode == "normal"
    for level in sorted(table):
        offset = table[level]
        qid = level - 1
        b = bounds.get((SCHEDULE_TOPIC, qid)) or QueueBounds(SCHEDULE_TOPIC, qid, None)
        at_load = b.max_at_load if before_reput else b.max_after_start
        low = min(b.min_offset, at_load)
        corrected = low if offset < low else (at_load if offset > at_load else offset)
        pending = max(0, b.max_after_start - corrected)
        if corrected != offset:
            sentence = (f"level {level}: offset {offset} is outside SCHEDULE_TOPIC_XXXX queue "
                        f"{qid} [{low}, {at_load}] at load: correctDelayOffset sets it to "
                        f"{corrected}; {pending} delay message(s) then wait for delivery")
        else:
            sentence = f"level {level}: {pending} delay message(s) wait for delivery"
        rows.append(DelayRow(level, qid, offset, b.min_offset, b.max_offset, at_load, corrected,
                             pending, sentence))
    return rows


def _family(plan: RecoveryPlan | None) -> str | None:
    """The broker family whose config load applies (None: no plan, the older rule)."""
    return plan.broker_version if plan is not None else None


ROCKSDB_OFFSETS_SOURCE = "consumerOffsets/"   # config/consumerOffsets/, read through a shadow


def _rocksdb_offsets(store: Store, configs: cfg.StoreConfigs
                     ) -> tuple[dict[str, dict[int, int]], str, list, bool]:
    """(offset table, a note on where it came from, problems, read) of a store whose offsets
    the RocksDB offset manager keeps; an empty table where RocksDB cannot read the database."""
    if "consumerOffsets" not in configs.rocksdb:
        return {}, ("consumer offsets are kept in RocksDB (" + ", ".join(
            f"config/{d}/" for d in configs.rocksdb) + "): mqtool reads config/consumerOffsets/ "
            "only; export them with the broker's rocksDBConfigToJson admin command"), [], False
    from .rocksdb import RocksDBError
    from .rocksdb_offsets import load_rocksdb_offsets
    try:
        loaded = load_rocksdb_offsets(store.root, configs)
    except (RocksDBError, OptionalDependencyError) as err:
        return {}, f"consumer offsets are kept in RocksDB and cannot be read: {err}", [], False
    return loaded.table, f"consumer offsets from {loaded.source}, as the broker loads them", \
        loaded.problems, True


def consumer_report(store: Store, plan: RecoveryPlan | None,
                    configs: cfg.StoreConfigs | None = None) -> ConsumerReport:
    """Every committed offset of every group, against the queues now and after the start.
    Without a plan (``info``: no CommitLog scan) the queues are taken as they are now."""
    configs = configs or cfg.read_store_configs(store.root, family=_family(plan))
    bounds = queue_bounds(store, plan)
    problems: list[str] = []
    notes: list[str] = []
    offsets_load = configs.loads[cfg.CONSUMER_OFFSET]
    table: dict[str, dict[int, int]] = {}
    if configs.offsets_in_rocksdb:
        table, note, found, read = _rocksdb_offsets(store, configs)
        source = ROCKSDB_OFFSETS_SOURCE if read else "rocksdb"
        notes.append(note)
        problems += found
    else:
        source = offsets_load.used
        table, found = cfg.offset_table(offsets_load.document, offsets_load.used or
                                        cfg.CONSUMER_OFFSET)
        problems += found
    topics, found = cfg.topic_names(configs.document(cfg.TOPICS))
    problems += found
    rows = []
    for topic_group in sorted(table):
        topic, group = cfg.split_topic_group(topic_group)
        for queue_id in sorted(table[topic_group]):
            offset = table[topic_group][queue_id]
            b = bounds.get((topic, queue_id)) or QueueBounds(topic, queue_id, None)
            lag = unconsumed(store, b, offset)
            rows.append(ConsumerRow(
                group, topic, queue_id, offset, b.min_offset, b.max_offset, b.max_after_start,
                b.kind is not None, None if topics is None else topic in topics,
                lag["lag_messages"], lag["lag_bytes"], lag["oldest_unconsumed_store_time"],
                max(0, b.min_offset - offset) if offset >= 0 else 0, next_start(offset, b)))
    delay_load = configs.loads[cfg.DELAY_OFFSET]
    delay_table, found = cfg.delay_offset_table(delay_load.document,
                                                delay_load.used or cfg.DELAY_OFFSET)
    problems += found
    predicted = start_predicted(store, plan)
    if not predicted:
        notes.append("no recovery prediction: the queue ends are taken as the files have them")
    if plan is not None and plan.refuses_to_start:
        notes.append("the broker refuses to start this store as it is (see verify); the "
                     "outcomes assume it starts")
    if plan is not None and plan.broker_version != VERSION_49 and plan.mode == "normal" and \
            plan.redispatch_from is None:
        notes.append("5.0-5.3.1 normal recovery dispatches nothing: queue ends are the "
                     "truncated ones")
    return ConsumerReport(str(store.root), plan.broker_version if plan else None,
                          plan.mode if plan else None, source,
                          configs.to_dict(), rows,
                          _delay_rows(store, plan, bounds, delay_table), problems, notes,
                          predicted)


# --- findings for verify ------------------------------------------------------------------------

def consumer_findings(store: Store, plan: RecoveryPlan,
                      configs: cfg.StoreConfigs | None = None,
                      report: ConsumerReport | None = None) -> list:
    """verify's findings about config files, consumer and delay offsets (codes in
    :data:`CONSUMER_CODES`), as :class:`mqtool.finding.Finding` objects. Every config file whose
    failed load stops the broker (:data:`mqtool.config.STARTUP_CONFIGS`) is checked."""
    configs = configs or cfg.read_store_configs(store.root, cfg.STARTUP_CONFIGS,
                                                family=_family(plan))
    report = report or consumer_report(store, plan, configs)
    findings = []

    def add(code, file, message, severity=None, offset=0, **extra):
        findings.append(Finding(code, severity or CONSUMER_CODES[code][0], file, int(offset),
                                message, **extra))

    for name, load in configs.loads.items():
        if load.outcome in ("main", "absent"):
            continue
        severity = ERROR if load.outcome in ("refuses", "empty") else WARNING
        add("CFG_UNREADABLE", f"config/{name}", load.reason, severity,
            offset=load.main.position or 0)
    by_used = {load.used: load for load in configs.loads.values() if load.used}
    for problem in report.problems:
        load = by_used.get(problem.file)
        add("CFG_BAD_VALUE", f"config/{problem.file}", problem.split(": ", 1)[-1],
            offset=load.offset_of(*problem.path) if load is not None else 0)
    for folder, what in configs.rocksdb.items():
        if folder == "consumerOffsets" and report.offsets_source == ROCKSDB_OFFSETS_SOURCE:
            continue   # read (through a shadow copy) and checked like consumerOffset.json
        why = next((n for n in report.notes if "cannot be read" in n), None) \
            if folder == "consumerOffsets" else None
        add("CFG_IN_ROCKSDB", f"config/{folder}", f"{what} in RocksDB: " + (
            why or "mqtool does not read it"))
    offsets_file = f"config/{report.offsets_source or cfg.CONSUMER_OFFSET}"
    offsets_load = configs.loads[cfg.CONSUMER_OFFSET]
    for row in report.rows:
        # located at the offset's value in the file, so every finding has its own key
        entry = offsets_load.offset_of("offsetTable", f"{row.topic}@{row.group}", row.queue_id)
        where = dict(topic=row.topic, queue_id=row.queue_id, queue_offset=row.committed_offset,
                     offset=entry)
        label = f"group {row.group} on {row.topic} queue {row.queue_id}"
        if row.committed_offset > row.max_after_start and report.start_predicted:
            add("CONSUMER_OFFSET_AHEAD", offsets_file,
                f"{label}: committed offset {row.committed_offset} > queue end "
                f"{row.max_after_start} after the next start: {row.next_start.sentence}",
                **where)
        elif row.committed_offset > row.max_offset:
            then = (f"the next start dispatches the queue to {row.max_after_start}"
                    if report.start_predicted else "the next start is not predicted")
            add("CONSUMER_OFFSET_AHEAD_NOW", offsets_file,
                f"{label}: committed offset {row.committed_offset} > queue end {row.max_offset} "
                f"on disk; {then}", **where)
        if row.below_min:
            add("CONSUMER_OFFSET_BELOW_MIN", offsets_file,
                f"{label}: committed offset {row.committed_offset} < queue minimum "
                f"{row.min_offset}: {row.below_min} message(s) were deleted unread",
                count=row.below_min, **where)
    topics, _ = cfg.topic_names(configs.document(cfg.TOPICS))
    if topics is not None:
        missing: dict[str, list] = {}
        for q in store.consume_queues + store.batch_consume_queues:
            if q.topic not in topics and q.topic not in BROKER_OWN_TOPICS \
                    and not q.topic.startswith(BROKER_OWN_PREFIX):
                missing.setdefault(q.topic, []).append(q)
        for topic, queues in sorted(missing.items()):
            add("TOPIC_NOT_IN_CONFIG", store.relative(queues[0].directory.parent),
                f"{len(queues)} queue(s) of topic {topic} on disk, but topics.json (loaded from "
                f"{configs.loads[cfg.TOPICS].used}) does not list it: the broker does not "
                "register it with the name server", topic=topic, count=len(queues))
    delay_load = configs.loads[cfg.DELAY_OFFSET]
    delay_file = f"config/{delay_load.used or cfg.DELAY_OFFSET}"
    for row in report.delay:
        if row.offset > row.max_at_load:
            add("DELAY_OFFSET_AHEAD", delay_file, row.sentence, topic=SCHEDULE_TOPIC,
                queue_id=row.queue_id, queue_offset=row.offset,
                offset=delay_load.offset_of("offsetTable", row.level))
    return findings


# --- what a group has not consumed (export --unconsumed-by) --------------------------------------

def committed_offsets(store: Store, group: str,
                      configs: cfg.StoreConfigs | None = None) -> dict[tuple[str, int], int]:
    """(topic, queue) -> the group's committed offset, from the file the broker would load.
    Raises MqtoolError when the broker would load none (RocksDB, unreadable, unknown group)."""
    configs = configs or cfg.read_store_configs(store.root)
    load = configs.loads[cfg.CONSUMER_OFFSET]
    if configs.offsets_in_rocksdb:
        table, note, _, read = _rocksdb_offsets(store, configs)
        if not read:
            raise MqtoolError(f"{store.root}: {note}")
        source = "config/consumerOffsets/"
    else:
        if load.document is None:
            raise MqtoolError(f"{store.root}: no consumer offsets to read: {load.reason}")
        table, _ = cfg.offset_table(load.document, load.used or cfg.CONSUMER_OFFSET)
        source = load.used
    positions, groups = {}, set()
    for topic_group, queues in table.items():
        topic, owner = cfg.split_topic_group(topic_group)
        groups.add(owner)
        if owner == group:
            positions.update({(topic, qid): offset for qid, offset in queues.items()})
    if not positions:
        known = ", ".join(sorted(groups)) or "none"
        raise MqtoolError(f"group {group!r} has no committed offset in {source} (groups: "
                          f"{known})")
    return positions


def is_unconsumed(record: MessageRecord, positions: dict[tuple[str, int], int]) -> bool:
    """The record holds a message of one of the group's queues at or after its committed
    offset (PREPARED/ROLLBACK records are in no queue; an inner batch spans INNER_NUM offsets)."""
    start = positions.get((record.topic, record.queue_id))
    if start is None:
        return False
    if cl_fmt.transaction_type(record.sys_flag) in (cl_fmt.TRANSACTION_PREPARED_TYPE,
                                                    cl_fmt.TRANSACTION_ROLLBACK_TYPE):
        return False
    span = 1
    if record.sys_flag & cl_fmt.INNER_BATCH_FLAG:
        span = max(1, codecs.batch_position(record.properties, record.queue_offset)[1])
    return record.queue_offset + span > start
