"""IndexFiles as records: geometry, the header, hash slots and entries (with their chains), decoded
with numpy dtypes derived from the declarations."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from .. import codec
from ..errors import MqtoolError, ParseError
from ..formats import indexfile as idx_fmt
from ..store import MappedFile, parse_at
from .records import RT_INDEX_ENTRY, RT_INDEX_HEADER, RT_INDEX_NOTE, RT_INDEX_SLOT, ms_to_iso


INDEX_ENTRY_DTYPE, INDEX_SLOT_DTYPE = codec.INDEX_ENTRY_DTYPE, codec.INDEX_SLOT_DTYPE


assert INDEX_ENTRY_DTYPE.itemsize == idx_fmt.INDEX_ENTRY_SIZE


# --- index files ---------------------------------------------------------------------------------

def index_geometry(file_size: int, slots: int | None = None,
                   entries: int | None = None) -> tuple[int, int]:
    """(slots, entries) of an IndexFile: the given values, or derived from its size."""
    body = file_size - idx_fmt.INDEX_HEADER_SIZE
    slot_size, entry_size = idx_fmt.HASH_SLOT_SIZE, idx_fmt.INDEX_ENTRY_SIZE
    if slots and entries:
        return slots, entries
    if slots:
        return slots, max(0, (body - slot_size * slots) // entry_size)
    if entries:
        return max(0, (body - entry_size * entries) // slot_size), entries
    guesses = idx_fmt.geometries_for_size(file_size)
    if guesses:
        return guesses[0]
    defaults = (idx_fmt.DEFAULT_SLOT_COUNT, idx_fmt.DEFAULT_ENTRY_COUNT)
    if file_size == idx_fmt.index_file_size(*defaults):
        return defaults
    raise MqtoolError(f"cannot infer the IndexFile geometry from its size ({file_size} bytes); "
                      f"pass --index-slots and --index-entries")


def read_index_header(data, name: str) -> dict:
    if len(data) < idx_fmt.INDEX_HEADER_SIZE:
        raise ParseError(name, 0, "", f"IndexFile is {len(data)} bytes, shorter than its "
                                      f"{idx_fmt.INDEX_HEADER_SIZE}-byte header")
    parsed = parse_at(idx_fmt.index_header, data[:idx_fmt.INDEX_HEADER_SIZE], file=name)
    return {k: v for k, v in parsed.items() if not k.startswith("_")}


def index_header_dict(header: dict, *, file: str, file_size: int, slots: int,
                      entries: int) -> dict:
    expected = idx_fmt.index_file_size(slots, entries)
    return {"record_type": RT_INDEX_HEADER, "file": file, "file_size": file_size,
            "begin_timestamp": header["begin_timestamp"],
            "begin_time": ms_to_iso(header["begin_timestamp"]),
            "end_timestamp": header["end_timestamp"],
            "end_time": ms_to_iso(header["end_timestamp"]),
            "begin_phy_offset": header["begin_phy_offset"],
            "end_phy_offset": header["end_phy_offset"],
            "hash_slot_count": header["hash_slot_count"], "index_count": header["index_count"],
            "entries_used": max(0, header["index_count"] - 1),
            "slot_count": slots, "entry_count": entries, "expected_size": expected,
            "size_ok": file_size == expected}


def iter_index_file(path: Path, *, file: str | None = None, slots: int | None = None,
                    entries: int | None = None, follow_slot: int | None = None) -> Iterator[dict]:
    """The header, the used hash slots, then entries 1..indexCount-1 of an IndexFile.

    With ``follow_slot`` only that slot's chain is walked (newest entry first, via prev_index);
    the walk stops with an ``index/note`` at a loop or a pointer past indexCount / the file."""
    path = Path(path)
    file = file or path.name
    with MappedFile(path) as mapped:
        data = mapped.data
        size = mapped.size
        header = read_index_header(data, str(path))
        slots, entries = index_geometry(size, slots, entries)
        yield index_header_dict(header, file=file, file_size=size, slots=slots, entries=entries)
        index_count = header["index_count"]
        begin_ts = header["begin_timestamp"]
        slot_area = idx_fmt.INDEX_HEADER_SIZE
        readable_slots = max(0, min(slots, (size - slot_area) // idx_fmt.HASH_SLOT_SIZE))
        slot_values = np.frombuffer(data, dtype=INDEX_SLOT_DTYPE, count=readable_slots,
                                    offset=slot_area) if readable_slots else np.zeros(0, ">i4")
        entry_area = idx_fmt.entry_position(slots, 0)
        readable_entries = max(0, min(entries, (size - entry_area) // idx_fmt.INDEX_ENTRY_SIZE))

        def note(text: str, **extra) -> dict:
            return {"record_type": RT_INDEX_NOTE, "file": file, "note": text, **extra}

        def entry(number: int, **extra) -> dict:
            pos = idx_fmt.entry_position(slots, number)
            key_hash, phy_offset, time_diff, prev_index = np.frombuffer(
                data, dtype=INDEX_ENTRY_DTYPE, count=1, offset=pos).tolist()[0]
            return {"record_type": RT_INDEX_ENTRY, "file": file, "number": number,
                    "file_offset": pos, "key_hash": key_hash, "slot": key_hash % slots,
                    "phy_offset": phy_offset, "time_diff": time_diff,
                    "timestamp": begin_ts + time_diff * 1000,
                    "time": ms_to_iso(begin_ts + time_diff * 1000), "prev_index": prev_index,
                    **extra}

        if readable_slots < slots:
            yield note(f"the file holds {readable_slots} of {slots} hash slots and no entries: "
                       f"it is {size} bytes, {idx_fmt.index_file_size(slots, entries)} expected")
        if follow_slot is not None:
            if not 0 <= follow_slot < slots:
                raise MqtoolError(f"--follow-slot {follow_slot} is outside 0..{slots - 1}")
            if follow_slot >= readable_slots:
                return
            number = int(slot_values[follow_slot])
            yield {"record_type": RT_INDEX_SLOT, "file": file, "slot": follow_slot,
                   "file_offset": idx_fmt.slot_position(follow_slot), "entry": number,
                   "valid": 0 < number < index_count}
            seen: set[int] = set()
            position = 0
            while number > 0:
                if number >= index_count:
                    yield note(f"entry {number} is past indexCount {index_count}: chain walk "
                               f"stopped", entry=number)
                    return
                if number >= readable_entries:
                    yield note(f"entry {number} is past the end of the file: chain walk stopped",
                               entry=number)
                    return
                if number in seen:
                    yield note(f"entry {number} was already visited (a loop): chain walk stopped",
                               entry=number)
                    return
                seen.add(number)
                record = entry(number, chain_position=position)
                yield record
                number = record["prev_index"]
                position += 1
            if number < 0:
                yield note(f"prev_index {number} is negative: chain walk stopped", entry=number)
            return

        for slot in np.flatnonzero(slot_values).tolist():
            value = int(slot_values[slot])
            yield {"record_type": RT_INDEX_SLOT, "file": file, "slot": slot,
                   "file_offset": idx_fmt.slot_position(slot), "entry": value,
                   "valid": 0 < value < index_count}
        last = index_count - 1
        if last > entries - 1:
            yield note(f"indexCount {index_count} exceeds the {entries} entries of the file; "
                       f"listing the first {entries - 1}")
            last = entries - 1
        if last > readable_entries - 1:
            if readable_entries:
                yield note(f"the file ends after entry {readable_entries - 1}; indexCount says "
                           f"{index_count}")
            last = readable_entries - 1
        for number in range(1, last + 1):
            yield entry(number)
