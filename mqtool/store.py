"""The store on disk: which files exist, what kind each is, and read-only access to their bytes.

``Store.open(path)`` takes a store root (commitlog/, consumequeue/, index/, checkpoint, ...), a
bare CommitLog directory, or a single file whose kind is recognised by :func:`identify_file`.
Nothing here opens a file for writing. Geometry (CommitLog file size, ConsumeQueue units per
file, IndexFile slots/entries) is inferred from the files, never assumed, and can be overridden.

The CommitLog's records live in one of two layouts, and this module is the one place that tells
them apart: plain ``commitlog/`` files, or DLedger-mode data files (``dledger-<id>/data/``,
:mod:`mqtool.formats.dledger`) where each record sits inside an entry with a 48-byte header. A
:class:`Segment` knows its layout from where its file lives; a record's global offset is its file
base plus its position in the file in both layouts (the broker's commitLogOffset = entry pos +
48), so everything above the scanner addresses records the same way. A store upgraded from a
plain CommitLog has both: plain files below dividedCommitlogOffset, DLedger files above.
"""
from __future__ import annotations

import bisect
import errno
import fcntl
import mmap
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import construct

from .config import JAVA_INT_MAX, ROCKSDB_DIRS, parse_fastjson, read_config_bytes, text_keys
from .errors import ParseError, StoreLayoutError, StoreNotFoundError
from .lock import held_here
from .mapping import data_runs, map_readonly, written_extent  # noqa: F401
from .formats import checkpoint as ckpt_fmt
from .formats import commitlog as cl_fmt
from .formats import consumequeue as cq_fmt
from .formats import dledger as dl_fmt
from .formats import indexfile as idx_fmt
from .vocabulary import (BACKUP_DIR, BACKUP_MANIFEST, DLEDGER_INDEX_KIND,  # noqa: F401
                         DLEDGER_TEXT_KIND, FILE_KINDS, STAGE_PREFIX)  # noqa: F401

OFFSET_NAME = re.compile(r"^\d{20}$")
INDEX_NAME = re.compile(r"^\d{17}$")


def parse_at(decl: construct.Construct, data, offset: int = 0, *, file: str = "", **context):
    """The only caller of construct's interpreted parse: errors become :class:`ParseError`."""
    try:
        return decl.parse(bytes(data[offset:]) if offset else bytes(data), **context)
    except construct.ConstructError as err:
        path = getattr(err, "path", "") or ""
        path = path.replace("(parsing)", "").strip(" ->")
        message = str(err).split("\n")[-1]
        message = re.sub(r"^Error in path.*?\s*", "", message).strip() or type(err).__name__
        raise ParseError(file, offset, path, message) from None


class MappedFile:
    """A read-only memory map of one file (an empty file maps to b"")."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fh = open(self.path, "rb")
        size = os.fstat(self._fh.fileno()).st_size
        self.data = map_readonly(self._fh.fileno()) if size else b""  # holes: no SIGBUS
        self.size = size

    def fileno(self) -> int:
        return self._fh.fileno()

    def close(self) -> None:
        if isinstance(self.data, mmap.mmap):
            try:
                self.data.close()
            except BufferError:  # a memoryview is still alive; the GC will unmap it
                pass
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


COMMITLOG_LAYOUT = "commitlog"    # records back to back, TOTALSIZE first, blank = size + magic
DLEDGER_LAYOUT = "dledger"        # each record inside a DLedger entry, blank = -1 + bytes left


def layout_of(path: Path) -> str:
    """The record layout of a CommitLog data file, from where it lives: DLedger keeps its data
    files in ``dledger-<selfId>/data/``."""
    parent = Path(path).parent
    if parent.name == dl_fmt.DATA_DIR and parent.parent.name.startswith(dl_fmt.DLEDGER_DIR_PREFIX):
        return DLEDGER_LAYOUT
    return COMMITLOG_LAYOUT
def data_extents(fh, size: int, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """[lo, hi) ranges of an open file inside [start, end) that may hold non-zero bytes: the
    file system's data extents (SEEK_DATA / SEEK_HOLE); a hole reads as zeros, so a sparse 6 MB
    ConsumeQueue file or 420 MB IndexFile is looked at only where something was written. Where
    the file system cannot tell, the whole range."""
    end = size if end is None else min(end, size)
    if start >= end:
        return []
    fd = fh.fileno()
    extents: list[tuple[int, int]] = []
    # lseek moves the descriptor's position under a buffered reader: put it back afterwards
    where = os.lseek(fd, 0, os.SEEK_CUR)
    try:
        for lo, hi in data_runs(fd, start):
            if lo >= end:
                break
            extents.append((lo, min(end, hi)))
            if hi >= end:
                break
    except (OSError, AttributeError):
        return [(start, end)]
    finally:
        os.lseek(fd, where, os.SEEK_SET)
    return extents


@dataclass(frozen=True)
class Segment:
    """One CommitLog (or offset-named queue) file. ``layout`` (COMMITLOG_LAYOUT or
    DLEDGER_LAYOUT) defaults to what :func:`layout_of` reads from the path."""

    path: Path
    base_offset: int
    length: int
    layout: str = ""

    def __post_init__(self):
        if not self.layout:
            object.__setattr__(self, "layout", layout_of(self.path))

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def is_dledger(self) -> bool:
        return self.layout == DLEDGER_LAYOUT

    @property
    def store_path(self) -> str:
        """The CommitLog file's path inside its store, as reports name it."""
        if self.is_dledger:
            return f"{self.path.parent.parent.name}/{dl_fmt.DATA_DIR}/{self.name}"
        return f"commitlog/{self.name}"


def _offset_files(directory: Path) -> tuple[list[Segment], list[Path]]:
    segments, stray = [], []
    if not directory.is_dir():
        return segments, stray
    for entry in sorted(directory.iterdir()):
        if entry.is_file() and OFFSET_NAME.match(entry.name):
            segments.append(Segment(entry, int(entry.name), entry.stat().st_size))
        elif not entry.name.startswith("."):
            stray.append(entry)
    segments.sort(key=lambda s: s.base_offset)
    return segments, stray


def _most_common(values, default):
    values = [v for v in values if v > 0]
    if not values:
        return default
    return Counter(values).most_common(1)[0][0]


def _queue_geometry(sizes: list[int], unit_size: int) -> int:
    """Units per file that the queue files' sizes show, or 0 when they show none to trust.

    The most common size is the geometry, as long as a broker could have mapped it: a size up to
    the broker's default (300,000 units) is taken as it is, the way the reference stores' small
    geometries are. A bigger one needs more evidence, because a lone oversized file (a damaged
    or hostile 2 GiB file) would otherwise make itself the geometry and hide its own size: it
    must be a whole number of units, fit the broker's int ``mappedFileSizeConsumeQueue``, and be
    the size of at least two files. Otherwise the default applies and the file's size is a
    finding (``--cq-units`` states a bigger configured geometry)."""
    size = _most_common(sizes, 0)
    if size <= cq_fmt.DEFAULT_CQ_UNITS_PER_FILE * unit_size:
        return size // unit_size
    if size % unit_size or size > JAVA_INT_MAX or sizes.count(size) < 2:
        return 0
    return size // unit_size


UPGRADED_LAYOUT = "dledger-upgraded"   # plain commitlog/ below dividedCommitlogOffset, DLedger above


def read_properties_file(path: Path) -> tuple[dict[str, str] | None, str | None, str | None]:
    """(values, file it came from, error) for a DLedger text file, falling back to ``.bak`` (the
    previous content, which DLedger keeps) when the file is missing, unreadable or empty."""
    errors = []
    for candidate in (path, path.with_name(path.name + ".bak")):
        if not candidate.is_file():
            continue
        try:
            text = candidate.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            errors.append(f"{candidate.name}: {err}")
            continue
        values = dl_fmt.parse_properties_text(text)
        if values:
            return values, candidate.name, "; ".join(errors) or None
        errors.append(f"{candidate.name}: no key=value line")
    return None, None, "; ".join(errors) or f"{path.name}: missing"


def properties_int(values: dict[str, str] | None, key: str) -> int | None:
    try:
        return int(values[key]) if values is not None else None
    except (KeyError, ValueError):
        return None


@dataclass
class DLedgerLog:
    """The files of ``dledger-<selfId>/``: data segments, DLedger index files, the checkpoint
    and currterm text files. Geometry (data file size, units per index file) comes from the
    files; nothing here reads more than a header or a unit."""

    directory: Path
    data_segments: list[Segment]
    index_files: list[Segment]
    stray_files: list[Path]

    @classmethod
    def beside(cls, directory: Path) -> DLedgerLog | None:
        """The DLedger files of the store whose ``commitlog/`` (or DLedger data directory) is
        ``directory``; None when there are none. Two ``dledger-*`` folders holding data files
        are an error: which one the broker uses depends on its dLegerSelfId."""
        directory = Path(directory)
        if layout_of(directory / "0") == DLEDGER_LAYOUT:
            return cls.load(directory.parent)
        if directory.name != "commitlog" or not directory.parent.is_dir():
            return None
        found = sorted(p for p in directory.parent.iterdir()
                       if p.name.startswith(dl_fmt.DLEDGER_DIR_PREFIX)
                       and (p / dl_fmt.DATA_DIR).is_dir())
        if len(found) > 1:
            raise StoreLayoutError(f"{directory.parent}: {len(found)} DLedger folders with data "
                                   f"({', '.join(p.name for p in found)}); point mqtool at one "
                                   "of their data/ folders")
        return cls.load(found[0]) if found else None

    @classmethod
    def load(cls, directory: Path) -> DLedgerLog:
        data, stray = _offset_files(directory / dl_fmt.DATA_DIR)
        index, index_stray = _offset_files(directory / dl_fmt.INDEX_DIR)
        return cls(Path(directory), data, index, stray + index_stray)

    @property
    def self_id(self) -> str:
        return self.directory.name[len(dl_fmt.DLEDGER_DIR_PREFIX):]

    @property
    def data_dir(self) -> Path:
        return self.directory / dl_fmt.DATA_DIR

    @property
    def index_dir(self) -> Path:
        return self.directory / dl_fmt.INDEX_DIR

    @property
    def index_file_size(self) -> int:
        return _most_common([f.length for f in self.index_files], dl_fmt.INDEX_FILE_SIZE)

    def checkpoint(self) -> tuple[dict[str, str] | None, str | None, str | None]:
        """committedIndex/endIndex as DLedger last persisted them (see read_properties_file)."""
        return read_properties_file(self.directory / dl_fmt.CHECKPOINT_FILE)

    def currterm(self) -> tuple[dict[str, str] | None, str | None, str | None]:
        """currTerm/voteLeader (see read_properties_file)."""
        return read_properties_file(self.directory / dl_fmt.CURRTERM_FILE)

    def index_unit(self, n: int):
        """The DLedger index unit of entry ``n`` (parsed), or None where no file holds it."""
        offset = n * dl_fmt.INDEX_UNIT_SIZE
        for f in self.index_files:
            if f.base_offset <= offset and offset + dl_fmt.INDEX_UNIT_SIZE <= f.base_offset + f.length:
                with open(f.path, "rb") as fh:
                    fh.seek(offset - f.base_offset)
                    data = fh.read(dl_fmt.INDEX_UNIT_SIZE)
                if len(data) < dl_fmt.INDEX_UNIT_SIZE:
                    return None
                return parse_at(dl_fmt.index_unit, data, file=f.name)
        return None

    def last_written_unit(self) -> int | None:
        """The number of the last index unit that is not all zeros (None: no such unit). The
        index file is sparse: only its written extents are read."""
        for f in reversed(self.index_files):
            with open(f.path, "rb") as fh:
                end = written_extent(fh.fileno(), f.length)
                chunk = 1 << 20
                while end > 0:
                    start = max(0, end - chunk)
                    fh.seek(start)
                    data = fh.read(end - start).rstrip(b"\0")
                    if data:
                        last_byte = start + len(data) - 1
                        return (f.base_offset + last_byte) // dl_fmt.INDEX_UNIT_SIZE
                    end = start
        return None

    def first_entry(self):
        """The header of the first entry of the first data file (parsed), or None when that file
        does not start with an entry."""
        for seg in self.data_segments:
            if seg.length < dl_fmt.ENTRY_HEADER_SIZE:
                continue
            with open(seg.path, "rb") as fh:
                data = fh.read(dl_fmt.ENTRY_HEADER_SIZE)
            header = parse_at(dl_fmt.entry_header, data, file=seg.name)
            return header if header.magic == dl_fmt.ENTRY_MAGIC else None
        return None


def check_file_size(segments: list[Segment], size: int,
                    option: str = "--commitlog-file-size") -> None:
    """Refuse (StoreLayoutError) a CommitLog file size that plain CommitLog ``segments``
    contradict: the broker names each file after its start offset, a multiple of the file size,
    and no file is longer than it."""
    for seg in segments:
        if seg.length > size:
            raise StoreLayoutError(f"{option} {size}: {seg.name} holds {seg.length:,} bytes, "
                                   f"more than a file of that size")
        if seg.base_offset % size:
            raise StoreLayoutError(f"{option} {size}: {seg.name} starts at an offset that is "
                                   f"no multiple of it (the broker names files after multiples "
                                   f"of the file size)")


class CommitLog:
    """The CommitLog segments of a store, addressed by global offset.

    ``directory`` is ``commitlog/`` (the store's DLedger data files are found beside it) or a
    DLedger data directory. For a pure DLedger store ``directory`` becomes the DLedger data
    directory; ``dledger`` describes the DLedger files (None in plain mode)."""

    def __init__(self, directory: Path, file_size: int | None = None,
                 extra_dirs: tuple[Path, ...] | list[Path] = ()):
        self.directory = Path(directory)
        # storePathCommitLog with several ','-separated directories, plus
        # readOnlyCommitLogStorePaths (MultiPathMappedFileQueue.load): the files of every
        # directory form one queue, in offset order, wherever each lies
        self.extra_dirs = tuple(Path(d) for d in extra_dirs)
        self.dledger = None if self.extra_dirs else DLedgerLog.beside(self.directory)
        if self.dledger is not None and self.directory == self.dledger.data_dir:
            plain, self.stray_files = [], []
        else:
            plain, self.stray_files = _offset_files(self.directory)
            for extra in self.extra_dirs:
                more, stray = _offset_files(extra)
                plain, self.stray_files = plain + more, self.stray_files + stray
            plain.sort(key=lambda s: s.base_offset)
            for a, b in zip(plain, plain[1:]):
                if a.base_offset == b.base_offset:
                    raise StoreLayoutError(f"CommitLog file {a.name} is in two directories "
                                           f"({a.path.parent} and {b.path.parent})")
        if self.dledger is not None:
            if not plain and not self.directory.is_dir():
                self.directory = self.dledger.data_dir
            self.stray_files = self.stray_files + self.dledger.stray_files
            self.segments = sorted(plain + self.dledger.data_segments,
                                   key=lambda s: (s.base_offset, s.layout))
        else:
            self.segments = plain
        self.plain_segments = plain
        self.inferred_file_size = _most_common([s.length for s in self.segments], 0)
        self.file_size = file_size or self.inferred_file_size or 1024 ** 3
        self._bases = [s.base_offset for s in self.segments]

    def check_file_size(self, size: int) -> None:
        """:func:`check_file_size` for the plain CommitLog files."""
        check_file_size(self.plain_segments, size)

    @property
    def directories(self) -> tuple[Path, ...]:
        """Every directory the CommitLog's files are read from (one unless multi-path)."""
        return (self.directory,) + self.extra_dirs

    @property
    def min_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else 0

    @property
    def layout(self) -> str:
        """COMMITLOG_LAYOUT, DLEDGER_LAYOUT, or UPGRADED_LAYOUT (plain files, then DLedger)."""
        if self.dledger is None:
            return COMMITLOG_LAYOUT
        return UPGRADED_LAYOUT if self.plain_segments else DLEDGER_LAYOUT

    @property
    def divided_offset(self) -> int | None:
        """dividedCommitlogOffset of an upgraded store: where the DLedger data begins."""
        if self.dledger is None or not self.plain_segments or not self.dledger.data_segments:
            return None
        return self.dledger.data_segments[0].base_offset

    @property
    def end_offset(self) -> int:
        """End of the last file (not of the data in it)."""
        if not self.segments:
            return 0
        last = self.segments[-1]
        return last.base_offset + max(last.length, self.file_size)

    def segment_for(self, offset: int) -> Segment | None:
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        return seg if offset < seg.base_offset + seg.length else None

    def read(self, offset: int, length: int) -> bytes:
        """Bytes at a global offset (possibly fewer at a file end; b"" where no file is)."""
        seg = self.segment_for(offset)
        if seg is None:
            return b""
        with open(seg.path, "rb") as fh:
            fh.seek(offset - seg.base_offset)
            return fh.read(length)

    def __len__(self) -> int:
        return len(self.segments)


@dataclass
class ConsumeQueue:
    """One topic/queue directory of ConsumeQueue (or BatchConsumeQueue) files."""

    topic: str
    queue_id: int
    directory: Path
    segments: list[Segment]
    unit_size: int = cq_fmt.CQ_STORE_UNIT_SIZE
    stray_files: list[Path] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.topic}-{self.queue_id}"


@dataclass(frozen=True)
class IndexFileInfo:
    path: Path
    length: int

    @property
    def name(self) -> str:
        return self.path.name


def read_fastjson(path: Path):
    """Parse fastjson output, whose Map<Integer, ...> keys are unquoted (``{0:123}``), with the
    one fastjson reader (:func:`mqtool.config.parse_fastjson`), object keys as the text has
    them (``"0"``, as JSON has them). A blank file is unreadable; text fastjson would not decode
    raises ValueError."""
    data = read_config_bytes(Path(path))
    if not data.strip():
        raise ValueError("empty file")
    return text_keys(parse_fastjson(data.decode("utf-8", errors="replace")))


def lock_holder(path: Path) -> bool:
    """True when another process holds a POSIX record lock on byte 0 of ``path`` (the lock the
    broker's FileChannel.tryLock takes). Opens the file read-only and takes no lock itself."""
    if held_here(path):  # ours: opening and closing the file here would drop it (POSIX locks)
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        import struct
        # struct flock: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
        request = struct.pack("hhqqi", fcntl.F_RDLCK, os.SEEK_SET, 0, 1, 0)
        try:
            answer = fcntl.fcntl(fd, fcntl.F_GETLK, request + b"\0" * 4)
        except OSError as err:
            if err.errno in (errno.EACCES, errno.EAGAIN):
                return True
            return False
        l_type = struct.unpack("hhqqi", answer[:struct.calcsize("hhqqi")])[0]
        return l_type != fcntl.F_UNLCK
    finally:
        os.close(fd)


_STORE_MARKS = ("commitlog", "consumequeue", "checkpoint", "index")


def live_lock_of(path: Path) -> Path | None:
    """The lock file of the store ``path`` belongs to (a store root, a bare CommitLog directory,
    a file inside a store) when a live process holds it, else None. The store is the nearest
    folder at or above ``path`` holding ``lock`` beside its data."""
    path = Path(path).absolute()
    folders = ([path] if path.is_dir() else []) + list(path.parents)[:4]
    for folder in folders:
        lock = folder / "lock"
        if lock.is_file() and any((folder / name).exists() for name in _STORE_MARKS):
            return lock if lock_holder(lock) else None
    return None


class Store:
    """A RocketMQ store root (or the parts of one that exist)."""

    def __init__(self, root: Path, *, commitlog_file_size: int | None = None,
                 cq_units_per_file: int | None = None, index_slots: int | None = None,
                 index_entries: int | None = None, commitlog_dirs: list[Path] | None = None):
        self.root = Path(root)
        if not self.root.exists():
            raise StoreNotFoundError(f"{root}: no such file or directory")
        if not self.root.is_dir():
            raise StoreLayoutError(f"{root}: not a directory")
        commitlog_dir = self.root / "commitlog"
        extra_dirs: list[Path] = []
        if commitlog_dirs:
            # the CommitLog directories a broker config names (storePathCommitLog,
            # readOnlyCommitLogStorePaths) instead of <root>/commitlog
            for d in commitlog_dirs:
                if not Path(d).is_dir():
                    raise StoreNotFoundError(f"{d}: CommitLog directory not found (named by "
                                             "the CommitLog path list)")
            commitlog_dir, extra_dirs = Path(commitlog_dirs[0]), [Path(d) for d in
                                                                  commitlog_dirs[1:]]
        elif not commitlog_dir.is_dir() and _offset_files(self.root)[0] and not (
                self.root / "consumequeue").is_dir():
            # a bare CommitLog directory
            commitlog_dir = self.root
        self.commitlog = CommitLog(commitlog_dir, commitlog_file_size, extra_dirs)
        self.commitlog_dirs_given = bool(commitlog_dirs)
        self.is_bare_commitlog = commitlog_dir == self.root
        if not self.is_bare_commitlog and self.commitlog.dledger is None and not holds_store_parts(
                self.root):
            raise not_a_store(root)
        self.consume_queues = self._load_queues("consumequeue", cq_fmt.CQ_STORE_UNIT_SIZE)
        self.batch_consume_queues = self._load_queues("batchconsumequeue",
                                                      cq_fmt.BATCH_CQ_STORE_UNIT_SIZE)
        cq_sizes = [s.length for q in self.consume_queues for s in q.segments]
        inferred_units = _queue_geometry(cq_sizes, cq_fmt.CQ_STORE_UNIT_SIZE)
        self.inferred_cq_units_per_file = inferred_units or None
        self.cq_units_per_file = (cq_units_per_file or inferred_units
                                  or cq_fmt.DEFAULT_CQ_UNITS_PER_FILE)
        bcq_sizes = [s.length for q in self.batch_consume_queues for s in q.segments]
        self.bcq_units_per_file = (_queue_geometry(bcq_sizes, cq_fmt.BATCH_CQ_STORE_UNIT_SIZE)
                                   or cq_fmt.DEFAULT_CQ_UNITS_PER_FILE)
        self.index_files = []
        index_dir = self.root / "index"
        self.index_stray = []
        if index_dir.is_dir():
            for entry in sorted(index_dir.iterdir()):
                if entry.is_file() and INDEX_NAME.match(entry.name):
                    self.index_files.append(IndexFileInfo(entry, entry.stat().st_size))
                elif not entry.name.startswith("."):
                    self.index_stray.append(entry)
        self.index_slots, self.index_entries = self._index_geometry(index_slots, index_entries)

    @staticmethod
    def refuse_unexplained_layout(root: Path, command: str) -> None:
        """Raise StoreLayoutError (exit 2) naming what ``root`` holds that mqtool cannot explain
        (:func:`unexplained_layout`). Every mutating command calls this before anything else."""
        if Path(root).is_dir() and not _offset_files(Path(root))[0] and not holds_store_parts(root):
            raise not_a_store(root)
        findings = unexplained_layout(root, command)
        if findings:
            why = ("mqtool never writes into a RocksDB database nor repairs what one indexes"
                   if rocksdb_parts(root) else "a layout mqtool does not fully understand")
            raise StoreLayoutError(f"{root}: {command} refused: the store holds "
                                   + "; ".join(findings) + f", {why}; nothing was changed")

    # -- construction helpers ------------------------------------------------------------------
    def _load_queues(self, dirname: str, unit_size: int) -> list[ConsumeQueue]:
        queues = []
        base = self.root / dirname
        if not base.is_dir():
            return queues
        for topic_dir in sorted(base.iterdir()):
            if not topic_dir.is_dir():
                continue
            for qdir in sorted(topic_dir.iterdir(), key=lambda p: (len(p.name), p.name)):
                if not qdir.is_dir() or not re.fullmatch(r"-?\d+", qdir.name):
                    continue  # the broker ignores non-integer queue directories
                segments, stray = _offset_files(qdir)
                queues.append(ConsumeQueue(topic_dir.name, int(qdir.name), qdir, segments,
                                           unit_size, stray))
        return queues

    def _index_geometry(self, slots, entries):
        if slots and entries:
            return slots, entries
        sizes = [f.length for f in self.index_files]
        size = _most_common(sizes, 0)
        if slots and not entries:
            return slots, (size - idx_fmt.INDEX_HEADER_SIZE - 4 * slots) // 20 if size else 4 * slots
        if entries and not slots:
            return ((size - idx_fmt.INDEX_HEADER_SIZE - 20 * entries) // 4 if size else entries // 4,
                    entries)
        guesses = idx_fmt.geometries_for_size(size) if size else []
        if guesses:
            return guesses[0]
        return idx_fmt.DEFAULT_SLOT_COUNT, idx_fmt.DEFAULT_ENTRY_COUNT

    @property
    def layout(self) -> str:
        """How the CommitLog's records are laid out: COMMITLOG_LAYOUT, DLEDGER_LAYOUT or
        UPGRADED_LAYOUT (see :class:`CommitLog`)."""
        return self.commitlog.layout

    @property
    def dledger(self) -> DLedgerLog | None:
        return self.commitlog.dledger

    @property
    def rocksdb(self) -> list[RocksDBPart]:
        """The store's RocksDB databases (:func:`rocksdb_parts`), found once."""
        if not hasattr(self, "_rocksdb"):
            self._rocksdb = [] if self.is_bare_commitlog else rocksdb_parts(self.root)
        return self._rocksdb

    @property
    def rocksdb_cq(self) -> RocksDBPart | None:
        """The RocksDB ConsumeQueue database (pure RocksDB or a CombineConsumeQueue's), if any."""
        return next((p for p in self.rocksdb if p.kind in (ROCKSDB_CQ, COMBINE_CQ)), None)

    @staticmethod
    def queues_live_in_rocksdb(root: Path) -> bool:
        """True when ``root`` is a store whose ConsumeQueues live only in RocksDB and which
        holds nothing else mqtool cannot explain (RocksDB metadata under config/ aside)."""
        parts = rocksdb_parts(root)
        if not any(p.kind == ROCKSDB_CQ for p in parts):
            return False
        phrases = {p.phrase for p in parts}
        return all(f in phrases for f in unexplained_layout(root, "rebuild-queues"))

    @property
    def queues_in_rocksdb(self) -> bool:
        """True when the ConsumeQueues live only in RocksDB (no file ConsumeQueue to check)."""
        part = self.rocksdb_cq
        return part is not None and part.kind == ROCKSDB_CQ

    # -- small files ---------------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> Path:
        return self.root / "checkpoint"

    def read_checkpoint(self):
        """The parsed checkpoint, or None when absent. A short file is an error."""
        path = self.checkpoint_path
        if not path.is_file():
            return None
        data = path.read_bytes()
        if len(data) < 40:
            raise ParseError(str(path), 0, "", f"checkpoint is {len(data)} bytes, expected 4096")
        return parse_at(ckpt_fmt.checkpoint, data.ljust(ckpt_fmt.CHECKPOINT_SIZE, b"\0")[:4096],
                        file=str(path))

    @property
    def abort_exists(self) -> bool:
        return (self.root / "abort").exists()

    def abort_content(self) -> str | None:
        path = self.root / "abort"
        if not path.is_file():
            return None
        return path.read_bytes().decode("utf-8", errors="replace").strip()

    def lock_held(self) -> bool:
        path = self.root / "lock"
        return path.is_file() and lock_holder(path)

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        for q in self.consume_queues:
            if q.topic == topic and q.queue_id == queue_id:
                return q
        return None

    def relative(self, path: Path) -> str:
        try:
            return Path(path).relative_to(self.root).as_posix()
        except ValueError:
            return str(path)


# -- what a store root holds ----------------------------------------------------------------------
# Folders a 4.x/5.x broker in plain CommitLog mode (or mqtool itself) leaves in the store root, and
# the part of each that mqtool reads and repairs. A folder outside this list that holds data
# belongs to a layout mqtool does not know (DLedger, RocksDB queues, a tiered store, ...): its
# repairs would leave it inconsistent with what they change, so they refuse the store instead.
KNOWN_ROOT_DIRS = ("commitlog", "consumequeue", "batchconsumequeue", "index", "config",
                   "timerlog", "compaction")
# derived from the CommitLog: present with data while commitlog/ is missing, they index records
# that live somewhere mqtool does not look
DERIVED_DIRS = ("consumequeue", "batchconsumequeue", "index", "timerlog")
# compaction/ is understood only while it holds the position checkpoint a 5.x broker persists
# with no compaction topic; compactionLog/ and compactionCq/ are the data of compaction topics
COMPACTION_FILES = ("position-checkpoint", "position-checkpoint.bak")


def _holds_data(path: Path) -> bool:
    """True when ``path`` is, or has anywhere below it, a regular file of at least one byte."""
    if path.is_file():
        return path.stat().st_size > 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                if os.lstat(os.path.join(folder, name)).st_size > 0:
                    return True
            except OSError:
                continue
    return False


def _is_mqtool_backup(path: Path) -> bool:
    """A folder of mqtool repair backups (--backup-dir may point inside the store root)."""
    return (path / BACKUP_MANIFEST).is_file() or any(
        (sub / BACKUP_MANIFEST).is_file() for sub in path.iterdir() if sub.is_dir())


# mutating commands that know a DLedger-mode store (one dledger-<id>/ with data/; no commitlog/,
# or an upgraded store's, ending where the DLedger data begins): recover follows DLedger's own
# recovery, truncate cuts at an entry, the rebuilds read the records inside the entries
DLEDGER_AWARE_COMMANDS = ("recover", "truncate", "rebuild-index", "rebuild-queues", "undo",
                          "fixture damage")


# mutating commands that know a store whose ConsumeQueues live only in RocksDB: recover cuts the
# CommitLog, rebuilds the index and writes the checkpoint, leaving RocksDB to the broker's start;
# undo puts back what it changed. Neither writes into the database.
ROCKSDB_AWARE_COMMANDS = ("recover", "undo")


def _known_dledger_layout(root: Path) -> bool:
    folders = [p for p in root.iterdir() if p.name.startswith(dl_fmt.DLEDGER_DIR_PREFIX)]
    if len(folders) != 1 or not (folders[0] / dl_fmt.DATA_DIR).is_dir():
        return False
    if not (root / "commitlog").exists():
        return True
    # upgraded: plain and data files of one size, the first data file where the plain ones end
    plain, data = ([p for p in sorted(d.iterdir()) if OFFSET_NAME.match(p.name)]
                   for d in (root / "commitlog", folders[0] / dl_fmt.DATA_DIR))
    size = plain[-1].stat().st_size if plain and data else -1
    return int(plain[-1].name) + size == int(data[0].name) and \
        all(p.stat().st_size == size for p in plain + data) if size >= 0 else False


STORE_PARTS = ("commitlog", "consumequeue", "index", "checkpoint", "batchconsumequeue")


def _holds_dledger_folder(root: Path) -> bool:
    return any(p.is_dir() and p.name.startswith(dl_fmt.DLEDGER_DIR_PREFIX) for p in root.iterdir())


def holds_store_parts(root: Path) -> bool:
    """Whether ``root`` holds anything a broker's store root does (its folders, its checkpoint,
    a DLedger folder, a RocksDB database)."""
    root = Path(root)
    return any((root / name).exists() for name in STORE_PARTS) or _holds_dledger_folder(root) \
        or bool(rocksdb_parts(root))


def not_a_store(root) -> StoreLayoutError:
    below = store_below(Path(root))
    return StoreLayoutError(
        f"{root}: not a RocketMQ store (no commitlog/, consumequeue/, index/ or checkpoint)"
        + (f": did you mean {below}?" if below is not None else ""))


def store_below(folder: Path, depth: int = 3, budget: int = 500) -> Path | None:
    """The first store root (a folder holding commitlog/ or a DLedger folder) at most ``depth``
    levels below ``folder``, breadth first, looking into at most ``budget`` folders: the usual
    slip is naming a folder above the store. None when there is none that near."""
    level = [Path(folder)]
    for _ in range(depth):
        below = []
        for parent in level:
            try:
                below += sorted(p for p in parent.iterdir()
                                if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            if len(below) > budget:
                return None
        for child in below:
            try:
                if (child / "commitlog").is_dir() or _holds_dledger_folder(child):
                    return child
            except OSError:
                continue
        budget -= len(below)
        level = below
    return None


def unexplained_layout(root: Path, command: str | None = None) -> list[str]:
    """What the store root holds that ``command`` (None: any mutating command) does not fully
    understand, one phrase per finding (empty: a plain CommitLog store, a DLedger store for
    the DLEDGER_AWARE_COMMANDS, or nothing mqtool would have to leave behind untouched).

    Files at the root that no broker reads (notes, scripts) are not findings: a repair neither
    reads nor changes them. Folders holding data are, unless mqtool knows what they are."""
    root = Path(root)
    if not root.is_dir():
        return []
    dledger_known = command in DLEDGER_AWARE_COMMANDS and _known_dledger_layout(root)
    # mqtool never writes into a RocksDB database, nor repairs what one indexes
    rocksdb = rocksdb_parts(root)
    findings = [part.phrase for part in rocksdb
                if not (part.kind == ROCKSDB_CQ and command in ROCKSDB_AWARE_COMMANDS)]
    rocksdb_dirs = {part.folder for part in rocksdb}
    entries = sorted(root.iterdir(), key=lambda p: p.name)
    for entry in entries:
        name = entry.name
        if not entry.is_dir() or name in rocksdb_dirs:
            continue
        if name.startswith(dl_fmt.DLEDGER_DIR_PREFIX):
            if not dledger_known:
                upgraded = command in DLEDGER_AWARE_COMMANDS and (root / "commitlog").is_dir()
                findings.append(f"{name}/ (a DLedger-mode CommitLog)" + (
                    ", which does not continue commitlog/ (data files of its file size from "
                    "where its last file ends)" if upgraded else ""))
        elif name in KNOWN_ROOT_DIRS or name == BACKUP_DIR or name.startswith(STAGE_PREFIX):
            if name == "compaction":
                extra = [p.name + ("/" if p.is_dir() else "") for p in sorted(entry.iterdir())
                         if p.name not in COMPACTION_FILES and _holds_data(p)]
                if extra:
                    findings.append(f"compaction/{extra[0]} (5.x compaction-topic data)")
        elif (entry / "commitlog").is_dir():
            # the usual slip: the folder above the store was named
            findings.append(f"{name}/ (a store root of its own: did you mean {entry}?)")
        elif _holds_data(entry) and not _is_mqtool_backup(entry):
            findings.append(f"{name}/ (an unknown folder that holds data)")
    if not (root / "commitlog").is_dir() and not dledger_known:
        derived = [d + "/" for d in DERIVED_DIRS if (root / d).is_dir() and _holds_data(root / d)]
        if derived:
            findings.append(f"{' and '.join(derived)} with data but no commitlog/")
    return findings


# -- RocksDB databases inside a store -----------------------------------------------------------
# A 5.2+ broker with storeType=defaultRocksDB keeps its ConsumeQueues in a RocksDB database
# directly in consumequeue/ (newer code: consumequeue_rocksdb/ with useSeparateStorePathForRocksdbCQ);
# the CombineConsumeQueueStore (rocksdbCQDoubleWriteEnable) writes file ConsumeQueues beside it;
# RocksDB metadata managers keep their tables under config/ (config.ROCKSDB_DIRS).
ROCKSDB_CQ = "rocksdb-cq"              # the ConsumeQueues live only in RocksDB
COMBINE_CQ = "combine-cq"              # file ConsumeQueues and a RocksDB ConsumeQueue side by side
ROCKSDB_METADATA = "rocksdb-metadata"  # config/<table>/ is a RocksDB database
ROCKSDB_CQ_DIRS = ("consumequeue", "consumequeue_rocksdb")


@dataclass(frozen=True)
class RocksDBPart:
    """One RocksDB database of a store: what it holds, its folder inside the store, and the files
    that show it is RocksDB."""

    kind: str
    folder: str
    evidence: str

    @property
    def phrase(self) -> str:
        what = {ROCKSDB_CQ: "a RocksDB ConsumeQueue (storeType=defaultRocksDB)",
                COMBINE_CQ: "a CombineConsumeQueue: file ConsumeQueues beside a RocksDB one",
                ROCKSDB_METADATA: "RocksDB metadata"}[self.kind]
        return f"{self.folder}/ ({what}: {self.evidence})"


def rocksdb_evidence(folder: Path) -> str | None:
    """The files that make ``folder`` a RocksDB database (CURRENT naming a MANIFEST, MANIFEST-*,
    OPTIONS-*, *.sst, *.log), or None when it holds neither CURRENT nor a MANIFEST. Reads only
    CURRENT (a few bytes)."""
    folder = Path(folder)
    try:
        names = sorted(p.name for p in folder.iterdir() if p.is_file())
    except OSError:
        return None
    manifests = [n for n in names if n.startswith("MANIFEST-")]
    if "CURRENT" not in names and not manifests:
        return None
    parts = []
    if "CURRENT" in names:
        try:
            named = (folder / "CURRENT").read_bytes()[:256].decode("ascii", "replace").strip()
        except OSError:
            named = "?"
        parts.append(f"CURRENT names {named or 'nothing'}")
        manifests = [n for n in manifests if n != named]
    parts += manifests + [n for n in names if n.startswith("OPTIONS-")]
    for ext in (".sst", ".log"):
        count = sum(n.endswith(ext) for n in names)
        if count:
            parts.append(f"{count} {ext} file{'s' if count != 1 else ''}")
    return ", ".join(parts)


def _file_queue_count(consumequeue: Path) -> int:
    """How many <topic>/<queueId>/ folders of consumequeue/ hold offset-named files."""
    count = 0
    if not consumequeue.is_dir():
        return 0
    for topic in consumequeue.iterdir():
        if not topic.is_dir():
            continue
        for queue in topic.iterdir():
            if queue.is_dir() and any(OFFSET_NAME.match(p.name) for p in queue.iterdir()):
                count += 1
    return count


def rocksdb_parts(root: Path) -> list[RocksDBPart]:
    """Every RocksDB database of the store at ``root``: its ConsumeQueue database (RocksDB only,
    or a CombineConsumeQueue's) and RocksDB metadata under config/."""
    root = Path(root)
    parts = []
    file_queues = _file_queue_count(root / "consumequeue")
    for name in ROCKSDB_CQ_DIRS:
        evidence = rocksdb_evidence(root / name)
        if evidence is None:
            continue
        if file_queues:
            evidence += f"; {file_queues} file ConsumeQueue{'s' if file_queues != 1 else ''}"
        parts.append(RocksDBPart(COMBINE_CQ if file_queues else ROCKSDB_CQ, name, evidence))
    config_dir = root / "config"
    for name, what in ROCKSDB_DIRS.items():
        folder = config_dir / name
        if folder.is_dir() and _holds_data(folder):
            evidence = rocksdb_evidence(folder) or "no CURRENT/MANIFEST: maybe not RocksDB"
            parts.append(RocksDBPart(ROCKSDB_METADATA, f"config/{name}", f"{what}; {evidence}"))
    return parts


# -- single files --------------------------------------------------------------------------------
# the kinds of a single file: mqtool.vocabulary (the command line lists them from there)


def identify_file(path: Path) -> str:
    """The kind of a single store file, from its path, name and size (and first bytes when the
    name alone is ambiguous). Raises StoreLayoutError when it is none of the known kinds."""
    path = Path(path)
    if not path.exists():
        raise StoreNotFoundError(f"{path}: no such file or directory")
    if not path.is_file():
        raise StoreLayoutError(f"{path}: not a regular file")
    name, parts = path.name, path.resolve().parts
    size = path.stat().st_size
    if any(part.startswith(dl_fmt.DLEDGER_DIR_PREFIX) for part in parts[:-1]):
        if OFFSET_NAME.match(name) and layout_of(path) == DLEDGER_LAYOUT:
            return "commitlog"  # CommitLog records inside DLedger entries
        if OFFSET_NAME.match(name) and path.parent.name == dl_fmt.INDEX_DIR:
            return DLEDGER_INDEX_KIND
        if name in (dl_fmt.CHECKPOINT_FILE, dl_fmt.CURRTERM_FILE) or name in (
                dl_fmt.CHECKPOINT_FILE + ".bak", dl_fmt.CURRTERM_FILE + ".bak"):
            return DLEDGER_TEXT_KIND
        raise StoreLayoutError(f"{path}: not a DLedger file of a known kind")
    if name == "checkpoint":
        return "checkpoint"
    if name in ("abort", "abort.bak"):
        return "abort"
    if name == "lock":
        return "lock"
    if name == "timerwheel":
        return "timerwheel"
    if name == "timercheck":
        return "timercheck"
    if path.parent.name == "config" or name.endswith(".json") or name.endswith(".json.bak"):
        return "config"
    if INDEX_NAME.match(name):
        return "index"
    if OFFSET_NAME.match(name):
        for kind in ("batchconsumequeue", "consumequeue", "timerlog", "commitlog"):
            if kind in parts[:-1]:
                return kind
        # unknown parent: look at the bytes
        with open(path, "rb") as fh:
            head = fh.read(8)
        if len(head) == 8 and int.from_bytes(head[4:8], "big") in cl_fmt.MESSAGE_MAGIC_CODES:
            return "commitlog"
        if size % cq_fmt.CQ_STORE_UNIT_SIZE == 0:
            return "consumequeue"
    raise StoreLayoutError(f"{path}: not a RocketMQ store file of a known kind")


def queue_of_file(path: Path) -> tuple[str, int]:
    """(topic, queueId) from ``.../consumequeue/<topic>/<queueId>/<file>``."""
    path = Path(path).resolve()
    try:
        return path.parent.parent.name, int(path.parent.name)
    except ValueError:
        return path.parent.parent.name, -1
