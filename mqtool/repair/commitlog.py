"""The CommitLog in a repair: gaps between its files, and the operations a repair makes on it in
place (erase past the recovered end, pad a short file, delete later files)."""
from __future__ import annotations

from ..reput.pipeline import _BLANK_MAGIC
from ..store import Store
from .files import data_end, _rel
from .transaction import FileOp

# DLedger's blank starts with its magic, -1 (the CommitLog's puts the size first)
_DLEDGER_BLANK_MAGIC = b"\xff\xff\xff\xff"


def commitlog_gaps(store: Store) -> list[tuple[int, int]]:
    """[start, end) ranges between CommitLog files that are missing (a deleted middle file)."""
    gaps = []
    size = store.commitlog.file_size
    segments = store.commitlog.segments
    for a, b in zip(segments, segments[1:]):
        if a.base_offset + size < b.base_offset:
            gaps.append((a.base_offset + size, b.base_offset))
    return gaps


# --- CommitLog operations ----------------------------------------------------------------------------

def _commitlog_ops(store: Store, *, cut: int, delete_names: list[str], erase_tail: bool,
                   pad: bool, reason: str) -> list[FileOp]:
    """Delete files past ``cut``; edit the others in place: erase the cut file's bytes past it
    and bring a file of the wrong size to the file size (one ``edit`` per file)."""
    ops = []
    size = store.commitlog.file_size
    where = "the recovered end" if reason == "recover" else "the cut"
    for seg in store.commitlog.segments:
        rel = _rel(store, seg.path)
        if seg.name in delete_names:
            ops.append(FileOp("delete", rel, "commitlog", seg.length, None,
                              [[0, seg.length]] if seg.length else [],
                              f"starts past {where} ({cut:,})"))
            continue
        new_size = size if pad and seg.length != size else seg.length
        why = []
        ranges = []
        if new_size > seg.length:
            why.append(f"padded with zeros to the file size {size:,} (the broker refuses to load "
                       "a short file)")
        elif new_size < seg.length:
            why.append(f"cut to the file size {size:,} (the broker refuses to load a longer "
                       "file)")
        zero_start = zero_end = min(seg.length, new_size)
        if erase_tail and seg.base_offset <= cut < seg.base_offset + max(size, seg.length):
            pos = cut - seg.base_offset
            with open(seg.path, "rb") as fh:
                fh.seek(pos)
                head = fh.read(8)
            blank = (head[:4] == _DLEDGER_BLANK_MAGIC) if seg.is_dledger \
                else head[4:8] == _BLANK_MAGIC
            if len(head) == 8 and blank:
                # the end-of-file blank record marks the end of a full file: it stays
                pos += 8
            end = min(data_end(seg.path, pos), new_size)
            if end > pos:
                zero_start, zero_end = pos, end
                ranges.append([pos, end])
                why.insert(0, f"bytes past {where} ({cut:,}) erased")
        if new_size < seg.length:
            ranges.append([new_size, seg.length])
        if why:
            ops.append(FileOp("edit", rel, "commitlog", seg.length, new_size, ranges,
                              "; ".join(why), start=zero_start, end=zero_end))
    return ops
