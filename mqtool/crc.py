"""The CRC-32 the hot paths use: the fastest implementation installed of the one function
:func:`mqtool.formats.codecs.body_crc` defines with :func:`zlib.crc32`.

ISA-L (``isal``, a default dependency) and zlib-ng compute exactly zlib's CRC-32 four to ten
times faster (vectorised folding); plain zlib is the fallback when neither imports. All three
take any buffer (bytes, memoryview slices of an mmap) and return the unsigned 32-bit value.
``MQTOOL_CRC=zlib|zlib-ng|isal`` forces one (to compare them, or to rule one out)."""
from __future__ import annotations

import os
import zlib
from typing import Callable

import numpy as np


def _isal() -> Callable:
    from isal import isal_zlib
    return isal_zlib.crc32


def _zlib_ng() -> Callable:
    from zlib_ng import zlib_ng
    return zlib_ng.crc32


def _zlib() -> Callable:
    return zlib.crc32


# fastest first, as measured on 1 KiB memoryview slices (what the scanner hands over)
_LOADERS = {"isal": _isal, "zlib-ng": _zlib_ng, "zlib": _zlib}


def implementations() -> dict[str, Callable]:
    """Every CRC-32 implementation that imports here, by name, fastest first."""
    found = {}
    for name, load in _LOADERS.items():
        try:
            found[name] = load()
        except ImportError:
            continue
    return found


def _choose() -> tuple[str, Callable]:
    forced = os.environ.get("MQTOOL_CRC", "").strip().lower()
    if forced in _LOADERS:
        try:
            return forced, _LOADERS[forced]()
        except ImportError:
            pass
    for name, load in _LOADERS.items():
        try:
            return name, load()
        except ImportError:
            continue
    return "zlib", zlib.crc32  # pragma: no cover - zlib always imports


NAME, crc32 = _choose()


def crc32_ranges(buf, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """crc32 of ``buf[starts[i]:ends[i]]`` for every i (int64), one call each on a view of
    ``buf``: the bytes of an mmap are not copied."""
    view = memoryview(buf)
    try:
        return np.fromiter(map(crc32, map(view.__getitem__,
                                          map(slice, starts.tolist(), ends.tolist()))),
                           dtype=np.int64, count=len(starts))
    finally:
        view.release()
