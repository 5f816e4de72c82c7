"""Running a repair command end to end: finish an interrupted repair, plan on a stage, then apply
(or only report, with ``dry_run``), optionally on a copy; and ``undo``."""
from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import backup as bk
from ..errors import StoreLockedError
from ..store import Store
from ..lock import store_lock
from .transaction import (RepairError, RepairPlan, Stage, _kill_point, apply_plan,
                          remove_stale_stages, resume_pending, sparse_copy)
from .planners import PLANNERS
from .epoch import plan_epoch_cut
from .heap import retained_heap


# --- orchestration ----------------------------------------------------------------------------------


@dataclass
class RepairResult:
    plan: RepairPlan | None
    status: str                      # nothing to do | planned | repaired
    backup: Path | None = None
    out: Path | None = None
    resumed: dict | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def data_loss(self) -> bool:
        lost = self.plan is not None and self.plan.data_loss and self.status != "nothing to do"
        return lost or bool(self.resumed and self.resumed.get("data_loss"))

    @property
    def exit_code(self) -> int:
        return 1 if self.data_loss else 0

    def to_dict(self) -> dict:
        data = {"status": self.status, "exit_code": self.exit_code, "data_loss": self.data_loss,
                "backup": str(self.backup) if self.backup else None,
                "out": str(self.out) if self.out else None, "warnings": self.warnings}
        if self.resumed is not None:
            data["resumed"] = {"backup": self.resumed.get("backup_dir"),
                               "command": self.resumed.get("command"),
                               "data_loss": self.resumed.get("data_loss"),
                               "summary": self.resumed.get("summary"),
                               "lost": self.resumed.get("lost", []),
                               "unreported": bool(self.resumed.get("unreported"))}
        if self.plan is not None:
            data.update(self.plan.to_dict())
        return data


def _copy_store(source: Path, dest: Path) -> None:
    """The store copied for --out, holes kept (a DLedger index file is 160 MiB of mostly hole),
    modification times kept (the broker's clean-up goes by them) but not modes: the copy is the
    writing user's, with the modes the umask gives, whatever the evidence's (often read-only)
    were. mqtool's own backups, stages and journal are left out."""
    skipped = {bk.BACKUP_DIR, bk.PENDING}
    dest.mkdir(exist_ok=True)
    # symbolic links are followed (a commitlog/ linked to another disk is copied as a folder)
    for folder, dirs, files in os.walk(source, followlinks=True):
        here = Path(folder)
        rel = here.relative_to(source)
        if rel == Path("."):
            dirs[:] = [d for d in dirs if d not in skipped and not d.startswith(bk.STAGE_PREFIX)]
            files = [f for f in files if f not in skipped]
        for name in dirs:
            (dest / rel / name).mkdir(exist_ok=True)
        for name in files:
            src = here / name
            sparse_copy(src, dest / rel / name)
            stat = src.stat()
            os.utime(dest / rel / name, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _building_name(out: Path) -> Path:
    """Where a copy for ``out`` is made: a hidden sibling, renamed to ``out`` once complete."""
    return out.parent / f".{out.name}.mqtool-partial-{os.getpid()}"


def _remove_dead_partials(out: Path) -> None:
    """Copies for ``out`` that a killed run left half-made (their process is gone)."""
    for path in out.parent.glob(f".{out.name}.mqtool-partial-*"):
        try:
            os.kill(int(path.name.rsplit("-", 1)[1]), 0)
            continue                       # its run is still going
        except ProcessLookupError:
            pass
        except (ValueError, PermissionError):
            continue
        shutil.rmtree(path, ignore_errors=True)


def _move_into_place(building: Path, out: Path) -> None:
    """Rename the finished copy to ``out`` (an empty folder there is replaced)."""
    try:
        os.replace(building, out)
    except OSError:
        out.rmdir()           # not empty: checked before anything was copied
        os.replace(building, out)
    bk.fsync_dir(out.parent)


def _check_backup_dir(store_root: Path, backup_dir: Path) -> Path:
    backup_dir = backup_dir.absolute()
    if backup_dir.exists() and (not backup_dir.is_dir() or any(backup_dir.iterdir())):
        raise RepairError(f"--backup-dir {backup_dir}: exists and is not an empty folder")
    for data_dir in ("commitlog", "consumequeue", "index", "batchconsumequeue"):
        inside = (store_root / data_dir).resolve()
        if backup_dir.resolve() == inside or inside in backup_dir.resolve().parents:
            raise RepairError(f"--backup-dir {backup_dir}: inside {data_dir}/, which the broker "
                              "loads; choose a folder outside the store's data directories")
    return backup_dir


def refuse_commitlog_dirs(store_path: Path, command: str, dirs: list[Path] | None) -> None:
    """Raise RepairError (exit 2, nothing changed) when the CommitLog lies in directories other
    than ``STORE/commitlog`` (a multi-path CommitLog, storePathCommitLog elsewhere): the repairs
    stage, back up and write CommitLog files inside the store root only, so they refuse rather
    than cut a CommitLog whose other files they would not see or could not put back."""
    if not dirs:
        return
    own = (Path(store_path) / "commitlog").absolute()
    if [Path(d).absolute() for d in dirs] == [own]:
        return
    for d in dirs:
        if not Path(d).is_dir():
            raise RepairError(f"{d}: CommitLog directory not found (named by the CommitLog path "
                              "list)")
    raise RepairError(f"{store_path}: {command} refused: the CommitLog lies in "
                      f"{len(dirs)} director{'y' if len(dirs) == 1 else 'ies'} "
                      f"({', '.join(map(str, dirs))}), not only in {own}; mqtool repairs a "
                      "CommitLog that lies in the store's own commitlog/ (read commands and "
                      "verify take --commitlog-dirs / --broker-config); nothing was changed")


def run_repair(command: str, store_path: Path, *, dry_run: bool = False,
               backup_dir: Path | None = None, out: Path | None = None,
               store_options: dict | None = None, progress=None, argv=None,
               report: Callable[[RepairResult], None] | None = None,
               **options) -> RepairResult:
    """Plan ``command`` on a store and, unless ``dry_run``, back up and apply it (on a copy with
    ``out``). A repair in place holds the store's lock (:mod:`mqtool.lock`) for its whole run and
    refuses (exit 3) a store whose lock another process holds.

    A repair whose run was killed after its changes but before its report is reported by the
    next run (``resumed`` with ``unreported``). ``report`` (the CLI's rendering) is called with
    the result while the lock is still held, and the repair counts as reported once it returns:
    a second repair waiting for the lock must not find a repair that is being reported and take
    it for one whose run was killed. Without ``report``, returning counts as reporting."""
    def reported(result: RepairResult) -> None:
        _kill_point("applied")
        if report is not None:
            report(result)
        mark_reported(result)

    with retained_heap():
        return _checked_repair(command, store_path, dry_run=dry_run, backup_dir=backup_dir,
                               out=out, store_options=store_options, progress=progress,
                               argv=argv, reported=reported, **options)


def mark_reported(result: RepairResult) -> None:
    """Note in their backups that the report of this repair (and of the one it finished or
    reported) reached its caller."""
    for backup in (result.backup, (result.resumed or {}).get("backup_dir")):
        if backup is not None:
            bk.mark_reported(Path(backup))


def _checked_repair(command: str, store_path: Path, *, dry_run: bool, backup_dir: Path | None,
                    out: Path | None, store_options: dict | None, progress, argv,
                    reported: Callable[[RepairResult], None], **options) -> RepairResult:
    store_options = store_options or {}
    source = Path(store_path).absolute()
    Store.refuse_unexplained_layout(source, command)
    if Store(source, **store_options).is_bare_commitlog:
        raise RepairError(f"{source}: a bare CommitLog directory; {command} needs the store root "
                          "(the folder holding commitlog/, consumequeue/, index/, checkpoint)")
    if dry_run or out is not None:
        # neither changes the store: no lock taken, a held one is only reported
        result = _run_repair(command, source, dry_run=dry_run, backup_dir=backup_dir, out=out,
                             store_options=store_options, progress=progress, argv=argv,
                             **options)
        reported(result)
        return result
    with store_lock(source, command):
        try:
            result = _run_repair(command, source, dry_run=dry_run, backup_dir=backup_dir,
                                 out=out, store_options=store_options, progress=progress,
                                 argv=argv, **options)
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            where = f" writing {err.filename}" if err.filename else ""
            raise RepairError(f"{source}: {command} stopped{where}: No space left on device; "
                              "the store is unchanged (stage and partial backup removed)") \
                from None
        reported(result)
        return result


def _run_repair(command: str, source: Path, *, dry_run: bool, backup_dir: Path | None,
                out: Path | None, store_options: dict, progress, argv, **options) -> RepairResult:
    warnings: list[str] = []
    # when this process holds the lock (a repair in place) no other process can: not "locked"
    locked = (source / "lock").is_file() and Store(source, **store_options).lock_held()
    if out is not None:
        out = Path(out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise RepairError(f"--out {out}: exists and is not an empty folder")
        if out.resolve() == source.resolve() or source.resolve() in out.resolve().parents:
            raise RepairError("--out must be outside the store")
        if locked:
            warnings.append(f"{source}: a live process holds the lock; the copy may be "
                            "inconsistent")
    elif locked and not dry_run:
        raise StoreLockedError(f"{source}: a live process (a running broker?) holds the store's "
                               f"lock file; refusing to {command} it (stop the broker, or use "
                               "--dry-run / --out)")
    elif locked:
        warnings.append(f"{source}: a live process holds the lock; the plan may be stale")

    if backup_dir is not None and not dry_run and out is None:
        backup_dir = _check_backup_dir(source, Path(backup_dir))
    resumed = None
    if not dry_run and out is None:
        resumed = resume_pending(source)
        remove_stale_stages(source)
        if resumed is None:
            resumed = bk.unreported_backup(source)
            if resumed is not None:
                resumed["unreported"] = True
    elif bk.read_pending(source) is not None:
        warnings.append("an interrupted repair is pending; it is finished before anything else "
                        "when a repair runs without --dry-run")
    else:
        if out is None:
            warnings += [f"{item['path']}: {item['detail']}"
                         for item in bk.repair_leftovers(source) if item["kind"] != "pending"]
        previous = bk.unreported_backup(source) if out is None else None
        if previous is not None:
            warnings.append(f"the last {previous.get('command')} (backup "
                            f"{previous['backup_dir']}) was stopped before it reported"
                            + (" its data loss" if previous.get("data_loss") else "")
                            + "; the next repair reports it (or: mqtool undo --list)")
    target = source
    building = None
    if out is not None and not dry_run:
        # the copy is made under a hidden sibling name and renamed once repaired: a failure or
        # a kill leaves no half-made copy under the name asked for
        out.parent.mkdir(parents=True, exist_ok=True)
        building = _building_name(out.absolute())
        _remove_dead_partials(out.absolute())
        shutil.rmtree(building, ignore_errors=True)
        target = building
    try:
        if building is not None:
            _copy_store(source, building)
        result = _plan_and_finish(command, source, target, dry_run=dry_run, out=out,
                                  backup_dir=backup_dir, store_options=store_options,
                                  progress=progress, argv=argv, resumed=resumed,
                                  warnings=warnings, **options)
    except BaseException:
        if building is not None:
            shutil.rmtree(building, ignore_errors=True)
        raise
    if building is not None:
        _move_into_place(building, out)
        if result.plan is not None:
            result.plan.store = out
    return result


def _plan_and_finish(command: str, source: Path, target: Path, *, dry_run: bool, out,
                     backup_dir, store_options: dict, progress, argv, resumed, warnings,
                     **options) -> RepairResult:
    stamp = bk.utc_stamp()
    if dry_run:
        stage_root = Path(tempfile.mkdtemp(prefix="mqtool-stage-"))
    else:
        stage_root = target / f"{bk.STAGE_PREFIX}{stamp}"
    stage = Stage(target, stage_root, for_apply=not dry_run)
    try:
        store = Store(target, **store_options)
        plan = PLANNERS[command](store, stage, progress=progress, **options)
        plan_epoch_cut(store, stage, plan)
    except BaseException:
        stage.cleanup()
        raise
    if not dry_run:
        _kill_point("planned")
    return _finish_repair(plan, stage, target, dry_run=dry_run, out=out, backup_dir=backup_dir,
                          stamp=stamp, argv=argv, resumed=resumed, warnings=warnings)


def _finish_repair(plan: RepairPlan, stage: Stage, target: Path, *, dry_run: bool,
                   out: Path | None, backup_dir: Path | None, stamp: str, argv, resumed,
                   warnings: list[str]) -> RepairResult:
    if plan.nothing_to_do:
        stage.cleanup()
        return RepairResult(plan, "nothing to do", out=out if out is not None and not dry_run
                            else None, resumed=resumed, warnings=warnings)
    if dry_run:
        stage.cleanup()
        plan.stage = None
        return RepairResult(plan, "planned", resumed=resumed, warnings=warnings)
    if out is not None:
        apply_plan(plan, backup_dir=None, argv=argv)
        return RepairResult(plan, "repaired", out=out, resumed=resumed, warnings=warnings)
    if backup_dir is None:
        backup_dir = target / bk.BACKUP_DIR / stamp
    try:
        used = apply_plan(plan, backup_dir=backup_dir, argv=argv)
    except BaseException:
        if bk.read_pending(target) is None:
            stage.cleanup()
        raise
    return RepairResult(plan, "repaired", backup=used, resumed=resumed, warnings=warnings)


def run_undo(backup: Path, *, force: bool = False, dry_run: bool = False) -> bk.UndoReport:
    """Undo a repair; unless ``dry_run``, holding the store's lock for the whole restore."""
    @contextmanager
    def guard(root: Path):
        Store.refuse_unexplained_layout(root, "undo")
        if dry_run:
            yield
        else:
            with store_lock(root, "undo"):
                yield
    return bk.undo_backup(backup, force=force, dry_run=dry_run, guard=guard)
