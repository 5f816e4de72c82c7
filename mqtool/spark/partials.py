"""Mergeable partial results of an audit task, and their merge on the driver: the per-queue
figures with the queue-offset runs of the gap check, and the UNIQ_KEY hashes.

A task sees its split's rows as Arrow batches while it writes them (the same batches, no second
read) and folds them into a :class:`SplitPartial`: per queue, its counts, sums and extremes, and
the run of queue offsets it saw (the first record's queue offset and place, what the last record
makes the next one expect, and the gaps inside the split). The driver merges the splits' partials
in CommitLog order: a queue's gap across a split boundary is found there, from the previous
split's expectation and the next one's first record. The rule is verify's, folded and merged
by the same functions (:mod:`mqtool.queue_runs`); the result equals what the Spark SQL of
:func:`mqtool.spark.job._queue_table` and :func:`mqtool.spark.job.queue_steps` compute over every
row.

UNIQ_KEYs: each key's 64-bit hash (pandas' SipHash, the same in every process), bucketed by
hash so that a shuffle brings equal hashes together; keys are compared exactly only inside a
bucket's repeated hashes (:func:`repeated_keys`).

No pyspark here.
"""
from __future__ import annotations

import numpy as np

from .. import queue_runs
from ..formats import commitlog as cl_fmt

_DISPATCHED = (cl_fmt.TRANSACTION_NAMES[cl_fmt.TRANSACTION_NOT_TYPE],
               cl_fmt.TRANSACTION_NAMES[cl_fmt.TRANSACTION_COMMIT_TYPE])
_PREPARED = cl_fmt.TRANSACTION_NAMES[cl_fmt.TRANSACTION_PREPARED_TYPE]
_ROLLBACK = cl_fmt.TRANSACTION_NAMES[cl_fmt.TRANSACTION_ROLLBACK_TYPE]
OPENED_RECORD = -1

#: the columns a partial reads of the messages rows
COLUMNS = ("topic", "queue_id", "inner_position", "transaction", "total_size", "body_length",
           "queue_offset", "store_timestamp", "body_crc_ok", "prop_crc_ok", "physical_offset",
           "commitlog_offset", "inner_num", "file_offset", "uniq_key", "body_crc")
#: per-queue sums, in the summary's order
_SUMS = ("records", "messages", "prepared", "rollback", "bytes", "body_bytes")
_COUNTS = ("crc_failures", "prop_crc_failures", "offset_mismatches", "inner_messages")
_EXTREMES = ("min_queue_offset", "max_queue_offset", "min_store_timestamp",
             "max_store_timestamp")
#: gaps a split lists (with their places) for the findings of scan-checked brokers
MAX_LISTED_GAPS = 100_000


def _filled(column, fill):
    return column.fill_null(fill).to_numpy(zero_copy_only=False)


class SplitPartial:
    """What one split's rows add to the per-queue figures, gaps and UNIQ_KEYs, folded a batch at
    a time (a task's memory holds a batch and its queues' figures, not its rows)."""

    def __init__(self, file: str, buckets: int = 0, gap_rows: bool = True):
        self.file = file
        self.buckets = buckets
        self.gap_rows = gap_rows
        self._queues: dict = {}
        self._problems: list = []
        self._keys: dict = {}       # bucket -> [(hashes, keys, topics, store timestamps)]

    def add(self, batch) -> None:
        """One Arrow batch of the split's rows (messages columns), in CommitLog order."""
        import pyarrow as pa

        if not batch.num_rows:
            return
        table = pa.Table.from_batches([batch.select(list(COLUMNS))])
        for key, part in _queue_figures(table, self.file, self.gap_rows).items():
            total = self._queues.get(key)
            if total is None:
                self._queues[key] = part
            else:
                _fold(total, part, self.file, self.gap_rows)
        self._problems += _record_problems(table)
        if self.buckets:
            for bucket, payload in _key_buckets(table, self.buckets):
                self._keys.setdefault(bucket, []).append(payload)

    def queues(self) -> dict:
        """{(topic, queue_id): figures}: sums, extremes, and the queue-offset run (``run``:
        its :class:`mqtool.queue_runs.Run`; ``first_file_offset``: where its first record
        lies in its file; ``gaps``, ``missing_offsets``, ``duplicates`` inside the split;
        ``gap_rows``, each gap's (file, file offset, CommitLog offset, queue offset, expected,
        previous record's offset))."""
        return self._queues

    def record_problems(self) -> list[tuple]:
        """The records whose body CRC, property CRC or PHYSICALOFFSET field is wrong, each
        (code, file offset, CommitLog offset, topic, queue id, queue offset, body CRC, body
        length, PHYSICALOFFSET): what a scan-checked broker's record findings are made of."""
        return self._problems

    def key_buckets(self) -> list:
        """(bucket, (hashes, keys, topics, store timestamps)) of the split's messages with a
        UNIQ_KEY (inner messages in place of their opened record, as the messages table)."""
        out = []
        for bucket, parts in sorted(self._keys.items()):
            out.append((bucket, tuple(np.concatenate([p[i] for p in parts]) for i in range(4))))
        return out


def _record_problems(table) -> list[tuple]:
    import pyarrow as pa
    import pyarrow.compute as pc

    position = _filled(table["inner_position"], -2)
    record = (position == -2) | (position == OPENED_RECORD)
    body = _filled(table["body_length"], 0).astype(np.int64)
    checks = (("CL_CRC_MISMATCH", record & (body > 0) &
               _filled(pc.equal(table["body_crc_ok"], False), False)),
              ("CL_PROP_CRC_MISMATCH",
               record & _filled(pc.equal(table["prop_crc_ok"], False), False)),
              ("CL_OFFSET_MISMATCH",
               record & _filled(pc.not_equal(table["physical_offset"],
                                             table["commitlog_offset"]), False)))
    out = []
    names = ("file_offset", "commitlog_offset", "topic", "queue_id", "queue_offset",
             "body_crc", "body_length", "physical_offset")
    for code, mask in checks:
        at = np.flatnonzero(mask)
        if len(at):
            picked = table.take(pa.array(at)).select(list(names)).to_pylist()
            out += [(code,) + tuple(row[n] for n in names) for row in picked]
    return out


def _key_buckets(table, buckets: int) -> list:
    import pyarrow as pa
    import pyarrow.compute as pc
    from pandas.util import hash_array

    position = _filled(table["inner_position"], -2)
    keep = (position != OPENED_RECORD) & _filled(pc.is_valid(table["uniq_key"]), False)
    if not keep.any():
        return []
    rows = pa.array(np.flatnonzero(keep))
    keys = table["uniq_key"].take(rows).to_numpy(zero_copy_only=False).astype(object)
    topics = table["topic"].take(rows).to_numpy(zero_copy_only=False).astype(object)
    stored = table["store_timestamp"].take(rows).fill_null(0).to_numpy(zero_copy_only=False)
    hashes = hash_array(keys, categorize=False)
    bucket = (hashes % np.uint64(buckets)).astype(np.int64)
    out = []
    for b in np.unique(bucket).tolist():
        at = np.flatnonzero(bucket == b)
        out.append((b, (hashes[at], keys[at], topics[at], stored[at])))
    return out


def _queue_figures(table, file: str, gap_rows: bool) -> dict:
    """:meth:`SplitPartial.queues` of one batch's rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    position = _filled(table["inner_position"], -2)
    record = (position == -2) | (position == OPENED_RECORD)
    tx = table["transaction"]
    dispatched = record & _filled(pc.is_in(tx, pa.array(_DISPATCHED)), False)
    topics = table["topic"].combine_chunks().dictionary_encode()
    names = topics.dictionary.to_pylist()
    key = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64) << 32 | \
        (_filled(table["queue_id"], 0).astype(np.int64) & 0xFFFFFFFF)
    keys, group = np.unique(key, return_inverse=True)
    group = group.reshape(-1)
    n = len(keys)

    def count(mask):
        return np.bincount(group[mask], minlength=n)

    size = _filled(table["total_size"], 0).astype(np.int64)
    body = _filled(table["body_length"], 0).astype(np.int64)
    qoff = _filled(table["queue_offset"], 0).astype(np.int64)
    stored = _filled(table["store_timestamp"], 0).astype(np.int64)
    offset = _filled(table["commitlog_offset"], 0).astype(np.int64)
    physical = _filled(table["physical_offset"], 0).astype(np.int64)
    file_offset = _filled(table["file_offset"], 0).astype(np.int64)
    step = _filled(table["inner_num"], 1).astype(np.int64)
    body_bad = _filled(pc.equal(table["body_crc_ok"], False), False)
    prop_bad = _filled(pc.equal(table["prop_crc_ok"], False), False)
    figures = {
        "records": count(record),
        "messages": count(dispatched),
        "prepared": count(record & (_filled(pc.equal(tx, _PREPARED), False))),
        "rollback": count(record & (_filled(pc.equal(tx, _ROLLBACK), False))),
        "crc_failures": count(record & body_bad & (body > 0)),
        "prop_crc_failures": count(record & prop_bad),
        "offset_mismatches": count(record & (physical != offset)),
        "inner_messages": count(position >= 0),
    }
    # sums of int64 columns exactly (bincount's float weights would round past 2**53)
    sums = {"bytes": size, "body_bytes": body}
    out: dict = {}
    for g in range(n):
        topic = names[int(keys[g] >> 32)]
        qid = int(np.int32(np.uint32(keys[g] & 0xFFFFFFFF)))
        out[(topic, qid)] = entry = {name: int(v[g]) for name, v in figures.items()}
        entry.update({name: None for name in _EXTREMES})
        entry.update({"gaps": 0, "missing_offsets": 0, "duplicates": 0, "run": None,
                      "first_file_offset": None, "gap_rows": []})
    for name, values in sums.items():
        per = np.zeros(n, dtype=object)
        np.add.at(per, group[record], values[record].astype(object))
        for g, (k, entry) in enumerate(out.items()):
            entry[name] = int(per[g])
    _extremes(out, group, record, stored, "store_timestamp", n)
    _extremes(out, group, dispatched, qoff, "queue_offset", n)
    # the queue-offset runs of dispatched records, each queue's in CommitLog order, folded by
    # verify's rule (mqtool.queue_runs)
    rows = np.flatnonzero(dispatched)
    rows = rows[np.argsort(group[rows], kind="stable")]
    g = group[rows]
    if len(rows):
        q, at, steps = qoff[rows], offset[rows], step[rows]
        expected, off, firsts, lasts = queue_runs.fold(q, steps, g)
        entries = list(out.values())
        for a, b in zip(firsts.tolist(), lasts.tolist()):
            entry = entries[int(g[a])]
            entry["run"] = queue_runs.piece(q, at, steps, a, b)
            entry["first_file_offset"] = int(file_offset[rows[a]])
        for i in np.flatnonzero(off).tolist():
            entry = entries[int(g[i])]
            _count_gap(entry, int(q[i]), int(expected[i]))
            if gap_rows and len(entry["gap_rows"]) < MAX_LISTED_GAPS:
                entry["gap_rows"].append((file, int(file_offset[rows[i]]),
                                          int(offset[rows[i]]), int(q[i]), int(expected[i]),
                                          int(offset[rows[i - 1]])))
    return out


def _extremes(out: dict, group, mask, values, name: str, n: int) -> None:
    if not mask.any():
        return
    g, v = group[mask], values[mask]
    low = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    high = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(low, g, v)
    np.maximum.at(high, g, v)
    seen = np.bincount(g, minlength=n) > 0
    for i, entry in enumerate(out.values()):
        if seen[i]:
            entry["min_" + name] = int(low[i])
            entry["max_" + name] = int(high[i])


def _count_gap(entry: dict, queue_offset: int, expected: int) -> None:
    gaps, missing, duplicates = queue_runs.counts(queue_offset, expected)
    entry["gaps"] += gaps
    entry["missing_offsets"] += missing
    entry["duplicates"] += duplicates


def _fold(total: dict, part: dict, file: str, gap_rows: bool = True) -> None:
    """Add a later part of a queue's rows (``part``, of ``file``) to ``total``: sums, extremes,
    and the queue-offset run, whose gap across the boundary is found here."""
    for name in _SUMS + _COUNTS + ("gaps", "missing_offsets", "duplicates"):
        total[name] += part[name]
    for name in _EXTREMES:
        pick = min if name.startswith("min_") else max
        if part[name] is not None:
            total[name] = part[name] if total[name] is None else pick(total[name], part[name])
    if part["run"] is not None:
        if total["run"] is None:
            total["first_file_offset"] = part["first_file_offset"]
        total["run"], gap = queue_runs.merge(total["run"], part["run"])
        if gap is not None:
            first_qoff, expected, previous = gap
            _count_gap(total, first_qoff, expected)
            if gap_rows and len(total["gap_rows"]) < MAX_LISTED_GAPS:
                total["gap_rows"].append((file, part["first_file_offset"],
                                          part["run"].first_offset, first_qoff, expected,
                                          previous))
    room = MAX_LISTED_GAPS - len(total["gap_rows"])
    if room > 0:
        total["gap_rows"] += part["gap_rows"][:room]


def merge_queues(parts: list[tuple[str, str, dict]]) -> tuple[list[dict], list[dict]]:
    """The splits' per-queue partials ((broker, file, queues), in CommitLog order) merged:
    the summary's per-queue rows (sorted by broker, topic, queue) and the gaps listed as
    {broker, topic, queue_id, file, file_offset, commitlog_offset, queue_offset, expected,
    previous_offset}."""
    merged: dict = {}
    for broker, file, queues in parts:
        for (topic, qid), part in queues.items():
            key = (broker, topic, qid)
            total = merged.get(key)
            if total is None:
                merged[key] = dict(part, gap_rows=list(part["gap_rows"]))
            else:
                _fold(total, part, file)
    rows, gaps = [], []
    for (broker, topic, qid) in sorted(merged):
        total = merged[(broker, topic, qid)]
        rows.append({"broker": broker, "topic": topic, "queue_id": qid,
                     **{name: total[name] for name in _SUMS},
                     "min_queue_offset": total["min_queue_offset"],
                     "max_queue_offset": total["max_queue_offset"],
                     "min_store_timestamp": total["min_store_timestamp"],
                     "max_store_timestamp": total["max_store_timestamp"],
                     **{name: total[name] for name in _COUNTS},
                     "gaps": total["gaps"], "missing_offsets": total["missing_offsets"],
                     "duplicates": total["duplicates"]})
        gaps += [_gap(broker, topic, qid, *row) for row in total["gap_rows"]]
    return rows, gaps


def _gap(broker, topic, qid, file, file_offset, offset, queue_offset, expected, previous):
    return {"broker": broker, "topic": topic, "queue_id": qid, "file": file,
            "file_offset": file_offset, "commitlog_offset": offset,
            "queue_offset": queue_offset, "expected": expected, "previous_offset": previous}


def repeated_keys(parts: list) -> list[dict]:
    """Reduce side of the UNIQ_KEY shuffle: one bucket's (broker, (hashes, keys, topics,
    store timestamps)) parts; the keys stored more than once, each {uniq_key, copies, brokers,
    topics, first_store_timestamp, last_store_timestamp}. Keys are compared only where their
    hashes repeat."""
    if not parts:
        return []
    hashes = np.concatenate([p[1][0] for p in parts])
    values, counts = np.unique(hashes, return_counts=True)
    candidates = values[counts > 1]
    if not len(candidates):
        return []
    found: dict = {}
    for broker, (h, keys, topics, stored) in parts:
        for i in np.flatnonzero(np.isin(h, candidates)).tolist():
            entry = found.setdefault(keys[i], {"copies": 0, "brokers": set(), "topics": set(),
                                               "first": None, "last": None})
            entry["copies"] += 1
            entry["brokers"].add(broker)
            entry["topics"].add(topics[i])
            ts = int(stored[i])
            entry["first"] = ts if entry["first"] is None else min(entry["first"], ts)
            entry["last"] = ts if entry["last"] is None else max(entry["last"], ts)
    return [{"uniq_key": key, "copies": e["copies"], "broker_count": len(e["brokers"]),
             "brokers": sorted(e["brokers"]), "topics": sorted(e["topics"]),
             "first_store_timestamp": e["first"], "last_store_timestamp": e["last"]}
            for key, e in found.items() if e["copies"] > 1]
