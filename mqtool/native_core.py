"""The native core this process runs (``mqtool._native``, Rust, built from ``native/`` by the
package's install when cargo is there), or None for the numpy path: the one switch every fast
codec reads at call time, below :mod:`mqtool.codec` so that codec can read it.

``MQTOOL_NATIVE=0`` turns it off. :mod:`mqtool.scan.native` turns it off as well when the core
was built for another record layout than :mod:`mqtool.formats` declares (the codec's functions
that read it do not depend on that layout), and is where callers and tests switch it.
"""
from __future__ import annotations

import os

OFF_VALUES = {"0", "no", "false", "off"}


def _load():
    """(the native module or None, why not)."""
    if os.environ.get("MQTOOL_NATIVE", "").strip().lower() in OFF_VALUES:
        return None, "MQTOOL_NATIVE=0"
    try:
        from . import _native
    except ImportError:
        return None, "no native extension in this install"
    return _native, ""


core, reason = _load()
