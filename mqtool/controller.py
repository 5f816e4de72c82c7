"""Controller mode (5.x automatic master switch): the epoch file read as the broker reads it, its
checks, the consistent point two brokers agree on, and what a cut of the CommitLog does to it.

The rules come from Apache RocketMQ 5.x's source (see :mod:`mqtool.formats.epoch`):

* ``EpochFileCache.initCacheFromFile`` / ``CheckpointFile.read``: the main file, or ``.bak`` when
  the main file is missing, empty, or its count or CRC line does not match; a line that is not a
  number throws out of the loader (the broker does not start). Entries go into a map keyed by
  epoch; each entry ends where the next one (in file order) starts, the last at the max offset.
* ``EpochFileCache.findConsistentPoint`` with ``AutoSwitchHAClient.doTruncate``: a slave
  rejoining a master walks its own epochs from the newest down and stops at the first the master
  has with the same start offset; the consistent point is the smaller of the two ends of that
  epoch (each side's last epoch ending at its max offset). No shared epoch: -1, the slave does
  not truncate and the handshake fails.
* ``truncateSuffixByOffset(offset)`` (the slave after that truncation, a new master in
  ``changeToMaster`` after cutting to its last dispatched offset): entries starting at or past
  the offset go; an empty result is never written, so the file keeps its old content.

No broker-written store of this mode exists among the reference stores: the tests run on
stores forged through :mod:`mqtool.writer` with these rules.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .errors import MqtoolError, ParseError
from .formats import commitlog as cl_fmt
from .formats import epoch as epoch_fmt
from .store import Store


@dataclass
class EpochFile:
    """``epochFileCheckpoint`` and its ``.bak`` as found in a store root."""

    root: Path
    main: epoch_fmt.EpochText | None = None      # None: the file is absent
    bak: epoch_fmt.EpochText | None = None
    unreadable: dict[str, str] = field(default_factory=dict)   # file name -> OS/UTF-8 error

    @classmethod
    def read(cls, root: Path) -> EpochFile:
        found = cls(Path(root))
        for name, attr in ((epoch_fmt.EPOCH_FILE, "main"),
                           (epoch_fmt.EPOCH_FILE + epoch_fmt.BAK_SUFFIX, "bak")):
            path = found.root / name
            if not path.is_file():
                continue
            try:
                text = path.read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError) as err:
                found.unreadable[name] = str(err)
                setattr(found, attr, epoch_fmt.EpochText(fatal=f"unreadable: {err}"))
                continue
            setattr(found, attr, epoch_fmt.parse_epoch_text(text))
        return found

    @property
    def present(self) -> bool:
        return self.main is not None or self.bak is not None

    def loaded(self) -> tuple[list[tuple[int, int]], str | None, str | None]:
        """(entries the broker's cache starts with, the file they come from, why the broker does
        not start or loads nothing). ``CheckpointFile.read``: main; on a count/CRC mismatch or an
        empty result, ``.bak``; a line that is not a number is fatal."""
        main, bak = self.main, self.bak
        bak_name = epoch_fmt.EPOCH_FILE + epoch_fmt.BAK_SUFFIX
        if main is not None and main.fatal:
            return [], None, f"{epoch_fmt.EPOCH_FILE}: {main.fatal}: the broker's start fails"
        if main is not None and main.usable and main.entries:
            return main.entries, epoch_fmt.EPOCH_FILE, None
        if bak is None:
            why = main.problem if main is not None and main.problem else None
            return [], None, (f"{epoch_fmt.EPOCH_FILE}: {why}, and no {bak_name}: the broker "
                              "starts with no epoch" if why else None)
        if bak.fatal:
            return [], None, f"{bak_name}: {bak.fatal}: the broker's start fails"
        if not bak.usable:
            return [], None, (f"{bak_name}: {bak.problem}: the broker starts with no epoch "
                              "(initCacheFromFile fails)")
        return bak.entries, bak_name, None


def epoch_ranges(entries: list[tuple[int, int]], max_offset: int) -> list[dict]:
    """The epochs as the broker's cache holds them, ascending by epoch: each ends where the next
    entry in the file starts (``initEntries``); the newest ends at ``max_offset`` when it starts
    at or before it (``setLastEpochEntryEndOffset``), else stays open (Long.MAX_VALUE, None)."""
    by_epoch: dict[int, dict] = {}
    previous = None
    for epoch, start in entries:
        current = {"epoch": epoch, "start_offset": start, "end_offset": None}
        by_epoch[epoch] = current
        if previous is not None:
            previous["end_offset"] = start
        previous = current
    ranges = [by_epoch[e] for e in sorted(by_epoch)]
    if ranges:
        last = ranges[-1]
        last["end_offset"] = max_offset if last["start_offset"] <= max_offset else None
    return ranges


def _end(entry: dict) -> int:
    return entry["end_offset"] if entry["end_offset"] is not None else (1 << 63) - 1


def consistent_point(local: list[dict], remote: list[dict]) -> tuple[int, int | None]:
    """(offset, epoch) ``findConsistentPoint`` returns for ``local`` (the rejoining slave)
    against ``remote`` (the master); (-1, None) when they share no epoch with one start."""
    remote_by_epoch = {e["epoch"]: e for e in remote}
    for entry in sorted(local, key=lambda e: e["epoch"], reverse=True):
        other = remote_by_epoch.get(entry["epoch"])
        if other is not None and other["start_offset"] == entry["start_offset"]:
            return min(_end(entry), _end(other)), entry["epoch"]
    return -1, None


def truncate_suffix(entries: list[tuple[int, int]], offset: int) -> list[tuple[int, int]]:
    """``truncateSuffixByOffset``: the entries that start before ``offset``."""
    return [(epoch, start) for epoch, start in entries if start < offset]


# --- the broker identity ---------------------------------------------------------------------------

def broker_identity(root: Path) -> dict | None:
    """``brokerIdentity`` (and ``brokerIdentity-temp``) decoded, None when neither exists."""
    root = Path(root)
    out = {}
    for name, temp in ((epoch_fmt.BROKER_IDENTITY_FILE, False),
                       (epoch_fmt.BROKER_IDENTITY_TEMP_FILE, True)):
        path = root / name
        if not path.is_file():
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            out[name] = {"problem": f"unreadable: {err}"}
            continue
        ident = epoch_fmt.parse_broker_identity(text, temp=temp)
        entry = {"cluster": ident.cluster, "broker_name": ident.broker_name,
                 "broker_id": ident.broker_id}
        if temp:
            entry["register_check_code"] = ident.register_check_code
        if ident.problem:
            entry["problem"] = ident.problem
        out[name] = entry
    return out or None


# --- what info and the passport show ----------------------------------------------------------------

def controller_section(store: Store, max_offset: int | None = None) -> dict | None:
    """The epochs and broker identity of a controller-mode store (None: neither file exists).
    ``max_offset`` closes the last epoch (default: the end of the CommitLog's written files)."""
    epochs = EpochFile.read(store.root)
    identity = broker_identity(store.root)
    if not epochs.present and identity is None:
        return None
    entries, source, fatal = epochs.loaded()
    if max_offset is None:
        max_offset = store.commitlog.end_offset
    return {"epoch_file": source, "epoch_problem": fatal or _problem_of(epochs),
            "epochs": epoch_ranges(entries, max_offset), "max_offset": max_offset,
            "broker_identity": identity}


def _problem_of(epochs: EpochFile) -> str | None:
    main = epochs.main
    if main is not None and main.problem:
        return f"{epoch_fmt.EPOCH_FILE}: {main.problem} (the broker loads the .bak)"
    return None


def controller_claim(section: dict) -> dict:
    epochs = section["epochs"]
    ident = (section["broker_identity"] or {}).get(epoch_fmt.BROKER_IDENTITY_FILE) or {}
    who = (f"{ident.get('cluster')}#{ident.get('broker_name')}#{ident.get('broker_id')}"
           if ident else "no brokerIdentity")
    span = ", ".join(f"epoch {e['epoch']} [{e['start_offset']:,}, "
                     f"{'' if e['end_offset'] is None else format(e['end_offset'], ',')})"
                     for e in epochs[-4:]) or "no epoch loaded"
    more = f" (last 4 of {len(epochs)})" if len(epochs) > 4 else ""
    return {"claim": "5.x controller mode",
            "evidence": f"{section['epoch_file'] or 'no usable epochFileCheckpoint'}: {span}{more}; "
                        f"identity {who}"}


# --- verify --------------------------------------------------------------------------------------

def _finding(code: str, file: str, message: str, severity: str | None = None,
             offset: int = 0, **extra) -> dict:
    from .vocabulary import CODES
    return {"code": code, "file": file, "offset": offset, "message": message,
            "severity": severity or CODES[code][0], **extra}


def record_starts_at(store: Store, offset: int) -> bool:
    """True when a message record whose PHYSICALOFFSET field names ``offset`` starts there."""
    from .scan import message_at
    try:
        record = message_at(store.commitlog, offset, check_crc=False)
    except (ParseError, MqtoolError, ValueError):
        return False
    return record.magic_code in cl_fmt.MESSAGE_MAGIC_CODES and record.physical_offset == offset


def check_epoch_file(store: Store, max_offset: int) -> list[dict]:
    """verify's findings on ``epochFileCheckpoint`` (and ``.bak``), ``max_offset`` being where the
    broker's recovery leaves the CommitLog: the count and CRC lines, epochs and start offsets
    increasing, each start inside the store and on a record start, the .bak agreeing."""
    epochs = EpochFile.read(store.root)
    if not epochs.present:
        return []
    name, bak_name = epoch_fmt.EPOCH_FILE, epoch_fmt.EPOCH_FILE + epoch_fmt.BAK_SUFFIX
    findings = []
    for file, text in ((name, epochs.main), (bak_name, epochs.bak)):
        if text is None:
            continue
        if text.fatal:
            findings.append(_finding("EPOCH_UNREADABLE", file, f"{text.fatal}: the broker's epoch "
                                     "cache load throws and its start fails" if file == name else
                                     f"{text.fatal} (the broker falls back to it only when "
                                     f"{name} is unusable)"))
        elif text.problem:
            code = "EPOCH_COUNT" if text.problem_kind == "count" else "EPOCH_CRC"
            fallback = (f"; the broker loads {bak_name} instead" if file == name else "")
            findings.append(_finding(code, file, text.problem + fallback))
        if text.skipped:
            findings.append(_finding("EPOCH_COUNT", file, f"line(s) {text.skipped[:5]} are not "
                                     "<epoch>-<startOffset> entries (the reader skips them)",
                                     severity="warning"))
    if epochs.main is None:
        findings.append(_finding("EPOCH_COUNT", name, f"missing; only {bak_name} exists (the "
                                 "broker loads it)", severity="warning"))
    entries, source, fatal = epochs.loaded()
    if fatal and not any(f["code"] == "EPOCH_UNREADABLE" for f in findings):
        findings.append(_finding("EPOCH_UNREADABLE", name, fatal))
    if source is not None:
        findings += _check_entries(store, source, entries, max_offset)
    if epochs.main is not None and epochs.bak is not None and epochs.main.usable \
            and epochs.bak.usable:
        findings += _check_bak(epochs.main.entries, epochs.bak.entries, bak_name)
    return findings


def _check_entries(store: Store, source: str, entries: list[tuple[int, int]],
                   max_offset: int) -> list[dict]:
    findings = []
    min_offset = store.commitlog.min_offset
    for (e0, s0), (e1, s1) in zip(entries, entries[1:]):
        if e1 <= e0 or s1 < s0:
            findings.append(_finding("EPOCH_ORDER", source, f"epoch {e1} starting at {s1:,} "
                                     f"follows epoch {e0} starting at {s0:,}: epochs and start "
                                     "offsets only grow (appendEntry refuses anything else)",
                                     commitlog_offset=s1))
    ranges = epoch_ranges(entries, max_offset)
    for entry in ranges:
        start, epoch = entry["start_offset"], entry["epoch"]
        if start > max_offset:
            findings.append(_finding("EPOCH_PAST_END", source, f"epoch {epoch} starts at "
                                     f"{start:,}, past the CommitLog's end {max_offset:,} (after "
                                     "recovery): its messages are gone, the epoch file was not "
                                     "cut with the CommitLog", commitlog_offset=start))
        elif min_offset <= start < max_offset and not record_starts_at(store, start):
            findings.append(_finding("EPOCH_NOT_RECORD", source, f"epoch {epoch} starts at "
                                     f"{start:,}, where no message record starts",
                                     commitlog_offset=start))
        elif start < min_offset and _end(entry) <= min_offset:
            findings.append(_finding("EPOCH_EXPIRED", source, f"epoch {epoch} ends at "
                                     f"{_end(entry):,}, before the first CommitLog file "
                                     f"({min_offset:,}); the broker drops it on its next file "
                                     "deletion (truncatePrefixByOffset)",
                                     commitlog_offset=start))
    return findings


def _check_bak(main: list[tuple[int, int]], bak: list[tuple[int, int]], bak_name: str) -> list[dict]:
    """The .bak is the file one write ago (string2File): every epoch both name starts at the
    same offset in both (entries are only appended or cut off, never moved)."""
    main_by_epoch = dict(main)
    differ = [(e, s, main_by_epoch[e]) for e, s in bak if e in main_by_epoch
              and main_by_epoch[e] != s]
    if not differ:
        return []
    e, s, m = differ[0]
    return [_finding("EPOCH_BAK", bak_name, f"epoch {e} starts at {s:,} in {bak_name} but at "
                     f"{m:,} in {epoch_fmt.EPOCH_FILE} ({len(differ)} epoch(s) differ): one of "
                     "them was edited or belongs to another store")]
