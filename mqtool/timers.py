"""``mqtool timers``: which 5.x timer messages are pending, which were delivered, and what the
broker's next start does with each.

Pending timers are read as the broker's dequeue reads them: every wheel slot due at or after the
checkpoint's lastReadTimeMs, its chain walked from lastPos back through prevPos to -1 (on a
sound wheel that ends at firstPos, timer.json's rule), each unit's rmq_sys_wheel_timer message
fetched from the CommitLog. Units in earlier slots have been delivered; the delivered copy (same
UNIQ_KEY, with TIMER_DEQUEUE_MS) is looked up in the CommitLog. A cancellation unit (magic
DELETE) carries TIMER_DEL_UNIQKEY; the dequeue drops the same slot's timers with that UNIQ_KEY.

The next start (TimerMessageStore.recover, then dequeue) is predicted from the files:
the CommitLog recovery (:func:`mqtool.recovery.predict_recovery`) may truncate a timer's message
(the timer is then lost: the dequeue finds nothing, or a later record, at its offset); the
TimerLog recovery cuts the log at its first bad unit, re-links the units of its last file(s) to
their slots (units written after the wheel's last flush come back) and re-reads the timer
topic's queue from the queue offset after the last kept unit; the read time starts at
lastReadTimeMs but never earlier than 7 days minus 60 slots before the start (older slots are
skipped); slots already due are delivered at once. Not modelled: checkPhyPos's second walk for
slots pointing past the cut TimerLog, and a master/slave role change."""
from __future__ import annotations

import time
from dataclasses import dataclass

from .errors import MqtoolError
from .formats import timer as timer_fmt
from .formats.codecs import property_int
from .recovery import RecoveryPlan, predict_recovery
from .scan import MessageRecord, Scanner
from .store import Store
from .scan.reader import RecordReader
from .timer import (TimerStore, has_timer_store, load_timer_store, revised_slots, timerlog_recovery,
                    used_slots, walk_slot)

PRECISION = timer_fmt.DEFAULT_PRECISION_MS
_DEQUEUE_MARK = timer_fmt.PROP_TIMER_DEQUEUE_MS.encode()

# what the next start does with a pending timer (stable values: scripts rely on them)
FATE_DUE = "delivered-when-due"
FATE_OVERDUE = "delivered-at-start"
FATE_REENQUEUED = "re-enqueued-from-queue"
FATE_CANCELLED = "cancelled"
FATE_ROLLED = "rolled-forward"
FATE_LOST_TRUNCATED = "lost-message-truncated"
FATE_LOST_MISSING = "lost-message-missing"
FATE_LOST_TIMERLOG = "lost-timerlog-cut"
FATE_LOST_SKIPPED = "lost-slot-skipped"
FATE_NO_START = "broker-refuses-to-start"
FATE_TWICE = "delivered-twice"
LOST_FATES = (FATE_LOST_TRUNCATED, FATE_LOST_MISSING, FATE_LOST_TIMERLOG, FATE_LOST_SKIPPED)


@dataclass
class _Message:
    record: MessageRecord
    properties: dict


def _message(reader: RecordReader, unit: dict) -> _Message | None:
    record, _ = reader.at(unit["commitlog_offset"])
    if record is None or record.total_size != unit["commitlog_size"]:
        return None
    return _Message(record, record.properties)


def _timer_entry(unit: dict, message: _Message | None) -> dict:
    entry = {
        "timerlog_offset": unit["timerlog_offset"], "size": unit["size"],
        "prev_pos": unit["prev_pos"], "magic": unit["magic"],
        "write_time_ms": unit["curr_write_time_ms"], "delay_ms": unit["delay_ms"],
        "deliver_time_ms": unit["deliver_time_ms"],
        "commitlog_offset": unit["commitlog_offset"], "commitlog_size": unit["commitlog_size"],
        "real_topic_hash": unit["real_topic_hash"],
        "kind": "delete" if unit["magic"] & timer_fmt.MAGIC_DELETE else
                "roll" if unit["magic"] & timer_fmt.MAGIC_ROLL else "timer",
        "message_found": message is not None,
    }
    if message is not None:
        props, record = message.properties, message.record
        entry.update({
            "topic": record.topic, "queue_id": record.queue_id,
            "queue_offset": record.queue_offset,
            "real_topic": props.get(timer_fmt.PROP_REAL_TOPIC),
            "real_queue_id": property_int(props.get(timer_fmt.PROP_REAL_QID)),
            "uniq_key": props.get("UNIQ_KEY"), "keys": props.get("KEYS"),
            "tags": props.get("TAGS"),
            "timer_out_ms": property_int(props.get(timer_fmt.PROP_TIMER_OUT_MS)),
            "timer_deliver_ms": property_int(props.get(timer_fmt.PROP_TIMER_DELIVER_MS)),
            "timer_delay_sec": property_int(props.get(timer_fmt.PROP_TIMER_DELAY_SEC)),
            "cancels_uniq_key": props.get(timer_fmt.PROP_TIMER_DEL_UNIQKEY),
        })
    return entry


@dataclass
class _NextStart:
    """The parts of the broker's next start that decide the timers' fates."""

    refuses: list[str]
    process_offset: int | None          # CommitLog recovery's end
    timerlog_kept_end: int              # TimerLog offset the timer recovery cuts at
    requeue_from: int | None            # timer-topic queue offset re-read after the cut
    read_from_ms: int                   # the first slot the dequeue reads
    start_ms: int


def _predict_next_start(reader: RecordReader, timers: TimerStore, plan: RecoveryPlan | None,
                        start_ms: int, timer_queue_end: int | None) -> _NextStart:
    refuses = list(plan.refuses_to_start) if plan else []
    if timers.wheel_refused:
        refuses.append(f"timerwheel is {timers.wheel_size} bytes, not "
                       f"{timer_fmt.TIMERWHEEL_FILE_SIZE}")
    kept_end = timerlog_recovery(timers)[1]
    ckpt = timers.checkpoint or {}
    requeue_from = ckpt.get("last_timer_queue_offset", 0)
    kept = [u for pos, u in timers.units.items() if pos + timer_fmt.TIMERLOG_UNIT_SIZE <= kept_end]
    if kept:
        last = max(kept, key=lambda u: u["timerlog_offset"])
        message = _message(reader, last)
        alive = message is not None and (plan is None or message.record.end <= plan.process_offset)
        if alive:
            requeue_from = message.record.queue_offset + 1
    requeue_from = min(requeue_from, ckpt.get("master_timer_queue_offset", requeue_from))
    if timer_queue_end is not None:
        requeue_from = min(requeue_from, timer_queue_end)
    horizon = (start_ms // PRECISION - timer_fmt.DEFAULT_SLOTS_TOTAL
               + timer_fmt.TIMER_BLANK_SLOTS) * PRECISION
    return _NextStart(refuses, plan.process_offset if plan else None, kept_end, requeue_from,
                      max(ckpt.get("last_read_time_ms", 0), horizon), start_ms)


def _fate(entry: dict, slot_ms: int, nxt: _NextStart, cancelled: set[str]) -> tuple[str, str]:
    if nxt.refuses:
        return FATE_NO_START, "; ".join(nxt.refuses)
    if not entry["message_found"]:
        return FATE_LOST_MISSING, (f"no {entry['commitlog_size']}-byte record at CommitLog offset "
                                   f"{entry['commitlog_offset']}")
    end = entry["commitlog_offset"] + entry["commitlog_size"]
    if nxt.process_offset is not None and end > nxt.process_offset:
        return FATE_LOST_TRUNCATED, (f"its message ends at {end}, past the CommitLog recovery "
                                     f"point {nxt.process_offset}")
    if entry["timerlog_offset"] + timer_fmt.TIMERLOG_UNIT_SIZE > nxt.timerlog_kept_end:
        if nxt.requeue_from is not None and entry.get("queue_offset", -1) >= nxt.requeue_from:
            return FATE_REENQUEUED, (f"the TimerLog recovery cuts at {nxt.timerlog_kept_end}; "
                                     f"its message (queue offset {entry['queue_offset']}) is read "
                                     f"again from queue offset {nxt.requeue_from}")
        return FATE_LOST_TIMERLOG, f"the TimerLog recovery cuts at {nxt.timerlog_kept_end}"
    twice = nxt.requeue_from is not None and entry.get("queue_offset", -1) >= nxt.requeue_from
    if slot_ms < nxt.read_from_ms:
        return FATE_LOST_SKIPPED, (f"the dequeue starts at {nxt.read_from_ms} ms and never reads "
                                   "this slot")
    if entry["kind"] == "delete":
        return FATE_CANCELLED, f"cancels UNIQ_KEY {entry.get('cancels_uniq_key')}"
    if entry.get("uniq_key") in cancelled:
        return FATE_CANCELLED, "a delete unit in the same slot cancels it"
    if entry["kind"] == "roll":
        return FATE_ROLLED, ("put back into the wheel, due at TIMER_OUT_MS "
                             f"{entry.get('timer_out_ms')}")
    if twice:
        return FATE_TWICE, (f"its unit is kept and its message (queue offset "
                            f"{entry['queue_offset']}) is enqueued again: the timer topic's queue "
                            f"is re-read from {nxt.requeue_from}")
    if slot_ms < nxt.start_ms:
        return FATE_OVERDUE, "due before the start: delivered as soon as the broker runs"
    return FATE_DUE, "delivered at its due time"


def _commitlog_timer_records(store: Store) -> tuple[dict[int, MessageRecord],
                                                   dict[str, MessageRecord]]:
    """One CommitLog pass: the timer-topic records by offset, and the delivered copies (records
    carrying TIMER_DEQUEUE_MS outside the timer topic) by UNIQ_KEY."""
    originals: dict[int, MessageRecord] = {}
    copies: dict[str, MessageRecord] = {}
    for record in Scanner(store.commitlog, check_crc=False).messages():
        if record.topic == timer_fmt.TIMER_TOPIC:
            originals[record.offset] = record
        elif _DEQUEUE_MARK in record.properties_raw:
            uniq = record.properties.get("UNIQ_KEY")
            if uniq is not None:
                copies.setdefault(uniq, record)
    return originals, copies


def timer_report(store: Store, *, start_ms: int | None = None, broker_version: str = "auto",
                 plan: RecoveryPlan | None = None, with_delivered: bool = True) -> dict:
    """The timer store of ``store`` as a JSON-able dict (see the module doc). ``start_ms`` is
    when the broker is assumed to start again (default: now); ``plan`` a recovery prediction
    already made (else one is made with ``broker_version``)."""
    if not has_timer_store(store):
        raise MqtoolError(f"{store.root}: no timer store (timerlog/, timerwheel, "
                          "config/timercheck): not a 5.x store with timer messages")
    timers = load_timer_store(store)
    if start_ms is None:
        start_ms = int(time.time() * 1000)
    if plan is None:
        plan = predict_recovery(store, broker_version=broker_version)
    timer_queue_end = plan.queue_end_after_recovery(timer_fmt.TIMER_TOPIC, 0)
    ckpt = timers.checkpoint
    read_ms = ckpt["last_read_time_ms"] if ckpt else 0
    with RecordReader(store.commitlog, random_access=False) as reader:
        nxt = _predict_next_start(reader, timers, plan, start_ms, timer_queue_end)
        walked = _walk_wheel(timers, reader, nxt, read_ms)
        relinked = _relinked_by_load(timers, reader, nxt, walked.reached, read_ms)
    copies_found, awaiting = None, []
    if with_delivered:
        copies_found, awaiting = _look_up_copies(store, timers, walked.delivered, plan, nxt)

    pending = [e for s in walked.pending_slots for e in s["timers"]]
    fates: dict[str, int] = {}
    for e in pending + relinked:
        fates[e["next_start"]] = fates.get(e["next_start"], 0) + 1
    unreachable = sorted(pos for pos, u in timers.units.items() if pos not in walked.reached
                         and u["deliver_time_ms"] >= read_ms
                         and pos not in {e["timerlog_offset"] for e in relinked})
    return {
        "store": str(store.root),
        "checkpoint": None if ckpt is None else
        {k: v for k, v in ckpt.items() if k != "record_type"},
        "timerlog": {"files": [vars(f) for f in timers.files], "units": len(timers.units),
                     "end": timers.timerlog_end},
        "wheel": {"size": timers.wheel_size, "expected_size": timer_fmt.TIMERWHEEL_FILE_SIZE,
                  "used_slots": walked.used_slots},
        "pending_count": len(pending),
        "pending_slots": walked.pending_slots,
        "delivered_count": len(walked.delivered),
        "delivered_copies_found": copies_found,
        "delivered": walked.delivered,
        "not_in_timerlog": awaiting,
        "unreachable_units": unreachable,
        "next_start": {
            "assumed_start_ms": start_ms,
            "refuses_to_start": nxt.refuses,
            "commitlog_process_offset": nxt.process_offset,
            "timerlog_kept_end": nxt.timerlog_kept_end,
            "timer_queue_reread_from": nxt.requeue_from,
            "dequeue_reads_from_ms": nxt.read_from_ms,
            "relinked": relinked,
            "fates": fates,
            "lost": [e for e in pending + relinked if e["next_start"] in LOST_FATES],
        },
        "problems": walked.problems,
    }


@dataclass
class _Walked:
    pending_slots: list
    delivered: list
    problems: list
    reached: set
    used_slots: int


def _walk_wheel(timers: TimerStore, reader: RecordReader, nxt: _NextStart,
                read_ms: int) -> _Walked:
    """Every used slot of the wheel on disk: due at or after lastReadTimeMs it is pending (with
    each timer's fate), earlier it has been delivered."""
    walked = _Walked([], [], [], set(), 0)
    if timers.wheel_refused:
        walked.problems.append(f"timerwheel is {timers.wheel_size} bytes, not "
                               f"{timer_fmt.TIMERWHEEL_FILE_SIZE}: its slots are not read")
        return walked
    slots = list(used_slots(timers.wheel)) if timers.wheel is not None else []
    walked.used_slots = len(slots)
    for slot in sorted(slots, key=lambda s: s["time_slot"]):
        slot_ms = slot["time_slot"] * PRECISION
        chain, problem = walk_slot(timers.units, slot)
        if problem:
            walked.problems.append(f"slot {slot['slot']}: {problem}")
        entries = [_timer_entry(u, _message(reader, u)) for u in chain]
        walked.reached.update(u["timerlog_offset"] for u in chain)
        if slot_ms >= read_ms:
            _set_fates(entries, slot_ms, nxt)
            walked.pending_slots.append({
                "slot": slot["slot"], "slot_time_ms": slot_ms, "first_pos": slot["first_pos"],
                "last_pos": slot["last_pos"], "num": slot["num"], "magic": slot["magic"],
                "timers": entries})
        else:
            walked.delivered += [{**e, "slot": slot["slot"], "slot_time_ms": slot_ms}
                                 for e in entries]
    return walked


def _set_fates(entries: list[dict], slot_ms: int, nxt: _NextStart) -> None:
    cancelled = {e["cancels_uniq_key"] for e in entries
                 if e["kind"] == "delete" and e.get("cancels_uniq_key")}
    for e in entries:
        e["cancelled"] = e["kind"] == "delete" or e.get("uniq_key") in cancelled
        e["next_start"], e["next_start_detail"] = _fate(e, slot_ms, nxt, cancelled)


def _relinked_by_load(timers: TimerStore, reader: RecordReader, nxt: _NextStart,
                      reached: set[int], read_ms: int) -> list[dict]:
    """Pending units on no chain of the wheel on disk that the broker's load puts back on their
    slot (units written after the wheel's last flush before a crash), with their fates."""
    if timers.wheel is None:
        return []
    begin, end = timerlog_recovery(timers)
    out = []
    for slot in revised_slots(timers, begin, end).values():
        slot_ms = slot["time_slot"] * PRECISION
        if slot_ms < read_ms:
            continue
        chain, _ = walk_slot(timers.units, slot)
        entries = [_timer_entry(u, _message(reader, u)) for u in chain]
        _set_fates(entries, slot_ms, nxt)
        out += [{**e, "slot_time_ms": slot_ms} for e in entries
                if e["timerlog_offset"] not in reached]
    return sorted(out, key=lambda e: e["timerlog_offset"])


def _look_up_copies(store: Store, timers: TimerStore, delivered: list[dict], plan: RecoveryPlan,
                    nxt: _NextStart) -> tuple[int, list[dict]]:
    """Each delivered timer's copy in the CommitLog (by UNIQ_KEY), and the timer-topic records
    no unit points at: enqueued at the next start when their queue offset is at or after the
    re-read point, else never."""
    originals, copies = _commitlog_timer_records(store)
    found = 0
    for e in delivered:
        copy = copies.get(e.get("uniq_key"))
        e["delivered_copy"] = None if copy is None else {
            **copy.brief(), "lost_on_recovery": copy.end > plan.process_offset}
        found += copy is not None
    awaiting = []
    pointed = {u["commitlog_offset"] for u in timers.units.values()}
    for offset, record in sorted(originals.items()):
        if offset in pointed:
            continue
        props = record.properties
        live = record.end <= plan.process_offset
        enqueued = live and nxt.requeue_from is not None \
            and record.queue_offset >= nxt.requeue_from
        awaiting.append({**record.brief(), "real_topic": props.get(timer_fmt.PROP_REAL_TOPIC),
                         "real_queue_id": property_int(props.get(timer_fmt.PROP_REAL_QID)),
                         "uniq_key": props.get("UNIQ_KEY"), "keys": props.get("KEYS"),
                         "timer_out_ms": property_int(props.get(timer_fmt.PROP_TIMER_OUT_MS)),
                         "next_start": "enqueued-at-start" if enqueued else
                         FATE_LOST_TRUNCATED if not live else "never-enqueued"})
    return found, awaiting


def pending_timer_offsets(store: Store, **kwargs) -> dict[int, dict]:
    """CommitLog offset -> pending timer entry (what ``export --pending-timers`` writes): the
    timers still to fire, without cancellations and the timers they cancel."""
    report = timer_report(store, with_delivered=False, **kwargs)
    return {e["commitlog_offset"]: e for s in report["pending_slots"] for e in s["timers"]
            if not e["cancelled"]}
