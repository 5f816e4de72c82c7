"""The CommitLog append path (also the TimerLog's): records and end-of-file blanks."""
from __future__ import annotations

from pathlib import Path

from ..codec import BLANK_RECORD
from ..formats import commitlog as cl_fmt
from .files import offset_file_name, open_existing_or_zero


class CommitLogWriter:
    """Appends records like CommitLog.doAppend: a record goes into the current file only if
    ``length + 8 <= remaining``; otherwise an 8-byte blank record closes the file."""

    def __init__(self, directory: Path, file_size: int, start_offset: int = 0,
                 directories: list[Path] | None = None):
        self.directory = Path(directory)
        # a multi-path CommitLog (storePathCommitLog "a,b"): MultiPathMappedFileQueue creates
        # file n in the (n % count)-th of the sorted writable directories
        self.directories = sorted(Path(d) for d in directories) if directories else None
        self.file_size = file_size
        self.offset = start_offset
        self._fh = None
        self._file_base = None

    def _open_for(self, offset: int):
        base = offset - offset % self.file_size
        if self._file_base != base:
            if self._fh:
                self._fh.close()
            self._fh = open_existing_or_zero(self.directory_for(base) / offset_file_name(base),
                                              self.file_size)
            self._file_base = base
        return self._fh

    def directory_for(self, base: int) -> Path:
        """The directory the file starting at ``base`` is created in."""
        if not self.directories:
            return self.directory
        directory = self.directories[(base // self.file_size) % len(self.directories)]
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def reserve(self, length: int) -> int:
        """The offset a record of ``length`` bytes will get, writing a blank record first when
        it does not fit in the current file."""
        if length + cl_fmt.END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise ValueError(f"a {length}-byte record cannot fit in a {self.file_size}-byte file")
        remaining = self.file_size - self.offset % self.file_size
        if length + cl_fmt.END_FILE_MIN_BLANK_LENGTH > remaining:
            fh = self._open_for(self.offset)
            fh.seek(self.offset - self._file_base)
            fh.write(self.blank(remaining))
            self.offset += remaining
        return self.offset

    @staticmethod
    def blank(remaining: int) -> bytes:
        """What closes a file with ``remaining`` bytes left (the rest stays zero)."""
        return BLANK_RECORD.pack(remaining, cl_fmt.BLANK_MAGIC_CODE)

    def write(self, offset: int, record: bytes) -> None:
        fh = self._open_for(offset)
        fh.seek(offset - self._file_base)
        fh.write(record)
        self.offset = offset + len(record)

    def ensure_current_file(self) -> None:
        """Create the (empty) file the next record would go to, as the broker's preallocation does."""
        self._open_for(self.offset)

    def close(self) -> None:
        if self._fh:
            self._fh.flush()
            self._fh.close()
            self._fh = None
            self._file_base = None
