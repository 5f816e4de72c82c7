"""Getting every message out of a store: ``salvage`` (past any damage) and ``export`` (for replay).

Both read every CommitLog byte once with the shared scanner, resynchronising after damage on the
next plausible record (magic, PHYSICALOFFSET equal to its position, consistent lengths, body
CRC), and classify each record:

* intact - lengths agree, PHYSICALOFFSET is the record's position, body CRC (and 5.2+ property
  CRC, when present) match;
* damaged - a record that decodes but fails one of those checks (a flipped body bit, a torn
  write that zeroed its end).

The same pass feeds :class:`mqtool.recovery.FileJudge` per file, so the broker's truncation point
(``processOffset``, everything at or after it is dropped by the next start) comes without a second
scan, and each message says whether it lies beyond it.

:func:`salvage` also maps the CommitLog into islands (runs of intact messages) and holes (byte
ranges that hold no intact message although data lies on both sides or the file was lost), each
hole with its lost bytes, the damaged records in it, the messages just before and after, and
the queue offsets that are missing across it.
"""
from __future__ import annotations

import bisect
import mmap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from .errors import MqtoolError
from .formats import codecs
from .formats import commitlog as cl_fmt
from .formats import timer as timer_fmt
from .consumers import is_unconsumed
from .inspect import message_to_dict, unwrap_message_dict
from .recovery import (BrokerRules, FileJudge, FileVerdict, RecoveryPlan, predict_recovery,
                       resolve_broker_version)
from .scan import BlankRecord, CorruptRegion, MessageRecord, Scanner, UnwrittenTail
from .store import MappedFile, Store, written_extent

SCHEDULE_TOPIC = codecs.SCHEDULE_TOPIC
TRANS_HALF_TOPIC = codecs.TRANS_HALF_TOPIC
TRANS_OP_HALF_TOPIC = codecs.TRANS_OP_HALF_TOPIC
TIMER_TOPIC = timer_fmt.TIMER_TOPIC
_TX_MASK = cl_fmt.TRANSACTION_TYPE_MASK
_DISPATCHED = (cl_fmt.TRANSACTION_NOT_TYPE, cl_fmt.TRANSACTION_COMMIT_TYPE)
_RELEASE_EVERY = 64 * 1024 * 1024


def damage_of(record: MessageRecord) -> str | None:
    """Why a decoded record is not intact, or None."""
    if not record.offset_ok:
        return "offset-mismatch"
    if record.body_crc_ok is False:
        return "body-crc"
    if record.prop_crc_ok is False:
        return "prop-crc"
    return None


# --- the one pass ---------------------------------------------------------------------------------

@dataclass
class Extracted:
    """One decoded record of the pass."""

    record: MessageRecord
    body: bytes
    file: str
    file_offset: int
    damage: str | None          # None: intact
    beyond_truncation: bool     # at or past the broker's processOffset


def _placeholder_verdicts(store: Store) -> dict[int, FileVerdict]:
    # predict_recovery chooses its start file before it looks at any verdict; verdicts that
    # just continue to the next file let it say which file that is without scanning anything
    return {seg.base_offset: FileVerdict(seg.base_offset, seg.name,
                                         seg.base_offset + seg.length, "blank")
            for seg in store.commitlog.segments}


def _zero_run_end(buf, start: int, end: int) -> int:
    """End of the run of zero bytes at ``start`` (at most ``end``)."""
    chunk = 1 << 16
    pos = start
    while pos < end:
        block = bytes(buf[pos:min(end, pos + chunk)])
        stripped = block.lstrip(b"\0")
        if stripped:
            return pos + len(block) - len(stripped)
        pos += len(block)
    return end


def _trimmed_end(buf, start: int, end: int) -> int:
    """``end`` moved back over trailing zero bytes, not before ``start``."""
    chunk = 1 << 16
    pos = end
    while pos > start:
        lo = max(start, pos - chunk)
        block = bytes(buf[lo:pos])
        stripped = block.rstrip(b"\0")
        if stripped:
            return lo + len(stripped)
        pos = lo
    return start


class _FileMapper:
    """Islands and holes of one file, built as its events stream by (nothing per record is kept).

    Zeros followed by more data (intact or damaged) are part of a hole (a zeroed range); zeros
    that run to the file end are the unwritten tail."""

    def __init__(self, name: str, report: "SalvageReport"):
        self.name = name
        self.report = report
        self.island: Island | None = None
        self.hole: Hole | None = None
        self.zeros: tuple[int, int] | None = None
        self.previous: dict | None = None

    def _open_hole(self, start: int, end: int) -> Hole:
        if self.hole is None:
            self.hole = Hole(self.name, start, end, before=self.previous)
        self.hole.end = max(self.hole.end, end)
        return self.hole

    def _zeros_into_hole(self) -> None:
        # zeros with more data after them are not the unwritten tail: a zeroed range of a hole
        if self.zeros is not None:
            hole = self._open_hole(*self.zeros)
            if "zeroed" not in hole.kinds:
                hole.kinds.append("zeroed")
            self.zeros = None

    def _close_hole(self, after: dict | None) -> None:
        if self.hole is not None:
            self.hole.after = after
            self.report.holes.append(self.hole)
            self.hole = None

    def message(self, record: MessageRecord) -> None:
        brief = record.brief()
        self._zeros_into_hole()
        self._close_hole(brief)
        island = self.island
        if island is None:
            island = self.island = Island(self.name, record.offset, record.end)
            self.report.islands.append(island)
        island.end = record.end
        island.messages += 1
        if island.first_store_timestamp is None:
            island.first_store_timestamp = record.store_timestamp
        island.last_store_timestamp = record.store_timestamp
        self.previous = brief

    def damaged(self, start: int, end: int, kind: str, detail: str = "",
                record: MessageRecord | None = None) -> None:
        self.island = None
        if end <= start:
            return
        self._zeros_into_hole()
        hole = self._open_hole(start, end)
        if kind not in hole.kinds:
            hole.kinds.append(kind)
        if detail and detail not in hole.details:
            hole.details.append(detail)
        if record is not None:
            hole.damaged_records.append({**record.brief(), "damage": kind})

    def zeroed(self, start: int, end: int) -> None:
        self.island = None
        if end > start:
            self.zeros = (self.zeros[0], end) if self.zeros is not None else (start, end)

    def end_of_data(self) -> None:
        """A blank record, the unwritten tail or the file end."""
        self.island = None
        self.zeros = None
        self._close_hole(None)


class StorePass:
    """One resynchronising, CRC-checking pass over a store's CommitLog.

    Iterate :meth:`records` for the decoded records (intact and damaged, in offset order). A
    ``mapper`` factory (file name -> :class:`_FileMapper`-like object) receives the file's
    events; the per-file verdicts and the recovery plan are available once it is exhausted."""

    def __init__(self, store: Store, *, broker_version: str = "auto",
                 force_verify_prop_crc: bool = False, progress=None,
                 mapper: Callable[[str], _FileMapper] | None = None):
        self.store = store
        self.version = resolve_broker_version(store, broker_version)
        self.force_verify_prop_crc = force_verify_prop_crc
        self.rules = BrokerRules(self.version, True, force_verify_prop_crc, True)
        self.progress = progress
        self.mapper = mapper
        self.verdicts: dict[int, FileVerdict] = {}
        self.plan: RecoveryPlan | None = None
        first = predict_recovery(store, broker_version=self.version,
                                 force_verify_prop_crc=force_verify_prop_crc,
                                 file_verdicts=_placeholder_verdicts(store))
        names = [s.name for s in store.commitlog.segments]
        self.start_index = names.index(first.start_file) if first.start_file in names else 0

    def records(self) -> Iterator[Extracted]:
        store = self.store
        scanner = Scanner(store.commitlog, check_crc=True, resync=True)
        truncated = False
        for index, seg in enumerate(store.commitlog.segments):
            judge = FileJudge(seg, self.rules)
            judged = index >= self.start_index
            if seg.length == 0:
                self.verdicts[seg.base_offset] = judge.verdict
                continue
            name = store.relative(seg.path)
            mapper = self.mapper(name) if self.mapper is not None else None
            base = seg.base_offset
            with open(seg.path, "rb") as fh:
                # past the last extent holding data the file is a hole of zeros: never touch it
                written = written_extent(fh.fileno(), seg.length)
            with MappedFile(seg.path) as mapped:
                buf = mapped.data
                released = 0
                for event in scanner.scan_segment(seg, progress=self.progress):
                    judge.feed(event)
                    kind = type(event)
                    position = event.offset - base
                    if position - released >= _RELEASE_EVERY:
                        # hand the pages behind the pass back, as the scanner does with its own
                        upto = position - position % mmap.PAGESIZE
                        buf.madvise(mmap.MADV_DONTNEED, released, upto - released)
                        released = upto
                    if kind is MessageRecord:
                        damage = damage_of(event)
                        if mapper is not None:
                            if damage is None:
                                mapper.message(event)
                            else:
                                mapper.damaged(event.offset, event.end, damage, record=event)
                        at = event.body_position - base
                        body = buf[at:at + event.body_length] if event.body_length > 0 else b""
                        beyond = judged and (truncated or (
                            judge.stopped and event.offset >= judge.verdict.stop_offset))
                        yield Extracted(event, body, name, event.offset - base, damage, beyond)
                    elif mapper is None:
                        continue
                    elif kind is CorruptRegion:
                        start = event.offset - base
                        limit = min(written, start + event.length)
                        # a region running to the file end is mostly the unwritten tail
                        end = max(_trimmed_end(buf, start, limit),
                                  start + min(max(event.total_size, 8), event.length))
                        mapper.damaged(event.offset, base + end, "corrupt",
                                       f"{event.code}: {event.detail}")
                        if end < start + event.length:
                            mapper.end_of_data()
                    elif kind is UnwrittenTail:
                        start = event.offset - base
                        limit = max(start, min(written, start + event.length))
                        zeros_end = _zero_run_end(buf, start, limit)
                        if zeros_end == limit:
                            zeros_end = start + event.length
                        mapper.zeroed(event.offset, base + zeros_end)
                        if zeros_end < limit:
                            # non-zero bytes behind the zeros that hold no plausible record
                            mapper.damaged(base + zeros_end,
                                           base + _trimmed_end(buf, zeros_end, limit),
                                           "corrupt", "bytes that hold no plausible record")
                    elif kind is BlankRecord:
                        mapper.end_of_data()
            if mapper is not None:
                mapper.end_of_data()
            if judged and not judge.verdict.continues:
                truncated = True
            self.verdicts[seg.base_offset] = judge.verdict
        self.plan = predict_recovery(store, broker_version=self.version,
                                     force_verify_prop_crc=self.force_verify_prop_crc,
                                     file_verdicts=self.verdicts)


# --- salvage --------------------------------------------------------------------------------------

@dataclass
class Island:
    file: str
    start: int
    end: int
    messages: int = 0
    first_store_timestamp: int | None = None
    last_store_timestamp: int | None = None


@dataclass
class Hole:
    file: str
    start: int
    end: int
    kinds: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    damaged_records: list[dict] = field(default_factory=list)
    before: dict | None = None
    after: dict | None = None
    queue_gaps: list[dict] = field(default_factory=list)

    @property
    def lost_bytes(self) -> int:
        return self.end - self.start

    def to_dict(self) -> dict:
        topics = {r["topic"] for r in self.damaged_records}
        topics |= {m["topic"] for m in (self.before, self.after) if m}
        topics |= {g["topic"] for g in self.queue_gaps}
        times = [m["store_timestamp"] for m in (self.before, self.after) if m]
        data = asdict(self)
        data["lost_bytes"] = self.lost_bytes
        data["topics"] = sorted(topics)
        data["time_range"] = [min(times), max(times)] if times else None
        data["messages_lost_estimate"] = sum(g["missing"] for g in self.queue_gaps)
        return data


@dataclass
class SalvageReport:
    store: str
    broker_version: str
    messages_intact: int = 0
    messages_damaged: int = 0
    messages_written: int = 0
    messages_beyond_truncation: int = 0
    bytes_lost: int = 0
    islands: list[Island] = field(default_factory=list)
    holes: list[Hole] = field(default_factory=list)
    unexplained_queue_gaps: list[dict] = field(default_factory=list)
    truncation: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"store": self.store, "broker_version": self.broker_version,
                "messages_intact": self.messages_intact,
                "messages_damaged": self.messages_damaged,
                "messages_written": self.messages_written,
                "messages_beyond_truncation": self.messages_beyond_truncation,
                "bytes_lost": self.bytes_lost, "truncation": self.truncation,
                "islands": [asdict(i) for i in self.islands],
                "holes": [h.to_dict() for h in self.holes],
                "unexplained_queue_gaps": self.unexplained_queue_gaps}


def _missing_files(store: Store, report: SalvageReport) -> None:
    """Ranges where a CommitLog file should be and is not (a deleted middle file)."""
    segments = store.commitlog.segments
    size = store.commitlog.file_size
    for prev, nxt in zip(segments, segments[1:]):
        expected = prev.base_offset + size
        if nxt.base_offset > expected:
            report.holes.append(Hole("(missing file)", expected, nxt.base_offset,
                                     kinds=["missing-file"],
                                     details=[f"no CommitLog file for offsets [{expected}, "
                                              f"{nxt.base_offset})"]))


def _assign_queue_gaps(report: SalvageReport, jumps: list[dict]) -> None:
    holes = sorted(report.holes, key=lambda h: h.start)
    starts = [h.start for h in holes]
    for jump in jumps:
        i = bisect.bisect_left(starts, jump["after_offset"])
        if i < len(holes) and holes[i].start < jump["before_offset"]:
            holes[i].queue_gaps.append({k: jump[k] for k in ("topic", "queue_id", "from", "to",
                                                             "missing")})
        else:
            report.unexplained_queue_gaps.append(jump)


def _consumed_inner(message: dict, outer: dict, record: MessageRecord,
                    unconsumed: dict[tuple[str, int], int] | None) -> bool:
    """An inner message of a batch the group has partly consumed, below its committed offset."""
    return (unconsumed is not None and message is not outer
            and message["queue_offset"] < unconsumed[(record.topic, record.queue_id)])


def salvage(store: Store, emit: Callable[[dict], None], *, beyond_truncation_only: bool = False,
            include_damaged: bool = False, body_mode: str = "base64", decompress: bool = True,
            unwrap: bool = True, broker_version: str = "auto", force_verify_prop_crc: bool = False,
            progress=None, unconsumed: dict[tuple[str, int], int] | None = None
            ) -> SalvageReport:
    """Hand every intact message (and with ``include_damaged`` the damaged ones, marked) to
    ``emit`` as the dump's message dict plus ``beyond_truncation`` (with ``unwrap`` an inner
    batch as its inner messages); return the map.

    With ``beyond_truncation_only`` only messages at or past the broker's truncation point are
    emitted (the map still covers the whole CommitLog); with ``unconsumed`` (see
    :func:`export_messages`) only what that group has not consumed."""
    report = SalvageReport(str(store.root), resolve_broker_version(store, broker_version))
    one_pass = StorePass(store, broker_version=report.broker_version,
                         force_verify_prop_crc=force_verify_prop_crc, progress=progress,
                         mapper=lambda name: _FileMapper(name, report))
    last_queue_offset: dict[tuple[str, int], tuple[int, int]] = {}
    jumps: list[dict] = []
    for item in one_pass.records():
        record = item.record
        if item.damage is None:
            report.messages_intact += 1
            report.messages_beyond_truncation += item.beyond_truncation
            if record.sys_flag & _TX_MASK in _DISPATCHED:
                key = (record.topic, record.queue_id)
                seen = last_queue_offset.get(key)
                if seen is not None and record.queue_offset > seen[1] + 1:
                    jumps.append({"topic": record.topic, "queue_id": record.queue_id,
                                  "from": seen[1] + 1, "to": record.queue_offset - 1,
                                  "missing": record.queue_offset - seen[1] - 1,
                                  "after_offset": seen[0], "before_offset": record.offset})
                if seen is None or record.queue_offset > seen[1]:
                    last_queue_offset[key] = (record.offset, record.queue_offset)
        else:
            report.messages_damaged += 1
            if not include_damaged:
                continue
        if beyond_truncation_only and not item.beyond_truncation:
            continue
        if unconsumed is not None and not is_unconsumed(record, unconsumed):
            continue
        out = message_to_dict(record, item.body, file=item.file, file_offset=item.file_offset,
                              body_mode=body_mode, decompress=decompress)
        out["beyond_truncation"] = item.beyond_truncation
        if include_damaged:
            out["damage"] = item.damage
        for message in (unwrap_message_dict(out, record, item.body, body_mode=body_mode)
                        if unwrap else [out]):
            if _consumed_inner(message, out, record, unconsumed):
                continue
            emit(message)
            report.messages_written += 1
    _missing_files(store, report)
    report.holes.sort(key=lambda h: h.start)
    _assign_queue_gaps(report, jumps)
    report.bytes_lost = sum(h.lost_bytes for h in report.holes)
    plan = one_pass.plan
    report.truncation = {"process_offset": plan.process_offset, "mode": plan.mode,
                         "stop_file": plan.stop_file, "stop_reason": plan.stop_reason,
                         "messages_lost_by_recovery": plan.messages_lost,
                         "commitlog_files_deleted": plan.commitlog_files_deleted}
    return report


# --- export ---------------------------------------------------------------------------------------

EXPORT_KINDS = ("normal", "delayed", "timer", "retry", "dlq", "transaction-half",
                "transaction-op", "transaction-prepared", "transaction-commit",
                "transaction-rollback")


def replay_fields(record: MessageRecord, properties: dict[str, str]) -> dict:
    """What a replay needs beyond the record: the kind, the real topic and queue a delayed,
    timer or transaction-half message belongs to, and when a delayed one is due."""
    topic = record.topic
    tx = record.sys_flag & _TX_MASK
    real_topic, real_queue = topic, record.queue_id
    deliver = None
    if topic == SCHEDULE_TOPIC:
        kind = "delayed"
        deliver = codecs.tags_code(topic, properties, record.store_timestamp)
    elif topic == TIMER_TOPIC:
        kind = "timer"
        deliver = codecs.property_int(properties.get("TIMER_OUT_MS")
                                      or properties.get("TIMER_DELIVER_MS"))
    elif topic == TRANS_HALF_TOPIC:
        kind = "transaction-half"
    elif topic == TRANS_OP_HALF_TOPIC:
        kind = "transaction-op"
    elif tx == cl_fmt.TRANSACTION_PREPARED_TYPE:
        kind = "transaction-prepared"
    elif tx == cl_fmt.TRANSACTION_ROLLBACK_TYPE:
        kind = "transaction-rollback"
    elif tx == cl_fmt.TRANSACTION_COMMIT_TYPE:
        kind = "transaction-commit"
    elif topic.startswith("%RETRY%"):
        kind = "retry"
    elif topic.startswith("%DLQ%"):
        kind = "dlq"
    else:
        kind = "normal"
    if kind in ("delayed", "timer", "transaction-half") and properties.get("REAL_TOPIC"):
        real_topic = properties["REAL_TOPIC"]
        real_queue = codecs.property_int(properties.get("REAL_QID"))
    return {"kind": kind, "real_topic": real_topic, "real_queue_id": real_queue,
            "delay_level": codecs.property_int(properties.get("DELAY")),
            "deliver_timestamp": deliver,
            "transaction_id": properties.get("__transactionId__")}


@dataclass
class ExportStats:
    exported: int = 0
    damaged_skipped: int = 0
    beyond_truncation: int = 0
    by_kind: dict = field(default_factory=dict)
    process_offset: int | None = None


def export_messages(store: Store, emit: Callable[[dict], None], *,
                    topics: list[str] | None = None, since: int | None = None,
                    until: int | None = None, live_only: bool = False,
                    body_mode: str = "base64", decompress: bool = True, unwrap: bool = True,
                    broker_version: str = "auto", pending_timers: bool = False,
                    open_transactions: bool = False, check_max: int | None = None,
                    progress=None,
                    unconsumed: dict[tuple[str, int], int] | None = None) -> ExportStats:
    """Every intact message as the dump's message dict plus :func:`replay_fields` and
    ``beyond_truncation``, in CommitLog order. ``topics`` match the stored or the real topic;
    ``live_only`` leaves out what the broker's next start would truncate; ``pending_timers``
    keeps only the timer messages still pending in the timer wheel (:mod:`mqtool.timers`),
    each with a ``pending_timer`` object (slot, due time, TimerLog offset, next start);
    ``open_transactions`` keeps only the newest half copy of each transaction the store shows
    neither committed nor rolled back (:mod:`mqtool.transactions`), each with an
    ``open_transaction`` object (transaction id, producer group, check times, copies, what the
    next check round does with at most ``check_max`` checks);
    ``unconsumed`` ((topic, queue) -> committed offset,
    :func:`mqtool.consumers.committed_offsets`) keeps only what that group has not consumed.
    With ``unwrap`` an inner batch gives one message per inner message."""
    wanted = set(topics) if topics else None
    pending = None
    if pending_timers:
        from .timers import pending_timer_offsets
        pending = pending_timer_offsets(store, broker_version=broker_version)
    open_txns = None
    if open_transactions:
        from .transactions import open_transaction_offsets
        open_txns = open_transaction_offsets(
            store, broker_version=broker_version,
            **({} if check_max is None else {"check_max": check_max}))
    stats = ExportStats()
    one_pass = StorePass(store, broker_version=broker_version, progress=progress)
    for item in one_pass.records():
        record = item.record
        if pending is not None and record.offset not in pending:
            continue
        if open_txns is not None and record.offset not in open_txns:
            continue
        if item.damage is not None:
            stats.damaged_skipped += 1
            continue
        if since is not None and record.store_timestamp < since:
            continue
        if until is not None and record.store_timestamp > until:
            continue
        if live_only and item.beyond_truncation:
            continue
        if unconsumed is not None and not is_unconsumed(record, unconsumed):
            continue
        properties = codecs.decode_properties(record.properties_raw)
        extra = replay_fields(record, properties)
        if wanted is not None and record.topic not in wanted and extra["real_topic"] not in wanted:
            continue
        out = message_to_dict(record, item.body, file=item.file, file_offset=item.file_offset,
                              body_mode=body_mode, decompress=decompress)
        out.update(extra)
        out["beyond_truncation"] = item.beyond_truncation
        if pending is not None:
            timer = pending[record.offset]
            out["pending_timer"] = {k: timer[k] for k in (
                "deliver_time_ms", "timer_out_ms", "timer_deliver_ms", "timerlog_offset",
                "next_start", "next_start_detail")}
        if open_txns is not None:
            out["open_transaction"] = open_txns[record.offset]
        # an inner batch is replayed as its messages, each with its own replay fields
        for message in (unwrap_message_dict(out, record, item.body, body_mode=body_mode)
                        if unwrap else [out]):
            if _consumed_inner(message, out, record, unconsumed):
                continue
            if message is not out:
                message.update(replay_fields(record, message["properties"]))
            emit(message)
            stats.exported += 1
            stats.beyond_truncation += item.beyond_truncation
            stats.by_kind[message["kind"]] = stats.by_kind.get(message["kind"], 0) + 1
    stats.process_offset = one_pass.plan.process_offset if one_pass.plan else None
    return stats


def check_output_outside(store: Store, out: Path) -> None:
    """Refuse to write into the store being read (it is evidence)."""
    try:
        resolved = out.resolve()
        root = store.root.resolve()
    except OSError:
        return
    if resolved == root or resolved.is_relative_to(root):
        raise MqtoolError(f"{out}: refusing to write inside the store {store.root}")


__all__ = ["StorePass", "Extracted", "Island", "Hole", "SalvageReport", "salvage",
           "export_messages", "replay_fields", "ExportStats", "EXPORT_KINDS", "damage_of",
           "check_output_outside"]
