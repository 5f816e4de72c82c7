"""The repair transaction: what a plan is made of (:class:`FileOp`, :class:`RepairPlan`), the stage
folder its new files are computed into (:class:`Stage`), and applying it - backup first, a
journal naming the backup, operations in a fixed order, each idempotent - plus finishing an
interrupted repair, clearing stale stages and refusing a store whose lock a live process holds."""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .. import backup as bk
from ..cores import map_on_cores
from ..errors import MqtoolError, RepairError, StoreLockedError
from ..recovery import RecoveryPlan
from ..store import data_extents
from ..writer import fsync_dir, fsync_path
from .files import _CHUNK, data_bytes


KILL_ENV = "MQTOOL_TEST_KILL_AFTER_STEP"
FULL_DISK_ENV = "MQTOOL_TEST_FULL_DISK_AFTER_STEP"
MAX_LISTED_RANGES = 64

# apply order: CommitLog first (the broker deletes the same files), the abort file last
_ORDER = {("commitlog", "edit"): 1, ("commitlog", "delete"): 2,
          ("consumequeue", "delete"): 3, ("consumequeue", "write"): 4,
          ("batchconsumequeue", "delete"): 3, ("batchconsumequeue", "write"): 4, ("index", "delete"): 5,
          ("index", "write"): 6, ("checkpoint", "write"): 7, ("abort", "delete"): 9}


# --- the plan --------------------------------------------------------------------------------------

@dataclass
class FileOp:
    """One change to one file of the store."""

    op: str                     # write (new content from the stage) | edit (in place) | delete
    path: str                   # relative to the store root, '/'-separated
    kind: str                   # commitlog | consumequeue | index | checkpoint | abort
    old_size: int | None        # None: the file is created
    new_size: int | None        # None: the file is deleted
    ranges: list[list[int]]     # [start, end) byte ranges that change or go away
    reason: str
    start: int | None = None    # edit: bytes [start, end) become zeros, then size new_size
    end: int | None = None
    stage_file: str | None = None
    detail: dict = field(default_factory=dict)

    @property
    def action(self) -> str:
        if self.op == "delete":
            return "delete"
        if self.old_size is None:
            return "create"
        return "change"

    @property
    def bytes_changed(self) -> int:
        return sum(e - s for s, e in self.ranges)

    def to_dict(self) -> dict:
        ranges = self.ranges
        data = {"action": self.action, "op": self.op, "path": self.path, "kind": self.kind,
                "old_size": self.old_size, "new_size": self.new_size,
                "bytes_changed": self.bytes_changed, "reason": self.reason,
                "ranges": ranges[:MAX_LISTED_RANGES]}
        if len(ranges) > MAX_LISTED_RANGES:
            data["ranges_total"] = len(ranges)
        data.update(self.detail)
        return data


@dataclass
class RepairPlan:
    """What a repair command will change; built without touching the store."""

    command: str
    store: Path
    ops: list[FileOp]
    summary: dict
    lost: list[str]
    notes: list[str]
    data_loss: bool
    recovery: RecoveryPlan | None = None
    stage: Path | None = None
    options: dict = field(default_factory=dict)
    passport: dict | None = None   # recover: what wrote the store, before its rules are applied

    @property
    def nothing_to_do(self) -> bool:
        return not self.ops

    def ordered_ops(self) -> list[FileOp]:
        return sorted(self.ops, key=lambda op: (_ORDER.get((op.kind, op.op), 8), op.path))

    def to_dict(self) -> dict:
        data = {"command": self.command, "store": str(self.store), "options": self.options,
                "nothing_to_do": self.nothing_to_do, "data_loss": self.data_loss,
                "summary": self.summary, "lost": self.lost, "notes": self.notes,
                "files": [op.to_dict() for op in self.ordered_ops()]}
        if self.recovery is not None:
            data["recovery"] = self.recovery.to_dict()
        if self.passport is not None:
            data["passport"] = self.passport
        return data


# --- the stage -------------------------------------------------------------------------------------

class Stage:
    """New file contents, next to (never inside) the store's data directories."""

    def __init__(self, store_root: Path, root: Path, for_apply: bool = False):
        self.store_root = Path(store_root)
        self.root = Path(root)
        self.for_apply = for_apply   # False for --dry-run: nothing is prepared for a backup
        self.files = self.root / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self.staged: set[str] = set()
        self.deleted: set[str] = set()

    def path(self, rel: str) -> Path:
        return self.files / rel

    def copy_in(self, rel: str) -> Path:
        """The staged copy of a store file (the original's bytes unless it was deleted)."""
        target = self.path(rel)
        if rel in self.staged:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        source = self.store_root / rel
        if rel not in self.deleted and source.is_file():
            sparse_copy(source, target)
        self.staged.add(rel)
        return target

    def mark_written(self, rel: str) -> None:
        self.staged.add(rel)

    def delete(self, rel: str) -> None:
        self.deleted.add(rel)
        if rel in self.staged:
            self.staged.discard(rel)
            try:
                self.path(rel).unlink()
            except FileNotFoundError:
                pass

    def current(self, rel: str) -> Path | None:
        """Where the file's content is after the changes so far (None: gone)."""
        if rel in self.staged:
            return self.path(rel)
        if rel in self.deleted:
            return None
        source = self.store_root / rel
        return source if source.exists() else None

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def sparse_copy(source: Path, target: Path) -> None:
    """Copy a file leaving its zero blocks as holes: a 6 MB ConsumeQueue file that holds a few
    units costs a few KB to stage and to fsync, not 6 MB."""
    block_size = 1 << 16
    zeros = bytes(block_size)
    with open(source, "rb") as src, open(target, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        # the source's holes are zeros already: only its data extents are read
        for lo, hi in data_extents(src, size):
            pos = lo
            src.seek(lo)
            while pos < hi:
                block = src.read(min(block_size, hi - pos))
                if not block:
                    break
                if block != (zeros if len(block) == block_size else bytes(len(block))):
                    dst.seek(pos)
                    dst.write(block)
                pos += len(block)
        dst.truncate(size)


# --- apply ---------------------------------------------------------------------------------------------

def _kill_point(step) -> None:
    """Test hook: SIGKILL this process after ``step`` ("planned": the stage computed, nothing
    saved yet; -1: backup data saved, manifest not yet written; 0: journal written, nothing
    changed; n: n operations applied; "applied": the repair done, not yet reported)."""
    wanted = os.environ.get(KILL_ENV)
    if wanted is not None and wanted.strip() == str(step):
        os.kill(os.getpid(), signal.SIGKILL)
    # the same for a disk that fills up right after step n (the roll-back path)
    wanted = os.environ.get(FULL_DISK_ENV)
    if wanted is not None and wanted.strip() == str(step):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _op_record(op: FileOp, index: int, store_root: Path, backup_dir: Path | None,
               blob) -> dict:
    """The manifest entry of one operation, with the original bytes saved first."""
    record = {"n": index, "op": op.op, "path": op.path, "kind": op.kind,
              "old_size": op.old_size, "new_size": op.new_size, "reason": op.reason,
              "ranges": op.ranges[:MAX_LISTED_RANGES], "saved": []}
    path = store_root / op.path
    blob_name = f"data/{index}.bin"
    if op.old_size is not None and path.exists():
        record["mode"] = path.stat().st_mode & 0o7777
    if op.op == "write":
        record["stage_file"] = op.stage_file
        staged = Path(op.stage_file)
        if op.old_size is not None and blob is not None:
            # only the ranges that differ are saved and undone (an IndexFile rebuilt under its
            # name differs from the old one in a few MB of its 420)
            record.update(bk.save_changes(path, staged, blob, blob_name))
        else:
            record["digest"] = bk.DIGEST_FORMAT
            record["new_digest"] = bk.content_digest(staged)
    elif op.op == "delete":
        record["digest"] = bk.DIGEST_FORMAT
        if blob is not None:
            record["saved"], _ = bk.save_range(path, 0, op.old_size or 0, blob, blob_name,
                                               hash_range=False)
        record["old_digest"] = bk.content_digest(path)
    if op.op == "edit":
        # bytes [start, end) become zeros, then the file takes new_size
        record.update(start=op.start, end=op.end, digest=bk.DIGEST_FORMAT)
        record["old_file_digest"], record["new_file_digest"] = bk.in_place_content_digests(
            path, op.start, op.end, op.new_size)
        if blob is not None:
            saved, _ = bk.save_range(path, op.start, min(op.end, op.old_size), blob, blob_name)
            if op.new_size < op.old_size:
                tail, _ = bk.save_range(path, max(op.new_size, op.end), op.old_size, blob,
                                        blob_name)
                saved += tail
            record["saved"] = saved
    return record


def _op_data_bytes(op: FileOp, store_root: Path) -> int:
    """What backing up ``op`` reads: the data of the file it changes and of the staged one."""
    staged = Path(op.stage_file) if op.stage_file else None
    return data_bytes(store_root / op.path) + data_bytes(staged)


def _holds_new(path: Path, record: dict) -> bool:
    """Whether a write's target already holds its new content (an interrupted apply)."""
    if record.get("digest") == bk.DIGEST_FORMAT:
        return bk.content_digest(path) == record["new_digest"]
    return bk.sha256_file(path) == record["new_sha256"]


def _fsync_all(paths) -> None:
    """fsync many files or directories at once: their waits overlap (the file system commits
    them together), where one after the other each waits for its own commit."""
    paths = list(dict.fromkeys(paths))
    if len(paths) <= 1:
        for path in paths:
            fsync_path(path)
        return
    with ThreadPoolExecutor(max_workers=min(16, len(paths))) as pool:
        for _ in pool.map(fsync_path, paths):
            pass


def _prepare_staged(record: dict) -> Path | None:
    """A write's staged file with its final mode: the file to make durable before the rename."""
    if record["op"] != "write":
        return None
    staged = Path(record["stage_file"])
    if not staged.exists():
        return None
    if record.get("mode") is not None:
        os.chmod(staged, record["mode"])
    return staged


def _apply_one(store_root: Path, record: dict, dirs: set | None = None,
               staged_durable: bool = False) -> None:
    """One operation; running it again after it completed changes nothing. With ``dirs`` the
    directories to fsync are added to it instead (the caller syncs them all before it calls the
    repair applied); ``staged_durable``: :func:`_prepare_staged` ran and the staged file is
    synced."""
    path = store_root / record["path"]
    op = record["op"]
    if op == "write":
        staged = Path(record["stage_file"])
        if not staged.exists():
            if path.exists() and _holds_new(path, record):
                return
            raise bk.BackupError(f"{staged}: the staged content of {record['path']} is gone and the "
                                 "file does not hold it; undo the backup instead")
        if not staged_durable:
            _prepare_staged(record)
            bk.fsync_file(staged)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(staged, path)
        except OSError as err:
            if err.errno != errno.EXDEV:
                raise
            tmp = path.with_name(f".{path.name}.mqtool-tmp")
            sparse_copy(staged, tmp)   # holes kept, as in the stage
            bk.fsync_file(tmp)
            os.replace(tmp, path)
            staged.unlink()
        _sync_dir(path.parent, dirs)
    elif op == "delete":
        try:
            path.unlink()
        except FileNotFoundError:
            return
        _sync_dir(path.parent, dirs)
    elif op == "edit":
        with open(path, "r+b") as fh:
            size = os.fstat(fh.fileno()).st_size
            pos, end = record["start"], min(record["end"], size)
            while pos < end:
                n = min(_CHUNK, end - pos)
                # zeros over zeros (a hole, an unwritten tail) are skipped: writing them would
                # allocate blocks, and on a full disk fail half-way through the apply
                if os.pread(fh.fileno(), n, pos).count(0) != n:
                    os.pwrite(fh.fileno(), bytes(n), pos)
                pos += n
            if size != record["new_size"]:
                fh.truncate(record["new_size"])
            fh.flush()
            os.fsync(fh.fileno())
    else:
        raise bk.BackupError(f"unknown operation {op!r} in the manifest")


def _sync_dir(directory: Path, dirs: set | None) -> None:
    if dirs is None:
        fsync_dir(directory)
    else:
        dirs.add(directory)


def _dirs_created(store_root: Path, ops: list[FileOp]) -> list[str]:
    created = set()
    for op in ops:
        if op.op != "write":
            continue
        parent = (store_root / op.path).parent
        while not parent.exists() and parent != store_root:
            created.add(parent.relative_to(store_root).as_posix())
            parent = parent.parent
    return sorted(created)


def apply_plan(plan: RepairPlan, *, backup_dir: Path | None, argv: list[str] | None = None,
               progress=None) -> Path | None:
    """Back up, then apply every operation of ``plan`` in order. ``backup_dir=None`` (a repaired
    copy made with --out) skips the backup and the journal."""
    store_root = Path(plan.store)
    ops = plan.ordered_ops()
    manifest = {"format": bk.MANIFEST_FORMAT, "command": plan.command, "argv": argv or [],
                "created": bk.utc_stamp(), "store": str(store_root.resolve()),
                "status": "prepared", "stage": str(plan.stage) if plan.stage else None,
                "data_loss": plan.data_loss, "summary": plan.summary, "lost": plan.lost,
                "dirs_created": _dirs_created(store_root, ops), "ops": []}
    if backup_dir is None:
        for i, op in enumerate(ops, 1):
            manifest["ops"].append(_op_record(op, i, store_root, None, None))
            if progress is not None:
                progress.update(1)
        for record in manifest["ops"]:
            _apply_one(store_root, record)
    else:
        backup_dir = Path(backup_dir)
        if backup_dir.exists() and any(backup_dir.iterdir()):
            raise RepairError(f"{backup_dir}: backup folder exists and is not empty")
        reserve = _back_up(plan, ops, manifest, store_root, backup_dir, progress)
        # directories are synced once all operations are done, before the manifest says
        # "applied": until then a crash leaves the journal, and the next run applies every
        # operation again (each is idempotent)
        dirs: set[Path] = set()
        try:
            for step, record in enumerate(manifest["ops"], 1):
                _apply_one(store_root, record, dirs, staged_durable=True)
                _kill_point(step)
            cleanup = _remove_stage_meanwhile(plan.stage)
            _fsync_all(sorted(dirs))
        except OSError as err:
            reserve.release()
            _roll_back(store_root, backup_dir, err)
            raise
        # the room kept free for the last writes (or for a roll-back) is not needed any more
        reserve.release()
        manifest["status"] = "applied"
        manifest["applied"] = bk.utc_stamp()
        bk.write_json_atomically(backup_dir / bk.MANIFEST, manifest)
        bk.clear_pending(store_root)
        if cleanup is not None:
            cleanup.join()
    if plan.stage is not None:
        shutil.rmtree(plan.stage, ignore_errors=True)
    return backup_dir


def _remove_stage_meanwhile(stage: Path | None) -> threading.Thread | None:
    """Remove the emptied stage in a thread while the last fsyncs wait on the disk."""
    if stage is None:
        return None
    thread = threading.Thread(target=shutil.rmtree, args=(stage,), kwargs={"ignore_errors": True},
                              daemon=True)
    thread.start()
    return thread


def _back_up(plan: RepairPlan, ops: list, manifest: dict, store_root: Path, backup_dir: Path,
             progress) -> bk.SpaceReserve:
    """Save every byte the operations change, write the manifest and the journal. On any error
    (a full disk) nothing of the backup is left behind and the store is untouched."""
    parent_existed = backup_dir.parent.exists()
    reserve = None
    try:
        bk.note_backup_place(store_root, backup_dir)
        (backup_dir / "data").mkdir(parents=True, exist_ok=True)
        to_sync: list[Path] = []

        def record_of(numbered) -> dict:
            i, op = numbered
            with open(backup_dir / f"data/{i}.bin", "wb") as blob:
                return _op_record(op, i, store_root, backup_dir, blob)

        # each operation reads its own files and writes its own blob; the digests (sha256) and
        # reads release the GIL, so the cores share them (an IndexFile and a few dozen queue
        # files: ~0.2 s of CPU on the default-geometry benchmark), the largest files first
        records = map_on_cores(record_of, enumerate(ops, 1), limit=4,
                               cost=lambda numbered: _op_data_bytes(numbered[1], store_root))
        for i, record in enumerate(records, 1):
            if record["saved"]:
                to_sync.append(backup_dir / f"data/{i}.bin")
            else:
                (backup_dir / f"data/{i}.bin").unlink()
            manifest["ops"].append(record)
            if progress is not None:
                progress.update(1)
        # the saved bytes, and the staged files the apply renames into the store, are made
        # durable together before the manifest and the journal exist
        to_sync += filter(None, map(_prepare_staged, manifest["ops"]))
        _fsync_all(to_sync)
        saved = sum(p.stat().st_size for p in (backup_dir / "data").iterdir())
        room = saved + 2 * len(json.dumps(manifest)) + bk.SpaceReserve.SLACK
        reserve = bk.SpaceReserve(backup_dir / ".reserve", room)
        fsync_dir(backup_dir / "data")
        _kill_point(-1)
        bk.write_json_atomically(backup_dir / bk.MANIFEST, manifest)
        fsync_dir(backup_dir.parent)
        bk.write_pending(store_root, backup_dir)
    except BaseException:
        if reserve is not None:
            reserve.release()
        if bk.read_pending(store_root) is None:
            bk.forget_backup_place(store_root, backup_dir)
            shutil.rmtree(backup_dir, ignore_errors=True)
            if not parent_existed:
                shutil.rmtree(backup_dir.parent, ignore_errors=True)
        raise
    _kill_point(0)
    return reserve


def _roll_back(store_root: Path, backup_dir: Path, cause: OSError) -> None:
    """Put back what an apply that failed half-way (a full disk) had changed, then drop its
    backup. When even that fails the journal stays: the next repair command finishes the repair."""
    try:
        bk.undo_backup(backup_dir)
    except (OSError, MqtoolError) as err:
        raise RepairError(f"{store_root}: the repair stopped half-way ({cause.strerror or cause}) "
                          f"and could not be rolled back ({err}); run the same command again "
                          f"to finish it, or mqtool undo {backup_dir}") from None
    shutil.rmtree(backup_dir, ignore_errors=True)
    try:
        backup_dir.parent.rmdir()
    except OSError:
        pass


def resume_pending(store_root: Path) -> dict | None:
    """Finish a repair that was interrupted after its backup was complete. Returns its manifest
    (None when nothing was pending)."""
    pending = bk.read_pending(store_root)
    if pending is None:
        return None
    manifest_path = Path(pending["manifest"])
    manifest = bk.load_manifest(manifest_path.parent)
    manifest["backup_dir"] = str(manifest_path.parent)
    if manifest.get("status") == "applied":
        bk.clear_pending(store_root)
        return manifest
    for record in manifest["ops"]:
        _apply_one(Path(store_root), record)
    manifest["status"] = "applied"
    manifest["applied"] = bk.utc_stamp()
    manifest["resumed"] = True
    bk.write_json_atomically(manifest_path, manifest)
    bk.clear_pending(store_root)
    stage = manifest.get("stage")
    if stage:
        shutil.rmtree(stage, ignore_errors=True)
    manifest["backup_dir"] = str(manifest_path.parent)
    return manifest


def remove_stale_stages(store_root: Path) -> None:
    """Stage folders and manifest-less backup folders left by a repair killed before its backup
    was complete: nothing in the store was changed by them, and no journal refers to them."""
    bk.remove_leftovers(store_root)


def refuse_if_locked(root: Path) -> None:
    store_lock = Path(root) / "lock"
    from ..store import lock_holder
    if store_lock.is_file() and lock_holder(store_lock):
        raise StoreLockedError(f"{root}: a live process (a running broker?) holds the store's "
                               "lock file; stop it before repairing the store")
