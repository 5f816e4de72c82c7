"""Recover's scan on every core: worker processes scan and judge CommitLog files ahead of the
dispatch, which stays in this process and takes their batches in file (so offset) order.

Each worker takes every W-th file from the start file on (W workers), runs the same scanner and
:class:`~mqtool.recovery.FileJudge` the one-process path runs, and sends for each run of
accepted records: the scanner's columns the dispatch reads and the index keys' hashes (the
properties parsed and hashed there), and each file's verdict. So this process neither scans nor
hashes index keys: what it receives is what the one-process path computes, and the dispatch
that consumes it is the same code (which reads TAGS itself, of the few records it writes units
for).

A worker stops after a file whose scan does not continue into the next (the broker's recovery
stops there, so later files are never dispatched); files a worker scanned beyond the stop are
dropped. Workers are forked (``python -m mqtool`` cannot be re-imported by a spawned child)
before the repair starts any thread of its own."""
from __future__ import annotations

import multiprocessing
import os
import queue as _queue
import traceback

import numpy as np

from .. import codec as _codec
from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..cores import die_with_parent
from ..recovery import FileJudge
from ..scan import _COLUMNS, RecordBatch, TopicTable, scan_segment_batches
from ..store import MappedFile, Segment
from ..errors import RepairError

# properties dispatch reads (see dispatching._DispatchProperties): the index keys of every
# record, TAGS only of the records whose ConsumeQueue units are written
PARSED_PROPERTIES = ("TAGS", "UNIQ_KEY", "KEYS")
INDEX_PROPERTIES = ("UNIQ_KEY", "KEYS")
_KEY_SEPARATOR = ord(" ")
_BLANK_MAGIC = cl_fmt.BLANK_MAGIC_CODE.to_bytes(4, "big")
# what the dispatch reads of a batch sent by a worker (the other columns stay None there)
DISPATCH_COLUMNS = ("position", "total_size", "sys_flag", "topic_id", "queue_id", "queue_offset",
                    "physical_offset", "store_timestamp", "properties_position",
                    "properties_length")
_ROLLBACK = cl_fmt.TRANSACTION_ROLLBACK_TYPE
_TYPE_MASK = cl_fmt.TRANSACTION_TYPE_MASK
_QUEUE_DEPTH = 4          # batches in flight per worker: bounds the memory they take
_POLL_SECONDS = 1.0


def parse_properties(batch: RecordBatch, names: tuple[str, ...] = PARSED_PROPERTIES,
                     rows: np.ndarray | None = None) -> tuple:
    """(blob, {name: spans}) of the properties of a batch's records (of ``rows`` only)."""
    buf, starts, ends = batch.properties_source()
    if rows is not None:
        starts, ends = starts[rows], ends[rows]
    data, _, values = _codec.property_spans(buf, starts, ends, names)
    return data, values


def tags_codes(data, values: dict, rows: np.ndarray | None = None) -> np.ndarray:
    """The TAGS hash codes of a :func:`parse_properties` (of its ``rows``)."""
    starts, ends = values["TAGS"]
    if rows is not None:
        starts, ends = starts[rows], ends[rows]
    return _codec.string_hash_codes(data, starts, ends)


def index_keys(data, values: dict, rows: np.ndarray, topic_ids: np.ndarray,
               prefix_of) -> tuple[np.ndarray, np.ndarray]:
    """(owner, hash) of every key buildIndex puts for the records ``rows`` of a batch, in put
    order (each record's UNIQ_KEY, then its KEYS items): owner indexes ``rows``.
    ``prefix_of(topic_id)`` is the hash of ``topic#``."""
    uniq = tuple(a[rows] for a in values["UNIQ_KEY"])
    keys = tuple(a[rows] for a in values["KEYS"])
    owner, starts, ends = _codec.index_key_spans(data, uniq, keys, _KEY_SEPARATOR)
    if len(owner) == 0:
        return owner, np.zeros(0, dtype=np.int64)
    topics = topic_ids[rows]
    table = np.zeros(int(topics.max()) + 1, dtype=np.uint32)
    for t in np.unique(topics[owner]).tolist():
        table[t] = prefix_of(t)
    return owner, _codec.index_key_hashes(data, starts, ends, table[topics[owner]])


prefix_hash = codecs.index_key_prefix_hash


def _scan_files(segments, rules, hints, out, first: int, step: int) -> None:
    """Worker: scan and judge segments[first::step], sending batches and verdicts to ``out``."""
    try:
        topics = TopicTable()
        sent = 0
        for seg in segments[first::step]:
            judge = FileJudge(seg, rules)
            for event in scan_segment_batches(seg, check_crc=rules.check_crc, resync=True,
                                              topics=topics, hints=None if hints is None
                                              else hints.for_segment(seg)):
                if type(event) is not RecordBatch:
                    judge.feed(event)
                    continue
                accepted = judge.feed_batch(event)
                if not accepted:
                    continue
                batch = event if accepted == len(event) else event.head(accepted)
                sent = _send_batch(out, batch, topics, sent)
            out.put(("file", judge.verdict))
            if not judge.verdict.continues:
                break
    except BaseException:   # noqa: BLE001 - reported to the dispatching process
        out.put(("error", traceback.format_exc()))


def _send_batch(out, batch: RecordBatch, topics: TopicTable, sent: int) -> int:
    """Send what the dispatch reads of ``batch``: its columns and index keys (the topic names
    interned since the ``sent`` first ones go along). Returns the names sent. TAGS are left to
    the dispatch: it hashes them only for the units it writes (often a few percent)."""
    data, values = parse_properties(batch, INDEX_PROPERTIES)
    # the keys of every record but a rollback: the dispatch picks the ones it indexes
    rows = np.flatnonzero((batch.sys_flag & _TYPE_MASK) != _ROLLBACK)
    owner, hashes = index_keys(data, values, rows, batch.topic_id,
                               lambda t: prefix_hash(topics.names[t]))
    columns = {name: getattr(batch, name) for name in DISPATCH_COLUMNS}
    out.put(("batch", topics.names[sent:], batch.base, columns, rows[owner], hashes))
    return len(topics.names)


# --- scanning records to dispatch (the one-process dispatch reads them here too) --------------

def _segment_batches(seg: Segment, start: int, stop: int, topics: TopicTable):
    """The message records of one segment whose offset is in [start, stop), in order, as the
    scanner's record batches (each valid until the next is asked for); a blank, or anything
    else that is not a record, ends the segment (the broker moves to the next file)."""
    pos = max(0, start - seg.base_offset)
    limit = min(seg.length, max(0, stop - seg.base_offset))
    if pos >= limit:
        return
    if not pos:
        yield from _walk_batches(seg, 0, limit, topics)
        return
    with open(seg.path, "rb") as fh:
        head = os.pread(fh.fileno(), 8, pos)
    if len(head) < 8 or head[4:8] == _BLANK_MAGIC or head == bytes(8):
        return
    walk = _walk_batches(seg, pos, limit, topics)
    first = next(walk, None)
    if first is None:
        return
    if first.start_offset != seg.base_offset + pos:
        # the record at the start position failed the resynchronisation test (a damaged
        # PHYSICALOFFSET): read the file from its start instead
        walk.close()
        for batch in _walk_batches(seg, 0, limit, topics):
            skip = int(np.searchsorted(batch.position, pos))
            if skip < len(batch):
                yield batch.rows(skip, len(batch))
        return
    yield first
    yield from walk


def _walk_batches(seg: Segment, pos: int, limit: int, topics: TopicTable):
    """Record batches from file position ``pos`` until the first event that is not a record or
    the first record at or past ``limit``. No CRC: the reput dispatches what it reads."""
    for event in scan_segment_batches(seg, seg.base_offset + pos, seg.base_offset + limit,
                                      check_crc=False, resync=False, topics=topics):
        if type(event) is not RecordBatch:
            return
        keep = int(np.searchsorted(event.position, limit))
        if keep < len(event):
            if keep:
                yield event.head(keep)
            return
        yield event


def _reput_files(segments, start: int, stop: int, out, first: int, step: int) -> None:
    """Worker: the records :func:`~mqtool.reput.dispatching.iter_records` walks in
    segments[first::step] (the same per-file walk), sent as batches; a file's end is sent as
    ("file", None): the walk goes on to the next file whatever ended this one."""
    try:
        topics = TopicTable()
        sent = 0
        for seg in segments[first::step]:
            for batch in _segment_batches(seg, start, stop, topics):
                sent = _send_batch(out, batch, topics, sent)
            out.put(("file", None))
    except BaseException:   # noqa: BLE001 - reported to the dispatching process
        out.put(("error", traceback.format_exc()))


def _guarded(parent_pid: int, target, *args) -> None:
    """A worker's entry: armed to die with ``parent_pid`` before it does anything."""
    die_with_parent(parent_pid)
    target(*args)


class ParallelJudgedRecords:
    """:func:`~mqtool.reput.dispatching.judged_records` with the scan in ``workers`` worker
    processes; started at construction, read through :meth:`parsed_batches`."""

    def __init__(self, segments, start_index: int, rules, verdicts: dict, workers: int,
                 hints=None, *, reput: tuple[int, int] | None = None):
        self.segments = list(segments[start_index:])
        self.rules, self.verdicts = rules, verdicts
        self.progress = None
        # as many scanning processes as asked (default: the cores), this one dispatching: the
        # scan costs more than the dispatch, so on two cores two scanners and the dispatch
        # keep both busy where one scanner would leave the dispatch waiting
        count = max(1, min(workers, len(self.segments)))
        context = multiprocessing.get_context("fork")
        self._queues = [context.Queue(_QUEUE_DEPTH) for _ in range(count)]
        target, head = (_scan_files, (self.segments, rules, hints)) if reput is None \
            else (_reput_files, (self.segments, *reput))
        # each worker dies with this process, whatever kills it (no orphan holds our pipes)
        self._procs = [context.Process(target=_guarded, name=f"mqtool-scan-{i}",
                                       args=(os.getpid(), target, *head, q, i, count),
                                       daemon=True)
                       for i, q in enumerate(self._queues)]
        for proc in self._procs:
            proc.start()

    def _get(self, worker: int):
        q, proc = self._queues[worker], self._procs[worker]
        while True:
            try:
                return q.get(timeout=_POLL_SECONDS)
            except _queue.Empty:
                if not proc.is_alive() and q.empty():
                    raise RepairError(f"the scanning process {proc.name} ended unexpectedly "
                                      f"(exit code {proc.exitcode})") from None

    def parsed_batches(self, topics: TopicTable):
        """(RecordBatch, (key owners, key hashes)) in offset order; each file's verdict lands in
        ``verdicts`` as in the one-process path."""
        count = len(self._queues)
        remaps: list[list[int]] = [[] for _ in range(count)]
        try:
            for k, seg in enumerate(self.segments):
                worker = k % count
                # the records whose properties the dispatch reads itself (TAGS of the units it
                # writes; delayed messages, BatchConsumeQueue topics) read them from the file's
                # mapping: only their pages are touched
                mapped = MappedFile(seg.path)
                try:
                    while True:
                        message = self._get(worker)
                        if message[0] == "error":
                            raise RepairError(f"scanning {seg.name} failed in a worker "
                                              "process:\n" + message[1])
                        if message[0] == "file":
                            verdict = message[1]
                            break
                        _, names, base, columns, owners, hashes = message
                        remap = remaps[worker]
                        remap.extend(topics.intern(name) for name in names)
                        batch = RecordBatch.__new__(RecordBatch)
                        batch.buf, batch.base, batch.topics = mapped.data, base, topics
                        batch._records = None
                        for name in _COLUMNS:
                            setattr(batch, name, columns.get(name))
                        batch.topic_id = np.asarray(remap, dtype=np.int32)[columns["topic_id"]]
                        yield batch, (owners, hashes)
                finally:
                    mapped.close()
                if self.progress is not None:
                    self.progress.update(seg.length)
                if verdict is None:     # a reput walk: every file is read
                    continue
                self.verdicts[seg.base_offset] = verdict
                if not (verdict.continues and k + 1 < len(self.segments)):
                    return
        finally:
            self.close()

    def close(self) -> None:
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self._procs:
            proc.join()
        for q in self._queues:
            q.close()
            q.cancel_join_thread()
        self._procs = []
