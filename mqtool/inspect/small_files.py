"""The store's small files as records: the checkpoint, the abort and lock files, and the JSON
configs."""
from __future__ import annotations

from pathlib import Path

from ..errors import ParseError
from ..formats import checkpoint as ckpt_fmt
from ..store import load_config, lock_holder, parse_at, read_fastjson
from .records import RT_ABORT, RT_CHECKPOINT, RT_CONFIG, RT_LOCK, ms_to_iso


# --- checkpoint, abort, lock, config -------------------------------------------------------------

CHECKPOINT_TIME_FIELDS = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")


def checkpoint_dict(data: bytes, file: str) -> dict:
    """The checkpoint's fields (timestamps raw and as UTC) plus the derived recovery minimums.
    ``master_flushed_offset``/``confirm_phy_offset`` exist only in 5.x (0 in 4.x files)."""
    if len(data) < 40:
        raise ParseError(file, 0, "", f"checkpoint is {len(data)} bytes, expected "
                                      f"{ckpt_fmt.CHECKPOINT_SIZE}")
    page = bytes(data[:ckpt_fmt.CHECKPOINT_SIZE]).ljust(ckpt_fmt.CHECKPOINT_SIZE, b"\0")
    parsed = parse_at(ckpt_fmt.checkpoint, page, file=file)
    out = {"record_type": RT_CHECKPOINT, "file": file, "file_size": len(data),
           "size_ok": len(data) == ckpt_fmt.CHECKPOINT_SIZE}
    for name in CHECKPOINT_TIME_FIELDS:
        out[name] = parsed[name]
        out[name.replace("_timestamp", "_time")] = ms_to_iso(parsed[name])
    out["master_flushed_offset"] = parsed["master_flushed_offset"]
    out["confirm_phy_offset"] = parsed["confirm_phy_offset"]
    out["rest_zero"] = not any(bytes(data[40:]))
    minimum = ckpt_fmt.min_timestamp(parsed["physic_msg_timestamp"],
                                     parsed["logics_msg_timestamp"])
    out["min_timestamp"] = minimum
    out["min_time"] = ms_to_iso(minimum)
    out["min_timestamp_index"] = ckpt_fmt.min_timestamp_index(
        parsed["physic_msg_timestamp"], parsed["logics_msg_timestamp"],
        parsed["index_msg_timestamp"])
    return out


def _read_small(path: Path, limit: int = 1 << 16) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(limit)


def parse_pid(text: str) -> int | None:
    """The PID a 5.x abort file holds; None for anything else (a PID has at most 10 digits,
    and turning thousands of digits into an int is refused by Python)."""
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None


def small_file_dict(path: Path, kind: str, file: str | None = None) -> dict:
    """abort / abort.bak (empty in 4.x, the broker PID in 5.x) or lock (``lock``, plus whether
    a live process holds it)."""
    path = Path(path)
    raw = _read_small(path)
    text = raw.decode("utf-8", errors="replace")
    out = {"record_type": RT_ABORT if kind == "abort" else RT_LOCK, "file": file or path.name,
           "file_size": path.stat().st_size, "content": text}
    if kind == "abort":
        out["pid"] = parse_pid(text)
    else:
        out["held"] = lock_holder(path)
    return out


def config_dict(path: Path, file: str | None = None) -> dict:
    """A fastjson config file; for a main file the ``.bak`` is the fallback, as in the broker's
    ConfigManager (``source`` says which was read)."""
    path = Path(path)
    if path.name.endswith(".bak"):
        try:
            data, source = read_fastjson(path), path.name
        except ValueError as err:
            raise ParseError(file or path.name, 0, "", f"not readable as fastjson: {err}") from None
    else:
        data, source = load_config(path)
    if data is None:
        raise ParseError(file or path.name, 0, "", "not readable as fastjson (nor its .bak)")
    return {"record_type": RT_CONFIG, "file": file or path.name, "source": source, "data": data}
