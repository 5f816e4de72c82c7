"""5.x timer store (Java ``timer.TimerLog``, ``TimerWheel``, ``TimerCheckpoint``).

* ``timerlog_unit`` - 52 bytes per timer message in ``timerlog/<20-digit offset>`` files;
* ``timerlog_blank`` - the 16-byte end-of-file filler (remaining, 0L, BLANK_MAGIC_CODE);
* ``timerwheel_slot`` - 32 bytes; the wheel holds 2 x slotsTotal slots;
* ``timer_checkpoint`` - ``config/timercheck``, one 4 KiB page of longs.
"""
from __future__ import annotations

from construct import Bytes, Const, Int32sb, Int32ub, Int64sb, Struct

from .commitlog import BLANK_MAGIC_CODE

TIMERLOG_UNIT_SIZE = 52
TIMERLOG_BLANK_SIZE = 16
TIMERWHEEL_SLOT_SIZE = 32
DEFAULT_TIMERLOG_FILE_SIZE = 100 * 1024 * 1024
DEFAULT_SLOTS_TOTAL = 7 * 86400
DEFAULT_PRECISION_MS = 1000
# the wheel always holds 2 x 7 days of slots, whatever the precision; any other non-zero length
# makes the broker refuse to start
TIMERWHEEL_FILE_SIZE = 2 * DEFAULT_SLOTS_TOTAL * TIMERWHEEL_SLOT_SIZE
# on start the read time is raised to (now - slotsTotal + TIMER_BLANK_SLOTS slots): older slots
# are never read again
TIMER_BLANK_SLOTS = 60
TIMER_CHECKPOINT_SIZE = 4096
TIMER_TOPIC = "rmq_sys_wheel_timer"

# properties of a timer message (the original in TIMER_TOPIC, and the delivered copy)
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_TIMER_OUT_MS = "TIMER_OUT_MS"            # the due time, floored to the precision
PROP_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"    # the time the client asked for
PROP_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROP_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROP_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"    # set on the delivered copy
PROP_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"    # set on the delivered copy
PROP_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"  # a cancellation: the UNIQ_KEY it cancels
PROP_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"

# TimerLog unit magic bits
MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2
MAGIC_BITS = MAGIC_DEFAULT | MAGIC_ROLL | MAGIC_DELETE

timerlog_unit = Struct(
    "size" / Int32sb,
    "prev_pos" / Int64sb,
    "magic" / Int32sb,
    "curr_write_time_ms" / Int64sb,
    "delay_ms" / Int32sb,
    "commitlog_offset" / Int64sb,
    "commitlog_size" / Int32sb,
    "real_topic_hash" / Int32sb,
    "reserved" / Int64sb,
)

timerlog_blank = Struct(
    "remaining" / Int32sb,
    "zero" / Int64sb,
    "magic_code" / Const(BLANK_MAGIC_CODE, Int32ub),
)

timerwheel_slot = Struct(
    "time_slot" / Int64sb,   # delivery time / precision
    "first_pos" / Int64sb,
    "last_pos" / Int64sb,
    "num" / Int32sb,
    "magic" / Int32sb,
)

timer_checkpoint = Struct(
    "last_read_time_ms" / Int64sb,
    "last_timer_log_flush_pos" / Int64sb,
    "last_timer_queue_offset" / Int64sb,
    "master_timer_queue_offset" / Int64sb,
    "state_version" / Int64sb,
    "data_version_timestamp" / Int64sb,
    "data_version_counter" / Int64sb,
    "padding" / Bytes(TIMER_CHECKPOINT_SIZE - 56),
)


def slot_index(time_slot: int, slot_count: int) -> int:
    """TimerWheel: the slot holding time T/precision is (T/precision) % (2 x slotsTotal)."""
    return time_slot % slot_count


def magic_is_valid(magic: int) -> bool:
    """What the broker writes: DEFAULT, optionally with ROLL and/or DELETE."""
    return magic & MAGIC_BITS == magic and magic & MAGIC_DEFAULT == MAGIC_DEFAULT


def magic_passes_recovery(magic: int) -> bool:
    """TimerMessageStore.isMagicOK: recovery only asks that no bit above the low four is set."""
    return magic | 0xF == 0xF
