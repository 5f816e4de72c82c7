"""The broker's rules for DLedger-mode stores: where DLedger's recovery ends the log, and what the
4.9.8 broker's next start does to the store (``DLedgerMmapFileStore.recover`` then
``DLedgerCommitLog.recover``), predicted without starting one.

DLedger's recovery is not the plain CommitLog's (:mod:`mqtool.recovery`), and the reference stores
the real 4.9.8 broker with DLedger 0.3.1.2 wrote are the ground truth:

1. the walk starts at the third-to-last data file, going back a file while that file's first
   entry does not pass the checks below or disagrees with its DLedger index unit;
2. per entry: magic 1, the pos field equal to the entry's own offset, body size + 48 = size,
   size > 44, index = previous + 1, term not decreasing. No CRC of any kind is computed and the
   RocketMQ record inside is never parsed. A blank (magic -1) moves to the next data file (at the
   last one, the log ends at that file's end); a size of 0 or any failure ends the log;
3. an entry whose DLedger index unit disagrees does not end the log: the index is rewritten
   from that entry on;
4. when the end lies more than one data-file size before the last data file's start, the broker
   exits (``processOffset is too small``) and changes nothing;
5. otherwise data files starting past the end are deleted (no bytes are zeroed), the DLedger
   index is cut after the last entry, and the ConsumeQueues are cut back only where they reach
   past the end. Nothing is dispatched during recovery: the reput service resumes from the
   ConsumeQueues' end, so IndexFiles an abnormal start deletes are never rebuilt.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from .codec import DLEDGER_INDEX_UNIT_DTYPE
from .errors import StoreLayoutError
from .formats import dledger as dl_fmt
from .scan import CorruptRegion, MessageRecord, Scanner, entry_header_at, first_int
from .store import (DLEDGER_INDEX_KIND, DLEDGER_TEXT_KIND, OFFSET_NAME, DLedgerLog, MappedFile,
                    Segment, Store, properties_int, written_extent)

# DLedgerEntry.HEADER_SIZE: the broker wants an entry longer than this
_MIN_ENTRY_SIZE_EXCLUSIVE = 44


@dataclass
class LedgerWalk:
    """Where DLedger's recovery walk ends."""

    start_file: int                 # index into the data files where the walk began
    start_reason: str
    process_offset: int             # end of the last accepted entry (or of a file left by a blank)
    stop_file: int                  # index of the data file the walk ended in
    stop_reason: str
    first_index: int | None         # index of the first entry walked
    last_index: int                 # -1: no entry accepted
    last_term: int
    last_pos: int | None
    entries: int
    index_rewritten_from: int | None = None   # first entry whose DLedger index unit disagreed
    rewritten_units: list = None    # (index, pos, size, magic, term) of every unit rewritten


def _entry_refusal(header, absolute: int, limit: int, last_index: int, last_term: int) -> str | None:
    """Why DLedgerMmapFileStore.recover refuses this entry, or None (its checks, its order)."""
    if header.pos != absolute:
        return f"entry at {absolute:,}: pos field {header.pos:,}"
    if header.body_size + dl_fmt.ENTRY_HEADER_SIZE != header.size:
        return f"entry at {absolute:,}: size {header.size} != body size {header.body_size} + 48"
    if header.position + header.size > limit:
        return f"entry at {absolute:,}: size {header.size} runs past the end of its file"
    if header.magic != dl_fmt.ENTRY_MAGIC:
        return f"entry at {absolute:,}: magic {header.magic}"
    if last_index != -1 and header.index != last_index + 1:
        return f"entry at {absolute:,}: index {header.index} after {last_index}"
    if header.term < last_term:
        return f"entry at {absolute:,}: term {header.term} < {last_term}"
    if header.size <= _MIN_ENTRY_SIZE_EXCLUSIVE:
        return f"entry at {absolute:,}: size {header.size} <= 44"
    return None


def _unit_agrees(dledger: DLedgerLog, header, absolute: int) -> bool:
    unit = dledger.index_unit(header.index) if header.index >= 0 else None
    return unit is not None and (unit.magic, unit.size, unit.index, unit.term, unit.pos) == (
        header.magic, header.size, header.index, header.term, absolute)


def _first_entry_ok(dledger: DLedgerLog, seg: Segment) -> bool:
    """The pre-check of a candidate start file: its first entry and its index unit."""
    with MappedFile(seg.path) as mapped:
        header = entry_header_at(mapped.data, 0)
    if header is None or header.magic == dl_fmt.BLANK_MAGIC or header.magic != dl_fmt.ENTRY_MAGIC:
        return False
    if header.size <= _MIN_ENTRY_SIZE_EXCLUSIVE or header.pos != seg.base_offset \
            or header.body_size + dl_fmt.ENTRY_HEADER_SIZE != header.size:
        return False
    return _unit_agrees(dledger, header, seg.base_offset)


def walk_ledger(dledger: DLedgerLog, start_file: int | None = None) -> LedgerWalk:
    """DLedger's recovery walk over the data files (see the module's rules 1-3). ``start_file``
    skips the choice of the start file (the passport walks from where the index says the last
    entry is known)."""
    files = dledger.data_segments
    if not files:
        return LedgerWalk(0, "no data file", 0, 0, "no data file", None, -1, -1, None, 0)
    if start_file is None:
        first_choice = index = max(0, len(files) - 3)
        for i in range(first_choice, -1, -1):
            index = i
            if _first_entry_ok(dledger, files[i]):
                break
        if index == first_choice:
            reason = "third-to-last data file"
        else:
            reason = (f"the first entry of {files[first_choice].name} fails the pre-check (or "
                      f"its index unit); the walk starts at {files[index].name}")
    else:
        index, reason = start_file, "given"
    walk = LedgerWalk(index, reason, files[index].base_offset, index, "", None, -1, -1, None, 0)
    rewriting = False
    n = index
    while True:
        seg = files[n]
        with MappedFile(seg.path) as mapped:
            buf, limit = mapped.data, seg.length
            position = walk.process_offset - seg.base_offset
            stop = None
            while stop is None:
                absolute = seg.base_offset + position
                magic = first_int(buf, position)
                if magic is None:
                    stop = f"end of {seg.name} without a blank"
                    break
                if magic == dl_fmt.BLANK_MAGIC:
                    break
                if first_int(buf, position + 4) == 0:
                    stop = f"unwritten at {absolute:,}"
                    break
                header = entry_header_at(buf, position)
                if header is None:
                    stop = f"entry at {absolute:,}: header runs past the end of {seg.name}"
                    break
                refusal = _entry_refusal(header, absolute, limit, walk.last_index, walk.last_term)
                if refusal is not None:
                    stop = refusal
                    break
                if not rewriting and not _unit_agrees(dledger, header, absolute):
                    rewriting = True
                    walk.index_rewritten_from = header.index
                    walk.rewritten_units = []
                if rewriting:
                    walk.rewritten_units.append((header.index, absolute, header.size,
                                                 header.magic, header.term))
                if walk.first_index is None:
                    walk.first_index = header.index
                walk.last_index, walk.last_term, walk.last_pos = header.index, header.term, absolute
                walk.entries += 1
                walk.process_offset = absolute + header.size
                position += header.size
        walk.stop_file = n
        if stop is not None:
            walk.stop_reason = stop
            return walk
        # a blank: the file is done; the log goes on in the next one, or ends at this file's end
        walk.process_offset = seg.base_offset + seg.length
        if n + 1 >= len(files):
            walk.stop_reason = f"blank at the end of the last data file {seg.name}"
            return walk
        n += 1
        walk.process_offset = files[n].base_offset


def ledger_extent(dledger: DLedgerLog) -> dict:
    """The ledger the data files hold as DLedger's recovery would find it: first and last entry
    (index, term, pos) and why the log ends there. The walk starts at the data file of the last
    entry the DLedger index knows when that unit agrees with the data (the index is only a hint,
    and walking every file of a large store would be slow), else where the broker starts."""
    first = dledger.first_entry()
    start = None
    unit_number = dledger.last_written_unit()
    unit = dledger.index_unit(unit_number) if unit_number is not None else None
    if unit is not None and unit.magic == dl_fmt.ENTRY_MAGIC and unit.index == unit_number:
        for i, seg in enumerate(dledger.data_segments):
            if seg.base_offset <= unit.pos < seg.base_offset + seg.length and \
                    _first_entry_ok(dledger, seg):
                start = i
    walk = walk_ledger(dledger, start)
    last = None if walk.last_index < 0 else {"index": walk.last_index, "term": walk.last_term,
                                              "pos": walk.last_pos}
    return {"first": None if first is None else {"index": first.index, "term": first.term,
                                                 "pos": first.pos},
            "last": last,
            "entries": walk.last_index - first.index + 1 if first is not None and last else 0,
            "end_offset": walk.process_offset, "end": walk.stop_reason,
            "index_last_written_unit": unit_number,
            "index_disagrees_from": walk.index_rewritten_from}


def predict_dledger_recovery(store: Store, plan, recovered_kinds, progress=None):
    """Fill ``plan`` (a :class:`mqtool.recovery.RecoveryPlan` with the parts both layouts share:
    ConsumeQueue recovery, IndexFiles an abnormal start deletes, file-size refusals) with what
    DLedger's recovery does. ``recovered_kinds``: the queues as ``ConsumeQueue.recover`` leaves
    them, which ``truncateDirtyLogicFiles`` walks. Returns the plan."""
    from .queue_recovery import truncate_dirty_logic

    dledger = store.dledger
    files = dledger.data_segments
    plan.notes.append("DLedger mode: DLedger's own recovery (no CRC checked, nothing dispatched "
                      "during recovery, normal and abnormal starts alike)")
    if not files:
        plan.start_reason = plan.stop_reason = "no DLedger data file"
        return plan
    walk = walk_ledger(dledger)
    start, stop = files[walk.start_file], files[walk.stop_file]
    plan.start_file, plan.start_offset = start.name, start.base_offset
    plan.start_reason = f"DLedger: {walk.start_reason}"
    process_offset = walk.process_offset
    plan.process_offset = process_offset
    plan.stop_file = stop.name
    plan.stop_position = process_offset - stop.base_offset
    plan.stop_reason = walk.stop_reason
    last_file = files[-1]
    if last_file.base_offset - process_offset > last_file.length:
        plan.refuses_to_start.append(
            f"DLedger recovery ends at {process_offset:,}, more than one data file before the "
            f"last data file ({last_file.name}): the broker exits (processOffset is too small) "
            "and changes nothing")
    for seg in files:
        if seg.base_offset > process_offset:
            plan.commitlog_files_deleted.append(seg.name)
        else:
            plan.commitlog_files_kept.append(seg.name)
            if seg.base_offset <= process_offset < seg.base_offset + seg.length:
                plan.cut_file = seg.name
    plan.commitlog_files_kept = [s.name for s in store.commitlog.plain_segments] + \
        plan.commitlog_files_kept
    # what lies past the end: records a resynchronising scan still finds there
    scanner = Scanner(store.commitlog, check_crc=False, resync=True)
    lost, first_lost, data_end = 0, None, process_offset
    for seg in files[walk.stop_file:]:
        for event in scanner.scan_segment(seg, progress=progress):
            end = event.offset + getattr(event, "total_size", 0)
            if type(event) is MessageRecord and event.offset >= process_offset:
                lost += 1
                first_lost = event.offset if first_lost is None else first_lost
                data_end = max(data_end, end)
            elif type(event) is CorruptRegion and event.offset >= process_offset:
                data_end = max(data_end, event.offset + min(event.length,
                                                            max(event.total_size, 8)))
    plan.messages_lost, plan.first_lost_offset = lost, first_lost
    plan.bytes_dropped = data_end - process_offset
    if walk.index_rewritten_from is not None:
        plan.notes.append(f"the DLedger index disagrees with the data from entry "
                          f"{walk.index_rewritten_from}: DLedger rewrites it from there")
    checkpoint, _, _ = dledger.checkpoint()
    committed = checkpoint.get(dl_fmt.COMMITTED_INDEX_KEY) if checkpoint else None
    plan.notes.append(f"DLedger ledger after recovery: entries up to {walk.last_index}, term "
                      f"{walk.last_term}; committedIndex {committed} from the DLedger checkpoint "
                      "(a single peer commits the rest once it is leader)")
    if plan.max_phy_offset_of_consume_queue >= process_offset:
        plan.cq_truncate_called = True
        plan.cq_truncations = [truncate_dirty_logic(q, process_offset, upf, kind)
                               for kind, queues, upf in recovered_kinds for q in queues]
        plan.cq_units_truncated = sum(t.units for t in plan.cq_truncations)
        cq_max = max((t.max_physic_offset for t in plan.cq_truncations), default=-1)
    else:
        cq_max = plan.max_phy_offset_of_consume_queue
    plan.redispatch_from = max(store.commitlog.min_offset, cq_max)
    plan.redispatch_rule = ("DLedger mode dispatches nothing during recovery; the reput service "
                            "resumes from the highest ConsumeQueue end")
    if plan.redispatch_from >= process_offset:
        plan.redispatch_rule += "; nothing left to dispatch"
    if plan.index_files_deleted:
        plan.notes.append("IndexFiles deleted by the abnormal start are not rebuilt in DLedger "
                          "mode: key lookups lose their entries")
    return plan


# --- dumping the DLedger bookkeeping files -------------------------------------------------------

RT_INDEX_UNIT = "dledger/index-unit"
RT_TEXT = "dledger/text"


def iter_index_units(path: Path) -> Iterator[dict]:
    """The written (not all-zero) units of a DLedger index file, in order; the file is sparse,
    only its written extents are read."""
    path = Path(path)
    base = int(path.name) if OFFSET_NAME.match(path.name) else 0
    unit_size = dl_fmt.INDEX_UNIT_SIZE
    with MappedFile(path) as mapped:
        end = written_extent(mapped.fileno(), mapped.size)
        end -= end % unit_size
        chunk = (1 << 20) - (1 << 20) % unit_size
        for start in range(0, end, chunk):
            units = np.frombuffer(mapped.data, DLEDGER_INDEX_UNIT_DTYPE,
                                  (min(end, start + chunk) - start) // unit_size, start)
            raw = units.view(np.uint8).reshape(len(units), unit_size)
            for i in np.flatnonzero(raw.any(axis=1)).tolist():
                unit = units[i]
                offset = start + i * unit_size
                yield {"record_type": RT_INDEX_UNIT, "file": path.name, "file_offset": offset,
                       "unit": (base + offset) // unit_size, "magic": int(unit["magic"]),
                       "pos": int(unit["pos"]), "size": int(unit["size"]),
                       "index": int(unit["index"]), "term": int(unit["term"]),
                       "index_matches_unit": int(unit["index"]) == (base + offset) // unit_size}


def text_file_dict(path: Path) -> dict:
    """A DLedger checkpoint or currterm file (or its .bak): its text and what it says."""
    path = Path(path)
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    values = dl_fmt.parse_properties_text(text)
    out = {"record_type": RT_TEXT, "file": path.name, "text": text, "values": values}
    for key in (dl_fmt.COMMITTED_INDEX_KEY, dl_fmt.END_INDEX_KEY, dl_fmt.CURR_TERM_KEY):
        if key in values:
            out[key] = properties_int(values, key)
    return out


def dump_file(path: Path, kind: str) -> Iterator[dict]:
    """Records of one DLedger bookkeeping file (``mqtool dump`` on it)."""
    if kind == DLEDGER_INDEX_KIND:
        yield from iter_index_units(path)
    elif kind == DLEDGER_TEXT_KIND:
        yield text_file_dict(path)
    else:
        raise StoreLayoutError(f"{path}: not a DLedger bookkeeping file ({kind})")


# --- verify: what DLedger keeps consistent, checked over the whole ledger --------------------------

_LISTED = 20


def _finding(code: str, file: str, offset: int, message: str, **extra) -> dict:
    from .vocabulary import CODES
    return {"code": code, "severity": CODES[code][0], "file": file, "offset": offset,
            "message": message, **extra}


def _ledger_entries(store: Store, findings: list[dict]) -> list[tuple]:
    """(index, term, pos, size, magic) of every entry with a sound header, walking each data
    file until its blank or first broken header (which the scanner reports: DL_ENTRY_*); index
    and term continuity are checked on the way."""
    entries, previous = [], None
    for seg in store.dledger.data_segments:
        rel = seg.store_path
        with MappedFile(seg.path) as mapped:
            buf, position = mapped.data, 0
            while True:
                magic = first_int(buf, position)
                header = entry_header_at(buf, position)
                if magic is None or magic == dl_fmt.BLANK_MAGIC or header is None:
                    break
                absolute = seg.base_offset + position
                if header.magic != dl_fmt.ENTRY_MAGIC or header.pos != absolute \
                        or header.size != dl_fmt.ENTRY_HEADER_SIZE + header.body_size \
                        or header.size <= _MIN_ENTRY_SIZE_EXCLUSIVE \
                        or position + header.size > len(buf):
                    previous = None      # the sequence is judged again after the break
                    break
                record = absolute + dl_fmt.ENTRY_HEADER_SIZE
                if previous is not None and header.index != previous.index + 1:
                    findings.append(_finding(
                        "DL_INDEX_SEQUENCE", rel, position,
                        f"entry at {absolute:,} has index {header.index}, the previous entry "
                        f"{previous.index}: DLedger's recovery ends the log here",
                        commitlog_offset=record))
                if previous is not None and header.term < previous.term:
                    findings.append(_finding(
                        "DL_TERM_ORDER", rel, position,
                        f"entry {header.index} has term {header.term} after term "
                        f"{previous.term}: DLedger's recovery ends the log here",
                        commitlog_offset=record))
                entries.append((header.index, header.term, absolute, header.size, header.magic,
                                rel, position))
                previous = header
                position += header.size
    return entries


def _check_index_units(store: Store, entries: list[tuple], findings: list[dict]) -> None:
    dledger = store.dledger
    wrong = []
    for index, term, pos, size, magic, rel, position in entries:
        unit = dledger.index_unit(index) if index >= 0 else None
        if unit is None or (unit.magic, unit.pos, unit.size, unit.index, unit.term) != \
                (magic, pos, size, index, term):
            wrong.append((index, unit, rel, position, pos))
    index_rel = store.relative(dledger.index_dir)
    for index, unit, rel, position, pos in wrong[:_LISTED]:
        what = "no unit" if unit is None else (
            f"unit says pos {unit.pos:,}, size {unit.size}, index {unit.index}, term {unit.term}")
        findings.append(_finding(
            "DL_INDEX_UNIT", index_rel, max(index, 0) * dl_fmt.INDEX_UNIT_SIZE,
            f"entry {index} at {pos:,} ({rel}:{position}): {what}; the broker rewrites units "
            "from its recovery start file on, and reads earlier entries through them",
            commitlog_offset=pos + dl_fmt.ENTRY_HEADER_SIZE))
    if len(wrong) > _LISTED:
        findings.append(_finding("DL_INDEX_UNIT", index_rel, 0,
                                 f"{len(wrong) - _LISTED:,} more entries whose index unit is "
                                 "missing or disagrees", count=len(wrong) - _LISTED))


def check_dledger(store: Store) -> list[dict]:
    """verify's findings about what DLedger itself keeps: index sequence and term order over the
    whole ledger, index units against their entries, the checkpoint and currterm, and where an
    upgraded store's two parts meet. Entry headers that are broken outright are the scanner's
    (DL_ENTRY_MAGIC, DL_ENTRY_POS, DL_ENTRY_SIZE, DL_ENTRY_TRUNCATED). [] in plain mode."""
    dledger = store.dledger
    if dledger is None:
        return []
    findings: list[dict] = []
    entries = _ledger_entries(store, findings)
    _check_index_units(store, entries, findings)
    folder = dledger.directory.name
    last_index = max((e[0] for e in entries), default=-1)
    checkpoint, source, error = dledger.checkpoint()
    committed = properties_int(checkpoint, dl_fmt.COMMITTED_INDEX_KEY)
    if checkpoint is None or committed is None:
        findings.append(_finding("DL_CHECKPOINT", f"{folder}/{dl_fmt.CHECKPOINT_FILE}", 0,
                                 f"no usable committedIndex ({error or 'not a number'}): the "
                                 "broker starts with nothing committed"))
    else:
        if source != dl_fmt.CHECKPOINT_FILE:
            findings.append(_finding("DL_CHECKPOINT", f"{folder}/{dl_fmt.CHECKPOINT_FILE}", 0,
                                     f"unusable ({error}); {source} holds the previous content"))
        if committed > last_index:
            findings.append(_finding("DL_CHECKPOINT", f"{folder}/{source}", 0,
                                     f"committedIndex {committed} is past the last entry "
                                     f"{last_index}"))
    currterm, _, error = dledger.currterm()
    if currterm is None or properties_int(currterm, dl_fmt.CURR_TERM_KEY) is None:
        findings.append(_finding("DL_CHECKPOINT", f"{folder}/{dl_fmt.CURRTERM_FILE}", 0,
                                 f"no usable currTerm ({error or 'not a number'})"))
    plain = store.commitlog.plain_segments
    divided = store.commitlog.divided_offset
    if divided is not None and plain[-1].base_offset + plain[-1].length != divided:
        findings.append(_finding("DL_LAYOUT", plain[-1].store_path, 0,
                                 f"commitlog/ ends at {plain[-1].base_offset + plain[-1].length:,}"
                                 f" but the DLedger data begins at {divided:,}"))
    return findings
