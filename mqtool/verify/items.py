"""Sorted fixed-size items in files (ConsumeQueue units, index entries) read by chunks: the
cursors the CommitLog checks walk alongside the scan, and the file descriptors they share."""
from __future__ import annotations

import bisect
import collections
import os
import struct
from dataclasses import dataclass


_CHUNK_ITEMS = 512
_END = 1 << 63   # a key past every CommitLog offset


# --- sorted fixed-size items in files (CQ units, index entries), read by chunks ---------------------


class _FdCache:
    """A few read-only descriptors kept open; queues can outnumber the process's fd limit."""

    def __init__(self, size: int = 128):
        self.size = size
        self.fds: collections.OrderedDict[str, int] = collections.OrderedDict()

    def pread(self, path: str, length: int, position: int) -> bytes:
        fd = self.fds.get(path)
        if fd is None:
            fd = os.open(path, os.O_RDONLY)
            self.fds[path] = fd
            if len(self.fds) > self.size:
                _, old = self.fds.popitem(last=False)
                os.close(old)
        else:
            self.fds.move_to_end(path)
        return os.pread(fd, length, position)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


@dataclass(frozen=True)
class _ItemFile:
    path: str
    data_start: int     # byte position of item ``first``
    first: int          # global item index of the first item in the file
    count: int


def _next_present(files: list[_ItemFile], firsts: list[int], index: int) -> int:
    """``index``, or the first item of the next file that has one when ``index`` lies past the
    end of a file shorter than its slot (a truncated ConsumeQueue: the rest of its units are
    missing, and the next file still starts where the geometry puts it)."""
    k = max(bisect.bisect_right(firsts, index) - 1, 0)
    while k < len(files) and index >= files[k].first + files[k].count:
        k += 1
        if k < len(files):
            index = max(index, files[k].first)
    return index if k < len(files) else _END


class _SortedItems:
    """Items ``[lo, hi)`` of a logical array spread over files, sorted by field ``key_field``;
    a cursor over those whose key lies in ``[key_lo, key_hi)``. ``head``/``head_key`` are the
    current item and its key (None and :data:`_END` past the last one)."""

    __slots__ = ("files", "firsts", "codec", "key_field", "fds", "lo", "hi", "key_hi", "index",
                 "chunk", "chunk_pos", "head", "head_key")

    def __init__(self, files: list[_ItemFile], codec: struct.Struct, key_field: int, fds: _FdCache,
                 lo: int, hi: int):
        self.files = files
        self.firsts = [f.first for f in files]
        self.codec = codec
        self.key_field = key_field
        self.fds = fds
        self.lo, self.hi = lo, hi
        self.key_hi = 0
        self.index = hi
        self.chunk: list = []
        self.chunk_pos = 0
        self.head = None
        self.head_key = _END

    def _file_of(self, index: int) -> _ItemFile:
        return self.files[bisect.bisect_right(self.firsts, index) - 1]

    def _read(self, index: int, limit: int) -> list:
        f = self._file_of(index)
        n = min(limit - index, f.first + f.count - index, _CHUNK_ITEMS)
        size = self.codec.size
        raw = self.fds.pread(f.path, n * size, f.data_start + (index - f.first) * size)
        return list(self.codec.iter_unpack(raw[:len(raw) - len(raw) % size]))

    def _key(self, index: int) -> int:
        # a missing item takes the key of the next present one: the keys stay sorted
        index = _next_present(self.files, self.firsts, index)
        if index >= self.hi:
            return _END
        return self._read(index, index + 1)[0][self.key_field]

    def seek(self, key_lo: int, key_hi: int) -> bool:
        """Position on the first item with key >= key_lo; False when none lies below key_hi."""
        lo, hi = self.lo, self.hi
        while lo < hi:
            mid = (lo + hi) // 2
            if self._key(mid) < key_lo:
                lo = mid + 1
            else:
                hi = mid
        self.index = min(_next_present(self.files, self.firsts, lo), self.hi)
        self.key_hi = key_hi
        self.chunk, self.chunk_pos = [], 0
        self._load()
        return self.head is not None

    def _load(self) -> None:
        if self.chunk_pos >= len(self.chunk):
            # chunks end at file ends, so only here can the next item lie in the next file
            self.index = min(_next_present(self.files, self.firsts, self.index), self.hi)
            if self.index >= self.hi:
                self.head, self.head_key = None, _END
                return
            self.chunk = self._read(self.index, self.hi)
            self.chunk_pos = 0
            if not self.chunk:
                self.index = self.hi
                self.head, self.head_key = None, _END
                return
        item = self.chunk[self.chunk_pos]
        key = item[self.key_field]
        if key < self.key_hi:
            self.head, self.head_key = item, key
        else:
            self.head, self.head_key = None, _END

    def advance(self) -> None:
        self.chunk_pos += 1
        self.index += 1
        self._load()
