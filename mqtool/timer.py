"""Reading and checking the 5.x timer store: ``timerlog/``, ``timerwheel``, ``config/timercheck``.

The basic checks: every TimerLog unit is 52 bytes with valid magic bits and a prevPos behind
it; it points at a CommitLog record of the size it records; every used TimerWheel slot sits at
the index its time maps to, and its lastPos unit is due in that slot's second."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from .codec import TIMERLOG_BLANK, TIMERLOG_UNIT, numpy_dtype
from .errors import MqtoolError, ParseError
from .formats import commitlog as cl_fmt
from .formats import timer as timer_fmt
from .scan import message_at
from .store import MappedFile, Store, _offset_files, parse_at

WHEEL_DTYPE = numpy_dtype(timer_fmt.timerwheel_slot)
UNIT_FIELDS = tuple(sc.name for sc in timer_fmt.timerlog_unit.subcons)


def timerlog_segments(store: Store):
    return _offset_files(store.root / "timerlog")[0]


def iter_timerlog(path: Path, base: int) -> Iterator[dict]:
    """Units of one TimerLog file until its blank record or the first all-zero unit."""
    with MappedFile(path) as mf:
        data, pos = mf.data, 0
        while pos + timer_fmt.TIMERLOG_BLANK_SIZE <= mf.size:
            remaining, zero, magic = TIMERLOG_BLANK.unpack_from(data, pos)
            if magic == cl_fmt.BLANK_MAGIC_CODE and zero == 0:
                yield {"record_type": "timerlog/blank", "file_offset": pos,
                       "timerlog_offset": base + pos, "remaining": remaining}
                return
            if pos + timer_fmt.TIMERLOG_UNIT_SIZE > mf.size:
                break
            values = TIMERLOG_UNIT.unpack_from(data, pos)
            if not any(values):
                return
            unit = dict(zip(UNIT_FIELDS, values))
            yield {"record_type": "timerlog/unit", "file_offset": pos,
                   "timerlog_offset": base + pos, **unit,
                   "deliver_time_ms": unit["curr_write_time_ms"] + unit["delay_ms"]}
            if unit["size"] != timer_fmt.TIMERLOG_UNIT_SIZE:
                return  # without a trustworthy size the next unit's start is unknown
            pos += timer_fmt.TIMERLOG_UNIT_SIZE


def read_wheel(path: Path) -> np.ndarray:
    with MappedFile(path) as mf:
        count = mf.size // timer_fmt.TIMERWHEEL_SLOT_SIZE
        return np.frombuffer(mf.data, dtype=WHEEL_DTYPE, count=count).copy() if count else \
            np.zeros(0, dtype=WHEEL_DTYPE)


def iter_timerwheel(path: Path) -> Iterator[dict]:
    """The used slots (num > 0) with their index."""
    slots = read_wheel(path)
    for index in np.flatnonzero(slots["num"] > 0).tolist():
        slot = slots[index]
        yield {"record_type": "timerwheel/slot", "slot": index,
               "file_offset": index * timer_fmt.TIMERWHEEL_SLOT_SIZE,
               **{name: int(slot[name]) for name in WHEEL_DTYPE.names}}


def timer_checkpoint_dict(path: Path) -> dict:
    data = Path(path).read_bytes()
    if len(data) < 56:
        raise ParseError(str(path), 0, "", f"timercheck is {len(data)} bytes, expected 4096")
    parsed = parse_at(timer_fmt.timer_checkpoint, data.ljust(timer_fmt.TIMER_CHECKPOINT_SIZE, b"\0")
                      [:timer_fmt.TIMER_CHECKPOINT_SIZE], file=str(path))
    return {"record_type": "timercheck",
            **{sc.name: parsed[sc.name] for sc in timer_fmt.timer_checkpoint.subcons
               if sc.name != "padding"}}


def check_timer_store(store: Store) -> list[dict]:
    """Findings (code, severity, file, offset, message, ...) of the timer store; [] without one."""
    findings = []

    def add(code, file, offset, message, **extra):
        findings.append({"code": code, "severity": "error", "file": file, "offset": offset,
                         "message": message, **extra})

    units: dict[int, dict] = {}
    for seg in timerlog_segments(store):
        rel = store.relative(seg.path)
        for rec in iter_timerlog(seg.path, seg.base_offset):
            if rec["record_type"] != "timerlog/unit":
                continue
            position = rec["timerlog_offset"]
            units[position] = rec
            if rec["size"] != timer_fmt.TIMERLOG_UNIT_SIZE:
                add("TIMER_UNIT_SIZE", rel, rec["file_offset"],
                    f"TimerLog unit at {position} declares size {rec['size']}, not 52")
                continue
            if not timer_fmt.magic_is_valid(rec["magic"]):
                add("TIMER_MAGIC", rel, rec["file_offset"],
                    f"TimerLog unit at {position} has magic {rec['magic']:#x}")
            if rec["prev_pos"] >= position or rec["prev_pos"] < -1:
                add("TIMER_PREV_POS", rel, rec["file_offset"],
                    f"TimerLog unit at {position} links to prevPos {rec['prev_pos']}, not an "
                    "earlier unit")
            try:
                target = message_at(store.commitlog, rec["commitlog_offset"], check_crc=False)
            except MqtoolError:
                add("TIMER_DANGLING", rel, rec["file_offset"],
                    f"TimerLog unit at {position} points at CommitLog offset "
                    f"{rec['commitlog_offset']}, where no record starts",
                    commitlog_offset=rec["commitlog_offset"])
                continue
            if target.total_size != rec["commitlog_size"]:
                add("TIMER_DANGLING", rel, rec["file_offset"],
                    f"TimerLog unit at {position} records size {rec['commitlog_size']} for the "
                    f"{target.total_size}-byte record at {rec['commitlog_offset']}",
                    commitlog_offset=rec["commitlog_offset"])
    wheel = store.root / "timerwheel"
    if wheel.is_file():
        slots = read_wheel(wheel)
        count = len(slots)
        for rec in iter_timerwheel(wheel):
            index, time_slot = rec["slot"], rec["time_slot"]
            if count and timer_fmt.slot_index(time_slot, count) != index:
                add("TIMER_SLOT_TIME", "timerwheel", rec["file_offset"],
                    f"slot {index} holds time {time_slot}, which belongs in slot "
                    f"{timer_fmt.slot_index(time_slot, count)}")
            last = units.get(rec["last_pos"])
            if last is None:
                add("TIMER_SLOT_POINTER", "timerwheel", rec["file_offset"],
                    f"slot {index} points at TimerLog offset {rec['last_pos']}, where no unit is")
            elif last["deliver_time_ms"] // timer_fmt.DEFAULT_PRECISION_MS != time_slot:
                add("TIMER_SLOT_TIME", "timerwheel", rec["file_offset"],
                    f"slot {index} (time {time_slot}) points at a unit due at "
                    f"{last['deliver_time_ms']} ms")
    return findings
