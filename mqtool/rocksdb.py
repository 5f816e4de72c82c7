"""Reading a RocksDB database of a store without writing into the store.

RocksDB, even opened read-only, is not a reader mqtool lets near a store: the binding (rocksdict)
writes a ``rocksdict-config.json`` into the directory it opens, and a RocksDB build may take its
LOCK file. So every read goes through a *shadow*: a temporary folder holding copies of the
database's small files (CURRENT, MANIFEST-*, OPTIONS-*, IDENTITY, the write-ahead *.log) and hard
links to its immutable *.sst files (copies where the temporary folder is on another file system).
RocksDB never changes an SST once written, and read-only mode writes none, so the store's bytes,
modification times and directory listing stay as they were.

:func:`read_database` returns every key/value of every column family, in RocksDB's (bytewise)
order, as the database's own reader (the write-ahead log replayed, later SSTs winning) serves
them. A database RocksDB refuses to open or read (CURRENT naming a missing MANIFEST, a torn or
corrupted SST) raises :class:`RocksDBError` with RocksDB's own one-line reason.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .errors import MqtoolError, OptionalDependencyError

INSTALL_HINT = "pip install rocksdict (a default dependency of mqtool; wheels for Linux and macOS)"
# files RocksDB may rewrite (copied) and the immutable table files (linked)
_SKIPPED = {"LOCK"}
_TABLE_SUFFIXES = (".sst", ".blob")


class RocksDBError(MqtoolError):
    """A RocksDB database that cannot be opened or read as it is."""


@dataclass
class Database:
    """Every column family of a RocksDB database: name -> [(key, value)] in key order."""

    folder: Path
    families: dict[str, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    linked: int = 0      # SSTs hard-linked into the shadow
    copied: int = 0      # files copied into the shadow


def _rocksdict():
    try:
        import rocksdict
    except ImportError:
        raise OptionalDependencyError("reading a RocksDB database needs the rocksdict package: "
                                      + INSTALL_HINT) from None
    return rocksdict


@contextmanager
def shadow_of(folder: Path):
    """A temporary folder that RocksDB may open in place of ``folder``: small files copied,
    table files hard-linked (copied across file systems). Removed afterwards."""
    folder = Path(folder)
    shadow = Path(tempfile.mkdtemp(prefix="mqtool-rocksdb-"))
    counts = {"linked": 0, "copied": 0}
    try:
        for entry in sorted(folder.iterdir()):
            if not entry.is_file() or entry.name in _SKIPPED:
                continue
            target = shadow / entry.name
            if entry.name.endswith(_TABLE_SUFFIXES):
                try:
                    os.link(entry, target)
                    counts["linked"] += 1
                    continue
                except OSError:
                    pass
            shutil.copyfile(entry, target)
            counts["copied"] += 1
        yield shadow, counts
    finally:
        shutil.rmtree(shadow, ignore_errors=True)


def _one_line(err: BaseException, shadow: Path, folder: Path) -> str:
    """RocksDB's message on one line, naming the store's files rather than the shadow's."""
    text = " ".join(str(err).replace(str(shadow), str(folder)).split())
    return text[:300] or type(err).__name__


def _all_items(it) -> list[tuple[bytes, bytes]]:
    """Every key/value of an iterator, raising where RocksDB stopped on an error (a corrupted
    block ends an iteration silently unless its status is asked)."""
    items = []
    it.seek_to_first()
    while it.valid():
        items.append((it.key(), it.value()))
        it.next()
    it.status()   # raises RocksDB's error, if the iteration stopped on one
    return items


def read_database(folder: Path, *, label: str | None = None) -> Database:
    """Every key/value of the RocksDB database in ``folder``, read through a shadow."""
    folder = Path(folder)
    label = label or str(folder)
    rocksdict = _rocksdict()
    if not (folder / "CURRENT").is_file():
        raise RocksDBError(f"{label}: no CURRENT file: not a RocksDB database RocksDB can open")
    with shadow_of(folder) as (shadow, counts):
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(False)
        try:
            names = rocksdict.Rdict.list_cf(str(shadow), options)
            db = rocksdict.Rdict(str(shadow), options,
                                 column_families={name: rocksdict.Options(raw_mode=True)
                                                  for name in names if name != "default"},
                                 access_type=rocksdict.AccessType.read_only())
        except Exception as err:  # RocksDB's own errors carry no stable type in the binding
            raise RocksDBError(f"{label}: RocksDB cannot open it: "
                               f"{_one_line(err, shadow, folder)}") from None
        database = Database(folder, linked=counts["linked"], copied=counts["copied"])
        try:
            for name in names:
                family = db.get_column_family(name)
                read = rocksdict.ReadOptions()
                read.set_verify_checksums(True)
                database.families[name] = _all_items(family.iter(read))
        except Exception as err:
            raise RocksDBError(f"{label}: RocksDB cannot read it: "
                               f"{_one_line(err, shadow, folder)}") from None
        finally:
            db.close()
    return database
