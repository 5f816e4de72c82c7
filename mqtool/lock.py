"""The store's lock, held by every command that changes a store for its whole run.

The broker takes ``FileChannel.tryLock(0, 1, false)`` on ``STORE/lock`` at start-up: an exclusive
POSIX record lock on byte 0. mqtool takes the very same lock (``lockf`` on byte 0, length 1), so a
broker started during a repair refuses to start, and a second mqtool refuses with exit 3 before it
changes anything.

POSIX record locks belong to the process, and closing *any* descriptor of the file drops them. So
while the lock is held here, nothing in this process may open and close ``lock`` (the "is it
held?" probe :func:`mqtool.store.lock_holder` asks :func:`held_here` first), and the one
descriptor stays open until the run ends.
"""
from __future__ import annotations

import errno
import fcntl
import functools
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import MqtoolError, StoreLockedError

LOCK_NAME = "lock"

# lock file (resolved path) -> [descriptor, nesting depth], for this process only
_HELD: dict[str, list[int]] = {}


def _key(path: Path) -> str:
    return os.path.realpath(path)


def held_here(path: Path) -> bool:
    """True when this process holds the lock on ``path`` through :func:`store_lock`."""
    return _key(path) in _HELD


#: what a file system without hard links (some FUSE and SMB mounts) answers os.link with
_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK}


def _create_locked(path: Path) -> int | None:
    """Create ``path`` already locked by this process, or return None when it exists.

    The file is made and locked under a private name, then linked in: a second mqtool can only
    open ``path`` once its creator holds the lock on it. Created in place, the file would be
    open to a rival between create and lock; a rival that won the lock there would believe the
    file was the broker's and leave it behind, while its creator, refused, could not remove it."""
    private = path.with_name(f".{path.name}.mqtool-{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(private, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)   # nobody else can see it yet
        os.link(private, path)
    except FileExistsError:
        os.close(fd)
        return None
    except OSError as err:
        os.close(fd)
        if err.errno not in _NO_HARD_LINKS:
            raise
        return _create_then_lock(path)
    except BaseException:
        os.close(fd)
        raise
    finally:
        private.unlink(missing_ok=True)
    return fd


def _create_then_lock(path: Path) -> int | None:
    """The fallback where hard links are not to be had: create in place, then lock (a rival
    can win the lock in between; it then refuses us, and we exit 3)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError:
        os.close(fd)
        return None        # the caller opens the existing file, and is refused by its holder
    return fd


# what the refusal suggests: only the repair commands have --out
_REPAIR_HINT = "stop it, or use --dry-run / --out"
_LOCKED_HINTS = {"undo": "stop it, or see what would be restored with --dry-run",
                 "fixture damage": "stop it, or damage a copy"}


def _open_and_lock(path: Path, command: str, root: Path) -> tuple[int, bool]:
    """Open (creating it if missing) and lock ``path``; return the descriptor and whether the
    file was created for this run. Retries when the file was replaced between open and lock, so
    the lock is always on the file a broker would open."""
    for _ in range(20):
        try:
            fd = _create_locked(path)
        except OSError as err:
            raise MqtoolError(f"{path}: cannot create the store's lock file ({err.strerror}); "
                              f"refusing to {command} the store") from None
        if fd is not None:
            return fd, True
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue
        except OSError as err:
            raise MqtoolError(f"{path}: cannot open the store's lock file for writing "
                              f"({err.strerror}); refusing to {command} the store") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EACCES, errno.EAGAIN):
                hint = _LOCKED_HINTS.get(command, _REPAIR_HINT)
                raise StoreLockedError(
                    f"{root}: a live process (a running broker or another mqtool) holds the "
                    f"store's lock file; refusing to {command} it ({hint})") from None
            raise MqtoolError(f"{path}: cannot lock the store's lock file ({err.strerror})") \
                from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd, False
        # another mqtool removed the file it had created after we opened it: lock the new one
        os.close(fd)
    raise StoreLockedError(f"{root}: the store's lock file keeps changing; refusing to {command} it")


@contextmanager
def store_lock(root: Path, command: str) -> Iterator[None]:
    """Hold the broker's lock on ``root/lock`` for the body; raise :class:`StoreLockedError`
    (exit 3) at once when another process holds it. A ``lock`` file that did not exist is created
    for the run and removed afterwards. Re-entrant within one process. A ``root`` that is not a
    directory is left alone (the command reports that itself)."""
    root = Path(root)
    if not root.is_dir():
        yield
        return
    path = root / LOCK_NAME
    key = _key(path)
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield
        finally:
            _HELD[key][1] -= 1
        return
    fd, created = _open_and_lock(path, command, root)
    _HELD[key] = [fd, 1]
    try:
        yield
    finally:
        del _HELD[key]
        try:
            if created:
                # unlinked while still locked: whoever opened it meanwhile re-checks the inode
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
        finally:
            os.close(fd)


def holding_store_lock(command: str):
    """Decorator: run a function whose first argument is a store root under :func:`store_lock`."""
    def wrap(func):
        @functools.wraps(func)
        def locked(root, *args, **kwargs):
            with store_lock(Path(root), command):
                return func(root, *args, **kwargs)
        return locked
    return wrap


__all__ = ["store_lock", "holding_store_lock", "held_here", "LOCK_NAME"]
