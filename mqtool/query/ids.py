"""Message ids: checking and describing an offsetMsgId or a UNIQ_KEY, and the store-time windows
a UNIQ_KEY can come from (its time is relative to a month in the producer's zone)."""
from __future__ import annotations

import calendar
import datetime as _dt
import re

from ..formats import codecs
from .results import QueryError


# A UNIQ_KEY's time is "ms since the start of the month" in the producer's zone, which can be
# anything from UTC-12 to UTC+14; an hour more allows for producer/broker clock skew.
_ZONE_EAST_MS = 14 * 3_600_000
_ZONE_WEST_MS = 12 * 3_600_000
_CLOCK_SKEW_MS = 3_600_000
_HEX = re.compile(r"[0-9A-Fa-f]*")


# --- ids -----------------------------------------------------------------------------------------

def check_hex_id(text: str, what: str) -> str:
    """``text`` upper-cased when it is 32 or 56 hex characters; QueryError otherwise."""
    value = text.strip()
    if not _HEX.fullmatch(value):
        bad = next(ch for ch in value if not _HEX.fullmatch(ch))
        raise QueryError(f"malformed {what} {text!r}: {bad!r} is not a hex digit")
    if len(value) not in (32, 56):
        raise QueryError(f"malformed {what} {text!r}: {len(value)} hex digits, expected 32 "
                         f"(IPv4) or 56 (IPv6)")
    return value.upper()


def describe_msg_id(msg_id: str) -> dict:
    host, offset = codecs.decode_offset_msg_id(msg_id)
    return {"store_host": host, "commitlog_offset": offset}


def describe_uniq_key(uniq_key: str, now_ms: int | None = None,
                      tz: _dt.tzinfo | None = None) -> dict:
    info = codecs.decode_uniq_key(uniq_key, now_ms=now_ms, tz=tz)
    return {"client_ip": info["ip"], "pid": info["pid"],
            "class_loader_hash": info["class_loader_hash"],
            "ms_since_month_start": info["ms_since_month_start"], "counter": info["counter"],
            "approx_time": info["approx_time_ms"]}


_LAST_MONTH_MS = calendar.timegm((9999, 10, 1, 0, 0, 0)) * 1000


def _month_starts(lo_ms: int, hi_ms: int) -> list[int]:
    """UTC month starts from the month before ``lo_ms`` to the month after ``hi_ms``."""
    # damaged timestamps can lie past year 9999, which no date can hold
    lo_ms, hi_ms = (min(max(ms, 0), _LAST_MONTH_MS) for ms in (lo_ms, hi_ms))
    lo = _dt.datetime.fromtimestamp(lo_ms / 1000, _dt.timezone.utc)
    hi = _dt.datetime.fromtimestamp(hi_ms / 1000, _dt.timezone.utc)
    year, month = lo.year, lo.month - 1
    if month == 0:
        year, month = year - 1, 12
    out = []
    while (year, month) <= (hi.year + (hi.month == 12), hi.month % 12 + 1):
        out.append(calendar.timegm((year, month, 1, 0, 0, 0)) * 1000)
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return out


def uniq_key_windows(uniq_key: str, lo_ms: int, hi_ms: int) -> list[tuple[int, int]]:
    """Store-time windows a UNIQ_KEY can belong to, within [lo_ms, hi_ms] (the store's span).

    The id holds milliseconds since the start of *some* month in the producer's zone; each month
    start in the span, shifted by every zone and an hour of clock skew, gives one window."""
    delta = codecs.decode_uniq_key(uniq_key, now_ms=hi_ms)["ms_since_month_start"]
    windows = []
    for month in _month_starts(lo_ms, hi_ms):
        start = month + delta - _ZONE_EAST_MS - _CLOCK_SKEW_MS
        end = month + delta + _ZONE_WEST_MS + _CLOCK_SKEW_MS
        if end >= lo_ms and start <= hi_ms:
            windows.append((start, end))
    return windows


def mqadmin_uniq_key_begin(uniq_key: str, now_ms: int | None = None,
                           tz: _dt.tzinfo | None = None) -> int:
    """The ``begin`` mqadmin's queryMsgByUniqueKey asks the broker for:
    MessageClientIDSetter.getNearlyTimeFromID(id) - 1000, read in the zone and month of the
    machine running it (this one, now, unless given)."""
    tz = tz or _dt.datetime.now().astimezone().tzinfo
    return codecs.decode_uniq_key(uniq_key, now_ms=now_ms, tz=tz)["approx_time_ms"] - 1000
