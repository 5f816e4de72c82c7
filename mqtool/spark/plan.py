"""The driver's plan of a Spark audit: which brokers, which CommitLog files, which byte ranges.

No pyspark here. Local paths (and ``file://`` URLs) are listed with :class:`mqtool.store.CommitLog`,
so a Spark audit sees exactly the files ``verify`` sees; any other scheme is listed through a
``lister`` callable (the session's Hadoop FileSystem, :func:`mqtool.spark.session.hadoop_lister`).

A split is a byte range of one CommitLog file. Records never cross files (the broker pads a
file's end with a blank record), and inside a file every record carries its own position, so a
task can find the first record of its range on its own (:mod:`mqtool.spark.splits`).
"""
from __future__ import annotations

import collections
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple
from urllib.parse import unquote, urlparse

from ..errors import MqtoolError, StoreLayoutError, StoreNotFoundError
from ..store import OFFSET_NAME, CommitLog
from ..verify import CODES, ERROR, WARNING

DEFAULT_SPLIT_SIZE = 128 * 1024 * 1024
#: the smallest split worth a task; smaller ones only multiply scheduling overhead
MIN_SPLIT_SIZE = 4096
_BROKER_NAME = re.compile(r"^[A-Za-z0-9._%@+-]+$")


class ListedEntry(NamedTuple):
    """One directory entry as a lister reports it."""

    name: str
    url: str
    is_dir: bool
    length: int


#: url -> entries, or None when the url does not exist; raises StoreLayoutError for a file
Lister = Callable[[str], "list[ListedEntry] | None"]


class Split(NamedTuple):
    """One task's work: file positions [start, end) of one CommitLog file. Plain values only, so
    it pickles to executors."""

    broker: str
    url: str           # local path, or a URL the executors can open
    name: str          # the file name (its base offset, 20 digits)
    base_offset: int
    length: int        # the file size when planned
    index: int         # split number inside the file
    start: int
    end: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.broker, self.name, self.index)


@dataclass(frozen=True)
class CommitLogFile:
    name: str
    url: str
    base_offset: int
    length: int
    #: the file as verify names it, relative to the store root (a DLedger-mode store keeps its
    #: data files in dledger-<id>/data/)
    rel: str = ""

    def label(self) -> str:
        return self.rel or "commitlog/" + self.name


@dataclass
class BrokerInput:
    """One input path resolved to a store (or a bare CommitLog directory)."""

    name: str
    source: str                      # the path as given
    root: str                        # the store root (for a bare CommitLog directory: itself)
    commitlog: str                   # the CommitLog directory
    local: bool
    files: list[CommitLogFile] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)   # names in the CommitLog directory
    file_size: int = 1024 ** 3

    @property
    def bare(self) -> bool:
        return self.root == self.commitlog

    @property
    def commitlog_bytes(self) -> int:
        return sum(f.length for f in self.files)

    def label(self, name: str) -> str:
        """File ``name`` as verify names it in findings (``commitlog/<name>`` in plain mode)."""
        for f in self.files:
            if f.name == name:
                return f.label()
        return "commitlog/" + name


def parse_split_size(text: str | int) -> int:
    """``128m``, ``64k``, ``1g`` or bytes; at least :data:`MIN_SPLIT_SIZE`."""
    from ..forge import parse_size  # the one size syntax of the CLI

    try:
        size = parse_size(text)
    except ValueError as err:
        raise MqtoolError(f"--split-size: {err}") from None
    if size < MIN_SPLIT_SIZE:
        raise MqtoolError(f"--split-size must be at least {MIN_SPLIT_SIZE} bytes, got {size}")
    return size


def is_local(path: str) -> bool:
    """A plain path or a ``file:`` URL (read directly by executors); anything else is remote."""
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and ":" in path[:3])  # C:\ style


def local_path(path: str) -> str:
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    return path


def broker_name_for(root: str) -> str:
    """The broker a store belongs to, from its path: the store root's name, or its parent's when
    the root is the usual ``<broker>/store``."""
    if is_local(root):
        path = local_path(root)
    else:
        parsed = urlparse(root)
        path = parsed.path if parsed.path.strip("/") else parsed.netloc   # s3a://broker-a
    parts = [p for p in path.rstrip("/").split("/") if p]
    if not parts:
        return "broker"
    name = parts[-1]
    if name == "store" and len(parts) > 1:
        name = parts[-2]
    return name


# --- listing -------------------------------------------------------------------------------------

def _resolve_local(source: str) -> tuple[str, str]:
    path = Path(local_path(source))
    if not path.exists():
        raise StoreNotFoundError(f"{source}: no such file or directory")
    if not path.is_dir():
        raise StoreLayoutError(f"{source}: not a directory (give a store root or a CommitLog "
                               f"directory)")
    if (path / "commitlog").is_dir() or CommitLog(path / "commitlog").dledger is not None:
        return str(path), str(path / "commitlog")
    has_segments = any(OFFSET_NAME.match(p.name) and p.is_file() for p in path.iterdir())
    if path.name == "commitlog" or has_segments:
        root = path.parent if path.name == "commitlog" else path
        return str(root), str(path)
    raise StoreLayoutError(f"{source}: neither a store root (no commitlog/) nor a CommitLog "
                           f"directory")


def _join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def _parent(url: str) -> str:
    parsed = urlparse(url)
    return parsed._replace(path=posixpath.dirname(parsed.path.rstrip("/")) or "/").geturl()


def _resolve_remote(source: str, lister: Lister) -> tuple[str, str, list[ListedEntry]]:
    entries = lister(source)
    if entries is None:
        raise StoreNotFoundError(f"{source}: no such file or directory")
    commitlog = next((e for e in entries if e.is_dir and e.name == "commitlog"), None)
    if commitlog is not None:
        listed = lister(commitlog.url) or []
        return source.rstrip("/"), commitlog.url, listed
    base = posixpath.basename(urlparse(source).path.rstrip("/"))
    if base == "commitlog" or any(OFFSET_NAME.match(e.name) and not e.is_dir for e in entries):
        root = _parent(source) if base == "commitlog" else source.rstrip("/")
        return root, source.rstrip("/"), entries
    raise StoreLayoutError(f"{source}: neither a store root (no commitlog/) nor a CommitLog "
                           f"directory")


def _relative(path, root: str) -> str:
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return ""


def _most_common_size(lengths: list[int]) -> int:
    # CommitLog's own inference (the most common non-empty size), so geometry findings agree
    sizes = [n for n in lengths if n > 0]
    if not sizes:
        return 1024 ** 3
    return collections.Counter(sizes).most_common(1)[0][0]


def resolve_input(source: str, *, name: str | None = None,
                  lister: Lister | None = None) -> BrokerInput:
    """A store root or CommitLog directory -> its broker, CommitLog files and stray files."""
    if is_local(source):
        root, directory = _resolve_local(source)
        commitlog = CommitLog(Path(directory))
        files = [CommitLogFile(s.name, str(s.path), s.base_offset, s.length,
                               _relative(s.path, root)) for s in commitlog.segments]
        stray = [p.name for p in commitlog.stray_files]
        # a DLedger-mode store's CommitLog directory is its DLedger data directory
        broker = BrokerInput(name or broker_name_for(root), source, root,
                             str(commitlog.directory), True, files, stray, commitlog.file_size)
    else:
        if lister is None:
            raise MqtoolError(f"{source}: listing this scheme needs a Spark session")
        root, directory, entries = _resolve_remote(source, lister)
        files, stray = [], []
        for entry in sorted(entries, key=lambda e: e.name):
            if not entry.is_dir and OFFSET_NAME.match(entry.name):
                files.append(CommitLogFile(entry.name, entry.url, int(entry.name), entry.length))
            elif not entry.name.startswith("."):
                stray.append(entry.name)
        files.sort(key=lambda f: f.base_offset)
        broker = BrokerInput(name or broker_name_for(root), source, root, directory, False, files,
                             stray, _most_common_size([f.length for f in files]))
    if not _BROKER_NAME.match(broker.name):
        raise MqtoolError(f"{source}: broker name {broker.name!r} has characters other than "
                          f"letters, digits and . _ % @ + -; give --broker-name")
    return broker


def resolve_inputs(sources: list[str], names: list[str] | None = None,
                   lister: Lister | None = None) -> list[BrokerInput]:
    if not sources:
        raise MqtoolError("give at least one store root or CommitLog directory")
    if names and len(names) != len(sources):
        raise MqtoolError(f"--broker-name was given {len(names)} time(s) for {len(sources)} "
                          f"path(s); give it once per path, in the same order")
    brokers = [resolve_input(s, name=names[i] if names else None, lister=lister)
               for i, s in enumerate(sources)]
    seen: dict[str, str] = {}
    for b in brokers:
        if b.name in seen:
            raise MqtoolError(f"{seen[b.name]} and {b.source} are both broker {b.name!r}; give "
                              f"--broker-name once per path")
        seen[b.name] = b.source
    return brokers


def check_output(out: str | None, overwrite: bool, *, exists=None, is_empty_dir=None) -> None:
    """Refuse an output directory that holds something, unless ``overwrite``: one audit's tables
    must not mix with another's. Local paths are checked here; other schemes through the
    callables (the session's Hadoop FileSystem)."""
    if out is None or overwrite:
        return
    if is_local(out):
        path = Path(local_path(out))
        if not path.exists():
            return
        if path.is_dir() and not any(path.iterdir()):
            return
    elif exists is None or not exists(out) or is_empty_dir(out):
        return
    raise MqtoolError(f"{out} exists and is not empty; give --overwrite or a new directory")


# --- splits --------------------------------------------------------------------------------------

def make_splits(brokers: list[BrokerInput], split_size: int = DEFAULT_SPLIT_SIZE) -> list[Split]:
    """Byte ranges of every non-empty CommitLog file: ceil(size / split_size) per file."""
    splits = []
    for broker in brokers:
        for f in broker.files:
            if f.length <= 0:
                continue
            for index, start in enumerate(range(0, f.length, split_size)):
                splits.append(Split(broker.name, f.url, f.name, f.base_offset, f.length, index,
                                    start, min(f.length, start + split_size)))
    return splits


# --- what the listing alone shows ----------------------------------------------------------------

def layout_findings(broker: BrokerInput) -> list[dict]:
    """CL_FILE_SIZE, CL_GAP and CL_STRAY_FILE of the CommitLog directory, located (file, offset)
    as ``verify`` locates them. ``verify`` words an empty last file by broker version; without
    the store's version files a Spark audit says what each version does."""
    out = []
    size = broker.file_size
    prefix = "commitlog/"
    for i, f in enumerate(broker.files):
        rel = f.label()
        if f.length != size:
            last_empty = i == len(broker.files) - 1 and f.length == 0
            text = (f"{f.length} bytes, but the store's files are {size} bytes"
                    + ("; 5.1.3+ deletes an empty last file on load (4.9 refuses to load the "
                       "store)" if last_empty else "; the broker refuses to load the store"))
            out.append(finding(broker.name, "CL_FILE_SIZE", rel, 0, text,
                                severity=WARNING if last_empty else ERROR))
        if i:
            prev = broker.files[i - 1]
            if f.base_offset != prev.base_offset + size:
                delta = f.base_offset - (prev.base_offset + size)
                out.append(finding(broker.name, "CL_GAP", rel, 0,
                                    f"starts at {f.base_offset}, but the previous file ends at "
                                    f"{prev.base_offset + size}: "
                                    + (f"{delta} bytes missing" if delta > 0 else
                                       f"overlaps by {-delta} bytes"),
                                    commitlog_offset=f.base_offset,
                                    details={"missing_bytes": delta}))
    stray_prefix = "" if broker.bare else prefix
    for name in broker.stray:
        out.append(finding(broker.name, "CL_STRAY_FILE", stray_prefix + name, 0,
                            "not named as the broker names its files; the broker ignores it "
                            "(or fails on it)"))
    return out


def finding(broker: str, code: str, file: str, offset: int, message: str, *,
             severity: str | None = None, commitlog_offset: int | None = None,
             topic: str | None = None, queue_id: int | None = None,
             queue_offset: int | None = None, count: int | None = None,
             details: dict | None = None) -> dict:
    return {"broker": broker, "code": code, "severity": severity or CODES[code][0], "file": file,
            "offset": int(offset), "message": message, "commitlog_offset": commitlog_offset,
            "topic": topic, "queue_id": queue_id, "queue_offset": queue_offset, "count": count,
            "details": details}

