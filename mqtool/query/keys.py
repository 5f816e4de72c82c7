"""Lookups by key, UNIQ_KEY and offsetMsgId: every index chain entry followed to its record, the
parts no IndexFile covers scanned instead."""
from __future__ import annotations

import numpy as np

from ..codec import BATCH_CQ_DTYPE
from ..config import TOPICS, read_config
from ..mapping import iter_units
from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..formats import timer as timer_fmt
from ..innerbatch import batch_carries, is_inner_batch, open_record
from ..scan import MessageRecord, RecordBatch, Scanner, TopicTable, read_body
from ..store import CommitLog, Store
from .results import Found, QueryError, QueryResult
from .ids import check_hex_id, describe_msg_id, describe_uniq_key, uniq_key_windows
from ..scan.reader import RecordReader
from .index import IndexHit, IndexSet


# Topics the broker writes itself; their records are indexed under these names too.
SCHEDULE_TOPIC = codecs.SCHEDULE_TOPIC
TRANS_HALF_TOPIC = codecs.TRANS_HALF_TOPIC
TRANS_OP_HALF_TOPIC = codecs.TRANS_OP_HALF_TOPIC
TIMER_TOPIC = timer_fmt.TIMER_TOPIC
SYSTEM_TOPICS = (SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TIMER_TOPIC)

_ROLLBACK = cl_fmt.TRANSACTION_ROLLBACK_TYPE
_UNIQ_PROPERTY = ("UNIQ_KEY" + codecs.NAME_VALUE_SEPARATOR).encode()
_KEYS_PROPERTY = ("KEYS" + codecs.NAME_VALUE_SEPARATOR).encode()


# --- key and UNIQ_KEY lookups --------------------------------------------------------------------

def store_topics(store: Store) -> list[str]:
    """Topics this store knows of: queue directories, config/topics.json, the system topics."""
    topics = {q.topic for q in store.consume_queues} | {q.topic for q in
                                                        store.batch_consume_queues}
    topics_json = read_config(store.root / "config" / TOPICS).document
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


def _batch_records(store: Store, topics: set[str] | None, use_queues: bool
                   ) -> tuple[list[MessageRecord], int]:
    """The inner-batch records of ``topics`` (None: all): those the BatchConsumeQueues point at
    plus a scan of the CommitLog past the last unit (records not dispatched yet); the whole
    CommitLog is scanned without ``use_queues``. Returns (records, where the scan started)."""
    commitlog = store.commitlog
    offsets: set[int] = set()
    scan_from = commitlog.min_offset
    if use_queues and store.batch_consume_queues:
        for queue in store.batch_consume_queues:
            for seg in queue.segments:
                for _, units in iter_units(seg.path, BATCH_CQ_DTYPE, store.bcq_units_per_file):
                    valid = units[(units["commitlog_offset"] >= 0) & (units["size"] > 0)]
                    if not len(valid):
                        continue
                    scan_from = max(scan_from, int(np.max(valid["commitlog_offset"]
                                                          + valid["size"])))
                    if topics is None or queue.topic in topics:
                        offsets.update(int(o) for o in valid["commitlog_offset"])
    records = []
    with RecordReader(commitlog) as reader:
        for offset in sorted(offsets):
            record, _why = reader.at(offset)
            if record is not None and record.offset_ok and is_inner_batch(record.sys_flag):
                records.append(record)
    scanner = Scanner(commitlog, check_crc=False, resync=True)
    for record in scanner.messages(scan_from, commitlog.end_offset):
        if is_inner_batch(record.sys_flag) and record.offset not in offsets and (
                topics is None or record.topic in topics):
            records.append(record)
    return records, scan_from


def find_inner_messages(store: Store, topics: list[str] | None, key: str | None,
                        uniq_key: str | None, *, use_queues: bool = True) -> tuple[list[Found],
                                                                                  list[str]]:
    """Inner messages of inner batches whose KEYS hold ``key`` or whose UNIQ_KEY is
    ``uniq_key``: no IndexFile entry names them (the broker indexes the outer record only), so
    the batch records are read (see :func:`_batch_records`). Returns (found, notes)."""
    if not store.batch_consume_queues and use_queues:
        return [], []
    value = (uniq_key if uniq_key is not None else key).encode("utf-8")
    records, scan_from = _batch_records(store, set(topics) if topics is not None else None,
                                        use_queues)
    found, notes = [], []
    for record in records:
        body = read_body(store.commitlog, record)
        if value not in body:
            continue
        opened = open_record(record, body)
        if opened.problem:
            notes.append(f"inner batch at CommitLog offset {record.offset}: {opened.problem}")
        for inner in batch_carries(opened, key, uniq_key):
            found.append(Found(record, "inner-batch", inner_position=inner.position))
    end = store.commitlog.end_offset
    if not use_queues:
        notes.append(f"inner batches: the whole CommitLog was scanned for them ({len(records)} "
                     f"read)")
    elif scan_from < end:
        notes.append(f"inner batches: {len(records)} read, found through the "
                     f"BatchConsumeQueues and a scan of CommitLog offsets [{scan_from}, {end}) "
                     f"past their last unit")
    return found, notes


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
    unresolved: list[tuple[str, IndexHit]] = []
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
                        if record is None:
                            unresolved.append((topic, hit))
                        elif record.topic != topic or not _carries(record, key, uniq_key):
                            if record.offset_ok:
                                result.collisions.append(hit.phy_offset)
                            else:
                                result.stale.append(hit.phy_offset)
                        else:
                            # the key's record, wherever its PHYSICALOFFSET field says it is
                            found[hit.phy_offset] = Found(record, "index", [hit])
            _resolve_stated(store, index, unresolved, found, result, key, uniq_key)
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
    inner, inner_notes = find_inner_messages(store, topics, key, uniq_key,
                                             use_queues=use_index)
    result.notes += inner_notes
    matches = [f for f in list(found.values()) + inner
               if (since is None or f.record.store_timestamp >= since)
               and (until is None or f.record.store_timestamp <= until)]
    result.candidates = len(matches)
    matches.sort(key=lambda f: (f.record.offset, -1 if f.inner_position is None
                                else f.inner_position))
    result.found = matches
    return result


def _resolve_stated(store: Store, index: IndexSet, unresolved: list[tuple[str, IndexHit]],
                    found: dict[int, Found], result: QueryResult, key: str | None,
                    uniq_key: str | None) -> None:
    """Index entries of the key that point where no message starts: the broker's dispatch
    writes the offset a record states (PHYSICALOFFSET), so a record whose field is damaged is
    indexed where it is not. Such an entry is followed to the record stating its offset,
    looked for between the IndexFiles around the entry's (where the record was dispatched);
    an entry no record explains is stale."""
    if not unresolved:
        return
    files = [f for f in index.files if f.used]
    names = [f.name for f in files]
    commitlog = store.commitlog
    ranges = []
    for _topic, hit in unresolved:
        i = names.index(hit.file) if hit.file in names else -1
        lo = files[i - 1].end_phy_offset if i > 0 else commitlog.min_offset
        hi = files[i + 1].begin_phy_offset + 1 if 0 <= i < len(files) - 1 \
            else commitlog.end_offset
        ranges.append((min(lo, hit.phy_offset), max(hi, hit.phy_offset + 1)))
    wanted = {hit.phy_offset for _topic, hit in unresolved}
    stating: dict[int, MessageRecord] = {}
    scanner = Scanner(commitlog, check_crc=False, resync=True)
    topics = TopicTable()
    for lo, hi in _merge_ranges(ranges):
        for seg in scanner.segments(lo, hi):
            start = lo if lo > seg.base_offset else None
            for batch in scanner.scan_segment_batches(seg, start, hi, topics=topics):
                if type(batch) is not RecordBatch:
                    continue
                # records whose field is not their position, a run of records at a time
                for i in np.flatnonzero(batch.physical_offset != batch.offsets).tolist():
                    if int(batch.physical_offset[i]) in wanted:
                        record = batch.record(i)
                        stating.setdefault(record.physical_offset, record)
            if len(stating) == len(wanted):
                break
        if len(stating) == len(wanted):
            break
    for topic, hit in unresolved:
        record = stating.get(hit.phy_offset)
        if record is None or record.topic != topic or not _carries(record, key, uniq_key):
            result.stale.append(hit.phy_offset)
        elif record.offset in found:
            found[record.offset].index_hits.append(hit)
            result.duplicates += 1
        else:
            found[record.offset] = Found(record, "index-stated-offset", [hit])
            result.notes.append(
                f"the message at CommitLog offset {record.offset} states PHYSICALOFFSET "
                f"{record.physical_offset} (damaged), where IndexFile {hit.file} entry "
                f"{hit.entry} points: found by the offset it states")


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
