"""Reading and checking the 5.x timer store: ``timerlog/``, ``timerwheel``, ``config/timercheck``.

:func:`load_timer_store` reads the three into a :class:`TimerStore`; :func:`walk_slot` follows a
wheel slot's chain (lastPos back through prevPos) as the broker's dequeue does;
:func:`check_timer_store` returns verify's findings about the timer files and their agreement with
the CommitLog. What the timers mean (pending, delivered, their fate at the next start) is
:mod:`mqtool.timers`."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np

from .codec import TIMERLOG_BLANK, TIMERLOG_UNIT, numpy_dtype
from .errors import ParseError
from .formats import commitlog as cl_fmt
from .formats import timer as timer_fmt
from .scan.reader import RecordReader
from .store import MappedFile, Store, _offset_files, parse_at

if TYPE_CHECKING:
    from .recovery import RecoveryPlan

WHEEL_DTYPE = numpy_dtype(timer_fmt.timerwheel_slot)
UNIT_FIELDS = tuple(sc.name for sc in timer_fmt.timerlog_unit.subcons)
UNIT = timer_fmt.TIMERLOG_UNIT_SIZE
ERROR, WARNING = "error", "warning"


def timerlog_segments(store: Store):
    return _offset_files(store.root / "timerlog")[0]


def iter_timerlog(path: Path, base: int) -> Iterator[dict]:
    """Units of one TimerLog file until its blank record or the first all-zero unit; a unit cut
    by the end of the file comes out as ``timerlog/torn``."""
    with MappedFile(path) as mf:
        data, pos = mf.data, 0
        while pos + timer_fmt.TIMERLOG_BLANK_SIZE <= mf.size:
            remaining, zero, magic = TIMERLOG_BLANK.unpack_from(data, pos)
            if magic == cl_fmt.BLANK_MAGIC_CODE and zero == 0:
                yield {"record_type": "timerlog/blank", "file_offset": pos,
                       "timerlog_offset": base + pos, "remaining": remaining}
                return
            if pos + UNIT > mf.size:
                break
            values = TIMERLOG_UNIT.unpack_from(data, pos)
            if not any(values):
                return
            unit = dict(zip(UNIT_FIELDS, values))
            yield {"record_type": "timerlog/unit", "file_offset": pos,
                   "timerlog_offset": base + pos, **unit,
                   "deliver_time_ms": unit["curr_write_time_ms"] + unit["delay_ms"]}
            if unit["size"] != UNIT:
                return  # without a trustworthy size the next unit's start is unknown
            pos += UNIT
        if pos < mf.size and any(data[pos:mf.size]):
            yield {"record_type": "timerlog/torn", "file_offset": pos,
                   "timerlog_offset": base + pos, "length": mf.size - pos}


def read_wheel(path: Path) -> np.ndarray:
    with MappedFile(path) as mf:
        count = mf.size // timer_fmt.TIMERWHEEL_SLOT_SIZE
        return np.frombuffer(mf.data, dtype=WHEEL_DTYPE, count=count).copy() if count else \
            np.zeros(0, dtype=WHEEL_DTYPE)


def _slot_dict(slots: np.ndarray, index: int) -> dict:
    slot = slots[index]
    return {"record_type": "timerwheel/slot", "slot": index,
            "file_offset": index * timer_fmt.TIMERWHEEL_SLOT_SIZE,
            **{name: int(slot[name]) for name in WHEEL_DTYPE.names}}


def used_slots(slots: np.ndarray) -> Iterator[dict]:
    for index in np.flatnonzero(slots["num"] > 0).tolist():
        yield _slot_dict(slots, index)


def iter_timerwheel(path: Path) -> Iterator[dict]:
    """The used slots (num > 0) with their index."""
    yield from used_slots(read_wheel(path))


def timer_checkpoint_dict(path: Path) -> dict:
    data = Path(path).read_bytes()
    if len(data) < 56:
        raise ParseError(str(path), 0, "", f"timercheck is {len(data)} bytes, expected 4096")
    parsed = parse_at(timer_fmt.timer_checkpoint, data.ljust(timer_fmt.TIMER_CHECKPOINT_SIZE, b"\0")
                      [:timer_fmt.TIMER_CHECKPOINT_SIZE], file=str(path))
    return {"record_type": "timercheck",
            **{sc.name: parsed[sc.name] for sc in timer_fmt.timer_checkpoint.subcons
               if sc.name != "padding"}}


# --- the timer store as one object ----------------------------------------------------------------

@dataclass
class TimerLogFile:
    name: str
    base_offset: int
    size: int
    units: int = 0
    end: int = 0            # file position where the units end
    end_kind: str = "end"   # blank | zeros | bad-unit | torn | end (of the file)


@dataclass
class TimerStore:
    """The timer files of one store as read from disk (nothing repaired or guessed)."""

    files: list[TimerLogFile] = field(default_factory=list)
    units: dict[int, dict] = field(default_factory=dict)     # TimerLog offset -> unit
    torn: list[dict] = field(default_factory=list)           # partial units at a file's end
    # the wheel the broker works with: the file, or all empty slots when the file is missing or
    # empty (the broker creates/extends it); None when its size makes the broker refuse to start
    wheel: np.ndarray | None = None
    wheel_size: int | None = None                            # on disk; None: no file
    checkpoint: dict | None = None                           # None: missing or unreadable
    checkpoint_size: int | None = None

    @property
    def wheel_refused(self) -> bool:
        """The broker maps a wheel of exactly 2 x 7 days of slots (a missing or empty file it
        creates); any other size stops its start."""
        return self.wheel_size not in (None, 0, timer_fmt.TIMERWHEEL_FILE_SIZE)

    @property
    def timerlog_end(self) -> int:
        """One past the last unit read (the TimerLog's written end)."""
        return max((pos + UNIT for pos in self.units), default=0)


def has_timer_store(store: Store) -> bool:
    root = store.root
    return (root / "timerlog").is_dir() or (root / "timerwheel").is_file() \
        or (root / "config" / "timercheck").is_file()


def load_timer_store(store: Store) -> TimerStore:
    timers = TimerStore()
    for seg in timerlog_segments(store):
        info = TimerLogFile(seg.name, seg.base_offset, seg.length, end=seg.length)
        for rec in iter_timerlog(seg.path, seg.base_offset):
            kind = rec["record_type"]
            if kind == "timerlog/unit":
                rec["file"] = store.relative(seg.path)
                timers.units[rec["timerlog_offset"]] = rec
                info.units += 1
                info.end = rec["file_offset"] + UNIT
                if rec["size"] != UNIT:
                    info.end, info.end_kind = rec["file_offset"], "bad-unit"
                    break
                info.end_kind = "zeros" if info.end < seg.length else "end"
            elif kind == "timerlog/blank":
                info.end, info.end_kind = rec["file_offset"], "blank"
            elif kind == "timerlog/torn":
                rec["file"] = store.relative(seg.path)
                timers.torn.append(rec)
                info.end, info.end_kind = rec["file_offset"], "torn"
        if info.units == 0 and info.end_kind == "end":
            info.end, info.end_kind = 0, "zeros"
        timers.files.append(info)
    wheel = store.root / "timerwheel"
    if wheel.is_file():
        timers.wheel_size = wheel.stat().st_size
    if timers.wheel_size == timer_fmt.TIMERWHEEL_FILE_SIZE:
        timers.wheel = read_wheel(wheel)
    elif not timers.wheel_refused:
        timers.wheel = np.zeros(2 * timer_fmt.DEFAULT_SLOTS_TOTAL, dtype=WHEEL_DTYPE)
    check = store.root / "config" / "timercheck"
    if check.is_file():
        timers.checkpoint_size = check.stat().st_size
        try:
            timers.checkpoint = timer_checkpoint_dict(check)
        except ParseError:
            timers.checkpoint = None
    return timers


def walk_slot(units: dict[int, dict], slot: dict) -> tuple[list[dict], str | None]:
    """The slot's units newest first, as the broker's dequeue reads them: from lastPos back
    through prevPos until -1 (firstPos is not consulted; on a sound wheel the walk ends there).
    The second value says why the walk stopped early, if it did."""
    chain, pos, seen = [], slot["last_pos"], set()
    while pos != -1:
        unit = units.get(pos)
        if unit is None:
            return chain, f"TimerLog offset {pos} holds no unit"
        if pos in seen:
            return chain, f"the chain loops back to {pos}"
        seen.add(pos)
        chain.append(unit)
        if unit["prev_pos"] >= pos:
            return chain, f"the unit at {pos} links forward to {unit['prev_pos']}"
        pos = unit["prev_pos"]
    return chain, None


def timerlog_recovery(timers: TimerStore) -> tuple[int, int]:
    """TimerMessageStore.recoverAndRevise on load: (where its walk starts, where it cuts the
    log). It starts at the file holding lastTimerLogFlushPos minus one file size and reads unit
    by unit; a blank ends a file, the first unit of the wrong size or with magic bits above the
    low four (an all-zero unit is one) ends the log, and later bytes and files are dropped."""
    files = timers.files
    if not files:
        return 0, 0
    flush = timers.checkpoint["last_timer_log_flush_pos"] if timers.checkpoint else 0
    begin = max(0, flush - files[-1].size)
    start = 0
    for i, f in enumerate(files):
        if begin >= f.base_offset:
            start = i
    for f in files[start:]:
        for pos in range(f.base_offset, f.base_offset + f.end, UNIT):
            unit = timers.units.get(pos)
            if unit is not None and not timer_fmt.magic_passes_recovery(unit["magic"]):
                return files[start].base_offset, pos
        if f.end_kind not in ("blank", "end"):
            return files[start].base_offset, f.base_offset + f.end
    last = files[-1]
    return files[start].base_offset, last.base_offset + last.end


def revised_slots(timers: TimerStore, begin: int, end: int) -> dict[int, dict]:
    """The wheel slots the broker's load rewrites (TimerWheel.reviseSlot, forced): for every
    unit its recovery walks, the slot of the unit's due second gets the unit as lastPos, and as
    firstPos too when the slot held another second. Returns slot time -> the slot afterwards
    (only the slots it touches); this is how units written after the last wheel flush of a
    crashed broker get back on a chain."""
    count = len(timers.wheel) if timers.wheel is not None else 0
    revised: dict[int, dict] = {}
    for pos in sorted(p for p in timers.units if begin <= p < end):
        unit = timers.units[pos]
        time_slot = unit["deliver_time_ms"] // timer_fmt.DEFAULT_PRECISION_MS
        slot = revised.get(time_slot)
        if slot is None:
            index = timer_fmt.slot_index(time_slot, count) if count else -1
            slot = _slot_dict(timers.wheel, index) if count else \
                {"slot": -1, "time_slot": -1, "first_pos": -1, "last_pos": -1, "num": 0, "magic": 0}
            if slot["time_slot"] != time_slot:
                slot.update(time_slot=time_slot, first_pos=pos, num=0, magic=0)
            revised[time_slot] = slot
        slot["last_pos"] = pos
    return revised


# --- checks ---------------------------------------------------------------------------------------

def check_timer_store(store: Store, *, plan: RecoveryPlan | None = None) -> list[dict]:
    """Findings (code, severity, file, offset, message and optionally commitlog_offset, topic,
    queue_id, count: the fields of verify's Finding) about the timer store; [] without one.

    With ``plan`` (verify's recovery prediction) a pending timer whose message the broker's
    next start truncates away is reported as TIMER_LOST."""
    if not has_timer_store(store):
        return []
    findings: list[dict] = []

    def add(code, file, offset, message, severity=ERROR, **extra):
        findings.append({"code": code, "severity": severity, "file": file, "offset": int(offset),
                         "message": message, **extra})

    timers = load_timer_store(store)
    _check_timerlog_files(timers, add)
    with RecordReader(store.commitlog, random_access=False) as reader:
        targets = _check_units(store, timers, reader, add)
    _check_checkpoint(store, timers, add)
    _check_wheel(store, timers, targets, plan, add)
    return findings


def _check_timerlog_files(timers: TimerStore, add) -> None:
    sizes = Counter(f.size for f in timers.files if f.size)
    expected = sizes.most_common(1)[0][0] if sizes else 0
    for f in timers.files:
        if f.size != expected:
            add("TIMER_FILE_SIZE", f"timerlog/{f.name}", 0,
                f"TimerLog file {f.name} is {f.size} bytes, the others {expected} (the broker's "
                "load refuses a file of another size)")
    for torn in timers.torn:
        add("TIMER_TORN", torn["file"], torn["file_offset"],
            f"{torn['length']} byte(s) at the end of the file are part of a unit, not a whole one")


def _check_units(store: Store, timers: TimerStore, reader: RecordReader, add) -> dict[int, object]:
    """Unit by unit; returns the CommitLog record each sound unit points at (offset -> record)."""
    targets: dict[int, object] = {}
    commitlog_end = max((s.base_offset + s.length for s in store.commitlog.segments), default=0)
    for position, rec in timers.units.items():
        rel, at = rec["file"], rec["file_offset"]
        if rec["size"] != UNIT:
            add("TIMER_UNIT_SIZE", rel, at,
                f"TimerLog unit at {position} declares size {rec['size']}, not {UNIT}")
            continue
        if not timer_fmt.magic_is_valid(rec["magic"]):
            add("TIMER_MAGIC", rel, at, f"TimerLog unit at {position} has magic {rec['magic']:#x}")
        if rec["prev_pos"] >= position or rec["prev_pos"] < -1:
            add("TIMER_PREV_POS", rel, at,
                f"TimerLog unit at {position} links to prevPos {rec['prev_pos']}, not an "
                "earlier unit")
        offset, size = rec["commitlog_offset"], rec["commitlog_size"]
        if offset < 0 or offset >= commitlog_end:
            add("TIMER_DANGLING", rel, at,
                f"TimerLog unit at {position} points at CommitLog offset {offset}, past the "
                f"CommitLog (it ends at {commitlog_end})", commitlog_offset=offset)
            continue
        target, _ = reader.at(offset)
        if target is None:
            add("TIMER_DANGLING", rel, at,
                f"TimerLog unit at {position} points at CommitLog offset {offset}, where no "
                "record starts", commitlog_offset=offset)
            continue
        if target.total_size != size:
            add("TIMER_DANGLING", rel, at,
                f"TimerLog unit at {position} records size {size} for the "
                f"{target.total_size}-byte record at {offset}", commitlog_offset=offset)
            continue
        targets[position] = target
        if target.topic != timer_fmt.TIMER_TOPIC:
            add("TIMER_MISMATCH", rel, at,
                f"TimerLog unit at {position} points at a record of topic {target.topic!r}, not "
                f"{timer_fmt.TIMER_TOPIC}", commitlog_offset=offset, topic=target.topic)
            continue
        due = target.properties.get(timer_fmt.PROP_TIMER_OUT_MS)
        rolled = rec["magic"] & timer_fmt.MAGIC_ROLL
        if not rolled and due is not None and due.lstrip("-").isdigit() \
                and int(due) != rec["deliver_time_ms"]:
            add("TIMER_MISMATCH", rel, at,
                f"TimerLog unit at {position} is due at {rec['deliver_time_ms']} ms, its message "
                f"at {offset} at TIMER_OUT_MS={due}", commitlog_offset=offset,
                topic=target.topic)
    return targets


def _check_checkpoint(store: Store, timers: TimerStore, add) -> None:
    path = "config/timercheck"
    if timers.checkpoint_size is None:
        if timers.units:
            add("TIMER_CKPT", path, 0, "config/timercheck is missing: the broker starts from a "
                "zeroed timer checkpoint", severity=WARNING)
        return
    if timers.checkpoint_size != timer_fmt.TIMER_CHECKPOINT_SIZE:
        add("TIMER_CKPT", path, 0,
            f"config/timercheck is {timers.checkpoint_size} bytes, not "
            f"{timer_fmt.TIMER_CHECKPOINT_SIZE}", severity=WARNING)
    ckpt = timers.checkpoint
    if ckpt is None:
        return
    end = timers.timerlog_end
    if ckpt["last_timer_log_flush_pos"] > end:
        add("TIMER_CKPT", path, 8,
            f"the checkpoint's lastTimerLogFlushPos {ckpt['last_timer_log_flush_pos']} is past "
            f"the TimerLog's last unit (ends at {end})", severity=WARNING)
    if ckpt["last_timer_queue_offset"] < 0 or ckpt["last_read_time_ms"] < 0:
        add("TIMER_CKPT", path, 0, "the checkpoint holds a negative read time or queue offset")


def _check_wheel(store: Store, timers: TimerStore, targets: dict, plan, add) -> None:
    if timers.wheel_refused:
        add("TIMER_WHEEL_SIZE", "timerwheel", 0,
            f"timerwheel is {timers.wheel_size} bytes, not {timer_fmt.TIMERWHEEL_FILE_SIZE} "
            "(2 x 604,800 slots of 32 bytes): the broker refuses to start")
        return
    if not timers.wheel_size and timers.units:
        # checked on as the empty wheel the broker creates: what is lost shows below
        add("TIMER_WHEEL_SIZE", "timerwheel", 0,
            f"timerwheel is {'empty' if timers.wheel_size == 0 else 'missing'}: the broker "
            "starts with an empty wheel")
    slots = timers.wheel
    count = len(slots)
    precision = timer_fmt.DEFAULT_PRECISION_MS
    ckpt = timers.checkpoint
    read_from = ckpt["last_read_time_ms"] if ckpt else 0
    reached: set[int] = set()
    for slot in used_slots(slots):
        index, time_slot, at = slot["slot"], slot["time_slot"], slot["file_offset"]
        if timer_fmt.slot_index(time_slot, count) != index:
            add("TIMER_SLOT_TIME", "timerwheel", at,
                f"slot {index} holds time {time_slot}, which belongs in slot "
                f"{timer_fmt.slot_index(time_slot, count)}")
            continue
        for name in ("last_pos", "first_pos"):
            if slot[name] not in timers.units:
                add("TIMER_SLOT_POINTER", "timerwheel", at,
                    f"slot {index} ({name.replace('_', '')}) points at TimerLog offset "
                    f"{slot[name]}, where no unit is")
                break
        else:
            chain, problem = walk_slot(timers.units, slot)
            reached.update(u["timerlog_offset"] for u in chain)
            strays = [u for u in chain if u["deliver_time_ms"] // precision != time_slot]
            if strays:
                add("TIMER_SLOT_TIME", "timerwheel", at,
                    f"slot {index} (time {time_slot} s) chains {len(strays)} unit(s) due in "
                    f"another second, first at TimerLog offset {strays[0]['timerlog_offset']} "
                    f"due at {strays[0]['deliver_time_ms']} ms", count=len(strays))
            if problem is not None or (chain and chain[-1]["timerlog_offset"] != slot["first_pos"]):
                add("TIMER_SLOT_CHAIN", "timerwheel", at,
                    f"slot {index}: the walk from lastPos {slot['last_pos']} does not end at "
                    f"firstPos {slot['first_pos']}" + (f" ({problem})" if problem else ""),
                    count=len(chain))
            if plan is not None and time_slot * precision >= read_from:
                for unit in chain:
                    target = targets.get(unit["timerlog_offset"])
                    if target is not None and target.end > plan.process_offset:
                        add("TIMER_LOST", unit["file"], unit["file_offset"],
                            f"pending timer due at {unit['deliver_time_ms']} ms: its message at "
                            f"{target.offset} lies past the broker's recovery point "
                            f"{plan.process_offset} and is truncated away",
                            commitlog_offset=target.offset)
    # a pending unit no slot leads to is never delivered, unless the broker's load puts it back
    # on its slot's chain (units written after the wheel's last flush)
    orphans = [u for pos, u in timers.units.items() if pos not in reached
               and u["size"] == UNIT and u["deliver_time_ms"] >= read_from]
    relinked = reached_after_revision(timers) if orphans else set()
    lost = [u for u in orphans if u["timerlog_offset"] not in relinked]
    behind = [u for u in orphans if u["timerlog_offset"] in relinked]
    for code, units, severity, what in (
            ("TIMER_UNREACHABLE", lost, ERROR, "the broker never delivers them"),
            ("TIMER_WHEEL_BEHIND", behind, WARNING, "the broker's load puts them back on their "
             "slots (the wheel was not flushed after they were written)")):
        if units:
            first = min(units, key=lambda u: u["timerlog_offset"])
            add(code, first["file"], first["file_offset"],
                f"{len(units)} pending TimerLog unit(s) are on no wheel slot's chain (first at "
                f"{first['timerlog_offset']}, due at {first['deliver_time_ms']} ms): {what}",
                severity=severity, count=len(units))


def reached_after_revision(timers: TimerStore) -> set[int]:
    """TimerLog offsets on a slot chain once the broker's load has revised the wheel."""
    begin, end = timerlog_recovery(timers)
    reached: set[int] = set()
    for slot in revised_slots(timers, begin, end).values():
        chain, _ = walk_slot(timers.units, slot)
        reached.update(u["timerlog_offset"] for u in chain)
    return reached
