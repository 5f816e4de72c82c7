"""``mqtool transactions``: the transactional messages of a store, what their producers decided as
far as the store shows, and what the broker's next transaction check does to each.

One CommitLog pass collects the half messages (``RMQ_SYS_TRANS_HALF_TOPIC``, one entry per
half-queue offset: the original and every copy a check put back), the op messages
(``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``, body = half-queue offsets) and the COMMIT records
(sysFlag COMMIT, preparedTransactionOffset = the half copy's CommitLog offset). Copies of one
transaction share its UNIQ_KEY.

*Ended in store*: a COMMIT record for one of its copies -> committed; else an op message covering
one of its copies -> rolled back; else open.

*Next check* follows ``TransactionalMessageServiceImpl.check`` (5.x) on the queues as the
broker's next start leaves them (records past the predicted recovery point are gone): from the
half and op offsets of group ``CID_RMQ_SYS_TRANS`` in consumerOffset.json (as the broker loads
it; a missing offset starts at the queue's minimum), op messages are read 32 at a time into the
set of ended half offsets; each half entry from the check offset on is skipped when an op covers
it, discarded when its TRANSACTION_CHECK_TIMES reaches ``check_max``, else put back as a new copy
(check times + 1) and checked with its producer. The round stops at the first copy it put back
itself (after discarding any put-back copy already at ``check_max``). A transaction's fate is
its newest copy's: committed / rolled back (ended by an op), checked again, discarded, or lost
(recovery truncates the copy the check would have used). Assumed: the check runs after
transactionTimeout and within fileReservedTime of the messages' birth, no producer answers, no
slave-acting-master escape, no CHECK_IMMUNITY_TIME_IN_SECONDS immunity.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .config import CONSUMER_OFFSET, offset_table, read_config, rocksdb_metadata
from .errors import MqtoolError
from .formats import commitlog as cl_fmt
from .formats import transaction as tx_fmt
from .recovery import RecoveryPlan, predict_recovery
from .scan import MessageRecord, RecordBatch, Scanner, TopicTable, read_body
from .store import Store

HALF_TOPIC = tx_fmt.TRANS_HALF_TOPIC
OP_TOPIC = tx_fmt.TRANS_OP_HALF_TOPIC

# what the producers decided, as the store shows it (stable values)
ENDED_COMMITTED = "committed"
ENDED_ROLLED_BACK = "rolled back"
ENDED_OPEN = "open"

# what the next check round does to a transaction (stable values)
FATE_COMMITTED = "committed"
FATE_ROLLED_BACK = "rolled back"
FATE_CHECKED_AGAIN = "checked again"
FATE_DISCARDED = "discarded"
FATE_LOST = "lost"
FATE_NO_START = "broker refuses to start"
FATE_NOT_CHECKED = "not checked"

# what happens to one half entry (stable values)
ENTRY_REMOVED = "removed by op"
ENTRY_PUT_BACK = "put back"
ENTRY_DISCARDED = "discarded"
ENTRY_NOT_REACHED = "not reached"
ENTRY_BEFORE_CRASH = "checked before the crash"
ENTRY_CONSUMED = "consumed before the crash"
ENTRY_TRUNCATED = "truncated by recovery"


@dataclass
class HalfEntry:
    record: MessageRecord
    props: dict
    truncated: bool
    covered_by: list = field(default_factory=list)     # op queue offsets
    commit: MessageRecord | None = None
    check: str = ""
    check_detail: str = ""
    put_back_as: int | None = None

    @property
    def queue_offset(self) -> int:
        return self.record.queue_offset

    @property
    def check_times(self) -> int | None:
        """TRANSACTION_CHECK_TIMES as the check reads it (Integer.parseInt, -1 when it is no
        number), None when absent."""
        text = self.props.get(tx_fmt.PROP_CHECK_TIMES)
        if text is None:
            return None
        value = tx_fmt.java_int(text)
        return tx_fmt.BAD_ITEM if value is None else value

    @property
    def key(self) -> str:
        return (self.props.get(tx_fmt.PROP_UNIQ_KEY) or self.props.get(tx_fmt.PROP_TRANSACTION_ID)
                or f"@{self.record.offset}")


@dataclass
class OpEntry:
    record: MessageRecord
    tags: str | None
    offsets: list
    bad_items: list
    truncated: bool

    @property
    def queue_offset(self) -> int:
        return self.record.queue_offset


@dataclass
class _Collected:
    halves: dict = field(default_factory=dict)     # (queue id, queue offset) -> HalfEntry
    ops: dict = field(default_factory=dict)        # (queue id, queue offset) -> OpEntry
    commits: list = field(default_factory=list)    # COMMIT records
    problems: list = field(default_factory=list)


def _collect(store: Store, process_offset: int) -> _Collected:
    """The half, op and COMMIT records of the CommitLog, picked from the scanner's record batches
    (only those rows are decoded one by one)."""
    got = _Collected()
    topics = TopicTable()
    half_id, op_id = topics.intern(HALF_TOPIC), topics.intern(OP_TOPIC)

    def take(record: MessageRecord) -> None:
        topic = record.topic
        truncated = record.end > process_offset
        if topic == HALF_TOPIC:
            entry = HalfEntry(record, record.properties, truncated)
            got.halves.setdefault((record.queue_id, record.queue_offset), entry)
        elif topic == OP_TOPIC:
            props = record.properties
            offsets, bad = tx_fmt.decode_op_body(read_body(store.commitlog, record))
            got.ops.setdefault((record.queue_id, record.queue_offset),
                               OpEntry(record, props.get("TAGS"), offsets, bad, truncated))
        elif cl_fmt.transaction_type(record.sys_flag) == cl_fmt.TRANSACTION_COMMIT_TYPE:
            got.commits.append(record)

    scanner = Scanner(store.commitlog, check_crc=False)
    for seg in scanner.segments():
        for event in scanner.scan_segment_batches(seg, topics=topics):
            if isinstance(event, RecordBatch):
                wanted = (event.topic_id == half_id) | (event.topic_id == op_id) | (
                    (event.sys_flag & cl_fmt.TRANSACTION_TYPE_MASK)
                    == cl_fmt.TRANSACTION_COMMIT_TYPE)
                for i in np.flatnonzero(wanted).tolist():
                    take(event.record(i))
            elif isinstance(event, MessageRecord):
                take(event)
    return got


@dataclass
class Links:
    got: _Collected
    op_rows: list
    orphans: list           # COMMIT records whose half message is missing
    problems: list


def link_records(store: Store, process_offset: int) -> Links:
    """One CommitLog pass, and the links: op message -> the half entries it covers (offsets
    covering none listed as missing), COMMIT record -> its half copy (by
    preparedTransactionOffset), and the sentences about what the broker would not write."""
    got = _collect(store, process_offset)
    problems = list(got.problems)
    by_offset = {e.record.offset: e for e in got.halves.values()}
    op_rows = []
    for (qid, at), op in sorted(got.ops.items()):
        missing = []
        if op.tags != tx_fmt.REMOVE_TAG:
            problems.append(f"op message {at} (CommitLog {op.record.offset}) has tag "
                            f"{op.tags!r}, not {tx_fmt.REMOVE_TAG!r}: the check ignores it")
        if op.bad_items:
            shown = ", ".join(repr(b) for b in op.bad_items[:5])
            problems.append(f"op message {at} (CommitLog {op.record.offset}): "
                            f"{len(op.bad_items)} item(s) of its body are no number ({shown}): "
                            "the check reads them as -1 and ignores them")
        for value in op.offsets:
            half = got.halves.get((qid, value))
            if half is None:
                missing.append(value)
            elif at not in half.covered_by:
                half.covered_by.append(at)
        op_rows.append({"op_queue_offset": at, "queue_id": qid, **_brief(op.record, op.truncated),
                        "tags": op.tags, "half_offsets": op.offsets, "bad_items": op.bad_items,
                        "half_offsets_missing": missing})
    orphans = []
    for commit in got.commits:
        half = by_offset.get(commit.prepared_transaction_offset)
        if half is None:
            orphans.append(commit)
        elif half.commit is None:
            half.commit = commit
    for e in got.halves.values():
        if tx_fmt.PROP_REAL_TOPIC not in e.props:
            problems.append(f"half message at half-queue offset {e.queue_offset} (CommitLog "
                            f"{e.record.offset}) has no REAL_TOPIC: a commit cannot put it into "
                            "any topic")
    return Links(got, op_rows, orphans, problems)


# --- the check's progress --------------------------------------------------------------------------

@dataclass
class CheckProgress:
    half: dict          # queue id -> next half-queue offset to check (None: not recorded)
    op: dict            # queue id -> next op-queue offset
    source: str | None  # the file the broker loads
    refuses: bool
    notes: list

    def to_dict(self) -> dict:
        return {"half_offsets": {str(k): v for k, v in sorted(self.half.items())},
                "op_offsets": {str(k): v for k, v in sorted(self.op.items())},
                "source": self.source, "broker_refuses_to_start": self.refuses,
                "notes": self.notes}


def check_progress(store: Store, has_half: bool = True) -> CheckProgress:
    """Group CID_RMQ_SYS_TRANS's offsets on the half and op topics, from the consumerOffset.json
    the broker would load (its .bak when the main file is torn)."""
    notes: list[str] = []
    config_dir = store.root / "config"
    if rocksdb_metadata(config_dir):
        notes.append("consumer offsets may be kept in RocksDB under config/: mqtool does not read "
                     "RocksDB; the check offsets are taken as missing")
    load = read_config(config_dir / CONSUMER_OFFSET)
    if load.outcome != "main" and (has_half or load.outcome == "refuses"):
        notes.append(f"{CONSUMER_OFFSET}: {load.reason}")
    table, problems = offset_table(load.document, load.used or CONSUMER_OFFSET)
    notes += [str(p) for p in problems]
    group = tx_fmt.CHECK_GROUP
    half = dict(table.get(f"{HALF_TOPIC}@{group}", {}))
    op = dict(table.get(f"{OP_TOPIC}@{group}", {}))
    if load.outcome != "refuses" and has_half:
        for topic, found in ((HALF_TOPIC, half), (OP_TOPIC, op)):
            if not found:
                notes.append(f"no {topic}@{group} offset in {load.used or CONSUMER_OFFSET}: the "
                             "check starts at the queue's minimum offset")
    return CheckProgress(half, op, load.used, load.broker_refuses, notes)


# --- one check round (TransactionalMessageServiceImpl.check) ------------------------------------

@dataclass
class _Copy:
    """A copy the round itself puts back at the end of the half queue."""

    source: int             # the half offset it copies
    check_times: int
    key: str
    check: str = ENTRY_NOT_REACHED


@dataclass
class Round:
    queue_id: int
    half_offset: int | None
    op_offset: int | None
    half_offset_after: int | None = None
    op_offset_after: int | None = None
    skipped: str | None = None
    copies: dict = field(default_factory=dict)     # new half offset -> _Copy
    discarded: list = field(default_factory=list)  # half offsets discarded this round
    put_back: list = field(default_factory=list)   # half offsets checked with their producer

    def to_dict(self) -> dict:
        return {"queue_id": self.queue_id, "half_offset": self.half_offset,
                "op_offset": self.op_offset, "half_offset_after": self.half_offset_after,
                "op_offset_after": self.op_offset_after, "skipped": self.skipped,
                "checked_with_producer": len(self.put_back),
                "discarded": len(self.discarded)}


class _OpRemoveMap:
    """``fillOpRemoveMap``: the op messages of the round pulled so far, the half offsets they
    remove, and the op offsets done (every half offset they name handled, or none to handle)."""

    def __init__(self, ops: dict[int, OpEntry], start: int):
        self.ops, self.start = ops, start
        self.op_min = min(ops) if ops else 0
        self.op_max = max(ops) + 1 if ops else 0
        self.remove: dict[int, int] = {}           # half offset -> the op offset removing it
        self.pending: dict[int, set] = {}          # op offset -> half offsets not reached yet
        self.done: list[int] = []

    def fill(self, offset: int) -> tuple[bool, int]:
        """One pull of op messages from ``offset``: (found op messages, next pull offset)."""
        if offset >= self.op_max or offset < self.op_min:
            return False, offset
        end = min(offset + tx_fmt.OP_PULL_BATCH, self.op_max)
        for at in range(offset, end):
            op = self.ops.get(at)
            if op is None:
                continue
            if not op.offsets and not op.bad_items:
                self.done.append(at)     # no body
                continue
            covered = set()
            if op.tags == tx_fmt.REMOVE_TAG:
                for value in op.offsets + [tx_fmt.BAD_ITEM] * len(op.bad_items):
                    if value < self.start:
                        continue
                    self.remove[value] = at
                    covered.add(value)
            if covered:
                self.pending[at] = covered
            else:
                self.done.append(at)
        return True, end

    def take(self, half_offset: int) -> int | None:
        """The op offset removing ``half_offset`` (None: none pulled so far), marked handled."""
        if half_offset not in self.remove:
            return None
        op_at = self.remove.pop(half_offset)
        self.pending[op_at].discard(half_offset)
        if not self.pending[op_at]:
            del self.pending[op_at]
            self.done.append(op_at)
        return op_at

    def offset_after(self, op_from: int) -> int:
        """The op queue's check offset after the round: past the done run from ``op_from``."""
        op_after = op_from
        for at in sorted(self.done):
            if at == op_after:
                op_after += 1
            elif at > op_after:
                break
        return op_after


def _discard_reason(entry, halves: dict[int, HalfEntry], check_max: int,
                    skip_born_before: int | None) -> str | None:
    """Why the round discards ``entry`` (a half entry or a copy) into TRANS_CHECK_MAX_TIME_TOPIC
    (None: it does not): checked ``check_max`` times, or born past fileReservedTime (needSkip)."""
    times = entry.check_times
    if times is not None and times >= check_max:
        return (f"checked {times} times (--check-max {check_max}): moved to "
                f"{tx_fmt.CHECK_MAX_TIME_TOPIC}")
    born = halves[entry.source].record.born_timestamp if isinstance(entry, _Copy) \
        else entry.record.born_timestamp
    if skip_born_before is not None and born < skip_born_before:
        return (f"born {born}, more than fileReservedTime before the check: skipped and moved "
                f"to {tx_fmt.CHECK_MAX_TIME_TOPIC}")
    return None


def _check_round(queue_id: int, halves: dict[int, HalfEntry], ops: dict[int, OpEntry],
                 half_start: int | None, op_start: int | None, check_max: int,
                 skip_born_before: int | None = None) -> Round:
    """One check of half queue ``queue_id`` on the entries the recovery keeps; sets each
    entry's ``check``/``put_back_as`` from ``half_start`` on. ``skip_born_before``: half
    messages born before it are past fileReservedTime and discarded (needSkip)."""
    half_min = min(halves) if halves else 0
    half_max = max(halves) + 1 if halves else 0
    start = half_min if half_start is None else half_start
    op_map = _OpRemoveMap(ops, start)
    op_from = op_map.op_min if op_start is None else op_start
    run = Round(queue_id, start, op_from)
    if start < 0 or op_from < 0:
        run.skipped = "a negative check offset: the broker skips this queue"
        return run
    found, next_op = op_map.fill(op_from)
    copies = run.copies
    nulls = 1
    i = new_offset = start
    while True:
        op_at = op_map.take(i)
        entry = halves.get(i) or copies.get(i)
        if op_at is not None:
            if isinstance(entry, HalfEntry):
                entry.check, entry.check_detail = ENTRY_REMOVED, f"op message {op_at} covers it"
            new_offset = i = i + 1
            continue
        queue_end = half_max + len(copies)
        if entry is None:
            if nulls > 1 or i >= queue_end:
                break
            nulls += 1
            i = new_offset = half_min if i < half_min else i + 1
            continue
        why = _discard_reason(entry, halves, check_max, skip_born_before)
        if why is not None:
            entry.check = ENTRY_DISCARDED
            if isinstance(entry, HalfEntry):
                entry.check_detail = why
            run.discarded.append(i)
            new_offset = i = i + 1
            continue
        if isinstance(entry, _Copy):
            break       # stored after the round began: checked next round
        if found:
            found, next_op = op_map.fill(next_op)
            continue
        _put_back(entry, i, queue_end, copies)
        run.put_back.append(i)
        new_offset = i = i + 1
    _discard_sources_of_discarded_copies(halves, copies, check_max)
    run.half_offset_after = new_offset
    run.op_offset_after = op_map.offset_after(op_from)
    return run


def _put_back(entry: HalfEntry, offset: int, queue_end: int, copies: dict) -> None:
    """No op message covers the half entry at ``offset``: the round checks it with its producer
    and puts a copy of it back at the end of the half queue (``putBackHalfMsgQueue``)."""
    times = entry.check_times
    copies[queue_end] = _Copy(offset, 1 if times is None else times + 1, entry.key)
    entry.check, entry.put_back_as = ENTRY_PUT_BACK, queue_end
    entry.check_detail = (f"no op message covers it: put back as half-queue offset "
                          f"{queue_end} (check {copies[queue_end].check_times}) and "
                          "checked with its producer")


def _discard_sources_of_discarded_copies(halves: dict[int, HalfEntry], copies: dict,
                                         check_max: int) -> None:
    """A copy the same round put back and then discarded takes its source with it."""
    for at, copy in copies.items():
        if copy.check == ENTRY_DISCARDED:
            source = halves[copy.source]
            source.check = ENTRY_DISCARDED
            source.check_detail = (f"put back as half-queue offset {at} with check "
                                   f"{copy.check_times}, which the same round discards "
                                   f"(--check-max {check_max}): moved to "
                                   f"{tx_fmt.CHECK_MAX_TIME_TOPIC}")


# --- the report -----------------------------------------------------------------------------------

def _brief(record: MessageRecord, truncated: bool) -> dict:
    return {"commitlog_offset": record.offset, "size": record.total_size,
            "topic": record.topic, "queue_id": record.queue_id,
            "queue_offset": record.queue_offset, "store_timestamp": record.store_timestamp,
            "truncated_by_recovery": truncated}


def _half_dict(e: HalfEntry) -> dict:
    p = e.props
    return {"half_queue_offset": e.queue_offset, "queue_id": e.record.queue_id,
            "commitlog_offset": e.record.offset, "size": e.record.total_size,
            "store_timestamp": e.record.store_timestamp,
            "check_times": e.check_times,
            "uniq_key": p.get(tx_fmt.PROP_UNIQ_KEY),
            "transaction_id": p.get(tx_fmt.PROP_TRANSACTION_ID),
            "producer_group": p.get(tx_fmt.PROP_PRODUCER_GROUP),
            "real_topic": p.get(tx_fmt.PROP_REAL_TOPIC),
            "real_queue_id": tx_fmt.java_int(p.get(tx_fmt.PROP_REAL_QID)),
            "keys": p.get("KEYS"),
            "covered_by_op_messages": sorted(e.covered_by),
            "commit_record": None if e.commit is None else e.commit.offset,
            "truncated_by_recovery": e.truncated,
            "next_check": e.check, "next_check_detail": e.check_detail,
            "put_back_as": e.put_back_as}


def _check_rounds(got: _Collected, progress: CheckProgress, process_offset: int,
                  check_max: int, skip_before: int | None) -> list[Round]:
    """One check round per half queue, on what the recovery keeps; the entries it truncates,
    those the round does not reach and those below its start are marked."""
    rounds = []
    queue_ids = sorted({q for q, _ in got.halves} | set(progress.half))
    for qid in queue_ids:
        kept = {o: e for (q, o), e in got.halves.items() if q == qid and not e.truncated}
        kept_ops = {o: op for (q, o), op in got.ops.items() if q == qid and not op.truncated}
        for (q, o), e in got.halves.items():
            if q == qid and e.truncated:
                e.check = ENTRY_TRUNCATED
                e.check_detail = (f"it ends past the recovery point {process_offset}: the next "
                                  "start truncates it")
        if progress.refuses:
            rounds.append(Round(qid, None, None, skipped="the broker refuses to start"))
            continue
        run = _check_round(qid, kept, kept_ops, progress.half.get(qid), progress.op.get(qid),
                           check_max, skip_before)
        rounds.append(run)
        if run.skipped:
            for o, e in kept.items():
                e.check, e.check_detail = ENTRY_NOT_REACHED, run.skipped
            continue
        start = run.half_offset if run.half_offset is not None else 0
        for o, e in kept.items():
            if o < start:
                e.check = ENTRY_BEFORE_CRASH
    return rounds


def _settle_entries_before_the_check(groups: dict[str, list[HalfEntry]]) -> None:
    """Half entries below the check offset (``groups``: each transaction's entries, oldest
    first): removed by an op message, put back as their next copy, or consumed by an earlier
    check."""
    later = {}
    for key, entries in groups.items():
        for older, newer in zip(entries, entries[1:]):
            later[id(older)] = newer
    for entries in groups.values():
        for e in entries:
            if e.check != ENTRY_BEFORE_CRASH:
                continue
            if e.covered_by:
                e.check, e.check_detail = ENTRY_REMOVED, (
                    f"op message {', '.join(map(str, sorted(e.covered_by)))} covers it "
                    "(ended before the crash)")
            elif id(e) in later:
                e.put_back_as = later[id(e)].queue_offset
                e.check_detail = (f"below the check offset; put back as half-queue offset "
                                  f"{e.put_back_as}")
            else:
                e.check = ENTRY_CONSUMED
                e.check_detail = ("below the check offset, and no later copy or op message: "
                                  "discarded or skipped by an earlier check")


def transaction_report(store: Store, *, check_max: int = tx_fmt.DEFAULT_CHECK_MAX,
                       group: str | None = None, broker_version: str = "auto",
                       plan: RecoveryPlan | None = None, at_ms: int | None = None,
                       file_reserved_hours: int = tx_fmt.DEFAULT_FILE_RESERVED_HOURS) -> dict:
    """Every transaction of ``store`` (see the module doc) as a JSON-able dict; ``group`` keeps
    the transactions of one producer group. ``at_ms``: when the check runs (default: right
    after the newest message, so that no half message is past fileReservedTime); half messages
    born more than ``file_reserved_hours`` before it are discarded unchecked, as the broker's
    needSkip does."""
    if check_max < 1:
        raise MqtoolError(f"--check-max must be at least 1, not {check_max}")
    if plan is None:
        plan = predict_recovery(store, broker_version=broker_version)
    process_offset = plan.process_offset
    links = link_records(store, process_offset)
    got, op_rows, orphans, problems = links.got, links.op_rows, links.orphans, links.problems
    progress = check_progress(store, has_half=bool(got.halves))

    skip_before = None if at_ms is None else at_ms - file_reserved_hours * 3600 * 1000
    rounds = _check_rounds(got, progress, process_offset, check_max, skip_before)
    groups: dict[str, list[HalfEntry]] = {}
    for (qid, o), e in sorted(got.halves.items()):
        groups.setdefault(e.key, []).append(e)
    _settle_entries_before_the_check(groups)
    cut_ops = {at for (_, at), op in got.ops.items() if op.truncated}
    transactions = []
    for key, entries in groups.items():
        first = entries[0]
        producer_group = first.props.get(tx_fmt.PROP_PRODUCER_GROUP)
        if group is not None and producer_group != group:
            continue
        transactions.append(_transaction(entries, progress.refuses, process_offset,
                                         cut_ops))
    half_rows = [_half_dict(e) for _, e in sorted(got.halves.items())
                 if group is None or e.props.get(tx_fmt.PROP_PRODUCER_GROUP) == group]
    orphan_rows = [{**_brief(c, c.end > process_offset),
                    "prepared_transaction_offset": c.prepared_transaction_offset,
                    "uniq_key": c.properties.get(tx_fmt.PROP_UNIQ_KEY)} for c in orphans]
    dangling = [{"op_queue_offset": r["op_queue_offset"], "commitlog_offset":
                 r["commitlog_offset"], "half_offsets": r["half_offsets_missing"]}
                for r in op_rows if r["half_offsets_missing"]]

    def count(field_name: str) -> dict:
        out: dict[str, int] = {}
        for t in transactions:
            out[t[field_name]] = out.get(t[field_name], 0) + 1
        return dict(sorted(out.items()))

    return {
        "store": str(store.root),
        "check_max": check_max,
        "check_at_ms": at_ms,
        "recovery": {"process_offset": process_offset, "mode": plan.mode,
                     "broker_version": plan.broker_version},
        "check_progress": progress.to_dict(),
        "check_rounds": [r.to_dict() for r in rounds],
        "half_entries": half_rows,
        "op_messages": op_rows,
        "transactions": transactions,
        "commit_records_without_half": orphan_rows,
        "op_offsets_without_half": dangling,
        "summary": {"half_entries": len(half_rows), "op_messages": len(op_rows),
                    "commit_records": len(got.commits), "transactions": len(transactions),
                    "ended_in_store": count("ended_in_store"), "next_check": count("next_check")},
        "problems": problems + progress.notes,
    }


def _transaction(entries: list[HalfEntry], refuses: bool, process_offset: int,
                 cut_ops: set) -> dict:
    first = entries[0]
    commit = next((e.commit for e in entries if e.commit is not None), None)
    covered = sorted({op for e in entries for op in e.covered_by})
    ended = ENDED_COMMITTED if commit is not None else ENDED_ROLLED_BACK if covered else ENDED_OPEN
    kept = [e for e in entries if not e.truncated]
    newest = kept[-1] if kept else None
    lost_after = newest is not None and any(e.truncated and e.queue_offset > newest.queue_offset
                                           for e in entries)
    ended_fate = FATE_COMMITTED if commit is not None else FATE_ROLLED_BACK
    if refuses:
        fate, why = FATE_NO_START, "consumerOffset.json cannot be loaded: the broker does not start"
    elif newest is None:
        fate, why = FATE_LOST, "the next start truncates every copy of it"
    elif newest.check == ENTRY_REMOVED:
        fate, why = ended_fate, newest.check_detail
    elif newest.check == ENTRY_DISCARDED:
        fate, why = FATE_DISCARDED, newest.check_detail
    elif newest.check == ENTRY_PUT_BACK:
        fate, why = FATE_CHECKED_AGAIN, newest.check_detail
    elif newest.check == ENTRY_NOT_REACHED and newest.check_detail:
        fate, why = FATE_NOT_CHECKED, newest.check_detail
    elif lost_after:
        fate, why = FATE_LOST, ("its newest copies are truncated by the next start; the check "
                                "has passed the copy that is kept")
    elif newest.check == ENTRY_CONSUMED:
        fate, why = FATE_DISCARDED, newest.check_detail
    else:
        fate, why = FATE_CHECKED_AGAIN, newest.check_detail or "not reached by the next round"
    note = None
    if ended != ENDED_OPEN and fate in (FATE_CHECKED_AGAIN, FATE_DISCARDED):
        note = (f"ended ({ended}) on an older copy: the op message covers that copy only, so the "
                "check still treats the newest copy as open")
    return {
        "uniq_key": first.props.get(tx_fmt.PROP_UNIQ_KEY),
        "transaction_id": first.props.get(tx_fmt.PROP_TRANSACTION_ID),
        "producer_group": first.props.get(tx_fmt.PROP_PRODUCER_GROUP),
        "real_topic": first.props.get(tx_fmt.PROP_REAL_TOPIC),
        "real_queue_id": tx_fmt.java_int(first.props.get(tx_fmt.PROP_REAL_QID)),
        "keys": first.props.get("KEYS"),
        "half_copies": [{"half_queue_offset": e.queue_offset, "commitlog_offset": e.record.offset,
                         "check_times": e.check_times, "truncated_by_recovery": e.truncated,
                         "next_check": e.check} for e in entries],
        "op_messages": covered,
        "commit_record": None if commit is None else {
            "commitlog_offset": commit.offset, "topic": commit.topic,
            "queue_id": commit.queue_id, "queue_offset": commit.queue_offset,
            "prepared_transaction_offset": commit.prepared_transaction_offset},
        "ended_in_store": ended,
        "next_check": fate,
        "next_check_detail": why,
        "recovery": [f"half copy {e.queue_offset} truncated" for e in entries if e.truncated]
        + [f"op message {at} truncated" for at in covered if at in cut_ops]
        + ([f"COMMIT record at {commit.offset} truncated"] if commit is not None
           and commit.end > process_offset else []),
        "note": note,
    }


def open_transaction_offsets(store: Store, **kwargs) -> dict[int, dict]:
    """CommitLog offset -> open transaction (what ``export --open-transactions`` writes): per
    transaction no COMMIT record and no op message ends, its newest half copy the recovery
    keeps."""
    report = transaction_report(store, **kwargs)
    out = {}
    for t in report["transactions"]:
        if t["ended_in_store"] != ENDED_OPEN:
            continue
        kept = [c for c in t["half_copies"] if not c["truncated_by_recovery"]]
        if not kept:
            continue
        out[kept[-1]["commitlog_offset"]] = {
            k: t[k] for k in ("transaction_id", "producer_group", "next_check",
                              "next_check_detail")} | {
            "check_times": kept[-1]["check_times"],
            "half_copies": [c["half_queue_offset"] for c in t["half_copies"]]}
    return out


# --- verify's checks ------------------------------------------------------------------------------

def has_transactions(store: Store) -> bool:
    """The store has a transaction half or op queue (the broker dispatched a half message)."""
    return any(q.topic in (HALF_TOPIC, OP_TOPIC) for q in store.consume_queues)


def check_transactions(store: Store, *, plan: RecoveryPlan | None = None) -> list[dict]:
    """verify's findings (the fields of its Finding) about transactional messages; [] for a store
    without a half or op queue: op messages listing half-queue offsets where no half message is
    (TXN_OP_DANGLING), COMMIT records whose half message is missing (TXN_COMMIT_ORPHAN), op
    bodies that are no list of numbers (TXN_OP_BODY), half messages without REAL_TOPIC
    (TXN_HALF_NO_REAL_TOPIC)."""
    if not has_transactions(store):
        return []
    if plan is None:
        plan = predict_recovery(store)
    links = link_records(store, plan.process_offset)
    findings: list[dict] = []

    def add(code: str, record: MessageRecord, message: str, severity: str, **extra) -> None:
        seg = store.commitlog.segment_for(record.offset)
        findings.append({"code": code, "severity": severity,
                         "file": store.relative(seg.path) if seg is not None else "commitlog",
                         "offset": record.offset - (seg.base_offset if seg is not None else 0),
                         "message": message, "commitlog_offset": record.offset,
                         "topic": record.topic, "queue_id": record.queue_id, **extra})

    for (qid, at), op in sorted(links.got.ops.items()):
        row = next(r for r in links.op_rows if r["queue_id"] == qid and r["op_queue_offset"] == at)
        missing = row["half_offsets_missing"]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            add("TXN_OP_DANGLING", op.record,
                f"op message {at} of {OP_TOPIC} queue {qid} ends half-queue offset(s) {shown} "
                f"where no half message is", "warning", count=len(missing))
        if op.bad_items:
            shown = ", ".join(repr(b) for b in op.bad_items[:5])
            add("TXN_OP_BODY", op.record,
                f"op message {at} of {OP_TOPIC} queue {qid}: {len(op.bad_items)} item(s) of its "
                f"body are no number ({shown}); the check reads each as -1 and ends nothing "
                "with it", "warning", count=len(op.bad_items))
    for commit in links.orphans:
        add("TXN_COMMIT_ORPHAN", commit,
            f"COMMIT record of {commit.topic} (UNIQ_KEY "
            f"{commit.properties.get(tx_fmt.PROP_UNIQ_KEY)}) names half message CommitLog offset "
            f"{commit.prepared_transaction_offset}, where no half message is", "warning")
    for (qid, at), e in sorted(links.got.halves.items()):
        if tx_fmt.PROP_REAL_TOPIC not in e.props:
            add("TXN_HALF_NO_REAL_TOPIC", e.record,
                f"half message at {HALF_TOPIC} queue {qid} offset {at} has no REAL_TOPIC: its "
                "commit cannot reach any topic", "error")
    return findings
