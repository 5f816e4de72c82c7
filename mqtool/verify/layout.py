"""Findings about the store's layout: file names and sizes, geometry, files a broker would not
have written, and the store's geometry as the report states it."""
from __future__ import annotations

from ..errors import ParseError
from ..store import Store
from ..vocabulary import ERROR, INFO, WARNING
from .findings import _Sink, _finding


# --- the whole store -----------------------------------------------------------------------------

def store_geometry(store: Store) -> dict:
    return {
        "commitlog_file_size": store.commitlog.file_size,
        "commitlog_files": len(store.commitlog.segments),
        "commitlog_min_offset": store.commitlog.min_offset,
        "cq_units_per_file": store.cq_units_per_file,
        "consume_queues": len(store.consume_queues),
        "cq_files": sum(len(q.segments) for q in store.consume_queues),
        "index_slots": store.index_slots,
        "index_entries": store.index_entries,
        "index_files": len(store.index_files),
    }


def _layout_findings(store: Store, sink: _Sink, version: str) -> None:
    commitlog = store.commitlog
    size = commitlog.file_size
    segments = commitlog.segments
    for i, seg in enumerate(segments):
        rel = seg.store_path
        if seg.length != size:
            last_empty = i == len(segments) - 1 and seg.length == 0
            sink.add(_finding("CL_FILE_SIZE", rel, 0,
                              f"{seg.length} bytes, but the store's files are {size} bytes"
                              + ("; 5.1.3+ deletes an empty last file on load" if last_empty
                                 and version != "4.9" else "; the broker refuses to load the store"),
                              severity=WARNING if last_empty and version != "4.9" else ERROR))
        if i:
            prev = segments[i - 1]
            if seg.base_offset != prev.base_offset + size:
                delta = seg.base_offset - (prev.base_offset + size)
                sink.add(_finding("CL_GAP", rel, 0,
                                  f"starts at {seg.base_offset}, but the previous file ends at "
                                  f"{prev.base_offset + size}: "
                                  + (f"{delta} bytes missing" if delta > 0 else
                                     f"overlaps by {-delta} bytes"),
                                  commitlog_offset=seg.base_offset))
    strays = [*commitlog.stray_files, *store.index_stray]
    strays += [p for q in store.consume_queues for p in q.stray_files]
    for path in strays:
        sink.add(_finding("CL_STRAY_FILE", store.relative(path), 0,
                          "not named as the broker names its files; the broker ignores it "
                          "(or fails on it)"))
    for part in store.rocksdb:
        sink.add(_finding("ROCKSDB_PRESENT", part.folder + "/", 0,
                          f"{part.phrase}; mqtool reads it through a shadow copy and never "
                          "writes into it", severity=INFO))
    store_state_findings(store, sink)


def store_state_findings(store: Store, sink: _Sink) -> None:
    """The store's own small files as verify judges them (CKPT_MISSING, ABORT_PRESENT,
    LOCK_HELD): part of :func:`_layout_findings`."""
    try:
        ckpt = store.read_checkpoint()
    except ParseError as err:
        sink.add(_finding("CKPT_MISSING", "checkpoint", 0, f"unreadable: {err.detail}",
                          severity=ERROR))
    else:
        if ckpt is None and not store.is_bare_commitlog:
            sink.add(_finding("CKPT_MISSING", "checkpoint", 0,
                              "no checkpoint: the broker starts from a zeroed one, and an "
                              "abnormal recovery from the first file"))
    if store.abort_exists:
        content = store.abort_content()
        sink.add(_finding("ABORT_PRESENT", "abort", 0,
                          "the abort file exists: the last shutdown was abnormal; the next start "
                          "runs abnormal recovery" + (f" (PID {content})" if content else "")))
    if store.lock_held():
        sink.add(_finding("LOCK_HELD", "lock", 0,
                          "a live process holds the lock file: a broker is probably running on "
                          "this store, which may change while it is read"))
