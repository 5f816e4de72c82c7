"""Which record walk runs: the native core (``mqtool._native``, Rust, built from ``native/`` by
the package's install when cargo is there) or the numpy path of :mod:`.batches`.

The numpy path stays the reference and the fallback: ``MQTOOL_NATIVE=0`` forces it, and an
install without the extension, or with one written for another layout than the declarations in
:mod:`mqtool.formats` describe, uses it without a word. ``mqtool --version`` says which runs.
"""
from __future__ import annotations

import sys
import types

from .. import codec as _codec
from .. import native_core as _switch
from ..formats import codecs
from ..formats import commitlog as fmt
from ..formats import dledger as dl_fmt
from .records import MIN_MESSAGE_SIZE


def _fields(dtype) -> list[tuple[str, int, int]]:
    return [(name, dtype.fields[name][1], dtype.fields[name][0].itemsize) for name in dtype.names]


def expected_layout() -> dict:
    """The layout values the native core hardcodes, derived here from the declarations."""
    flags = _codec.HOST_FLAGS
    v6 = (flags & -flags, flags & ~(flags & -flags))       # born host, store host
    middles = {}
    for variant in (0, v6[0], v6[1], flags):
        dtype = _codec.MESSAGE_MIDDLE_DTYPES[variant]
        middles[variant] = (dtype.itemsize,) + tuple(
            dtype.fields[name][1] for name in ("store_timestamp", "reconsume_times",
                                               "prepared_transaction_offset", "body_length"))
    return {
        "magic_v1": fmt.MESSAGE_MAGIC_CODE,
        "magic_v2": fmt.MESSAGE_MAGIC_CODE_V2,
        "header_size": _codec.MESSAGE_HEADER.size,
        "header_fields": _fields(_codec.MESSAGE_HEADER_DTYPE),
        "middles": middles,
        "min_message_size": MIN_MESSAGE_SIZE,
        "prop_crc_prefix": (codecs.PROP_CRC_KEY + codecs.NAME_VALUE_SEPARATOR).encode(),
        "crc32_reserved_len": codecs.CRC32_RESERVED_LEN,
        "dledger_magic": dl_fmt.ENTRY_MAGIC,
        "dledger_header_size": dl_fmt.ENTRY_HEADER_SIZE,
        "dledger_header_fields": _fields(_codec.DLEDGER_ENTRY_HEADER_DTYPE),
    }


def _check_layout() -> None:
    """Switch the native core off when it was built for another layout than the declarations."""
    if _switch.core is None:
        return
    theirs = _switch.core.layout()
    for key, value in expected_layout().items():
        if theirs.get(key) != value:
            _switch.core = None
            _switch.reason = f"the native core's {key} disagrees with the declarations"
            return


_check_layout()


class _SwitchModule(types.ModuleType):
    """``native.core`` and ``native.reason`` read and write :mod:`mqtool.native_core`, the
    switch below the codec: setting ``native.core = None`` puts every fast path on numpy."""

    core = property(lambda self: _switch.core,
                    lambda self, value: setattr(_switch, "core", value))
    reason = property(lambda self: _switch.reason,
                      lambda self, value: setattr(_switch, "reason", value))


sys.modules[__name__].__class__ = _SwitchModule


def describe() -> str:
    """Which record walk runs, for ``mqtool --version``."""
    return "native core" if _switch.core is not None else f"numpy path: {_switch.reason}"
