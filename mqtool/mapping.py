"""Read-only memory maps that cannot die of SIGBUS on a full file system.

On tmpfs (and other memory-backed file systems) touching a page of a *hole* through a shared
map allocates a page for it; when the file system is full that allocation fails and the kernel
sends SIGBUS, which kills the process in the middle of whatever it was doing (``read()`` of the
same hole returns zeros and allocates nothing). Store files are often sparse: a CommitLog or
ConsumeQueue file is created at full size and filled from the front, and a copy made with
``cp --sparse`` turns every zero block into a hole.

:func:`map_readonly` therefore maps the file and then replaces every page-aligned hole of the map
with private anonymous zero pages (``MAP_FIXED``): the bytes seen are the same zeros, reading
them maps the kernel's shared zero page, and no file system page is ever allocated.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os

_PAGE = mmap.PAGESIZE
_libc = None


def _mmap_call():
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        _libc = libc
    return _libc.mmap


def data_runs(fd: int, start: int = 0):
    """The file system's data extents of ``fd`` from ``start`` on, as (lo, hi) byte ranges in
    order (SEEK_DATA / SEEK_HOLE), asked for one at a time so a caller stops where it likes;
    everything between them is a hole and reads as zeros. Raises OSError (or AttributeError
    without SEEK_DATA) where the file system cannot tell: each caller has its own fallback.
    Moves the descriptor's position."""
    pos = start
    while True:
        try:
            lo = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as err:
            if err.errno == errno.ENXIO:   # only a hole is left
                return
            raise
        pos = os.lseek(fd, lo, os.SEEK_HOLE)
        yield lo, pos


def holes(fd: int, length: int) -> list[tuple[int, int]]:
    """Page-aligned (start, end) ranges within the first ``length`` bytes of ``fd`` that are
    holes; [] when the file system cannot tell."""
    gaps: list[tuple[int, int]] = []
    data_end = 0
    try:
        for lo, hi in data_runs(fd):
            if lo >= length:
                break
            gaps.append((data_end, lo - lo % _PAGE))
            data_end = hi
            if hi >= length:
                break
    except (OSError, AttributeError):
        return []
    if data_end < length:
        # to the end of the map, whose last page runs past the data (zeros too)
        gaps.append((data_end, length + (-length % _PAGE)))
    found = []
    for lo, hi in gaps:
        lo += -lo % _PAGE
        if hi > lo:
            found.append((lo, hi))
    return found


def map_readonly(fd: int, length: int = 0) -> mmap.mmap:
    """A read-only shared map of the first ``length`` bytes of ``fd`` (0: the whole file) whose
    holes are anonymous zero pages, so reading it never allocates file system pages."""
    buf = mmap.mmap(fd, length, access=mmap.ACCESS_READ)
    gaps = holes(fd, len(buf))
    if gaps:
        try:
            _cover(buf, gaps)
        except OSError:
            buf.close()
            raise
    return buf


def _cover(buf: mmap.mmap, gaps: list[tuple[int, int]]) -> None:
    import numpy as np
    view = np.frombuffer(buf, dtype=np.uint8)
    base = view.ctypes.data
    del view            # the map must not stay exported, or it could not be closed
    call = _mmap_call()
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_FIXED", 0x10)
    for start, end in gaps:
        got = call(base + start, end - start, mmap.PROT_READ, flags, -1, 0)
        if got is None or got == ctypes.c_void_p(-1).value:
            code = ctypes.get_errno()
            raise OSError(code, f"cannot map zero pages over a hole: {os.strerror(code)}")


def read_units(path, dtype, limit_units: int | None = None):
    """``(units, count)`` of a file of fixed-size units (a ConsumeQueue file): ``count`` whole
    units are in the file (at most ``limit_units``), of which ``units`` holds those up to the end
    of the written data - the rest lie in a trailing hole and are all zeros. A 2 GiB sparse file
    with a few units therefore costs a few bytes of memory, not 2 GiB. Read with ``pread`` in
    bounded chunks, never through a map."""
    import numpy as np
    itemsize = np.dtype(dtype).itemsize
    with open(path, "rb") as fh:
        fd = fh.fileno()
        size = os.fstat(fd).st_size
        count = size // itemsize
        if limit_units is not None:
            count = min(count, max(0, limit_units))
        written = -(-written_extent(fd, count * itemsize) // itemsize)
        wanted = min(count, written)
        out = np.zeros(wanted, dtype=dtype)
        raw = out.view(np.uint8)
        chunk = (4 << 20) - (4 << 20) % itemsize
        pos = 0
        while pos < wanted * itemsize:
            got = os.preadv(fd, [memoryview(raw[pos:pos + chunk])], pos)
            if got <= 0:
                break       # the file shrank meanwhile: the rest stays zeros
            pos += got
    return out, count


# units a queue reader holds at once: 64 Ki ConsumeQueue units are 1.25 MiB, whatever the file
QUEUE_CHUNK_UNITS = 1 << 16


def iter_units(path, dtype, limit_units: int | None = None, chunk_units: int | None = None):
    """The units :func:`read_units` returns, as ``(first unit index, units)`` chunks of at most
    ``chunk_units`` (default :data:`QUEUE_CHUNK_UNITS`) that follow each other without a gap from
    unit 0 to the written end (at most ``limit_units``). A chunk lying wholly in a hole is zeros
    and is not read. Memory is one chunk whatever the file's size; rules that look at
    neighbouring units carry their state from one chunk to the next."""
    import numpy as np
    itemsize = np.dtype(dtype).itemsize
    step = max(1, chunk_units or QUEUE_CHUNK_UNITS)
    with open(path, "rb") as fh:
        fd = fh.fileno()
        count = os.fstat(fd).st_size // itemsize
        if limit_units is not None:
            count = min(count, max(0, limit_units))
        wanted = min(count, -(-written_extent(fd, count * itemsize) // itemsize))
        for first in range(0, wanted, step):
            out = np.zeros(min(step, wanted - first), dtype=dtype)
            if holds_data(fd, first * itemsize, (first + len(out)) * itemsize):
                os.preadv(fd, [memoryview(out.view(np.uint8))], first * itemsize)
            yield first, out


def holds_data(fd: int, start: int, end: int) -> bool:
    """False when bytes [start, end) of ``fd`` lie in a hole (they read as zeros)."""
    try:
        return os.lseek(fd, start, os.SEEK_DATA) < end
    except OSError as err:
        return err.errno != errno.ENXIO      # ENXIO: only a hole from here on
    except AttributeError:
        return True


def iter_unit_chunks(path, dtype, chunk_units: int = 1 << 16, first_unit: int = 0):
    """``(count, chunks)`` for a file of fixed-size units: ``count`` whole units are in the file
    and ``chunks`` yields ``(first unit index, units)`` for the parts holding data from unit
    ``first_unit`` on, in order, at most ``chunk_units`` at a time; units in holes are zeros and
    are not yielded. Memory is one chunk whatever the file's size."""
    import numpy as np
    itemsize = np.dtype(dtype).itemsize
    fh = open(path, "rb")
    fd = fh.fileno()
    count = os.fstat(fd).st_size // itemsize
    end = count * itemsize

    def extents():
        pos = max(0, first_unit) * itemsize
        while pos < end:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
                stop = os.lseek(fd, start, os.SEEK_HOLE)
            except OSError as err:
                if err.errno == errno.ENXIO:
                    return
                yield pos, end          # the file system cannot tell: all of it is data
                return
            if start >= end:
                return
            yield start, min(stop, end)
            pos = stop

    def chunks():
        with fh:
            first = max(0, first_unit)     # next unit index not yet yielded
            for start, stop in extents():
                unit = max(first, start // itemsize)
                last = -(-stop // itemsize)
                while unit < last:
                    n = min(chunk_units, last - unit)
                    out = np.zeros(n, dtype=dtype)
                    got = os.preadv(fd, [memoryview(out.view(np.uint8))], unit * itemsize)
                    if got <= 0:
                        return
                    yield unit, out[:got // itemsize] if got < n * itemsize else out
                    unit += n
                first = max(first, last)

    return count, chunks()


__all__ = ["map_readonly", "holes", "holds_data", "read_units", "iter_units", "iter_unit_chunks",
           "written_extent", "QUEUE_CHUNK_UNITS"]


def written_extent(fd: int, size: int) -> int:
    """End of the last extent holding data (SEEK_DATA/SEEK_HOLE); ``size`` when the file
    system cannot tell."""
    end = 0
    try:
        for _, end in data_runs(fd):
            if end >= size:
                break
    except (OSError, AttributeError):
        return size
    return min(size, end)
