"""Store file names and the low-level file handling every writer shares: 20-digit offset names,
IndexFile time names, durable writes, sparse zero-filled files opened for update."""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import stat
from pathlib import Path


def offset_file_name(offset: int) -> str:
    """UtilAll.offset2FileName: 20-digit zero-padded decimal."""
    return f"{offset:020d}"


def index_file_name(millis: int) -> str:
    """yyyyMMddHHmmssSSS of a time (UTC here; the broker uses its local zone)."""
    t = _dt.datetime.fromtimestamp(millis / 1000, _dt.timezone.utc)
    return t.strftime("%Y%m%d%H%M%S") + f"{millis % 1000:03d}"


def index_file_millis(name: str) -> int:
    """The time an IndexFile name written by :func:`index_file_name` stands for."""
    t = _dt.datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(tzinfo=_dt.timezone.utc)
    return int(t.timestamp()) * 1000 + int(name[14:17])


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a rename is durable only once its directory is)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = fsync_path


def atomic_write(path: Path, data: bytes) -> None:
    """Write through a temp file + fsync + rename, then fsync the directory."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.mqtool-tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


@contextlib.contextmanager
def output_file(path: Path, mode: str = "w", **options):
    """An output file (an export, a salvage, its map) written whole or not at all: into a hidden
    sibling, renamed to ``path`` when the body ends without error, removed when it fails. A path
    that exists and is no regular file (``/dev/null``, a FIFO) is written directly."""
    path = Path(path)
    try:
        direct = not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        direct = False
    if direct:
        with open(path, mode, **options) as fh:
            yield fh
        return
    tmp = path.with_name(f".{path.name}.mqtool-partial-{os.getpid()}")
    try:
        with open(tmp, mode, **options) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class _SequentialFile:
    """A file handle that skips ``seek`` to where it already is: a BufferedRandom flushes its
    buffer on every seek, which would cost one write system call per record."""

    __slots__ = ("_fh", "_pos")

    def __init__(self, fh):
        self._fh = fh
        self._pos = fh.tell()

    def seek(self, pos: int) -> None:
        if pos != self._pos:
            self._fh.seek(pos)
            self._pos = pos

    def write(self, data: bytes) -> None:
        self._fh.write(data)
        self._pos += len(data)

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def open_existing_or_zero(path: Path, size: int) -> _SequentialFile:
    """Open a store file for update, creating it zero-filled (sparse) at its full size."""
    if path.exists():
        return _SequentialFile(open(path, "r+b"))
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "w+b")
    fh.truncate(size)
    return _SequentialFile(fh)
