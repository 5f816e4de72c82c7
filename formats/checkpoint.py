"""StoreCheckpoint (Java ``StoreCheckpoint``): one 4 KiB page, big-endian longs.

4.x writes three timestamps; 5.0+ adds masterFlushedOffset @24 and 5.1.1+ confirmPhyOffset @32.
The rest of the page is zero.
"""
from __future__ import annotations

from construct import Bytes, Int64sb, Struct

CHECKPOINT_SIZE = 4096

checkpoint = Struct(
    "physic_msg_timestamp" / Int64sb,
    "logics_msg_timestamp" / Int64sb,
    "index_msg_timestamp" / Int64sb,
    "master_flushed_offset" / Int64sb,
    "confirm_phy_offset" / Int64sb,
    "padding" / Bytes(CHECKPOINT_SIZE - 40),
)


def min_timestamp(physic: int, logics: int) -> int:
    """StoreCheckpoint.getMinTimestamp: min(physic, logics) - 3 s, floored at 0."""
    return max(0, min(physic, logics) - 3000)


def min_timestamp_index(physic: int, logics: int, index: int) -> int:
    """StoreCheckpoint.getMinTimestampIndex."""
    return min(min_timestamp(physic, logics), index)
