"""``dump``: which kind of store file a path is, and the record stream of a whole store or of any
single file, with the options the command takes."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from .. import dledger, timer
from ..errors import MqtoolError, StoreLayoutError, StoreNotFoundError
from ..formats import checkpoint as ckpt_fmt
from ..store import (INDEX_NAME, OFFSET_NAME, ROCKSDB_CQ_DIRS, CommitLog, Segment, Store,
                     identify_file, rocksdb_evidence)
from .messages import BODY_MODES, MessageFilter, iter_commitlog_records
from .queues import _file_base, iter_batch_consume_queue_file, iter_consume_queue_file
from .index import iter_index_file
from .rocksdb_records import iter_rocksdb_cq
from .small_files import checkpoint_dict, config_dict, _read_small, small_file_dict


ROCKSDB_CQ_KIND = "rocksdb-consumequeue"   # a RocksDB ConsumeQueue database folder


# --- dump dispatch -------------------------------------------------------------------------------

@dataclass
class DumpOptions:
    body: str = "base64"
    max_body_bytes: int | None = None
    decompress: bool = True
    resync: bool = False
    messages_only: bool = False
    unwrap: bool = True                # inner batches as their inner messages
    filters: MessageFilter = field(default_factory=MessageFilter)
    follow_slot: int | None = None
    kind: str | None = None            # force the kind of a single file
    commitlog_file_size: int | None = None
    cq_units: int | None = None
    index_slots: int | None = None
    index_entries: int | None = None
    commitlog_dirs: list | None = None  # a multi-path CommitLog's directories (store only)
    progress: object = None            # a tqdm-like bar fed with scanned CommitLog bytes


DUMPABLE_KINDS = ("commitlog", "consumequeue", "batchconsumequeue", "index", "checkpoint",
                  "abort", "lock", "config", "timerlog", "timerwheel", "timercheck",
                  dledger.DLEDGER_INDEX_KIND, dledger.DLEDGER_TEXT_KIND)


def path_kind(path: Path, kind: str | None = None) -> str:
    """``store`` for a directory holding a store (or a bare CommitLog directory), ``queue-dir`` /
    ``index-dir`` for a directory of such files, else the kind of the single file."""
    path = Path(path)
    if not path.exists():
        raise StoreNotFoundError(f"{path}: no such file or directory")
    if path.is_dir():
        parts = path.resolve().parts
        offset_files = any(OFFSET_NAME.match(p.name) for p in path.iterdir() if p.is_file())
        if offset_files and len(parts) >= 3 and parts[-3] in ("consumequeue", "batchconsumequeue"):
            return "queue-dir"
        if path.name == "index" and any(INDEX_NAME.match(p.name) for p in path.iterdir()):
            return "index-dir"
        if path.name in ROCKSDB_CQ_DIRS and rocksdb_evidence(path) is not None:
            return ROCKSDB_CQ_KIND
        return "store"
    if kind:
        if kind not in DUMPABLE_KINDS:
            raise MqtoolError(f"--kind must be one of {', '.join(DUMPABLE_KINDS)}")
        return kind
    return identify_file(path)


def _require_nonempty(path: Path, kind: str) -> None:
    if path.stat().st_size == 0:
        raise StoreLayoutError(f"{path}: empty file (0 bytes): no {kind} data to dump")


def dump_path(path: Path, options: DumpOptions | None = None) -> Iterator[dict]:
    """Records of a store (its CommitLog) or of one store file; see the module docstring."""
    options = options or DumpOptions()
    path = Path(path)
    kind = path_kind(path, options.kind)
    if options.follow_slot is not None and kind not in ("index",):
        raise MqtoolError("--follow-slot applies to a single IndexFile")
    body_args = dict(body_mode=options.body, max_body_bytes=options.max_body_bytes,
                     decompress=options.decompress)
    if options.body not in BODY_MODES:
        raise MqtoolError(f"--body must be one of {', '.join(BODY_MODES)}")
    if kind == "store":
        store = Store(path, commitlog_file_size=options.commitlog_file_size,
                      cq_units_per_file=options.cq_units, index_slots=options.index_slots,
                      index_entries=options.index_entries, commitlog_dirs=options.commitlog_dirs)
        yield from iter_commitlog_records(
            store.commitlog, file_name=lambda seg: store.relative(seg.path),
            filters=options.filters, resync=options.resync, messages_only=options.messages_only,
            unwrap=options.unwrap, progress=options.progress, **body_args)
    elif kind == "queue-dir":
        is_batch = path.resolve().parts[-3] == "batchconsumequeue"
        reader = iter_batch_consume_queue_file if is_batch else iter_consume_queue_file
        for child in sorted(p for p in path.iterdir() if p.is_file() and OFFSET_NAME.match(p.name)):
            yield from reader(child, file=child.name)
    elif kind == ROCKSDB_CQ_KIND:
        from ..rocksdb_cq import load_folder
        yield from iter_rocksdb_cq(load_folder(path))
    elif kind == "index-dir":
        for child in sorted(p for p in path.iterdir() if p.is_file() and INDEX_NAME.match(p.name)):
            yield from iter_index_file(child, file=child.name, slots=options.index_slots,
                                       entries=options.index_entries)
    elif kind == "commitlog":
        _require_nonempty(path, kind)
        base = _file_base(path)
        commitlog = CommitLog(path.parent, options.commitlog_file_size)
        segment = Segment(path, base, path.stat().st_size)
        yield from iter_commitlog_records(
            commitlog, segments=[segment], filters=options.filters, resync=options.resync,
            messages_only=options.messages_only, unwrap=options.unwrap, progress=options.progress,
            **body_args)
    elif kind == "consumequeue":
        _require_nonempty(path, kind)
        yield from iter_consume_queue_file(path)
    elif kind == "batchconsumequeue":
        _require_nonempty(path, kind)
        yield from iter_batch_consume_queue_file(path)
    elif kind == "index":
        _require_nonempty(path, kind)
        yield from iter_index_file(path, slots=options.index_slots, entries=options.index_entries,
                                   follow_slot=options.follow_slot)
    elif kind == "checkpoint":
        _require_nonempty(path, kind)
        record = checkpoint_dict(_read_small(path, ckpt_fmt.CHECKPOINT_SIZE * 2), str(path))
        record["file"] = path.name
        yield record
    elif kind in ("abort", "lock"):
        yield small_file_dict(path, kind)
    elif kind == "config":
        yield config_dict(path)
    elif kind == "timerlog":
        _require_nonempty(path, kind)
        for record in timer.iter_timerlog(path, _file_base(path)):
            yield {"file": path.name, **record}
    elif kind == "timerwheel":
        _require_nonempty(path, kind)
        for record in timer.iter_timerwheel(path):
            yield {"file": path.name, **record}
    elif kind == "timercheck":
        _require_nonempty(path, kind)
        yield {"file": path.name, **timer.timer_checkpoint_dict(path)}
    elif kind in (dledger.DLEDGER_INDEX_KIND, dledger.DLEDGER_TEXT_KIND):
        yield from dledger.dump_file(path, kind)
    else:
        raise StoreLayoutError(f"{path}: dumping {kind} files is not supported")
