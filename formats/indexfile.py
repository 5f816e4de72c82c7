"""IndexFile (Java ``index.IndexFile``, ``IndexHeader``, ``IndexService``).

A file is a 40-byte header, ``slot_count`` 4-byte hash slots, then ``entry_count`` 20-byte
entries. Entry 0 is never written (0 means "empty"), so a full file holds entry_count-1 entries.
``index_file(slot_count, entry_count)`` declares a whole file for a given geometry.
"""
from __future__ import annotations

from construct import Array, Int32sb, Int64sb, Struct

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
DEFAULT_SLOT_COUNT = 5_000_000
DEFAULT_ENTRY_COUNT = 20_000_000

index_header = Struct(
    "begin_timestamp" / Int64sb,
    "end_timestamp" / Int64sb,
    "begin_phy_offset" / Int64sb,
    "end_phy_offset" / Int64sb,
    "hash_slot_count" / Int32sb,
    "index_count" / Int32sb,
)

index_slot = Int32sb

index_entry = Struct(
    "key_hash" / Int32sb,
    "phy_offset" / Int64sb,
    "time_diff" / Int32sb,
    "prev_index" / Int32sb,
)


def index_file(slot_count: int, entry_count: int) -> Struct:
    """A whole IndexFile of the given geometry."""
    return Struct(
        "header" / index_header,
        "slots" / Array(slot_count, index_slot),
        "entries" / Array(entry_count, index_entry),
    )


def index_file_size(slot_count: int, entry_count: int) -> int:
    return INDEX_HEADER_SIZE + HASH_SLOT_SIZE * slot_count + INDEX_ENTRY_SIZE * entry_count


def slot_position(slot: int) -> int:
    return INDEX_HEADER_SIZE + HASH_SLOT_SIZE * slot


def entry_position(slot_count: int, number: int) -> int:
    return INDEX_HEADER_SIZE + HASH_SLOT_SIZE * slot_count + INDEX_ENTRY_SIZE * number


def geometries_for_size(file_size: int) -> list[tuple[int, int]]:
    """Geometries (slots, entries) with entries = 4 x slots (the broker's default ratio) whose file
    size is ``file_size``; the ratio is the only thing that makes the size alone decidable."""
    body = file_size - INDEX_HEADER_SIZE
    # 4*s + 20*(4*s) = 84*s
    if body > 0 and body % 84 == 0:
        return [(body // 84, 4 * (body // 84))]
    return []
