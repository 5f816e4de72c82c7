"""The 5.x timer store: TimerLog units, the TimerWheel and the timer checkpoint."""
from __future__ import annotations

from pathlib import Path

from ..codec import TIMERLOG_BLANK, TIMERLOG_UNIT, TIMERWHEEL_SLOT
from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..formats import timer as timer_fmt
from .commitlog import CommitLogWriter


class TimerWriter:
    """The 5.x timer store as TimerMessageStore writes it: a 52-byte TimerLog unit per timer
    message (a 16-byte blank closes a file a unit no longer fits in) and the TimerWheel slot of
    its delivery second pointing at the newest unit, each unit linking to the slot's previous
    one through prevPos."""

    def __init__(self, root: Path, *, timerlog_file_size: int = timer_fmt.DEFAULT_TIMERLOG_FILE_SIZE,
                 slots_total: int = timer_fmt.DEFAULT_SLOTS_TOTAL,
                 precision_ms: int = timer_fmt.DEFAULT_PRECISION_MS):
        self.root = Path(root)
        self.precision_ms = precision_ms
        self.slot_count = 2 * slots_total
        self.timerlog = CommitLogWriter(self.root / "timerlog", timerlog_file_size)
        self.wheel = bytearray(self.slot_count * timer_fmt.TIMERWHEEL_SLOT_SIZE)

    def enqueue(self, commitlog_offset: int, size: int, deliver_ms: int, write_ms: int,
                real_topic: str, magic: int = timer_fmt.MAGIC_DEFAULT) -> int:
        """Append one unit; returns its TimerLog offset."""
        unit_size = timer_fmt.TIMERLOG_UNIT_SIZE
        log = self.timerlog
        remaining = log.file_size - log.offset % log.file_size
        if unit_size + timer_fmt.TIMERLOG_BLANK_SIZE > remaining:
            log.write(log.offset, TIMERLOG_BLANK.pack(remaining, 0, cl_fmt.BLANK_MAGIC_CODE))
            log.offset += remaining - timer_fmt.TIMERLOG_BLANK_SIZE
        time_slot = deliver_ms // self.precision_ms
        slot_pos = timer_fmt.slot_index(time_slot, self.slot_count) * timer_fmt.TIMERWHEEL_SLOT_SIZE
        stored_time, first_pos, last_pos, num, _ = TIMERWHEEL_SLOT.unpack_from(self.wheel, slot_pos)
        if stored_time != time_slot or num <= 0:
            first_pos, last_pos, num = -1, -1, 0
        position = log.offset
        log.write(position, TIMERLOG_UNIT.pack(
            unit_size, last_pos, magic, write_ms, deliver_ms - write_ms, commitlog_offset, size,
            codecs.java_string_hash(real_topic), 0))
        TIMERWHEEL_SLOT.pack_into(self.wheel, slot_pos, time_slot,
                                  position if first_pos < 0 else first_pos, position, num + 1, 0)
        return position

    def close(self, *, last_read_time_ms: int = 0, last_timer_queue_offset: int = 0) -> None:
        self.timerlog.close()
        (self.root / "timerwheel").write_bytes(bytes(self.wheel))
        (self.root / "config").mkdir(parents=True, exist_ok=True)
        (self.root / "config" / "timercheck").write_bytes(timer_fmt.timer_checkpoint.build(dict(
            last_read_time_ms=last_read_time_ms, last_timer_log_flush_pos=self.timerlog.offset,
            last_timer_queue_offset=last_timer_queue_offset, master_timer_queue_offset=0,
            state_version=0, data_version_timestamp=0, data_version_counter=0,
            padding=b"\0" * (timer_fmt.TIMER_CHECKPOINT_SIZE - 56))))
