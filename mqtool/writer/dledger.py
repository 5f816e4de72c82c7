"""The CommitLog of a DLedger-mode broker: every record inside a DLedger entry.

``DLedgerCommitLog`` hands each encoded record to DLedger (``DLedgerMmapFileStore.appendAsLeader``
over ``MmapFileList``), which puts the 48-byte entry header in front of it, appends the entry to
the data files of ``dledger-<selfId>/data/`` and a 32-byte unit to the DLedger index. An entry
goes into the current data file only if ``size + 8 <= remaining`` (``MmapFileList.preAppend``);
otherwise the file is closed by DLedger's blank: the int -1, then the bytes left, then zeros.
The record's commitLogOffset (its PHYSICALOFFSET, ConsumeQueue units, IndexFile entries) is the
entry's pos + 48. Layout and fields: :mod:`mqtool.formats.dledger`.
"""
from __future__ import annotations

from pathlib import Path

from ..codec import DLEDGER_BLANK, DLEDGER_ENTRY_HEADER, DLEDGER_INDEX_UNIT
from ..formats import dledger as dl_fmt
from .commitlog import CommitLogWriter
from .files import offset_file_name, open_existing_or_zero


class _DataFiles(CommitLogWriter):
    """The data files: CommitLog's append rule (``length + 8 <= remaining``), DLedger's blank."""

    @staticmethod
    def blank(remaining: int) -> bytes:
        return DLEDGER_BLANK.pack(dl_fmt.BLANK_MAGIC, remaining)


class DLedgerWriter:
    """Appends RocketMQ records as DLedger entries of one term, with their index units.

    It stands in for :class:`CommitLogWriter` in :class:`~mqtool.writer.store.StoreWriter`:
    :meth:`reserve` answers the record's commitLogOffset (entry pos + 48) and :meth:`write`
    writes the entry holding the record there. ``start_offset`` is where the data begins (0, or
    dividedCommitlogOffset for a store upgraded from a plain CommitLog), ``first_index`` the
    index of the first entry. ``offset`` is the end of the last entry (the broker's max offset)."""

    def __init__(self, directory: Path, data_file_size: int, *, start_offset: int = 0,
                 first_index: int = 0, term: int = 0,
                 index_units_per_file: int = dl_fmt.INDEX_UNITS_PER_FILE):
        self.directory = Path(directory)
        self.data_dir = self.directory / dl_fmt.DATA_DIR
        self.index_dir = self.directory / dl_fmt.INDEX_DIR
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.index_dir.mkdir(parents=True, exist_ok=True)
        self.data = _DataFiles(self.data_dir, data_file_size, start_offset)
        self.file_size = data_file_size
        self.term = term
        self.next_index = first_index
        self.index_file_size = index_units_per_file * dl_fmt.INDEX_UNIT_SIZE
        self._index_fh = None
        self._index_base = None

    @property
    def offset(self) -> int:
        return self.data.offset

    @property
    def last_index(self) -> int:
        """The index of the last entry written (first_index - 1 before any)."""
        return self.next_index - 1

    def reserve(self, length: int) -> int:
        """The commitLogOffset a record of ``length`` bytes will get, closing the current data
        file with a blank first when its entry does not fit."""
        return self.data.reserve(length + dl_fmt.ENTRY_HEADER_SIZE) + dl_fmt.ENTRY_HEADER_SIZE

    def write(self, offset: int, record: bytes) -> None:
        """The entry holding ``record`` (whose commitLogOffset is ``offset``), and its unit."""
        pos = offset - dl_fmt.ENTRY_HEADER_SIZE
        size = dl_fmt.ENTRY_HEADER_SIZE + len(record)
        index = self.next_index
        header = DLEDGER_ENTRY_HEADER.pack(dl_fmt.ENTRY_MAGIC, size, index, self.term, pos,
                                           0, 0, 0, len(record))
        self.data.write(pos, header + record)
        self._write_unit(index, DLEDGER_INDEX_UNIT.pack(dl_fmt.ENTRY_MAGIC, pos, size, index,
                                                        self.term))
        self.next_index = index + 1

    def _write_unit(self, index: int, unit: bytes) -> None:
        at = index * dl_fmt.INDEX_UNIT_SIZE
        base = at - at % self.index_file_size
        if self._index_base != base:
            if self._index_fh:
                self._index_fh.close()
            # a new index file is sparse: only the pages units are written to take space
            self._index_fh = open_existing_or_zero(self.index_dir / offset_file_name(base),
                                                   self.index_file_size)
            self._index_base = base
        self._index_fh.seek(at - base)
        self._index_fh.write(unit)

    def close(self) -> None:
        self.data.close()
        if self._index_fh:
            self._index_fh.flush()
            self._index_fh.close()
            self._index_fh = None
            self._index_base = None
