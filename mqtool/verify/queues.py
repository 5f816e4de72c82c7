"""ConsumeQueue structure checked with numpy a bounded chunk of units at a time, without the
records: file sizes, unit validity and order, units pointing outside the CommitLog; queues too
irregular for the streaming merge are checked here unit by unit."""
from __future__ import annotations

import numpy as np

from ..errors import ParseError
from ..formats import consumequeue as cq_fmt
from ..queue_recovery import iter_cq_units, units_past_mapped_size
from ..recovery import deleted_on_load
from ..scan import message_at
from ..store import Segment, Store
from ..vocabulary import WARNING
from .findings import _Sink, _finding
from .items import _ItemFile
from .context import _QueueInfo


# --- structure checks (numpy, a bounded chunk of units at a time) ---------------------------------


def _segment_ranges(segments: list[Segment]) -> tuple[np.ndarray, np.ndarray]:
    # a damaged file name can hold a 20-digit number past int64: clipped, it still compares
    # greater than every offset a unit can hold
    top = np.iinfo(np.int64).max
    starts = np.array([min(s.base_offset, top) for s in segments], dtype=np.int64)
    ends = np.array([min(s.base_offset + s.length, top) for s in segments], dtype=np.int64)
    return starts, ends


def _inside_segments(offsets: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    if len(starts) == 0:
        return np.zeros(len(offsets), dtype=bool)
    i = np.searchsorted(starts, offsets, side="right") - 1
    ok = i >= 0
    i = np.clip(i, 0, len(starts) - 1)
    return ok & (offsets < ends[i])


def _check_queue_structure(store: Store, queue, starts, ends, min_offset: int, sink: _Sink,
                           deferred: list, version: str) -> _QueueInfo | None:
    """Unit validity, order and reach of one queue; returns what a worker needs to merge it, or
    None when the queue cannot be merged (then its units are checked one by one). Each file is
    read a bounded chunk at a time (:func:`iter_cq_units`), whatever its size."""
    unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
    upf = store.cq_units_per_file
    files, rels = [], []
    regular = True
    first_valid = valid_end = None
    min_off = max_off = None
    previous_last = None
    expected_base = None
    for k, seg in enumerate(queue.segments):
        rel = store.relative(seg.path)
        last_file = k == len(queue.segments) - 1
        base = seg.base_offset // unit_size
        if deleted_on_load(queue.segments, seg, version):
            sink.add(_finding("CQ_FILE_SIZE", rel, 0, "an empty last file: 5.1.3+ deletes it on "
                              "load (mqtool recover does too)", severity=WARNING,
                              topic=queue.topic, queue_id=queue.queue_id))
        elif seg.length % unit_size or seg.length != upf * unit_size:
            _report_file_size(store, queue, seg, rel, last_file, sink)
        if seg.base_offset % unit_size:
            sink.add(_finding("CQ_FILE_SIZE", rel, 0,
                              f"file name {seg.name} is not a multiple of the {unit_size}-byte unit",
                              topic=queue.topic, queue_id=queue.queue_id))
        if expected_base is not None and base != expected_base:
            sink.add(_finding("CQ_FILE_SIZE", rel, 0,
                              f"files are not contiguous: {base - expected_base} units missing "
                              f"before this file", topic=queue.topic, queue_id=queue.queue_id))
            regular = False
        expected_base = base + upf
        # only the geometry's units are the broker's (it maps no more), and a trailing hole is
        # not read: memory stays one chunk whatever the file's size
        scan = _FileScan(first_valid is None)
        for first, units in iter_cq_units(seg.path, upf):
            scan.feed(first, units, previous_last, starts, ends, min_offset)
        files.append(_ItemFile(str(seg.path), 0, base, scan.count))
        rels.append(rel)
        regular &= scan.emit(queue, rel, base, last_file, sink, deferred)
        if scan.first_real is None:
            continue
        if first_valid is None:
            first_valid = base + scan.first_real
        valid_end = base + scan.last_real + 1
        previous_last = scan.previous
        if scan.min_off is not None:
            min_off = scan.min_off if min_off is None else min(min_off, scan.min_off)
            max_off = scan.max_off if max_off is None else max(max_off, scan.max_off)
    if first_valid is None:
        return None
    info = _QueueInfo(queue.topic, queue.queue_id, tuple(files), tuple(rels), first_valid,
                      valid_end, min_off if min_off is not None else 0,
                      max_off if max_off is not None else -1)
    return info if regular else _Irregular(info)


def _report_file_size(store: Store, queue, seg: Segment, rel: str, last_file: bool,
                      sink: _Sink) -> None:
    unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
    upf = store.cq_units_per_file
    base = seg.base_offset // unit_size
    lost = ""
    if not last_file and seg.length < upf * unit_size:
        # the next file starts where the geometry says, so these units are simply gone
        lost = (f"; units {base + seg.length // unit_size}..{base + upf - 1} of the queue "
                f"are missing")
    if seg.length >= (upf + 1) * unit_size:
        past = units_past_mapped_size(seg.path, upf)
        lost = (f"; {past} non-zero units lie past the {upf * unit_size} bytes the broker "
                f"maps" if past else "")
    expected = f"expected {upf * unit_size} ({upf} units)"
    if store.inferred_cq_units_per_file is None and upf == cq_fmt.DEFAULT_CQ_UNITS_PER_FILE:
        expected = (f"expected the broker's default {upf * unit_size} ({upf} units; the queue "
                    f"files' sizes show no other geometry a broker maps, --cq-units states one)")
    sink.add(_finding("CQ_FILE_SIZE", rel, seg.length - seg.length % unit_size,
                      f"{seg.length} bytes, {expected}; the broker refuses to load it{lost}",
                      topic=queue.topic, queue_id=queue.queue_id))


_SHOWN_DANGLING = 20     # holes (and stray pre-blank units) shown per file
_SHOWN_OUTSIDE = 50      # units pointing outside the CommitLog shown per file


class _FileScan:
    """What the structure check gathers over one queue file, fed a chunk at a time; the state a
    rule needs from earlier chunks (the lead of pre-blank units, the last valid unit, the
    previous unit's offset) is carried here."""

    def __init__(self, queue_unstarted: bool):
        self.count = 0
        self.in_lead = queue_unstarted      # pre-blank units lead a queue only at its start
        self.holes: list[tuple] = []        # (unit, offset, size) of the first invalid units
        self.hole_count = 0
        self.holes_before_last_valid = 0
        self.strays: list[tuple] = []       # the same of pre-blank units after the lead
        self.stray_count = 0
        self.last_valid = -1
        self.first_real = self.last_real = None
        self.previous_in_file = None
        self.previous = None                # offset of the last real unit so far (or before)
        self.out_of_order: list[tuple] = []  # (unit, offset, the previous file's last or None)
        self.outside: list[tuple] = []       # (unit, offset, past the CommitLog's data)
        self.outside_count = 0
        self.min_off = self.max_off = None

    def feed(self, first: int, units, previous_last, starts, ends, min_offset: int) -> None:
        n = len(units)
        self.count = first + n
        offs, sizes, tags = units["commitlog_offset"], units["size"], units["tags_code"]
        valid = (offs >= 0) & (sizes > 0)
        pre_blank = (offs == 0) & (sizes == cq_fmt.PRE_BLANK_SIZE) & (tags == 0)
        lead = 0
        if self.in_lead:
            run = np.flatnonzero(~pre_blank)
            lead = int(run[0]) if len(run) else n
            self.in_lead = not len(run)
        holes = np.flatnonzero(~valid[lead:]) + lead
        strays = np.flatnonzero(pre_blank[lead:]) + lead
        valid_idx = np.flatnonzero(valid)
        if len(valid_idx):
            self.last_valid = first + int(valid_idx[-1])
            self.holes_before_last_valid = self.hole_count + int(
                np.count_nonzero(holes < int(valid_idx[-1])))
        self.hole_count += len(holes)
        self.holes += [(first + i, int(offs[i]), int(sizes[i]))
                       for i in holes[:_SHOWN_DANGLING - len(self.holes)].tolist()]
        self.stray_count += len(strays)
        self.strays += [(first + i, int(offs[i]), int(sizes[i]))
                        for i in strays[:_SHOWN_DANGLING - len(self.strays)].tolist()]
        idx = np.flatnonzero(valid & ~pre_blank)
        if len(idx) == 0:
            return
        if self.first_real is None:
            self.first_real = first + int(idx[0])
        self.last_real = first + int(idx[-1])
        o = offs[idx]
        if self.previous_in_file is None:
            if previous_last is not None and o[0] < previous_last:
                self.out_of_order.append((self.first_real, int(o[0]), previous_last))
            back = np.flatnonzero(np.diff(o) < 0) + 1
        else:
            back = np.flatnonzero(np.diff(o, prepend=self.previous_in_file) < 0)
        if len(back) and not any(before is None for _, _, before in self.out_of_order):
            i = int(idx[int(back[0])])
            self.out_of_order.append((first + i, int(offs[i]), None))
        self.previous_in_file = self.previous = int(o[-1])
        live = o >= min_offset
        if live.any():
            lo, hi = int(o[live].min()), int(o[live].max())
            self.min_off = lo if self.min_off is None else min(self.min_off, lo)
            self.max_off = hi if self.max_off is None else max(self.max_off, hi)
        outside = np.flatnonzero(live & ~_inside_segments(o, starts, ends))
        self.outside_count += len(outside)
        for j in outside[:_SHOWN_OUTSIDE - len(self.outside)]:
            i = int(idx[j])
            self.outside.append((first + i, int(offs[i]),
                                 bool(len(ends)) and int(offs[i]) >= int(ends[-1])))

    def emit(self, queue, rel: str, base: int, last_file: bool, sink: _Sink,
             deferred: list) -> bool:
        """Add the file's findings in the order a whole-file check finds them; False when the
        queue cannot be merged with the scan."""
        unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
        where = dict(topic=queue.topic, queue_id=queue.queue_id)
        regular = True
        holes, hole_count = self.holes, self.hole_count
        if last_file:     # past the last valid unit is the unwritten end, not a hole
            holes = [hole for hole in holes if hole[0] < self.last_valid]
            hole_count = self.holes_before_last_valid
        for i, offset, size in holes + self.strays:
            sink.add(_finding("CQ_DANGLING", rel, i * unit_size,
                              f"unit {base + i} is ({offset}, {size}): not a valid unit inside "
                              f"the queue; ConsumeQueue.recover stops here", **where,
                              queue_offset=base + i))
        if hole_count or self.stray_count:
            regular = False
            hidden = (max(0, hole_count - _SHOWN_DANGLING)
                      + max(0, self.stray_count - _SHOWN_DANGLING))
            if hidden:
                sink.add_suppressed("CQ_DANGLING", hidden)
        for i, offset, before in self.out_of_order:
            regular = False
            sink.add(_finding("CQ_MISMATCH", rel, i * unit_size,
                              f"unit {base + i} points at {offset}, before the previous unit"
                              + (f" ({before})" if before is not None else "")
                              + ": units out of CommitLog order", **where))
        for i, offset, past in self.outside:
            deferred.append(_finding("CQ_DANGLING", rel, i * unit_size,
                                     f"unit {base + i} points at CommitLog offset {offset}, "
                                     f"past the CommitLog data" if past
                                     else f"unit {base + i} points at CommitLog offset "
                                          f"{offset}, where no CommitLog file is",
                                     commitlog_offset=offset, **where, queue_offset=base + i))
        extra = self.outside_count - len(self.outside)
        if extra > 0:
            sink.add_suppressed("CQ_DANGLING", extra)
        return regular


class _Irregular:
    """A queue whose units cannot be merged with the scan (holes, out of order)."""

    def __init__(self, info: _QueueInfo):
        self.info = info


def _check_irregular_queue(store: Store, info: _QueueInfo, min_offset: int, sink: _Sink,
                           limit: int = 10_000) -> None:
    """Units of a queue that cannot be merged, checked one record read each."""
    checked = 0
    for f, rel in zip(info.files, info.rels):
        for i, (offset, size, tags) in _units_to_check(f, min_offset):
            if checked >= limit:
                return
            checked += 1
            unit = f.first + i
            extra = dict(commitlog_offset=offset, topic=info.topic, queue_id=info.queue_id,
                         queue_offset=unit)
            try:
                record = message_at(store.commitlog, offset, check_crc=False)
            except ParseError as err:
                sink.add(_finding("CQ_DANGLING", rel, i * cq_fmt.CQ_STORE_UNIT_SIZE,
                                  f"unit {unit} points at CommitLog offset {offset}, where no "
                                  f"record starts ({err.detail})", **extra))
                continue
            problems = []
            if (record.topic, record.queue_id) != (info.topic, info.queue_id):
                problems.append(f"the record belongs to {record.topic!r} queue {record.queue_id}")
            if size != record.total_size:
                problems.append(f"size {size} but the record is {record.total_size} bytes")
            if record.queue_offset != unit:
                problems.append(f"the record's queue offset is {record.queue_offset}")
            if problems:
                sink.add(_finding("CQ_MISMATCH", rel, i * cq_fmt.CQ_STORE_UNIT_SIZE,
                                  f"unit {unit}: " + "; ".join(problems), **extra))


def _units_to_check(f: _ItemFile, min_offset: int):
    """(index in the file, (offset, size, tagsCode)) of the units the structure check kept that
    point at a live record: not pre-blank, not below the CommitLog's first offset, not empty
    (a chunk of zeros costs one numpy pass, not a Python step per unit)."""
    for first, units in iter_cq_units(f.path, f.count):
        offs, sizes, tags = units["commitlog_offset"], units["size"], units["tags_code"]
        pre_blank = (offs == 0) & (sizes == cq_fmt.PRE_BLANK_SIZE) & (tags == 0)
        for i in np.flatnonzero((offs >= min_offset) & (sizes > 0) & ~pre_blank).tolist():
            yield first + i, (int(offs[i]), int(sizes[i]), int(tags[i]))
