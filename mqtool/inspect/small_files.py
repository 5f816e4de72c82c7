"""The store's small files as records: the checkpoint, the abort and lock files, and the JSON
configs."""
from __future__ import annotations

from pathlib import Path

from ..errors import ParseError
from ..formats import checkpoint as ckpt_fmt
from ..config import read_config, text_keys
from ..store import lock_holder, parse_at, read_fastjson
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
    """A fastjson config file. A ``.bak`` is read as it is; a main file as the broker's
    ConfigManager.load reads it (:func:`mqtool.config.read_config`): ``source`` names the file
    whose content it takes (the ``.bak`` when the main file fails) and ``reason`` says why
    when that is not simply the main file. When the broker takes no file's content (it starts
    with an empty table, or refuses to start) the reason is the error."""
    path = Path(path)
    name = file or path.name
    if path.name.endswith(".bak"):
        try:
            data = read_fastjson(path)
        except ValueError as err:
            raise ParseError(name, 0, "", f"not readable as fastjson: {err}") from None
        return {"record_type": RT_CONFIG, "file": name, "source": path.name, "data": data}
    load = read_config(path)
    if load.used is None:
        raise ParseError(name, 0, "", load.reason)
    out = {"record_type": RT_CONFIG, "file": name, "source": load.used,
           "data": text_keys(load.document)}
    if load.outcome != "main" or load.tmp is not None:
        out["reason"] = load.reason
    return out
