"""Backups of what a repair changes, the journal that makes a repair resumable, and ``undo``.

A repair (:mod:`mqtool.repair`) never changes a byte before every byte it will change or remove
is copied into a backup folder (default ``STORE/.mqtool-backup/<UTC timestamp>/``)::

    manifest.json      what each operation does, digests of the files before and after (sha256
                       of their non-zero 1 MiB blocks, DIGEST_FORMAT), where the saved bytes are
    data/<n>.bin       the original bytes of operation n (runs of zeros are not stored, only noted;
                       a file replaced under its name keeps only the ranges that change)

The broker never looks at the backup folder (it loads ``commitlog/``, ``consumequeue/<topic>/<int>/``
and ``index/`` only) and neither does :class:`mqtool.store.Store` (names starting with a dot).

While the operations run, ``STORE/.mqtool-pending.json`` names the manifest. A repair killed half
way leaves it behind; the next mutating command finishes the listed operations first (each one is
idempotent), and ``undo`` of that backup puts every file back whether or not its operation ran.

A repair killed earlier leaves a stage folder (``STORE/.mqtool-stage-<ts>/``) and perhaps a
backup folder without ``manifest.json``: the store itself is unchanged (the journal is written
after the manifest, and nothing is changed before the journal). :func:`repair_leftovers` names
them (``info`` and ``verify`` report them), the next repair or ``undo`` removes them.

The manifest keeps the repair's loss report (``data_loss``, ``lost``, ``summary``); the command
line marks a backup ``reported`` (an empty file beside the manifest) once it has printed that
report, so a repair killed between its last change and its report is reported by the next run
(:func:`unreported_backup`) and ``undo --list`` shows it.

A backup written elsewhere (``--backup-dir``) is named by a note in the store's backup folder
(``<ts>.where.json``) and names its store in ``store.json``, written before anything else: a
repair killed while saving there is found and finished like one in the default place.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from . import jsontext
from .errors import MqtoolError, StoreLayoutError
from .store import data_extents, holds_store_parts, store_below
from .vocabulary import BACKUP_DIR, BACKUP_MANIFEST, STAGE_PREFIX  # noqa: F401
from .writer import fsync_dir, fsync_path

MANIFEST = BACKUP_MANIFEST
REPORTED = "reported"
MANIFEST_FORMAT = "mqtool-backup/1"
PENDING = ".mqtool-pending.json"
WHERE_SUFFIX = ".where.json"
STORE_NOTE = "store.json"
CHUNK = 1 << 20
_ZEROS = bytes(CHUNK)


class BackupError(MqtoolError):
    """A backup folder that cannot be used (missing, incomplete, or the store moved on)."""


def utc_stamp(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S.%fZ")


def sha256_file(path: Path, start: int = 0, end: int | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        fh.seek(start)
        remaining = None if end is None else max(0, end - start)
        while remaining is None or remaining > 0:
            block = fh.read(CHUNK if remaining is None else min(CHUNK, remaining))
            if not block:
                break
            digest.update(block)
            if remaining is not None:
                remaining -= len(block)
    return digest.hexdigest()


def in_place_digests(path: Path, start: int, end: int, new_size: int) -> tuple[str, str]:
    """sha256 of a whole file before and after an in-place change, in one read: bytes [start,
    end) become zeros and the file is then cut or padded to ``new_size``."""
    before, after = hashlib.sha256(), hashlib.sha256()
    pos = 0
    with open(path, "rb") as fh:
        while True:
            block = fh.read(CHUNK)
            if not block:
                break
            before.update(block)
            if pos < new_size:
                part = block[:new_size - pos]
                lo, hi = max(start - pos, 0), min(end - pos, len(part))
                if lo < hi:
                    part = part[:lo] + bytes(hi - lo) + part[hi:]
                after.update(part)
            pos += len(block)
    while pos < new_size:
        n = min(CHUNK, new_size - pos)
        after.update(_ZEROS if n == CHUNK else bytes(n))
        pos += n
    return before.hexdigest(), after.hexdigest()


# --- digests of file contents, reading only what the file system holds -----------------------------
#
# A repair's files are mostly holes: a 420 MB IndexFile holds ~45 MB of data, a preallocated
# CommitLog file none. A sha256 of every byte costs ~0.35 s for the IndexFile alone; this digest
# reads the data extents only and is still a function of the content alone (a hole and written
# zeros give the same value): sha256 over (offset, bytes) of every 1 MiB block holding a
# non-zero byte, then the size. Manifests name it in their "digest" field.

DIGEST_FORMAT = "sha256-sparse/1"
DIGEST_BLOCK = 1 << 20
_PATCH_PAGE = 1 << 16          # granularity of the changed ranges a patch backup records


def _blocks(extents: list[tuple[int, int]], limit: int):
    """Starts of the DIGEST_BLOCK-aligned blocks below ``limit`` that meet an extent, ascending."""
    last = -DIGEST_BLOCK
    for lo, hi in extents:
        first = max(lo - lo % DIGEST_BLOCK, last + DIGEST_BLOCK)
        for block in range(first, min(hi, limit), DIGEST_BLOCK):
            yield block
            last = block


_ZERO_BLOCK = bytes(DIGEST_BLOCK)


def _all_zeros(block: bytes) -> bool:
    # a compare with a zero block is a memcmp, many times faster than counting the zeros
    if len(block) == DIGEST_BLOCK:
        return block == _ZERO_BLOCK
    return block.count(0) == len(block)


def _read_block(fd: int, pos: int, length: int) -> bytes:
    """``length`` bytes at ``pos``, zeros past the end of the file."""
    data = os.pread(fd, length, pos)
    while 0 < len(data) < length:
        more = os.pread(fd, length - len(data), pos + len(data))
        if not more:
            break
        data += more
    return data if len(data) == length else data + bytes(length - len(data))


class _ContentDigest:
    """The DIGEST_FORMAT digest, fed block by block in ascending order."""

    def __init__(self, size: int):
        self.size = size
        self.hash = hashlib.sha256()

    def update(self, pos: int, block: bytes) -> None:
        if pos >= self.size:
            return
        block = block[:self.size - pos]
        if not _all_zeros(block):
            self.hash.update(pos.to_bytes(8, "big"))
            self.hash.update(block)

    def hexdigest(self) -> str:
        self.hash.update(b"size" + self.size.to_bytes(8, "big"))
        return self.hash.hexdigest()


def content_digest(path: Path) -> str:
    """The DIGEST_FORMAT digest of a file."""
    return in_place_content_digests(path, 0, 0, None)[0]


def in_place_content_digests(path: Path, start: int, end: int,
                             new_size: int | None) -> tuple[str, str]:
    """Digests (DIGEST_FORMAT) of a file before and after an in-place change, in one read of its
    data extents: bytes [start, end) become zeros and the file is then cut or padded to
    ``new_size`` (None: unchanged)."""
    with open(path, "rb") as fh:
        fd = fh.fileno()
        size = os.fstat(fd).st_size
        new_size = size if new_size is None else new_size
        before, after = _ContentDigest(size), _ContentDigest(new_size)
        for pos in _blocks(data_extents(fh, size), size):
            # a file padded past its end takes zeros into its last block
            block = _read_block(fd, pos, min(DIGEST_BLOCK, max(size, new_size) - pos))
            before.update(pos, block)
            lo, hi = max(start - pos, 0), min(end - pos, len(block))
            if lo < hi:
                block = block[:lo] + bytes(hi - lo) + block[hi:]
            after.update(pos, block)
    return before.hexdigest(), after.hexdigest()


def save_changes(old: Path, new: Path, blob, blob_path: str) -> dict:
    """Back up what replacing file ``old`` by file ``new`` changes: the [lo, hi) ranges where
    they differ (64 KiB pages; a file's missing tail counts as zeros), the old bytes of those
    ranges saved into ``blob`` (runs of zeros only noted), and both files' digests - all in one
    read of the two files' data extents. Undo zeros the ranges in the new file and writes the
    saved bytes back (:func:`restore_changes`)."""
    with open(old, "rb") as fo, open(new, "rb") as fn:
        old_size, new_size = os.fstat(fo.fileno()).st_size, os.fstat(fn.fileno()).st_size
        reach = max(old_size, new_size)
        extents = sorted(data_extents(fo, old_size) + data_extents(fn, new_size))
        old_digest, new_digest = _ContentDigest(old_size), _ContentDigest(new_size)
        changed: list[list[int]] = []
        for pos in _blocks(extents, reach):
            n = min(DIGEST_BLOCK, reach - pos)
            a = _read_block(fo.fileno(), pos, n) if pos < old_size else bytes(n)
            b = _read_block(fn.fileno(), pos, n) if pos < new_size else bytes(n)
            old_digest.update(pos, a)
            new_digest.update(pos, b)
            if a == b:
                continue
            for page in range(0, n, _PATCH_PAGE):
                if a[page:page + _PATCH_PAGE] != b[page:page + _PATCH_PAGE]:
                    lo, hi = pos + page, pos + min(n, page + _PATCH_PAGE)
                    if changed and changed[-1][1] == lo:
                        changed[-1][1] = hi
                    else:
                        changed.append([lo, hi])
    saved: list[dict] = []
    for lo, hi in changed:
        if lo < old_size:
            segments, _ = save_range(old, lo, min(hi, old_size), blob, blob_path,
                                     hash_range=False)
            saved += segments
    return {"digest": DIGEST_FORMAT, "old_digest": old_digest.hexdigest(),
            "new_digest": new_digest.hexdigest(), "changed": changed, "saved": saved}


def restore_changes(target: Path, size: int, changed: list, segments: list[dict],
                    backup_dir: Path) -> None:
    """Undo a :func:`save_changes` backup in place: the old size, zeros over the changed ranges,
    then the saved bytes. Exact when the file is the new one (undo checks its digest first)."""
    with open(target, "r+b") as fh:
        fd = fh.fileno()
        current = os.fstat(fd).st_size
        if current != size:
            fh.truncate(min(current, size))
            fh.truncate(size)
        for lo, hi in changed:
            pos, hi = lo, min(hi, size)
            while pos < hi:
                n = min(CHUNK, hi - pos)
                if os.pread(fd, n, pos).count(0) != n:
                    os.pwrite(fd, _ZEROS if n == CHUNK else bytes(n), pos)
                pos += n
        _write_segments(fh, segments, backup_dir)
        fh.flush()
        os.fsync(fd)


fsync_file = fsync_path


def write_json_atomically(path: Path, document) -> None:
    """The manifest and the journal go through temp file + fsync + rename + fsync of the dir."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        # paths that are not UTF-8 are kept reversibly (mqtool.jsontext)
        fh.write(jsontext.dumps(document, indent=1))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def save_range(src: Path, start: int, end: int, blob, blob_path: str,
               known_sha256: str | None = None, *, hash_range: bool = True
               ) -> tuple[list[dict], str | None]:
    """Copy bytes [start, end) of ``src`` into the open ``blob``; runs of zeros (1 MiB aligned
    blocks) are only noted, since a restored file starts as zeros. Returns the saved segments and
    the sha256 of the whole range (``known_sha256`` when the caller already has it; None with
    ``hash_range=False``, which reads the file's data extents only)."""
    digest = hashlib.sha256() if known_sha256 is None and hash_range else None
    segments: list[dict] = []
    with open(src, "rb") as fh:
        fh.seek(start)
        pos = start
        # holes are zeros: with the digest known, only the data extents are read
        extents = None if digest is not None else data_extents(fh, os.fstat(fh.fileno()).st_size,
                                                               start, end)
        at_extent = 0
        while pos < end:
            if extents is not None:
                while at_extent < len(extents) and extents[at_extent][1] <= pos:
                    at_extent += 1
                if at_extent == len(extents):
                    break
                if pos < extents[at_extent][0]:
                    pos = extents[at_extent][0]
                    fh.seek(pos)
            block = fh.read(min(CHUNK, end - pos))
            if not block:
                break
            if digest is not None:
                digest.update(block)
            # compare with the prebuilt block: slicing _ZEROS would copy a MiB every time
            if block != (_ZEROS if len(block) == CHUNK else bytes(len(block))):
                stripped = block.rstrip(b"\0")
                lead = len(stripped) - len(stripped.lstrip(b"\0"))
                data = stripped[lead:]
                at = pos + lead
                if segments and segments[-1]["offset"] + segments[-1]["length"] == at:
                    segments[-1]["length"] += len(data)
                else:
                    segments.append({"offset": at, "length": len(data), "blob": blob_path,
                                     "blob_offset": blob.tell()})
                blob.write(data)
            pos += len(block)
    return segments, digest.hexdigest() if digest is not None else known_sha256


def _write_segments(fh, segments: list[dict], backup_dir: Path) -> None:
    for seg in segments:
        with open(backup_dir / seg["blob"], "rb") as blob:
            blob.seek(seg["blob_offset"])
            remaining = seg["length"]
            fh.seek(seg["offset"])
            while remaining:
                block = blob.read(min(CHUNK, remaining))
                if not block:
                    raise BackupError(f"{backup_dir / seg['blob']}: shorter than the manifest says")
                fh.write(block)
                remaining -= len(block)


class SpaceReserve:
    """Disk space set aside (``posix_fallocate``) before the first change, so that the journal
    and manifest writes after it - or a roll-back - cannot be the ones that find the disk full."""

    SLACK = 64 * 1024

    def __init__(self, path: Path, size: int):
        self.path = path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as err:
                if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    self.release()
                    raise
        finally:
            os.close(fd)

    def release(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def restore_file(target: Path, size: int, segments: list[dict], backup_dir: Path) -> None:
    """Recreate ``target`` byte-exact from saved segments: temp file, fsync, rename, fsync dir."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.mqtool-undo")
    try:
        with open(tmp, "w+b") as fh:
            fh.truncate(size)
            _write_segments(fh, segments, backup_dir)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def restore_in_place(target: Path, size: int, segments: list[dict], backup_dir: Path,
                     start: int, end: int) -> None:
    """Put back a big file the repair edited in place: its old size (a cut tail comes back as
    zeros), zeros over [start, end), then the saved non-zero runs."""
    with open(target, "r+b") as fh:
        fh.seek(0, os.SEEK_END)
        current = fh.tell()
        if current != size:
            fh.truncate(min(current, size))
            fh.truncate(size)
        pos = start
        while pos < min(end, size):
            n = min(CHUNK, min(end, size) - pos)
            # zeros over zeros (a hole) are skipped: writing them would allocate blocks
            if os.pread(fh.fileno(), n, pos).count(0) != n:
                os.pwrite(fh.fileno(), _ZEROS if n == CHUNK else bytes(n), pos)
            pos += n
        _write_segments(fh, segments, backup_dir)
        fh.flush()
        os.fsync(fh.fileno())


# --- the journal ---------------------------------------------------------------------------------

def pending_path(store_root: Path) -> Path:
    return Path(store_root) / PENDING


def read_pending(store_root: Path) -> dict | None:
    """The journal of an interrupted repair, or None."""
    path = pending_path(store_root)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise BackupError(f"{path}: unreadable journal of an interrupted repair ({err}); "
                          "inspect it, then delete it") from None


def write_pending(store_root: Path, backup_dir: Path) -> None:
    write_json_atomically(pending_path(store_root), {"manifest": str(Path(backup_dir) / MANIFEST)})


def clear_pending(store_root: Path) -> None:
    path = pending_path(store_root)
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir(path.parent)


def note_backup_place(store_root: Path, backup_dir: Path) -> None:
    """Before a repair saves anything into a backup folder outside the store's own backup
    folder, let each of the two name the other (see the module's docstring)."""
    store_root, backup_dir = Path(store_root).absolute(), Path(backup_dir).absolute()
    home = store_root / BACKUP_DIR
    if backup_dir.parent == home:
        return
    home.mkdir(exist_ok=True)
    backup_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomically(backup_dir / STORE_NOTE, {"store": str(store_root)})
    write_json_atomically(home / f"{utc_stamp()}{WHERE_SUFFIX}", {"backup": str(backup_dir)})


def forget_backup_place(store_root: Path, backup_dir: Path) -> None:
    """Drop the store's note of an outside backup folder (its repair failed, or was undone)."""
    home = Path(store_root) / BACKUP_DIR
    for _, path, note in _backup_folders(store_root, existing=False):
        if note is not None and path.resolve() == Path(backup_dir).resolve():
            note.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        home.rmdir()                    # only when the note was all it held


def _backup_folders(store_root: Path, existing: bool = True) -> list[tuple[str, Path, Path | None]]:
    """Every backup folder of a store, oldest first, as (timestamp, folder, note): the folders
    of its own backup folder (note None) and the outside ones its notes name (those that still
    exist unless ``existing`` is false)."""
    found = []
    for path in (Path(store_root) / BACKUP_DIR).glob("*"):
        if path.is_dir():
            found.append((path.name, path, None))
        elif path.name.endswith(WHERE_SUFFIX):
            try:
                target = Path(json.loads(path.read_text(encoding="utf-8"))["backup"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if target.is_dir() or not existing:
                found.append((path.name[:-len(WHERE_SUFFIX)], target, path))
    return sorted(found, key=lambda item: item[0])


def _shown(store_root: Path, folder: Path) -> str:
    """A backup folder as reports name it: relative to the store when inside it."""
    try:
        return folder.relative_to(store_root).as_posix()
    except ValueError:
        return str(folder)


def newest_backup(store_root: Path) -> Path | None:
    """The most recent backup folder (with a manifest) of a store."""
    folders = [p for _, p, _ in _backup_folders(store_root) if (p / MANIFEST).is_file()]
    return folders[-1] if folders else None


def _looks_like_store(folder: Path) -> bool:
    return (folder / BACKUP_DIR).exists() or holds_store_parts(folder)


def load_manifest(backup_dir: Path) -> dict:
    backup_dir = Path(backup_dir)
    path = backup_dir / MANIFEST if backup_dir.is_dir() else backup_dir
    if not path.exists():
        newest = newest_backup(backup_dir) if backup_dir.is_dir() else None
        if newest is not None:
            # Undo is never pointed at a backup on the user's behalf: which repair to take back
            # is theirs to say, so the message names the newest one and the command to run.
            raise BackupError(f"{backup_dir} is a store, not a backup; its newest backup is "
                              f"{newest} (mqtool undo {newest})")
        if backup_dir.is_dir() and _looks_like_store(backup_dir):
            raise BackupError(f"{backup_dir} is a store, not a backup, and it has no backup "
                              f"(nothing in {BACKUP_DIR}/): there is nothing to undo")
        below = store_below(backup_dir) if backup_dir.is_dir() else None
        if below is not None:
            raise BackupError(f"{backup_dir}: not a backup: did you mean {below}? (given a "
                              "store, undo names its newest backup)")
        if backup_dir.is_dir():
            raise BackupError(f"{backup_dir}: no {MANIFEST}: not a backup, or one whose repair was "
                              "interrupted before it changed anything")
        raise BackupError(f"{backup_dir}: no such backup folder")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise BackupError(f"{path}: unreadable manifest ({err})") from None
    if manifest.get("format") != MANIFEST_FORMAT:
        raise BackupError(f"{path}: not an mqtool backup manifest")
    return manifest


# --- what interrupted repairs leave behind ---------------------------------------------------------

def _pending_stage(store_root: Path) -> str | None:
    try:
        pending = read_pending(store_root)
        return None if pending is None else \
            load_manifest(Path(pending["manifest"]).parent).get("stage")
    except (BackupError, KeyError, TypeError):
        return None


def repair_leftovers(store_root: Path) -> list[dict]:
    """What interrupted repairs left in a store, each ``{"kind", "path", "detail"}`` with kind
    ``pending`` (a repair stopped half-way: the next repair finishes it, undo of its backup takes
    it back), ``stage`` or ``backup`` (a stage folder, a backup folder without manifest: left by
    a repair killed before it changed anything; the next repair or undo removes them)."""
    root = Path(store_root)
    found = []
    try:
        pending = read_pending(root)
    except BackupError as err:
        found.append({"kind": "pending", "path": PENDING, "detail": str(err)})
        pending = None
    if pending is not None:
        found.append({"kind": "pending", "path": PENDING,
                      "detail": f"a repair was interrupted half-way (backup "
                                f"{Path(pending.get('manifest', '?')).parent}); the next repair "
                                "command finishes it, undo of that backup takes it back"})
    keep = _pending_stage(root)
    keep = Path(keep).resolve() if keep else None
    for path in sorted(root.glob(STAGE_PREFIX + "*")):
        if path.is_dir() and path.resolve() != keep:
            found.append({"kind": "stage", "path": path.name,
                          "detail": "stage folder of a repair killed before it changed the store; "
                                    "the next repair or undo removes it"})
    for _, path, note in _backup_folders(root):
        if not (path / MANIFEST).exists():
            item = {"kind": "backup", "path": _shown(root, path),
                    "detail": "backup folder without manifest.json, of a repair killed "
                              "while it was saving (the store was not changed); the next "
                              "repair or undo removes it"}
            if note is not None:
                item["note"] = note.name
            found.append(item)
    return found


def remove_leftovers(store_root: Path) -> list[str]:
    """Remove the stage folders and manifest-less backup folders :func:`repair_leftovers` names
    (never the pending repair's own stage); returns what was removed, relative to the store."""
    removed = []
    for item in repair_leftovers(store_root):
        if item["kind"] in ("stage", "backup"):
            shutil.rmtree(Path(store_root) / item["path"], ignore_errors=True)
            if "note" in item:
                (Path(store_root) / BACKUP_DIR / item["note"]).unlink(missing_ok=True)
            removed.append(item["path"])
    return removed


def mark_reported(backup_dir: Path) -> None:
    """Note that the report of the repair that made ``backup_dir`` reached its caller."""
    try:
        (Path(backup_dir) / REPORTED).touch()
    except OSError:
        pass


def unreported_backup(store_root: Path) -> dict | None:
    """The manifest of the newest backup in the store's backup folder when its repair applied
    every change but was killed before it reported (``backup_dir`` added), else None."""
    newest = newest_backup(store_root)
    if newest is None or (newest / REPORTED).exists():
        return None
    try:
        manifest = load_manifest(newest)
    except BackupError:
        return None
    if manifest.get("status") != "applied":
        return None
    manifest["backup_dir"] = str(newest)
    return manifest


def list_backups(store_root: Path) -> list[dict]:
    """Every folder in the store's backup folder, oldest first: its repair, status (prepared,
    applied, undone; incomplete without manifest), loss report and whether it was reported."""
    out = []
    for _, path, _ in _backup_folders(store_root):
        entry = {"backup": str(path), "name": path.name}
        try:
            manifest = load_manifest(path)
        except BackupError:
            entry.update(status="incomplete", command=None, data_loss=None, lost=[],
                         summary=None, reported=False)
            out.append(entry)
            continue
        entry.update(status=manifest.get("status"), command=manifest.get("command"),
                     argv=manifest.get("argv"), created=manifest.get("created"),
                     applied=manifest.get("applied"), undone=manifest.get("undone"),
                     data_loss=manifest.get("data_loss"), lost=manifest.get("lost", []),
                     summary=manifest.get("summary"),
                     reported=(path / REPORTED).exists())
        out.append(entry)
    return out


# --- undo ----------------------------------------------------------------------------------------

@dataclass
class UndoReport:
    backup: str
    store: str
    restored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    dry_run: bool = False
    leftovers: list[str] = field(default_factory=list)   # of interrupted repairs, removed

    def to_dict(self) -> dict:
        return {"backup": self.backup, "store": self.store, "dry_run": self.dry_run,
                "restored": self.restored, "removed": self.removed, "unchanged": self.unchanged,
                "conflicts": self.conflicts, "leftovers_removed": self.leftovers}


def _current_state(store_root: Path, op: dict) -> str:
    """'old', 'new', 'absent' or 'other' for the file an operation touched."""
    path = store_root / op["path"]
    if not path.exists():
        return "absent"
    size = path.stat().st_size
    kind = op["op"]
    if op.get("digest") == DIGEST_FORMAT:
        digest = content_digest(path)
        prefix = "old_file_" if kind == "edit" else "old_"
        if op["old_size"] is not None and size == op["old_size"] and digest == op[prefix + "digest"]:
            return "old"
        new = op.get("new_file_digest" if kind == "edit" else "new_digest")
        if new is not None and size == op["new_size"] and digest == new:
            return "new"
        return "other"
    if kind == "edit":
        digest = sha256_file(path)
        if size == op["old_size"] and digest == op["old_file_sha256"]:
            return "old"
        if size == op["new_size"] and digest == op["new_file_sha256"]:
            return "new"
        return "other"
    digest = sha256_file(path)
    if op.get("old_sha256") is not None and size == op["old_size"] and digest == op["old_sha256"]:
        return "old"
    if op.get("new_sha256") is not None and digest == op["new_sha256"]:
        return "new"
    return "other"


def undo_backup(backup_dir: Path, *, force: bool = False, dry_run: bool = False,
                guard=None) -> UndoReport:
    """Put the store back exactly as it was before the repair that made ``backup_dir``.

    Files the repair created are removed, changed and deleted files restored byte-exact. A file
    that is neither as the repair left it nor as it was before (someone wrote to the store since)
    is a conflict: nothing is changed unless ``force``. ``guard(store_root)``, a context
    manager, surrounds everything done to the store (the caller checks and holds its lock)."""
    backup_dir = Path(backup_dir).absolute()
    if backup_dir.is_file() and backup_dir.name == MANIFEST:
        backup_dir = backup_dir.parent
    store_root = _store_of_incomplete_backup(backup_dir)
    if store_root is not None:
        # a repair killed while it was saving: it changed nothing, only its leftovers go
        report = UndoReport(str(backup_dir), str(store_root), dry_run=dry_run)
        with (guard(store_root) if guard is not None else contextlib.nullcontext()):
            report.leftovers = [item["path"] for item in repair_leftovers(store_root)
                                if item["kind"] != "pending"]
            if not dry_run:
                remove_leftovers(store_root)
        return report
    manifest = load_manifest(backup_dir)
    store_root = Path(manifest["store"])
    if not store_root.is_dir():
        raise StoreLayoutError(f"{store_root}: the store this backup belongs to is gone")
    with (guard(store_root) if guard is not None else contextlib.nullcontext()):
        return _undo(backup_dir, manifest, store_root, force=force, dry_run=dry_run)


def _store_of_incomplete_backup(backup_dir: Path) -> Path | None:
    """The store of a backup folder without a manifest that no journal names (a repair killed
    while saving), else None."""
    if not backup_dir.is_dir() or (backup_dir / MANIFEST).exists():
        return None
    if backup_dir.parent.name == BACKUP_DIR:
        store_root = backup_dir.parent.parent
    else:
        try:
            store_root = Path(json.loads((backup_dir / STORE_NOTE).read_text(
                encoding="utf-8"))["store"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
    try:
        pending = read_pending(store_root)
    except BackupError:
        return None
    if pending is None or Path(pending["manifest"]).parent.resolve() != backup_dir.resolve():
        return store_root
    return None


def _check_room(backup_dir: Path, manifest: dict) -> None:
    """Refuse, before changing anything, an undo the disk has no room for: the restored files
    hold at most the saved bytes, and the manifest is rewritten once."""
    data = backup_dir / "data"
    saved = sum(p.stat().st_size for p in data.iterdir()) if data.is_dir() else 0
    room = saved + 2 * len(json.dumps(manifest)) + SpaceReserve.SLACK
    try:
        SpaceReserve(backup_dir / ".reserve", room).release()
    except OSError as err:
        raise BackupError(f"{manifest['store']}: no room to undo {backup_dir} ({room} bytes "
                          f"needed): {err.strerror}; nothing restored") from None


def _undo(backup_dir: Path, manifest: dict, store_root: Path, *, force: bool,
          dry_run: bool) -> UndoReport:
    pending = read_pending(store_root)
    if pending is not None and Path(pending["manifest"]).resolve() != (backup_dir / MANIFEST).resolve():
        raise BackupError(f"{store_root}: another repair was interrupted ({pending['manifest']}); "
                          "finish it (run the repair again) or undo that backup first")
    report = UndoReport(str(backup_dir), str(store_root), dry_run=dry_run)
    if manifest.get("status") == "undone":
        report.unchanged = [op["path"] for op in manifest["ops"]]
        return report
    ops = manifest["ops"]
    states = [_current_state(store_root, op) for op in ops]
    report.conflicts = _undo_conflicts(ops, states)
    if report.conflicts and not force:
        raise BackupError(f"{len(report.conflicts)} file(s) changed since the repair (first: "
                          f"{report.conflicts[0]}); nothing restored (use --force to restore "
                          "anyway)")
    if not dry_run:
        _check_room(backup_dir, manifest)
    for op, state in reversed(list(zip(ops, states))):
        _undo_op(op, state, store_root, backup_dir, report, dry_run)
    if not dry_run:
        _finish_undo(backup_dir, manifest, store_root, report)
    report.restored = sorted(set(report.restored))
    report.unchanged = sorted(set(report.unchanged) - set(report.restored))
    return report


def _undo_conflicts(ops: list[dict], states: list[str]) -> list[str]:
    """The paths changed since the repair (undo refuses them unless forced)."""
    conflicts = []
    # a path touched by several operations (pad, then zero a tail) is judged by its last one
    final_state: dict[str, str] = {}
    for op, state in zip(ops, states):
        final_state[op["path"]] = state
    for op, state in zip(ops, states):
        created = op["op"] == "write" and op.get("old_size") is None
        if state == "other" and final_state[op["path"]] == "other":
            conflicts.append(op["path"])
        elif created and state == "absent":
            continue
        elif not created and state == "absent" and op["op"] != "delete":
            conflicts.append(op["path"])
    return sorted(set(conflicts))


def _undo_op(op: dict, state: str, store_root: Path, backup_dir: Path, report: UndoReport,
             dry_run: bool) -> None:
    """One operation undone: a file the repair created removed, a changed one restored from
    the backup (unless it still holds its old bytes)."""
    path = store_root / op["path"]
    kind = op["op"]
    if kind == "write" and op.get("old_size") is None:
        if path.exists():
            report.removed.append(op["path"])
            if not dry_run:
                path.unlink()
                fsync_dir(path.parent)
        return
    if state == "old":
        report.unchanged.append(op["path"])
        return
    report.restored.append(op["path"])
    if dry_run:
        return
    if op.get("changed") is not None:
        if not path.exists():
            raise BackupError(f"{path}: gone; its backup holds only the bytes the repair "
                              "changed, so it cannot be restored")
        restore_changes(path, op["old_size"], op["changed"], op["saved"], backup_dir)
    elif kind == "edit":
        if not path.exists():
            restore_file(path, op["old_size"], op["saved"], backup_dir)
        else:
            restore_in_place(path, op["old_size"], op["saved"], backup_dir, op["start"],
                             op["end"])
    else:
        restore_file(path, op["old_size"], op["saved"], backup_dir)
    if op.get("mode") is not None:
        os.chmod(path, op["mode"])


def _finish_undo(backup_dir: Path, manifest: dict, store_root: Path,
                 report: UndoReport) -> None:
    """The folders the repair created removed, its stage and pending marker gone, the backup
    marked undone."""
    for directory in sorted(manifest.get("dirs_created", []), key=len, reverse=True):
        d = store_root / directory
        try:
            d.rmdir()
        except OSError as err:
            if err.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
                raise
    stage = manifest.get("stage")
    if stage and Path(stage).is_dir():
        shutil.rmtree(stage, ignore_errors=True)
    clear_pending(store_root)
    report.leftovers = remove_leftovers(store_root)
    manifest["status"] = "undone"
    manifest["undone"] = utc_stamp()
    write_json_atomically(backup_dir / MANIFEST, manifest)
    # the store is as before the repair: nothing of it names that backup any more
    forget_backup_place(store_root, backup_dir)


__all__ = ["BackupError", "UndoReport", "undo_backup", "load_manifest", "read_pending",
           "write_pending", "clear_pending", "save_range", "restore_file", "sha256_file",
           "write_json_atomically", "utc_stamp", "in_place_digests", "content_digest",
           "in_place_content_digests", "save_changes", "restore_changes", "DIGEST_FORMAT",
           "MANIFEST", "PENDING", "BACKUP_DIR", "STAGE_PREFIX", "REPORTED", "repair_leftovers",
           "remove_leftovers", "mark_reported", "unreported_backup", "list_backups",
           "note_backup_place", "forget_backup_place"]
