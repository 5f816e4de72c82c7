"""Compare two stores (master and slave, backup and live): where their CommitLogs part, which
records only one side holds, and how each ConsumeQueue differs.

A slave's CommitLog is a byte copy of its master's, and a backup is a copy of the live store
taken earlier, so both are compared by global CommitLog offset:

* the first divergent offset is the first byte, inside either side's written data, at which the
  two CommitLogs differ (or where one of them ends);
* records are matched by offset and compared byte for byte: same, different, or on one side
  only;
* ConsumeQueues are compared unit by unit by queue offset.

Bytes past the written data of both sides (zeros, stale bytes after a truncation) do not make the
stores differ; they are mentioned when they do differ.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import codec
from .crc import crc32_ranges
from .formats import consumequeue as cq_fmt
from .scan import BlankRecord, CorruptRegion, RecordBatch, decode_message, scan_segment_batches
from .store import ConsumeQueue, MappedFile, Segment, Store

_COMPARE_CHUNK = 1 << 22


@dataclass
class _FileRecords:
    """One CommitLog file's records as columns, ascending offsets: where each is, its size and
    the crc32 of its bytes (what two sides are compared by)."""

    segment: Segment | None
    offsets: np.ndarray
    sizes: np.ndarray
    crcs: np.ndarray
    data_end: int                 # global offset past the written data

    def containing(self, offset: int) -> np.ndarray:
        """Starts of the records whose bytes hold ``offset``."""
        return self.offsets[(self.offsets <= offset) & (self.offsets + self.sizes > offset)]

    def briefs(self, offsets: np.ndarray) -> list[dict]:
        """How reports list the records at ``offsets`` (decoded again: only a few are listed)."""
        if not len(offsets):
            return []
        seg = self.segment
        with MappedFile(seg.path) as mapped:
            return [decode_message(mapped.data, offset - seg.base_offset, len(mapped.data),
                                   seg.base_offset, False).brief()
                    for offset in offsets.tolist()]


_NONE = np.zeros(0, dtype=np.int64)


def _file_records(seg: Segment | None) -> _FileRecords:
    if seg is None or seg.length == 0:
        return _FileRecords(seg, _NONE, _NONE, _NONE,
                            seg.base_offset if seg is not None else 0)
    offsets, sizes, crcs = [], [], []
    data_end = seg.base_offset
    # the records' bytes are read from a mapping of our own: a batch the scanner built from a
    # decoded record (off its fast path) carries no buffer
    with MappedFile(seg.path) as mapped:
        for event in scan_segment_batches(seg, check_crc=False, resync=True):
            kind = type(event)
            if kind is RecordBatch:
                positions, lengths = event.position, event.total_size
                offsets.append(positions + event.base)
                sizes.append(lengths)
                crcs.append(crc32_ranges(mapped.data, positions, positions + lengths))
                data_end = int(offsets[-1][-1] + lengths[-1])
            elif kind is CorruptRegion:
                data_end = event.offset + min(event.length, max(event.total_size, 8))
            elif kind is BlankRecord:
                data_end = event.offset + 8
    if not offsets:
        return _FileRecords(seg, _NONE, _NONE, _NONE, data_end)
    return _FileRecords(seg, np.concatenate(offsets), np.concatenate(sizes),
                        np.concatenate(crcs), data_end)


def _rows_besides(count: int, matched: np.ndarray) -> np.ndarray:
    """The rows 0..count-1 not in ``matched``, ascending."""
    keep = np.ones(count, dtype=bool)
    keep[matched] = False
    return np.flatnonzero(keep)


def _first_difference(a: Segment | None, b: Segment | None, start: int, upto: int) -> int | None:
    """File position of the first differing byte in [start, upto), a missing or short file
    reading as zeros; None when equal."""
    with _Mapped(a) as buf_a, _Mapped(b) as buf_b:
        pos = start
        while pos < upto:
            end = min(upto, pos + _COMPARE_CHUNK)
            chunk_a = _chunk(buf_a, pos, end)
            chunk_b = _chunk(buf_b, pos, end)
            if chunk_a != chunk_b:
                diff = np.frombuffer(chunk_a, np.uint8) != np.frombuffer(chunk_b, np.uint8)
                return pos + int(np.argmax(diff))
            pos = end
    return None


def _chunk(buf, start: int, end: int) -> bytes:
    data = bytes(buf[start:end]) if buf is not None else b""
    return data + bytes(end - start - len(data))


class _Mapped:
    def __init__(self, seg: Segment | None):
        self.mapped = MappedFile(seg.path) if seg is not None and seg.length else None

    def __enter__(self):
        return self.mapped.data if self.mapped is not None else None

    def __exit__(self, *exc):
        if self.mapped is not None:
            self.mapped.close()


@dataclass
class RecordSide:
    count: int = 0
    bytes: int = 0
    first: list[dict] = field(default_factory=list)

    def add(self, side: _FileRecords, rows: np.ndarray, limit: int) -> None:
        """Records ``rows`` of one file of ``side``, in offset order."""
        self.count += len(rows)
        self.bytes += int(side.sizes[rows].sum())
        room = limit - len(self.first)
        if room > 0:
            self.first += side.briefs(side.offsets[rows[:room]])


def _queue_units(queue: ConsumeQueue | None) -> dict[int, tuple[int, int, int]]:
    """queue offset -> (commitlog offset, size, tagsCode) of every written unit (up to each
    file's first zero-size unit; pre-blank fillers included, as the broker counts them)."""
    out: dict[int, tuple[int, int, int]] = {}
    if queue is None:
        return out
    unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
    for seg in queue.segments:
        with MappedFile(seg.path) as mapped:
            n = mapped.size // unit_size
            if not n:
                continue
            units = np.frombuffer(mapped.data, codec.CQ_DTYPE, n)
            zero = np.flatnonzero(units["size"] == 0)
            written = units[:zero[0]] if len(zero) else units
            base = seg.base_offset // unit_size
            for i, (phy, size, tags) in enumerate(written.tolist()):
                out[base + i] = (phy, size, tags)
    return out


def _compare_queue(topic: str, queue_id: int, a: ConsumeQueue | None,
                   b: ConsumeQueue | None) -> dict | None:
    units_a, units_b = _queue_units(a), _queue_units(b)
    if units_a == units_b:
        return None
    keys = sorted(set(units_a) | set(units_b))
    only_a = [q for q in keys if q in units_a and q not in units_b]
    only_b = [q for q in keys if q in units_b and q not in units_a]
    differ = [q for q in keys if q in units_a and q in units_b and units_a[q] != units_b[q]]
    first = min(only_a[:1] + only_b[:1] + differ[:1])

    def bounds(units):
        return [min(units), max(units) + 1] if units else None

    entry = {"topic": topic, "queue_id": queue_id, "a": bounds(units_a), "b": bounds(units_b),
             "first_divergent_queue_offset": first, "units_only_in_a": len(only_a),
             "units_only_in_b": len(only_b), "units_different": len(differ)}
    if first in units_a:
        entry["a_unit"] = list(units_a[first])
    if first in units_b:
        entry["b_unit"] = list(units_b[first])
    if a is None or b is None:
        entry["queue_only_in"] = "a" if b is None else "b"
    return entry


def diff_stores(a: Store, b: Store, *, list_limit: int = 20, progress=None) -> dict:
    """The differences between two stores as one JSON-ready dict; ``identical`` is True when the
    CommitLog records and every ConsumeQueue unit agree."""
    segs_a = {s.base_offset: s for s in a.commitlog.segments}
    segs_b = {s.base_offset: s for s in b.commitlog.segments}
    only_a, only_b, different = RecordSide(), RecordSide(), RecordSide()
    same = 0
    first_divergent = first_byte = None
    notes: list[str] = []
    if a.commitlog.file_size != b.commitlog.file_size and segs_a and segs_b:
        notes.append(f"CommitLog file sizes differ: {a.commitlog.file_size} vs "
                     f"{b.commitlog.file_size}")
    for base in sorted(set(segs_a) | set(segs_b)):
        seg_a, seg_b = segs_a.get(base), segs_b.get(base)
        rec_a, rec_b = _file_records(seg_a), _file_records(seg_b)
        upto = max(rec_a.data_end, rec_b.data_end) - base
        if first_divergent is None and upto > 0:
            pos = _first_difference(seg_a, seg_b, 0, upto)
            if pos is not None:
                first_byte = base + pos
                # report the start of the record holding the byte: records that differ can
                # share their leading bytes (a size field's high zeros)
                starts = np.concatenate((rec_a.containing(first_byte),
                                         rec_b.containing(first_byte)))
                first_divergent = int(starts.min()) if len(starts) else first_byte
        if seg_a is not None and seg_b is not None and seg_a.length == seg_b.length:
            tail = _first_difference(seg_a, seg_b, max(upto, 0), seg_a.length)
            if tail is not None:
                notes.append(f"{seg_a.name}: bytes past the written data differ from position "
                             f"{tail} on (zeros or stale bytes; not counted)")
        elif (seg_a is None) != (seg_b is None):
            side = "a" if seg_b is None else "b"
            notes.append(f"CommitLog file {base:020d} exists only in {side}")
        # records are matched by offset, and the same when their bytes are (size and crc32)
        _, in_a, in_b = np.intersect1d(rec_a.offsets, rec_b.offsets, assume_unique=True,
                                       return_indices=True)
        equal = (rec_a.sizes[in_a] == rec_b.sizes[in_b]) & (rec_a.crcs[in_a] == rec_b.crcs[in_b])
        same += int(np.count_nonzero(equal))
        different.add(rec_a, in_a[~equal], list_limit)
        only_a.add(rec_a, _rows_besides(len(rec_a.offsets), in_a), list_limit)
        only_b.add(rec_b, _rows_besides(len(rec_b.offsets), in_b), list_limit)
        if progress is not None:
            progress.update((seg_a.length if seg_a else 0) + (seg_b.length if seg_b else 0))

    queues_a = {(q.topic, q.queue_id): q for q in a.consume_queues}
    queues_b = {(q.topic, q.queue_id): q for q in b.consume_queues}
    queue_diffs = []
    for key in sorted(set(queues_a) | set(queues_b)):
        entry = _compare_queue(key[0], key[1], queues_a.get(key), queues_b.get(key))
        if entry is not None:
            queue_diffs.append(entry)

    index_a = [f.name for f in a.index_files]
    index_b = [f.name for f in b.index_files]
    if index_a != index_b:
        notes.append(f"IndexFiles differ by name: {len(index_a)} in a, {len(index_b)} in b "
                     f"(file names are creation times; a slave builds its own)")
    identical = (first_divergent is None and not only_a.count and not only_b.count
                 and not different.count and not queue_diffs)
    return {
        "a": str(a.root), "b": str(b.root), "identical": identical,
        "commitlog": {
            "first_divergent_offset": first_divergent,
            "first_divergent_byte": first_byte,
            "records_same": same,
            "records_only_in_a": {"count": only_a.count, "bytes": only_a.bytes,
                                  "first": only_a.first},
            "records_only_in_b": {"count": only_b.count, "bytes": only_b.bytes,
                                  "first": only_b.first},
            "records_different": {"count": different.count, "first": different.first},
        },
        "consume_queues": {"queues_a": len(queues_a), "queues_b": len(queues_b),
                           "queues_different": len(queue_diffs), "queues": queue_diffs},
        "notes": notes,
    }


__all__ = ["diff_stores"]
