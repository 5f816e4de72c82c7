"""ConsumeQueue structure checked with numpy over whole files, without the records: file sizes,
unit validity and order, units pointing outside the CommitLog; queues too irregular for the
streaming merge are checked here unit by unit."""
from __future__ import annotations

import numpy as np

from ..errors import ParseError
from ..formats import consumequeue as cq_fmt
from ..recovery import deleted_on_load, read_cq_units, units_past_mapped_size
from ..scan import message_at
from ..store import Segment, Store
from ..vocabulary import WARNING
from .findings import _Sink, _finding
from .items import _ItemFile
from .context import _QueueInfo


# --- structure checks (numpy over whole files) ------------------------------------------------------


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
    None when the queue cannot be merged (then its units are checked one by one)."""
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
            lost = ""
            if not last_file and seg.length < upf * unit_size:
                # the next file starts where the geometry says, so these units are simply gone
                lost = (f"; units {base + seg.length // unit_size}..{base + upf - 1} of the queue "
                        f"are missing")
            if seg.length >= (upf + 1) * unit_size:
                past = units_past_mapped_size(seg.path, upf)
                lost = (f"; {past} non-zero units lie past the {upf * unit_size} bytes the broker "
                        f"maps" if past else "")
            sink.add(_finding("CQ_FILE_SIZE", rel, seg.length - seg.length % unit_size,
                              f"{seg.length} bytes, expected {upf * unit_size} ({upf} units); the "
                              f"broker refuses to load it{lost}", topic=queue.topic,
                              queue_id=queue.queue_id))
        if seg.base_offset % unit_size:
            sink.add(_finding("CQ_FILE_SIZE", rel, 0,
                              f"file name {seg.name} is not a multiple of the {unit_size}-byte unit",
                              topic=queue.topic, queue_id=queue.queue_id))
        if expected_base is not None and base != expected_base:
            sink.add(_finding("CQ_FILE_SIZE", rel, 0,
                              f"files are not contiguous: {base - expected_base} units missing "
                              f"before this file", topic=queue.topic, queue_id=queue.queue_id))
            regular = False
        # only the geometry's units are the broker's (it maps no more), and a trailing hole is
        # not read: memory stays bounded whatever the file's size
        units = read_cq_units(seg.path, upf)
        expected_base = base + upf
        files.append(_ItemFile(str(seg.path), 0, base, len(units)))
        rels.append(rel)
        if len(units) == 0:
            continue
        offs, sizes, tags = units["commitlog_offset"], units["size"], units["tags_code"]
        valid = (offs >= 0) & (sizes > 0)
        pre_blank = (offs == 0) & (sizes == cq_fmt.PRE_BLANK_SIZE) & (tags == 0)
        n = len(units)
        valid_idx = np.flatnonzero(valid)
        if len(valid_idx) == 0:
            last_valid = -1
        else:
            last_valid = int(valid_idx[-1])
        # pre-blank units are legitimate only as the first units of the queue
        lead = 0
        if first_valid is None:
            while lead < n and pre_blank[lead]:
                lead += 1
        real = valid & ~pre_blank
        real[:lead] = False
        limit = n if not last_file else last_valid + 1
        holes = np.flatnonzero(~valid[lead:limit]) + lead
        stray_pre = np.flatnonzero(pre_blank[lead:limit]) + lead
        for i in list(holes[:20]) + list(stray_pre[:20]):
            sink.add(_finding("CQ_DANGLING", rel, int(i) * unit_size,
                              f"unit {base + int(i)} is ({int(offs[i])}, {int(sizes[i])}): not a "
                              f"valid unit inside the queue; ConsumeQueue.recover stops here",
                              topic=queue.topic, queue_id=queue.queue_id,
                              queue_offset=base + int(i)))
        if len(holes) or len(stray_pre):
            regular = False
            hidden = max(0, len(holes) - 20) + max(0, len(stray_pre) - 20)
            if hidden:
                sink.add_suppressed("CQ_DANGLING", hidden)
        idx = np.flatnonzero(real)
        if len(idx) == 0:
            continue
        if first_valid is None:
            first_valid = base + int(idx[0])
        valid_end = base + int(idx[-1]) + 1
        o = offs[idx]
        if previous_last is not None and o[0] < previous_last:
            regular = False
            sink.add(_finding("CQ_MISMATCH", rel, int(idx[0]) * unit_size,
                              f"unit {base + int(idx[0])} points at {int(o[0])}, before the "
                              f"previous unit ({previous_last}): units out of CommitLog order",
                              topic=queue.topic, queue_id=queue.queue_id))
        back = np.flatnonzero(np.diff(o) < 0)
        if len(back):
            regular = False
            i = int(idx[int(back[0]) + 1])
            sink.add(_finding("CQ_MISMATCH", rel, i * unit_size,
                              f"unit {base + i} points at {int(offs[i])}, before the previous "
                              f"unit: units out of CommitLog order", topic=queue.topic,
                              queue_id=queue.queue_id))
        previous_last = int(o[-1])
        live = o >= min_offset
        if live.any():
            lo, hi = int(o[live].min()), int(o[live].max())
            min_off = lo if min_off is None else min(min_off, lo)
            max_off = hi if max_off is None else max(max_off, hi)
        outside = live & ~_inside_segments(o, starts, ends)
        for j in np.flatnonzero(outside)[:50]:
            i = int(idx[j])
            deferred.append(_finding("CQ_DANGLING", rel, i * unit_size,
                                     f"unit {base + i} points at CommitLog offset {int(offs[i])}, "
                                     f"past the CommitLog data" if len(ends) and offs[i] >= ends[-1]
                                     else f"unit {base + i} points at CommitLog offset "
                                          f"{int(offs[i])}, where no CommitLog file is",
                                     commitlog_offset=int(offs[i]), topic=queue.topic,
                                     queue_id=queue.queue_id, queue_offset=base + i))
        extra = int(outside.sum()) - min(50, int(outside.sum()))
        if extra > 0:
            sink.add_suppressed("CQ_DANGLING", extra)
    if first_valid is None:
        return None
    info = _QueueInfo(queue.topic, queue.queue_id, tuple(files), tuple(rels), first_valid,
                      valid_end, min_off if min_off is not None else 0,
                      max_off if max_off is not None else -1)
    return info if regular else _Irregular(info)


class _Irregular:
    """A queue whose units cannot be merged with the scan (holes, out of order)."""

    def __init__(self, info: _QueueInfo):
        self.info = info


def _check_irregular_queue(store: Store, info: _QueueInfo, min_offset: int, sink: _Sink,
                           limit: int = 10_000) -> None:
    """Units of a queue that cannot be merged, checked one record read each."""
    checked = 0
    for f, rel in zip(info.files, info.rels):
        units = read_cq_units(f.path, f.count)     # the units the structure check kept
        for i, (offset, size, tags) in enumerate(units.tolist()):
            if offset < min_offset or size <= 0 or cq_fmt.is_pre_blank(offset, size, tags):
                continue
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
