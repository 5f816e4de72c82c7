"""``info``: one dict describing a store - files and geometry, the CommitLog scan, topics x queues
(from the CommitLog and from the ConsumeQueues), IndexFiles, checkpoint, abort/lock, configs and
what else lies in the store root."""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..config import STORE_CONFIGS, read_store_configs, text_keys
from ..errors import ParseError
from ..formats import checkpoint as ckpt_fmt
from ..formats import commitlog as cl_fmt
from ..formats import consumequeue as cq_fmt
from ..formats import indexfile as idx_fmt
from ..passport import own_property_batch_rows, store_passport
from ..rocksdb_cq import load_rocksdb_cq
from ..scan import (FLAG_FALSE, BlankRecord, RecordBatch, TopicTable, UnwrittenTail,
                    scan_segment_batches)
from ..store import MappedFile, Store
from .records import ms_to_iso
from .queues import queue_summary
from .index import read_index_header
from .small_files import checkpoint_dict, parse_pid, _read_small


# Files and directories a broker (4.x or 5.x) leaves in its store root.
KNOWN_ROOT_ENTRIES = {"commitlog", "consumequeue", "consumequeue_ext", "batchconsumequeue",
                      "index", "checkpoint", "abort", "abort.bak", "lock", "config", "timerlog",
                      "timerwheel", "compaction", "epochFileCheckpoint", "brokerIdentity"}


# --- info ----------------------------------------------------------------------------------------

def _geometry(store: Store) -> dict:
    def source(value, inferred, default):
        if inferred and value == inferred:
            return "inferred"
        if value == default and not inferred:
            return "default"
        return "override"

    cl = store.commitlog
    index_sizes = Counter(f.length for f in store.index_files)
    common_index = index_sizes.most_common(1)[0][0] if index_sizes else 0
    inferred_index = idx_fmt.geometries_for_size(common_index) if common_index else []
    index_value = (store.index_slots, store.index_entries)
    return {
        "commitlog_file_size": cl.file_size,
        "commitlog_file_size_source": source(cl.file_size, cl.inferred_file_size, 1024 ** 3),
        "cq_units_per_file": store.cq_units_per_file,
        "cq_file_size": store.cq_units_per_file * cq_fmt.CQ_STORE_UNIT_SIZE,
        "cq_units_per_file_source": source(store.cq_units_per_file,
                                           store.inferred_cq_units_per_file,
                                           cq_fmt.DEFAULT_CQ_UNITS_PER_FILE),
        "index_slots": store.index_slots,
        "index_entries": store.index_entries,
        "index_file_size": idx_fmt.index_file_size(*index_value),
        "index_geometry_source": source(index_value, inferred_index[0] if inferred_index else None,
                                        (idx_fmt.DEFAULT_SLOT_COUNT, idx_fmt.DEFAULT_ENTRY_COUNT)),
    }


def _scan_summary(store: Store, check_crc: bool, progress=None) -> tuple[dict, dict]:
    """(CommitLog section, per topic/queue counts) from one scan of every segment, a batch of
    records at a time (numpy counts, no object per record)."""
    cl = store.commitlog
    topics = TopicTable()
    files = []
    per_queue: dict[tuple[str, int], dict] = {}
    by_transaction = Counter()
    messages = compressed = v2 = crc_bad = offset_bad = prop_crc_bad = prop_crc_records = 0
    own_batch = 0
    first_ts = last_ts = min_ts = max_ts = None
    end_of_data = None
    corrupt = []
    previous_end = None
    for seg in cl.segments:
        entry = {"name": seg.name, "file": store.relative(seg.path), "size": seg.length,
                 "start_offset": seg.base_offset, "end_offset": seg.base_offset + seg.length,
                 "size_ok": seg.length == cl.file_size, "messages": 0, "scan_end": None}
        if previous_end is not None and seg.base_offset != previous_end:
            entry["gap_before"] = seg.base_offset - previous_end
        previous_end = seg.base_offset + cl.file_size
        for event in scan_segment_batches(seg, check_crc=check_crc, resync=False,
                                          progress=progress, topics=topics):
            kind = type(event)
            if kind is RecordBatch:
                n = len(event)
                entry["messages"] += n
                messages += n
                offsets = event.offsets
                end_of_data = int(offsets[-1] + event.total_size[-1])
                sys_flag = event.sys_flag
                tx = sys_flag & cl_fmt.TRANSACTION_TYPE_MASK
                for code, count in enumerate(np.bincount(tx, minlength=4).tolist()):
                    if count:
                        by_transaction[cl_fmt.TRANSACTION_NAMES[code]] += count
                compressed += int(np.count_nonzero(sys_flag & cl_fmt.COMPRESSED_FLAG))
                v2 += int(np.count_nonzero(event.magic_code == cl_fmt.MESSAGE_MAGIC_CODE_V2))
                crc_bad += int(np.count_nonzero(event.body_crc_ok == FLAG_FALSE))
                prop_crc_bad += int(np.count_nonzero(event.prop_crc_ok == FLAG_FALSE))
                # presence, not validity: quick scans leave prop_crc_ok unset
                prop_crc_records += int(np.count_nonzero(event.stored_prop_crc_present()))
                own_batch += own_property_batch_rows(event)
                offset_bad += int(np.count_nonzero(event.physical_offset != offsets))
                ts = event.store_timestamp
                if first_ts is None:
                    first_ts = min_ts = max_ts = int(ts[0])
                min_ts = min(min_ts, int(ts.min()))
                max_ts = max(max_ts, int(ts.max()))
                last_ts = int(ts[-1])
                _count_queues(per_queue, topics, event.topic_id, event.queue_id, tx,
                              event.queue_offset)
            else:
                position = event.offset - seg.base_offset
                if kind is BlankRecord:
                    entry["scan_end"] = {"kind": "blank", "position": position,
                                         "declared_size": event.total_size}
                elif kind is UnwrittenTail:
                    entry["scan_end"] = {"kind": "unwritten", "position": position,
                                         "length": event.length}
                else:
                    entry["scan_end"] = {"kind": "corrupt", "position": position,
                                         "code": event.code, "detail": event.detail}
                    corrupt.append({"file": seg.name, "position": position,
                                    "commitlog_offset": event.offset, "code": event.code,
                                    "detail": event.detail})
        if entry["scan_end"] is None:
            entry["scan_end"] = {"kind": "file_end", "position": seg.length}
        files.append(entry)
    section = {
        "directory": store.relative(cl.directory) if cl.directory != store.root else ".",
        "files": files,
        "stray_files": [store.relative(p) for p in cl.stray_files],
        "min_offset": cl.min_offset if cl.segments else None,
        "end_of_data": end_of_data,
        "messages": messages,
        "by_transaction": {name: by_transaction.get(name, 0)
                           for name in cl_fmt.TRANSACTION_NAMES.values()},
        "compressed": compressed,
        "v2_records": v2,
        "prop_crc_records": prop_crc_records,
        "own_property_batch_records": own_batch,
        "crc_checked": check_crc,
        "body_crc_mismatches": crc_bad if check_crc else None,
        "prop_crc_mismatches": prop_crc_bad if check_crc else None,
        "physical_offset_mismatches": offset_bad,
        "corrupt_regions": corrupt,
        "first_store_timestamp": first_ts, "first_store_time": ms_to_iso(first_ts),
        "last_store_timestamp": last_ts, "last_store_time": ms_to_iso(last_ts),
        "min_store_timestamp": min_ts, "max_store_timestamp": max_ts,
    }
    return section, per_queue


def _count_queues(per_queue: dict, topics: TopicTable, topic_ids: np.ndarray,
                  queue_ids: np.ndarray, tx: np.ndarray, queue_offsets: np.ndarray) -> None:
    """Add a batch's records to the per topic/queue counts: messages and the queue offset range
    of the dispatchable ones (NOT/COMMIT), prepared and rolled-back ones apart."""
    keys = (topic_ids.astype(np.int64) << 32) | (queue_ids.astype(np.int64) & 0xFFFFFFFF)
    unique, which = np.unique(keys, return_inverse=True)
    which = which.reshape(-1)
    size = len(unique)
    plain = (tx == cl_fmt.TRANSACTION_NOT_TYPE) | (tx == cl_fmt.TRANSACTION_COMMIT_TYPE)
    counted = np.bincount(which[plain], minlength=size)
    prepared = np.bincount(which[tx == cl_fmt.TRANSACTION_PREPARED_TYPE], minlength=size)
    rollback = np.bincount(which[~plain & (tx != cl_fmt.TRANSACTION_PREPARED_TYPE)],
                           minlength=size)
    low = np.full(size, np.iinfo(np.int64).max)
    high = np.full(size, np.iinfo(np.int64).min)
    np.minimum.at(low, which[plain], queue_offsets[plain])
    np.maximum.at(high, which[plain], queue_offsets[plain])
    for k, key in enumerate(unique.tolist()):
        queue_id = key & 0xFFFFFFFF
        queue_id -= (queue_id >> 31) << 32          # back to a signed int32
        name = (topics.names[key >> 32], queue_id)
        q = per_queue.get(name)
        if q is None:
            q = per_queue[name] = {"messages": 0, "min_queue_offset": None,
                                   "max_queue_offset": None, "prepared": 0, "rollback": 0}
        if counted[k]:
            q["messages"] += int(counted[k])
            lo, hi = int(low[k]), int(high[k])
            if q["min_queue_offset"] is None or lo < q["min_queue_offset"]:
                q["min_queue_offset"] = lo
            if q["max_queue_offset"] is None or hi > q["max_queue_offset"]:
                q["max_queue_offset"] = hi
        q["prepared"] += int(prepared[k])
        q["rollback"] += int(rollback[k])


def _index_section(store: Store) -> dict:
    files = []
    for info in store.index_files:
        entry = {"name": info.name, "size": info.length,
                 "size_ok": info.length == idx_fmt.index_file_size(store.index_slots,
                                                                    store.index_entries)}
        try:
            with MappedFile(info.path) as mapped:
                header = read_index_header(mapped.data, info.name)
            entry.update(header)
            entry["begin_time"] = ms_to_iso(header["begin_timestamp"])
            entry["end_time"] = ms_to_iso(header["end_timestamp"])
            entry["entries_used"] = max(0, header["index_count"] - 1)
            entry["full"] = header["index_count"] >= store.index_entries
        except ParseError as err:
            entry["error"] = str(err)
        files.append(entry)
    return {"files": files, "stray_files": [store.relative(p) for p in store.index_stray]}


def _checkpoint_section(store: Store) -> dict | None:
    path = store.checkpoint_path
    if not path.is_file():
        return None
    try:
        out = checkpoint_dict(_read_small(path, ckpt_fmt.CHECKPOINT_SIZE * 2), "checkpoint")
    except ParseError as err:
        return {"error": str(err)}
    out.pop("record_type", None)
    out.pop("file", None)
    return out


def _config_table(data: dict, key: str, errors: list[str]) -> dict:
    """``data[key]`` when it is a JSON object; anything else is noted and counts as empty."""
    table = data.get(key)
    if table is None:
        return {}
    if not isinstance(table, dict):
        errors.append(f"{key} is a JSON {type(table).__name__}, not an object")
        return {}
    return table


def _level_order(key) -> int:
    text = str(key).lstrip("-")
    return int(key) if text.isascii() and text.isdigit() and len(text) <= 18 else 0


def _config_summary(name: str, data) -> dict:
    if not isinstance(data, dict):
        return {"error": f"a JSON {type(data).__name__}, not an object"}
    errors: list[str] = []
    if name == "topics.json":
        out = {"topics": len(_config_table(data, "topicConfigTable", errors))}
    elif name in ("consumerOffset.json", "lmqConsumerOffset.json"):
        table = _config_table(data, "offsetTable", errors)
        out = {"topic_groups": len(table),
               "queues": sum(len(v) for v in table.values() if isinstance(v, dict))}
    elif name == "delayOffset.json":
        table = _config_table(data, "offsetTable", errors)
        out = {"levels": {str(k): v for k, v in sorted(table.items(),
                                                        key=lambda kv: _level_order(kv[0]))}}
    elif name == "subscriptionGroup.json":
        out = {"groups": len(_config_table(data, "subscriptionGroupTable", errors))}
    else:
        out = {"keys": sorted(map(str, data))[:10]}
    if errors:
        out["error"] = "; ".join(errors)
    return out


def _config_section(store: Store, family: str | None = None) -> dict:
    """Each config file present (main or .bak) as the broker's ConfigManager.load would take
    it: ``source`` is the file whose content it loads (None: none), ``outcome`` one of
    :class:`mqtool.config.ConfigLoad`'s (``refuses``: the broker would not start), ``reason``
    why, when that is not simply the main file."""
    out = {}
    for name, load in read_store_configs(store.root, STORE_CONFIGS, family).loads.items():
        if load.outcome == "absent":
            continue
        entry = {"source": load.used, "fallback_to_bak": load.outcome == "bak",
                 "outcome": load.outcome}
        if load.outcome in ("main", "bak"):
            entry.update(_config_summary(name, text_keys(load.document)))
        if load.outcome != "main" or load.tmp is not None:
            entry["reason"] = load.reason
        if load.deletes_main:
            entry["deleted_on_load"] = True
        out[name] = entry
    return out


def _stray_root_entries(store: Store) -> list[str]:
    if store.is_bare_commitlog:
        return []
    return sorted(p.name + ("/" if p.is_dir() else "") for p in store.root.iterdir()
                  if p.name not in KNOWN_ROOT_ENTRIES and not p.name.startswith("dledger-")
                  and not p.name.startswith("."))


def _abort_section(store: Store) -> dict:
    root = store.root
    out = {"present": store.abort_exists, "last_shutdown_abnormal": store.abort_exists,
           "content": None, "pid": None, "bak_present": (root / "abort.bak").is_file(),
           "bak_content": None}
    if out["present"] and (root / "abort").is_file():
        out["content"] = _read_small(root / "abort").decode("utf-8", errors="replace")
        out["pid"] = parse_pid(out["content"])
    if out["bak_present"]:
        out["bak_content"] = _read_small(root / "abort.bak").decode("utf-8", errors="replace")
    return out


def _lock_section(store: Store) -> dict:
    path = store.root / "lock"
    present = path.is_file()
    return {"present": present, "held": store.lock_held() if present else False,
            "content": _read_small(path).decode("utf-8", errors="replace") if present else None}


def _consumer_groups(store: Store, family: str | None = None) -> list[dict]:
    """Per consumer group: queues, lag against the queues as they are (no recovery prediction:
    ``mqtool consumers`` has the next start's effect), from the config files ``family`` loads."""
    from ..consumers import consumer_report, group_summary_lines

    report = consumer_report(store, None, read_store_configs(store.root, family=family))
    return [{**group, "line": line} for group, line in zip(report.groups(),
                                                            group_summary_lines(report))]


def rocksdb_queue_summary(queue, commitlog_end: int | None) -> dict:
    """:func:`queue_summary`'s keys for a queue of a RocksDB ConsumeQueue (served units only;
    stale units past the max entry apart)."""
    served = queue.served
    past = (sum(1 for u in served if u.commitlog_offset + u.size > commitlog_end)
            if commitlog_end is not None else None)
    return {"files": 0, "bytes": 0, "units": len(served), "pre_blank_units": 0,
            "invalid_units": 0, "min_offset": queue.min_offset, "max_offset": queue.max_offset,
            "max_physic_offset": queue.max_commitlog_offset if served else None,
            "units_past_commitlog_end": past, "stray_files": [], "notes": [],
            "stale_units": len(queue.stale), "source": "rocksdb"}


def rocksdb_section(table) -> dict:
    return {"folder": table.folder + "/", "queues": len(table.queues), "units": table.unit_count,
            "stale_units": table.stale_count, "checkpoint": table.checkpoint,
            "column_families": table.families, "problems": [str(p) for p in table.problems]}


def store_info(store: Store, *, check_crc: bool = False, progress=None) -> dict:
    """Everything ``mqtool info`` shows, as one JSON-ready dict.

    Message counts and queue-offset ranges come from one CommitLog scan (CRC not checked unless
    asked: info must be quick); only NOT/COMMIT records carry queue offsets, PREPARED/ROLLBACK
    are counted apart. Each queue also gets what its own ConsumeQueue files say."""
    commitlog, per_queue = _scan_summary(store, check_crc, progress)
    cl_end = commitlog["end_of_data"]
    queues = {(q.topic, q.queue_id): q for q in store.consume_queues}
    rocks = load_rocksdb_cq(store) if store.queues_in_rocksdb else None
    summaries = ({key: rocksdb_queue_summary(q, cl_end) for key, q in rocks.queues.items()}
                 if rocks is not None else {})
    topics = []
    for key in sorted(set(per_queue) | set(queues) | set(summaries), key=lambda k: (k[0], k[1])):
        topic, queue_id = key
        cq = queues.get(key)
        summary = queue_summary(cq, cl_end) if cq is not None else summaries.get(key)
        topics.append({"topic": topic, "queue_id": queue_id,
                       "commitlog": per_queue.get(key), "consume_queue": summary})
    batch = [{"topic": q.topic, "queue_id": q.queue_id, **queue_summary(q, cl_end)}
             for q in store.batch_consume_queues]
    cq_files = sum(len(q.segments) for q in store.consume_queues)
    passport = store_passport(store, v2_records=commitlog["v2_records"],
                              prop_crc_records=commitlog["prop_crc_records"],
                              own_property_batch_records=commitlog.get(
                                  "own_property_batch_records"),
                              max_offset=cl_end)
    # the config files as the family the passport names loads them (5.3.4+ deletes torn ones)
    family = passport["recovery_rules"]
    return {
        "root": str(store.root),
        "layout": "bare-commitlog" if store.is_bare_commitlog else "store",
        "geometry": _geometry(store),
        "passport": passport,
        "commitlog": commitlog,
        "consume_queues": {"queues": len(store.consume_queues), "files": cq_files,
                           "bytes": sum(s.length for q in store.consume_queues
                                        for s in q.segments),
                           "stray_files": [store.relative(p) for q in store.consume_queues
                                           for p in q.stray_files],
                           **({"rocksdb": rocksdb_section(rocks)} if rocks is not None else {})},
        "batch_consume_queues": batch,
        "topics": topics,
        "index": _index_section(store),
        "checkpoint": _checkpoint_section(store),
        "abort": _abort_section(store),
        "lock": _lock_section(store),
        "config": _config_section(store, family),
        "consumer_groups": _consumer_groups(store, family),
        "stray_files": _stray_root_entries(store),
    }
