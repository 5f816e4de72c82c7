"""The broker's own answer to ``queryMessage`` (its cap, its skip of entries past the readable
end) and :func:`explain`: why it would fail or differ from mqtool's answer."""
from __future__ import annotations

import datetime as _dt
import weakref

from ..formats import commitlog as cl_fmt
from ..formats import transaction as tx_fmt
from ..recovery import RecoveryPlan, predict_recovery
from ..store import Store
from .results import QueryResult
from .ids import mqadmin_uniq_key_begin
from .index import JAVA_LONG_MAX, MAX_MSGS_NUM_BATCH, ChainProblem, IndexSet


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

class _Reasons(list):
    """The reasons found so far, in the order they are added."""

    def add(self, reason: str, detail: str, offsets=()) -> None:
        self.append({"reason": reason, "detail": detail, "offsets": sorted(set(offsets))})


def explain(store: Store, result: QueryResult, *, plan: RecoveryPlan | None = None,
            now_ms: int | None = None, tz: _dt.tzinfo | None = None) -> dict:
    """Why the broker's own query (mqadmin queryMsgByKey / queryMsgByUniqueKey / queryMsgById on
    a broker started on this store) would fail or differ from ``result``.

    Returns {"broker_offsets": what queryMessage would return (per topic), "reasons": [{"reason",
    "detail", "offsets"}], "recovery": the facts used}."""
    plan = plan or predict_recovery(store, broker_version="auto")
    process_offset = plan.process_offset
    mode = result.query.get("mode")
    reasons = _Reasons()
    out = {"recovery": {"mode": plan.mode, "broker_version": plan.broker_version,
                        "process_offset": process_offset,
                        "index_files_deleted": plan.index_files_deleted,
                        "redispatch_from": plan.redispatch_from}}
    if mode == "msg-id":
        _explain_msg_id(result, process_offset, reasons)
    if mode not in ("key", "uniq-key"):
        out["reasons"] = list(reasons)
        return out
    value = result.query.get("key") if mode == "key" else result.query.get("uniq_key")
    topics, begin, end = _query_window(result, mode, value, now_ms, tz, out)
    broker, index_from, walk_problems = _broker_answer(store, result, plan, topics, value,
                                                       begin, end, reasons)
    out["broker_offsets"] = broker
    out["indexed_on_start_from"] = index_from if index_from < process_offset else None
    _index_reasons(result, walk_problems, process_offset, reasons)
    missing = _why_not_found(result, broker, set(plan.index_files_deleted), process_offset,
                             begin, end, reasons)
    _missing_reasons(missing, plan, mode, begin, end, index_from, reasons)
    if mode == "uniq-key" and "is_offset_msg_id_of" in result.details:
        reasons.add("msg-id-given-as-uniq-key", "the id is an offsetMsgId, not a UNIQ_KEY: "
                    "queryMsgByUniqueKey finds nothing; use queryMsgById",
                    [result.details["is_offset_msg_id_of"]])
    if mode == "uniq-key":
        txn = _transaction_answer(result, broker, value, process_offset)
        if txn is not None:
            out["transaction"] = txn
    out["reasons"] = list(reasons)
    out["broker_finds_all"] = not any(missing.values())
    return out


def _explain_msg_id(result: QueryResult, process_offset: int, reasons: _Reasons) -> None:
    """queryMsgById: the message past the recovered end, or the id a UNIQ_KEY."""
    if result.found:
        record = result.found[0].record
        if record.offset >= process_offset:
            reasons.add("beyond-truncation", f"the message lies at or past CommitLog offset "
                        f"{process_offset}, where the broker's next start truncates: "
                        f"queryMsgById finds nothing", [record.offset])
    if "is_uniq_key_of" in result.details:
        reasons.add("uniq-key-given-as-msg-id", "the id is a UNIQ_KEY (client message id), not "
                    "an offsetMsgId: queryMsgById decodes it as host+offset and reads garbage "
                    "or nothing; use queryMsgByUniqueKey", result.details["is_uniq_key_of"])


def _query_window(result: QueryResult, mode: str, value: str, now_ms: int | None,
                  tz: _dt.tzinfo | None, out: dict) -> tuple[list[str], int, int]:
    """(the topics the broker is asked in, begin, end) as mqadmin asks: a UNIQ_KEY from the
    id's approximate time (``out["mqadmin_begin"]``), a key within --since/--until."""
    found_topics = sorted({f.record.topic for f in result.found})
    topics = [result.query["topic"]] if result.query.get("topic") else found_topics
    if mode == "uniq-key" and not result.query.get("topic"):
        # a transaction's half copies name its real topic: ask there too (its COMMIT record, if
        # any, is indexed there)
        topics += sorted({real for f in result.found if f.record.topic == tx_fmt.TRANS_HALF_TOPIC
                          for real in [f.record.properties.get(tx_fmt.PROP_REAL_TOPIC)]
                          if real and real not in topics})
    begin = 0
    if mode == "key" and result.query.get("since") is not None:
        begin = result.query["since"]
    end = JAVA_LONG_MAX
    if mode == "key" and result.query.get("until") is not None:
        end = result.query["until"]
    if mode == "uniq-key":
        begin = max(0, mqadmin_uniq_key_begin(value, now_ms, tz))
        out["mqadmin_begin"] = begin
    return topics, begin, end


def _broker_answer(store: Store, result: QueryResult, plan: RecoveryPlan, topics: list[str],
                   value: str, begin: int, end: int,
                   reasons: _Reasons) -> tuple[dict[str, list[int]], int, list[ChainProblem]]:
    """(queryMessage's offsets per topic on the started broker, where the start indexes again
    from, the chain problems its walk meets): the IndexFiles the start keeps, plus what it
    indexes again; the 64-entry cap as a reason."""
    process_offset, deleted = plan.process_offset, set(plan.index_files_deleted)
    redispatch = plan.redispatch_from
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
                reasons.add("result-cap", f"{topic}: the broker stops at {MAX_MSGS_NUM_BATCH} "
                            f"index entries (maxMsgsNumBatch), newest first; mqtool found "
                            f"{sum(1 for f in result.found if f.record.topic == topic)} "
                            f"messages")
    # messages the start (re)indexes are found by the running broker too
    for f in result.found:
        if f.inner_position is not None:
            continue  # the start indexes the outer record only
        offset = f.record.offset
        if not f.record.offset_ok:
            continue  # indexed again under the offset it states, where it is not
        if index_from <= offset < process_offset and f.record.topic in broker:
            if offset not in broker[f.record.topic]:
                broker[f.record.topic] = sorted(broker[f.record.topic] + [offset])
    return broker, index_from, walk_problems


def _index_reasons(result: QueryResult, walk_problems: list[ChainProblem], process_offset: int,
                   reasons: _Reasons) -> None:
    """What the IndexFiles themselves do to the answer: loops and damage in the chains, hash
    collisions, stale entries past the recovered end."""
    for problem in walk_problems:
        if problem.kind == "loop":
            reasons.add("index-chain-loops", f"IndexFile {problem.file}: {problem.detail}")
    for problem in result.problems:
        reasons.add("index-chain-damaged", f"IndexFile {problem.file}: {problem.detail}")
    if result.collisions:
        reasons.add("hash-collision", f"{len(set(result.collisions))} index entries have the "
                    f"same hash but belong to other keys: the broker returns those messages too "
                    f"(the client drops them) and they count toward its "
                    f"{MAX_MSGS_NUM_BATCH}-entry cap", result.collisions)
    stale_past = [o for o in result.stale if o >= process_offset]
    if stale_past:
        reasons.add("stale-index-entry", f"{len(set(stale_past))} index entries point at or "
                    f"past the recovered end {process_offset}: the broker skips them",
                    stale_past)


def _why_not_found(result: QueryResult, broker: dict[str, list[int]], deleted: set[str],
                   process_offset: int, begin: int, end: int, reasons: _Reasons) -> dict:
    """The messages mqtool found that the broker does not return, by why: {"inner", "beyond",
    "misplaced", "lost_index", "unindexed", "outside_window", "missing_other"}."""
    broker_seen = {o for offsets in broker.values() for o in offsets}
    missing = {"beyond": [], "unindexed": [], "lost_index": [], "outside_window": [],
               "missing_other": [], "misplaced": []}
    inner = [f for f in result.found if f.inner_position is not None]
    missing["inner"] = inner
    if inner:
        reasons.add("inner-batch-message", f"{len(inner)} of the messages found lie inside "
                    f"inner batches (BatchCQ topic): the broker indexes only the outer record, "
                    f"so its queryMessage finds none of them by their own key or UNIQ_KEY",
                    [f.record.offset for f in inner])
    for f in result.found:
        offset = f.record.offset
        if f.inner_position is not None:
            continue
        if offset >= process_offset:
            missing["beyond"].append(offset)
            continue
        if offset in broker_seen:
            continue
        if not f.record.offset_ok:
            missing["misplaced"].append(f.record)
            continue
        live_hits = [h for h in f.index_hits if h.file not in deleted]
        if f.index_hits and not live_hits:
            missing["lost_index"].append(offset)
        elif not f.index_hits:
            missing["unindexed"].append(offset)
        elif live_hits and not any(begin <= h.index_time <= end for h in live_hits):
            missing["outside_window"].append(offset)
        else:
            missing["missing_other"].append(offset)
    return missing


def _missing_reasons(missing: dict, plan: RecoveryPlan, mode: str, begin: int, end: int,
                     index_from: int, reasons: _Reasons) -> None:
    """A reason for each kind of message the broker does not return."""
    process_offset, deleted = plan.process_offset, set(plan.index_files_deleted)
    if missing["misplaced"]:
        stated = ", ".join(f"{r.offset} states {r.physical_offset}"
                           for r in missing["misplaced"][:5])
        reasons.add("damaged-physical-offset", f"the PHYSICALOFFSET field of these messages is "
                    f"damaged ({stated}): the broker's dispatch indexes a message under the "
                    f"offset it states, where no such message starts, so queryMessage does not "
                    f"return it (mqtool found it where it really is)",
                    [r.offset for r in missing["misplaced"]])
    if missing["beyond"]:
        reasons.add("beyond-truncation", f"the broker's next start truncates the CommitLog at "
                    f"{process_offset} ({plan.stop_reason}): these messages are gone for it",
                    missing["beyond"])
    if missing["lost_index"]:
        reasons.add("index-file-deleted-by-recovery", f"the next start is an abnormal recovery: "
                    f"it deletes IndexFile(s) {', '.join(sorted(deleted))} (endTimestamp after "
                    f"the checkpoint's indexMsgTimestamp) and indexes again only from CommitLog "
                    f"offset {index_from}", missing["lost_index"])
    if missing["unindexed"]:
        reasons.add("not-indexed", "no IndexFile holds an entry for these messages (the index "
                    "was lost or stops short of them): the broker cannot find them by key",
                    missing["unindexed"])
    if missing["outside_window"]:
        if mode == "uniq-key":
            detail = (f"mqadmin searches from the id's approximate time minus 1 s "
                      f"({begin}, read in this machine's zone and current month); these "
                      f"messages' index times are earlier")
        else:
            detail = (f"the index time (whole seconds from the file's beginTimestamp) is outside "
                      f"[{begin}, {end}] although the store time may be inside")
        reasons.add("outside-time-window", detail, missing["outside_window"])
    if missing["missing_other"]:
        reasons.add("not-returned", "the broker's walk stops before these entries (time order "
                    "of the chain or the 64-entry cap)", missing["missing_other"])


def _transaction_answer(result: QueryResult, broker: dict[str, list[int]], uniq_key: str,
                        process_offset: int) -> dict | None:
    """For the UNIQ_KEY of a transactional message: its half copies (indexed under the half
    topic, one per check that put it back), its COMMIT record (indexed under the real topic),
    and which of them the broker's queryMessage returns per topic; None for other keys."""
    halves = [f.record for f in result.found if f.record.topic == tx_fmt.TRANS_HALF_TOPIC]
    if not halves:
        return None
    commits = [f.record for f in result.found
               if cl_fmt.transaction_type(f.record.sys_flag) == cl_fmt.TRANSACTION_COMMIT_TYPE]
    half_offsets = {r.offset for r in halves}
    real = halves[0].properties.get(tx_fmt.PROP_REAL_TOPIC)
    by_real = broker.get(real) if real is not None else None
    half_answer = broker.get(tx_fmt.TRANS_HALF_TOPIC, [])
    if commits:
        live = [c.offset for c in commits if c.offset < process_offset]
        shown = (f"queryMessage({real}, {uniq_key}) returns the COMMIT record"
                 f"{'s' if len(live) > 1 else ''} {', '.join(map(str, live))}: what mqadmin "
                 f"queryMsgByUniqueKey -t {real} shows" if live else
                 f"the COMMIT record is past the recovery point {process_offset}: "
                 f"queryMessage({real}, ...) finds nothing")
    else:
        shown = (f"no COMMIT record: queryMessage({real}, {uniq_key}) finds nothing, the "
                 "transaction was never committed (open or rolled back)")
    return {
        "real_topic": real,
        "half_copies": [{"commitlog_offset": r.offset, "half_queue_offset": r.queue_offset,
                         "check_times": tx_fmt.java_int(r.properties.get(tx_fmt.PROP_CHECK_TIMES))}
                        for r in halves],
        "commit_records": [{"commitlog_offset": c.offset, "topic": c.topic,
                            "queue_offset": c.queue_offset,
                            "prepared_transaction_offset": c.prepared_transaction_offset,
                            "half_copy_found": c.prepared_transaction_offset in half_offsets}
                           for c in commits],
        "broker_returns_for_half_topic": half_answer,
        "broker_returns_for_real_topic": by_real,
        "detail": (f"a transactional message: its {len(halves)} half cop"
                   f"{'y is' if len(halves) == 1 else 'ies are'} indexed under "
                   f"{tx_fmt.TRANS_HALF_TOPIC} (queryMessage there returns "
                   f"{', '.join(map(str, half_answer)) or 'nothing'}, and mqadmin shows the "
                   f"first); {shown}"),
    }
