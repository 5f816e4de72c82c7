"""damage_store: one fault injected into a store, described exactly (what changed, which records
it hits)."""
from __future__ import annotations

import os
import random
from pathlib import Path

from .. import writer as w
from ..errors import StoreLayoutError, StoreLockedError
from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..formats import consumequeue as cq_fmt
from ..formats import dledger as dl_fmt
from ..codec import CQ_UNIT as _CQ_UNIT
from ..scan import MessageRecord, Scanner, entry_header_at
from ..lock import holding_store_lock
from ..store import Store


# damage to the CommitLog and its derived files (every store has them)
DAMAGE_KINDS = ("torn-tail", "bit-flip", "zero-range", "truncate-file", "delete-file",
                "stray-file", "stale-checkpoint")
# damage to a config JSON file (only stores with config/ have them)
CONFIG_DAMAGE_KINDS = ("config-empty", "config-truncate", "config-zeros")
HEX_PREVIEW = 32
# a whole-file damage lists the first records it hits and counts the rest
RECORDS_PREVIEW = 32
HEADER_FIELDS = tuple(
    (sc.name, sc.subcon.sizeof()) for sc in cl_fmt.message_header.subcons)
ENTRY_HEADER_FIELDS = tuple(
    (sc.name, sc.subcon.sizeof()) for sc in dl_fmt.entry_header.subcons)
# the DLedger entry header fields the broker's DLedger recovery checks (channel and the two CRC
# fields are never read: a flip there changes nothing the broker sees)
ENTRY_CHECKED_FIELDS = ("magic", "size", "index", "term", "pos", "body_size")
BIT_TARGETS = ("body", "header", "properties", "entry-header")
STRAY_FILE_NAMES = ("commitlog.tmp", "core.{n}", "{offset}.bak", "segment-{n}.old", "README")
STRAY_DIR_NAMES = ("lost+found", "tmp-{n:x}", "TopicTest.bak", "__backup__")


def _relative(store: Store, path: Path) -> str:
    try:
        return Path(path).resolve().relative_to(store.root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _hex(data: bytes) -> str:
    return bytes(data[:HEX_PREVIEW]).hex()


def _describe_record(store: Store, rec: MessageRecord) -> dict:
    seg = store.commitlog.segment_for(rec.offset)
    return {"offset": rec.offset, "size": rec.total_size,
            "file": _relative(store, seg.path) if seg else None,
            "file_pos": rec.offset - seg.base_offset if seg else None,
            "topic": rec.topic, "queue_id": rec.queue_id, "queue_offset": rec.queue_offset,
            "sys_flag": rec.sys_flag, "store_timestamp": rec.store_timestamp}


def _segment_records(store: Store, segment) -> list[MessageRecord]:
    scanner = Scanner(store.commitlog, check_crc=False)
    return [e for e in scanner.scan_segment(segment) if type(e) is MessageRecord]


def _data_segments(store: Store) -> list:
    """CommitLog files whose first bytes are a message (preallocated zero files are not)."""
    found = []
    for seg in store.commitlog.segments:
        with open(seg.path, "rb") as fh:
            head = fh.read(8)
        if len(head) < 8:
            continue
        if seg.is_dledger:
            if int.from_bytes(head[:4], "big", signed=True) == dl_fmt.ENTRY_MAGIC:
                found.append(seg)
        elif int.from_bytes(head[4:8], "big") in cl_fmt.MESSAGE_MAGIC_CODES:
            found.append(seg)
    return found


def _pick_segment(store: Store, file: str | None, rng: random.Random, *, prefer_non_last: bool,
                  min_records: int = 1):
    segments = _data_segments(store)
    if file is not None:
        target = _resolve_file(store, file)
        for seg in store.commitlog.segments:
            if seg.path.resolve() == target.resolve():
                return seg
        raise StoreLayoutError(f"{file}: not a CommitLog file of this store")
    if not segments:
        raise StoreLayoutError(f"{store.root}: no CommitLog file holds a message")
    pool = segments[:-1] if prefer_non_last and len(segments) > 1 else list(segments)
    rng.shuffle(pool)
    if min_records > 1:
        # scanning every file of a big store to rank them would be slow: take the first that fits
        for seg in pool:
            if len(_segment_records(store, seg)) >= min_records:
                return seg
    return pool[0]


def _resolve_file(store: Store, file: str) -> Path:
    """``file`` relative to the store root (or its commitlog/), never a file outside the store."""
    path = Path(file)
    candidates = [path] if path.is_absolute() else [store.root / path,
                                                    store.commitlog.directory / path]
    root = store.root.resolve()
    for candidate in candidates:
        if candidate.is_file():
            resolved = candidate.resolve()
            if not resolved.is_relative_to(root):
                raise StoreLayoutError(f"{file}: outside the store {store.root}")
            return resolved
    raise StoreLayoutError(f"{file}: no such file in {store.root}")


def _record_at(store: Store, offset: int, *, entry: bool = False) -> tuple[object, MessageRecord]:
    """The record holding ``offset``; with ``entry`` the record whose DLedger entry (header
    included) holds it."""
    seg = store.commitlog.segment_for(offset)
    if seg is None:
        raise StoreLayoutError(f"offset {offset}: no CommitLog file holds it")
    lead = dl_fmt.ENTRY_HEADER_SIZE if entry else 0
    for rec in _segment_records(store, seg):
        if rec.offset - lead <= offset < rec.end:
            return seg, rec
    raise StoreLayoutError(f"offset {offset}: not inside a readable "
                           + ("DLedger entry" if entry else "message record"))


def _rewrite(path: Path, file_pos: int, new: bytes) -> bytes:
    with open(path, "r+b") as fh:
        fh.seek(file_pos)
        old = fh.read(len(new))
        fh.seek(file_pos)
        fh.write(new)
    return old


def _change(store: Store, seg, start: int, old: bytes, new: bytes) -> dict:
    """The common part of a report about bytes changed at global CommitLog offset ``start``."""
    return {"file": _relative(store, seg.path), "file_size": seg.length,
            "range": {"start": start, "end": start + len(old),
                      "file_start": start - seg.base_offset,
                      "file_end": start - seg.base_offset + len(old)},
            "length": len(old), "old_hex": _hex(old), "new_hex": _hex(new),
            "hex_truncated": len(old) > HEX_PREVIEW}


def _torn_tail(store, rng, file, offset, **_):
    if offset is not None:
        seg, rec = _record_at(store, offset)
    else:
        if file is not None:
            seg = _pick_segment(store, file, rng, prefer_non_last=False)
        else:
            segments = _data_segments(store)
            if not segments:
                raise StoreLayoutError(f"{store.root}: no CommitLog file holds a message")
            seg = segments[-1]
        records = _segment_records(store, seg)
        if not records:
            raise StoreLayoutError(f"{_relative(store, seg.path)}: holds no message record")
        rec = records[-1]
    # a torn write persists the first pages of the record and leaves the rest as it was (zeros)
    half = rec.total_size // 2
    start = rec.offset + half
    length = rec.total_size - half
    old = _rewrite(seg.path, start - seg.base_offset, bytes(length))
    return {**_change(store, seg, start, old, bytes(length)),
            "records": [_describe_record(store, rec)]}


def _flippable(rec, target: str) -> int:
    """How many bytes of ``target`` the record has (the properties minus a __CRC32# field, so
    that a property flip is one the property CRC sees)."""
    if target == "body":
        return max(rec.body_length, 0)
    if target == "properties":
        tail = codecs.CRC32_RESERVED_LEN if codecs.stored_prop_crc(rec.properties_raw) else 0
        return max(len(rec.properties_raw) - tail, 0)
    return 1


def _bit_flip(store, rng, file, offset, target="body", field=None, **_):
    if target not in BIT_TARGETS:
        raise ValueError(f"--target must be {', '.join(BIT_TARGETS[:-1])} or {BIT_TARGETS[-1]}")
    if target == "entry-header":
        return _entry_header_flip(store, rng, file, offset, field)
    if field is not None:
        raise ValueError("--field names a DLedger entry header field: use --target entry-header")
    if offset is not None:
        seg, rec = _record_at(store, offset)
        if not _flippable(rec, target):
            raise StoreLayoutError(f"the record at {rec.offset} has no {target} to flip a bit in")
    else:
        seg = _pick_segment(store, file, rng, prefer_non_last=True)
        records = [r for r in _segment_records(store, seg) if _flippable(r, target)]
        if not records:
            raise StoreLayoutError(f"{_relative(store, seg.path)}: no record with {target}")
        rec = records[rng.randrange(len(records))]
    field_name = target
    if target == "body":
        pos = rec.body_position + rng.randrange(rec.body_length)
    elif target == "properties":
        properties_start = rec.offset + rec.total_size - len(rec.properties_raw)
        pos = properties_start + rng.randrange(_flippable(rec, target))
    else:
        index = rng.randrange(len(HEADER_FIELDS))
        field_name, size = HEADER_FIELDS[index]
        field_start = sum(s for _, s in HEADER_FIELDS[:index])
        pos = rec.offset + field_start + rng.randrange(size)
    bit = rng.randrange(8)
    old_byte = store.commitlog.read(pos, 1)
    new_byte = bytes([old_byte[0] ^ (1 << bit)])
    old = _rewrite(seg.path, pos - seg.base_offset, new_byte)
    return {**_change(store, seg, pos, old, new_byte), "target": target, "field": field_name,
            "bit": bit, "records": [_describe_record(store, rec)]}


def _entry_header_flip(store, rng, file, offset, field):
    """One bit of one field of a DLedger entry header: the broker's DLedger recovery ends the
    log at that entry (magic, pos, size, body size), at the entry after it (an index or term the
    next entry does not follow), or rewrites its index unit."""
    if store.dledger is None:
        raise StoreLayoutError(f"{store.root}: not a DLedger-mode store: no entry header to damage")
    if field is not None and field not in ENTRY_CHECKED_FIELDS:
        raise ValueError(f"--field must be one of {', '.join(ENTRY_CHECKED_FIELDS)}")
    if offset is not None:
        seg, rec = _record_at(store, offset, entry=True)
        if not seg.is_dledger:
            raise StoreLayoutError(f"offset {offset} lies in the plain commitlog/ part of the "
                                   "store")
    else:
        if file is not None:
            seg = _pick_segment(store, file, rng, prefer_non_last=True)
            if not seg.is_dledger:
                raise StoreLayoutError(f"{file}: not a DLedger data file")
        else:
            segments = [s for s in _data_segments(store) if s.is_dledger]
            if not segments:
                raise StoreLayoutError(f"{store.root}: no DLedger data file holds an entry")
            pool = segments[:-1] if len(segments) > 1 else segments
            seg = pool[rng.randrange(len(pool))]
        records = _segment_records(store, seg)
        if not records:
            raise StoreLayoutError(f"{_relative(store, seg.path)}: holds no entry")
        rec = records[rng.randrange(len(records))]
    field = field or rng.choice(ENTRY_CHECKED_FIELDS)
    index = [name for name, _ in ENTRY_HEADER_FIELDS].index(field)
    size = ENTRY_HEADER_FIELDS[index][1]
    entry_pos = rec.offset - dl_fmt.ENTRY_HEADER_SIZE
    field_start = entry_pos + sum(s for _, s in ENTRY_HEADER_FIELDS[:index])
    pos = field_start + rng.randrange(size)
    bit = rng.randrange(8)
    header = store.commitlog.read(entry_pos, dl_fmt.ENTRY_HEADER_SIZE)
    entry = entry_header_at(header, 0)
    at = pos - entry_pos
    new_byte = bytes([header[at] ^ (1 << bit)])
    old = _rewrite(seg.path, pos - seg.base_offset, new_byte)
    damaged = entry_header_at(header[:at] + new_byte + header[at + 1:], 0)
    return {**_change(store, seg, pos, old, new_byte), "target": "entry-header",
            "field": field, "bit": bit, "old_value": getattr(entry, field),
            "new_value": getattr(damaged, field),
            "entry": {"pos": entry_pos, "index": entry.index, "term": entry.term,
                      "file_pos": entry_pos - seg.base_offset},
            "records": [_describe_record(store, rec)]}


def _zero_range(store, rng, file, offset, length=None, **_):
    if offset is not None:
        seg, first = _record_at(store, offset)
        records = _segment_records(store, seg)
        start = offset
        if length is None:
            last = records[min(records.index(first) + rng.randint(0, 2), len(records) - 1)]
            length = max(1, last.offset + rng.randrange(1, last.total_size + 1) - start)
    else:
        seg = _pick_segment(store, file, rng, prefer_non_last=False, min_records=3)
        records = _segment_records(store, seg)
        if not records:
            raise StoreLayoutError(f"{_relative(store, seg.path)}: holds no message record")
        # stay clear of the first and last record so the damage sits in the middle of the file
        lo, hi = (1, len(records) - 2) if len(records) >= 3 else (0, len(records) - 1)
        i = rng.randint(lo, hi)
        j = min(hi, i + rng.randint(0, 2))
        first, last = records[i], records[j]
        start = first.offset + rng.randrange(first.total_size)
        if length is None:
            end = last.offset + rng.randint(1, last.total_size)
            if end <= start:
                end = first.end
            length = end - start
    file_end = seg.base_offset + seg.length
    length = max(1, min(length, file_end - start))
    old = _rewrite(seg.path, start - seg.base_offset, bytes(length))
    end = start + length
    hit = [_describe_record(store, r) for r in records if r.offset < end and r.end > start]
    return {**_change(store, seg, start, old, bytes(length)), "records": hit}


def _truncate_file(store, rng, file, offset, **_):
    if offset is not None:
        seg = store.commitlog.segment_for(offset)
        if seg is None:
            raise StoreLayoutError(f"offset {offset}: no CommitLog file holds it")
        cut = offset - seg.base_offset
        records = _segment_records(store, seg)
    else:
        seg = _pick_segment(store, file, rng, prefer_non_last=False)
        records = _segment_records(store, seg)
        if not records:
            raise StoreLayoutError(f"{_relative(store, seg.path)}: holds no message record")
        rec = records[rng.randrange(len(records))]
        cut = rec.offset - seg.base_offset + rng.randrange(rec.total_size)
    with open(seg.path, "rb") as fh:
        fh.seek(cut)
        old = fh.read(HEX_PREVIEW)
    os.truncate(seg.path, cut)
    start = seg.base_offset + cut
    hit = [r for r in records if r.end > start]
    return {"file": _relative(store, seg.path), "old_size": seg.length, "new_size": cut,
            "range": {"start": start, "end": seg.base_offset + seg.length,
                      "file_start": cut, "file_end": seg.length},
            "length": seg.length - cut, "old_hex": _hex(old), "new_hex": "",
            "hex_truncated": seg.length - cut > HEX_PREVIEW,
            "records": [_describe_record(store, r) for r in hit[:RECORDS_PREVIEW]],
            "records_total": len(hit)}


def _delete_file(store, rng, file, offset, **_):
    cq_files = [(q, s) for q in store.consume_queues for s in q.segments]
    middle = store.commitlog.segments[1:-1]
    if file is not None:
        path = _resolve_file(store, file)
    elif offset is not None:
        seg = store.commitlog.segment_for(offset)
        if seg is None:
            raise StoreLayoutError(f"offset {offset}: no CommitLog file holds it")
        path = seg.path
    else:
        choices = []
        if cq_files:
            choices.append("consumequeue")
        if middle:
            choices.append("commitlog")
        if not choices:
            raise StoreLayoutError(f"{store.root}: no ConsumeQueue file and no middle CommitLog "
                                   "file to delete")
        kind = choices[rng.randrange(len(choices))]
        if kind == "commitlog":
            path = middle[rng.randrange(len(middle))].path
        else:
            path = cq_files[rng.randrange(len(cq_files))][1].path
    path = Path(path).resolve()
    data = path.read_bytes()
    report = {"file": _relative(store, path), "old_size": len(data), "new_size": None,
              "range": {"file_start": 0, "file_end": len(data)}, "length": len(data),
              "old_hex": _hex(data), "new_hex": "", "hex_truncated": len(data) > HEX_PREVIEW}
    cl_seg = next((s for s in store.commitlog.segments if s.path.resolve() == path), None)
    cq = next(((q, s) for q, s in cq_files if s.path.resolve() == path), None)
    if cl_seg is not None:
        records = _segment_records(store, cl_seg)
        report["file_kind"] = "commitlog"
        report["range"].update(start=cl_seg.base_offset, end=cl_seg.base_offset + cl_seg.length)
        report["records"] = [_describe_record(store, r) for r in records[:RECORDS_PREVIEW]]
        report["records_total"] = len(records)
    elif cq is not None:
        queue, seg = cq
        unit = cq_fmt.CQ_STORE_UNIT_SIZE
        units = [_CQ_UNIT.unpack_from(data, p) for p in range(0, len(data) - unit + 1, unit)]
        valid = 0
        for commitlog_offset, size, _tags in units:
            if not cq_fmt.is_valid_unit(commitlog_offset, size):
                break
            valid += 1
        first_queue_offset = seg.base_offset // unit
        report["file_kind"] = "consumequeue"
        report["queue"] = {"topic": queue.topic, "queue_id": queue.queue_id,
                           "first_queue_offset": first_queue_offset,
                           "units": valid,
                           "end_queue_offset": first_queue_offset + valid}
    else:
        raise StoreLayoutError(f"{file}: not a CommitLog or ConsumeQueue file of this store")
    path.unlink()
    return report


def _stray_file(store, rng, file, offset, **_):
    n = rng.randrange(1000, 100000)
    name = rng.choice(STRAY_FILE_NAMES).format(
        n=n, offset=w.offset_file_name(rng.randrange(1 << 40)))
    junk = rng.randbytes(rng.randint(16, 4096))
    commitlog_dir = store.commitlog.directory
    junk_path = commitlog_dir / name
    if junk_path.exists():
        raise StoreLayoutError(f"{_relative(store, junk_path)} already exists")
    junk_path.write_bytes(junk)
    dir_name = rng.choice(STRAY_DIR_NAMES).format(n=n)
    stray_dir = store.root / "consumequeue" / dir_name / "not-a-queue"
    stray_dir.mkdir(parents=True, exist_ok=True)
    return {"file": _relative(store, junk_path), "old_size": None, "new_size": len(junk),
            "range": {"file_start": 0, "file_end": len(junk)}, "length": len(junk),
            "old_hex": "", "new_hex": _hex(junk), "hex_truncated": len(junk) > HEX_PREVIEW,
            "dirs": [_relative(store, stray_dir.parent), _relative(store, stray_dir)],
            "records": []}


def _stale_checkpoint(store, rng, file, offset, direction=None, **_):
    path = store.checkpoint_path
    if not path.is_file():
        raise StoreLayoutError(f"{store.root}: no checkpoint file")
    old_bytes = path.read_bytes()
    current = store.read_checkpoint()
    if direction is None:
        direction = rng.choice(("ahead", "behind"))
    if direction not in ("ahead", "behind"):
        raise ValueError("--direction must be ahead or behind")
    days = rng.randint(2, 60)
    delta = days * 86_400_000
    sign = 1 if direction == "ahead" else -1
    names = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")
    new_values = {name: max(0, current[name] + sign * delta) for name in names}
    fresh = w.checkpoint_bytes(new_values["physic_msg_timestamp"],
                               new_values["logics_msg_timestamp"],
                               new_values["index_msg_timestamp"],
                               current["master_flushed_offset"], current["confirm_phy_offset"])
    width = 8 * len(names)
    new_bytes = fresh[:width] + old_bytes[width:]
    w.atomic_write(path, new_bytes)
    return {"file": _relative(store, path), "direction": direction, "shift_ms": sign * delta,
            "range": {"file_start": 0, "file_end": width}, "length": width,
            "old_hex": _hex(old_bytes[:width]), "new_hex": _hex(new_bytes[:width]),
            "hex_truncated": False,
            "old": {name: current[name] for name in names}, "new": new_values,
            "records": []}


CONFIG_DAMAGE_DEFAULT = "config/consumerOffset.json"


def _damage_config(store, rng, file, offset, kind, length=None, **_):
    """A config file as an OS crash leaves it: empty (5.1-5.3 write in place), cut short, or
    its bytes turned to zeros (the size kept, the data never written back)."""
    rel = file or CONFIG_DAMAGE_DEFAULT
    path = store.root / rel
    if not path.is_file():
        raise StoreLayoutError(f"{store.root}: no file {rel}")
    old = path.read_bytes()
    if kind == "config-empty":
        new = b""
    elif kind == "config-truncate":
        cut = offset if offset is not None else rng.randrange(1, max(2, len(old)))
        if not 0 <= cut < len(old):
            raise ValueError(f"--offset must be below the file size {len(old)}")
        new = old[:cut]
    else:
        new = bytes(len(old))
    w.atomic_write(path, new)
    return {"file": rel, "range": {"file_start": len(new) if kind == "config-truncate" else 0,
                                   "file_end": len(old)},
            "old_size": len(old), "new_size": len(new), "old_hex": _hex(old),
            "new_hex": _hex(new), "hex_truncated": len(old) > HEX_PREVIEW, "records": []}


_DAMAGERS = {"torn-tail": _torn_tail, "bit-flip": _bit_flip, "zero-range": _zero_range,
             "truncate-file": _truncate_file, "delete-file": _delete_file,
             "stray-file": _stray_file, "stale-checkpoint": _stale_checkpoint,
             "config-empty": _damage_config, "config-truncate": _damage_config,
             "config-zeros": _damage_config}


@holding_store_lock("fixture damage")
def damage_store(root: Path, kind: str, seed: int = 0, *, file: str | None = None,
                 offset: int | None = None, length: int | None = None, target: str = "body",
                 direction: str | None = None, field: str | None = None) -> dict:
    """Inject one fault of ``kind`` into the store at ``root`` and describe it.

    Refuses (StoreLockedError, exit 3) a store whose lock a live process holds."""
    if kind not in _DAMAGERS:
        raise ValueError(f"unknown damage kind {kind!r}; choose from "
                         f"{', '.join(DAMAGE_KINDS + CONFIG_DAMAGE_KINDS)}")
    Store.refuse_unexplained_layout(root, "fixture damage")
    store = Store(root)
    if store.lock_held():
        raise StoreLockedError(f"{root}: the store's lock is held by a live process (a running "
                               "broker?); refusing to damage it")
    if length is not None and length < 1:
        raise ValueError("--length must be >= 1")
    rng = random.Random(f"{kind}:{seed}")
    if field is not None and kind != "bit-flip":
        raise ValueError("--field applies to bit-flip --target entry-header only")
    report = _DAMAGERS[kind](store, rng, file, offset, length=length, target=target,
                             direction=direction, kind=kind, field=field)
    return {"kind": kind, "seed": seed, **report}
