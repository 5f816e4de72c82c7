"""Controller mode (5.x automatic master switch): the epoch checkpoint and the broker identity.

Read from Apache RocketMQ 5.x's source (commit 8fc57f14): ``common/utils/CheckpointFile``,
``store/ha/autoswitch/EpochFileCache`` (its ``EpochEntrySerializer``), ``MixAll.string2File``,
``UtilAll.crc32``, ``store/ha/autoswitch/BrokerMetadata`` and ``MessageStoreConfig``
(``getStorePathEpochFile``, ``getStorePathBrokerIdentity``). No broker-written store of this
mode exists among the reference stores: these rules come from the source alone.

``<storePathRootDir>/epochFileCheckpoint`` is text (UTF-8, lines ended by the JVM's line
separator, ``\\n`` on Linux)::

    <number of entries>
    <crc>
    <epoch>-<startOffset>
    ...

* ``crc`` is ``UtilAll.crc32`` (CRC-32 masked to 31 bits, so never negative) of the entry lines
  joined, each with its line separator. A ``crc`` of 0 means "not checked".
* The reader takes every line after the second as an entry line: the CRC covers them all (also
  a line that is not an entry), an entry is a line that ``split("-")`` cuts into exactly two
  parts (Java drops trailing empty parts). The number of entries must equal the first line.
* A count or CRC that does not match makes the reader fall back to ``.bak``; a line that is not a
  number where a number must be (first two lines, either part of an entry) throws an exception
  the broker does not catch (``NumberFormatException`` is no ``IOException``): its start fails.
* Every write goes through ``MixAll.string2File``: the previous content is copied to
  ``epochFileCheckpoint.bak`` first, so ``.bak`` is the file one change ago. An empty entry list
  is never written (the file keeps its old content).
* An epoch covers ``[startOffset, next epoch's startOffset)``; the last one ends at the CommitLog's
  max offset. Epochs and start offsets only grow (``appendEntry`` refuses anything else).

``<storePathRootDir>/brokerIdentity`` is ``clusterName#brokerName#brokerId`` (no line end);
``brokerIdentity-temp`` adds ``#registerCheckCode`` while the broker registers with the
controller.

Pure declarations: the functions here turn text into values and back; nothing opens a file.
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field

EPOCH_FILE = "epochFileCheckpoint"          # MessageStoreConfig.getStorePathEpochFile
BAK_SUFFIX = ".bak"                         # CheckpointFile.getBackFilePath / string2File
BROKER_IDENTITY_FILE = "brokerIdentity"     # MessageStoreConfig.getStorePathBrokerIdentity
BROKER_IDENTITY_TEMP_FILE = "brokerIdentity-temp"   # ReplicasManager's TempBrokerMetadata
LINE_SEPARATOR = "\n"                       # System.lineSeparator() on the Linux brokers
NOT_CHECKED_CRC = 0                         # CheckpointFile.NOT_CHECK_CRC_MAGIC_CODE
ENTRY_SEPARATOR = "-"
IDENTITY_SEPARATOR = "#"
JAVA_INT = (-(1 << 31), (1 << 31) - 1)
JAVA_LONG = (-(1 << 63), (1 << 63) - 1)
_JAVA_NUMBER = re.compile(r"[+-]?[0-9]+\Z")


def checkpoint_crc(entry_text: str) -> int:
    """``UtilAll.crc32`` of the entry lines (each with its separator), as the file stores it."""
    return zlib.crc32(entry_text.encode("utf-8")) & 0x7FFFFFFF


def java_lines(text: str) -> list[str]:
    """The lines ``BufferedReader.readLine`` returns: ended by ``\\n``, ``\\r`` or ``\\r\\n``;
    a final line without an end still counts, an empty text has none."""
    lines = re.split(r"\r\n|\r|\n", text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def java_number(text: str | None, bounds: tuple[int, int]) -> int | None:
    """``Integer.parseInt``/``Long.parseLong`` of ``text`` (ASCII digits, optional sign), None
    where Java throws."""
    if text is None or not _JAVA_NUMBER.match(text):
        return None
    value = int(text)
    return value if bounds[0] <= value <= bounds[1] else None


def java_split(text: str, separator: str) -> list[str]:
    """``String.split`` with a one-character literal and no limit: trailing empty parts dropped."""
    parts = text.split(separator)
    if text == "":
        return [""]
    while parts and parts[-1] == "":
        parts.pop()
    return parts


@dataclass
class EpochText:
    """One epoch checkpoint text as ``CheckpointFile.read`` sees it.

    ``entries`` are (epoch, startOffset) in file order. ``fatal`` names the line that throws an
    uncaught exception (the broker does not start); ``problem`` why the reader rejects the
    text and falls back to ``.bak`` (count or CRC). ``skipped`` are entry lines the serializer
    returns null for (numbered from 1 in the file)."""

    entries: list[tuple[int, int]] = field(default_factory=list)
    stated_count: int | None = None
    stated_crc: int | None = None
    computed_crc: int | None = None
    skipped: list[int] = field(default_factory=list)
    fatal: str | None = None
    problem: str | None = None
    problem_kind: str | None = None     # "count" or "crc"

    @property
    def usable(self) -> bool:
        return self.fatal is None and self.problem is None


def parse_epoch_text(text: str) -> EpochText:
    """The epoch checkpoint read as the broker reads it (never raises)."""
    result = EpochText()
    lines = java_lines(text)
    first = lines[0] if lines else None
    result.stated_count = java_number(first, JAVA_INT)
    if result.stated_count is None:
        result.fatal = f"line 1 (entry count) {first!r} is not a number"
        return result
    second = lines[1] if len(lines) > 1 else None
    result.stated_crc = java_number(second, JAVA_INT)
    if result.stated_crc is None:
        result.fatal = f"line 2 (CRC) {second!r} is not a number"
        return result
    covered = []
    for number, line in enumerate(lines[2:], start=3):
        covered.append(line + LINE_SEPARATOR)
        parts = java_split(line, ENTRY_SEPARATOR)
        if len(parts) != 2:
            result.skipped.append(number)
            continue
        epoch, start = java_number(parts[0], JAVA_INT), java_number(parts[1], JAVA_LONG)
        if epoch is None or start is None:
            result.fatal = f"line {number} {line!r} is not <epoch>-<startOffset> numbers"
            return result
        result.entries.append((epoch, start))
    result.computed_crc = checkpoint_crc("".join(covered))
    if len(result.entries) != result.stated_count:
        result.problem = (f"line 1 says {result.stated_count} entries, "
                          f"{len(result.entries)} found")
        result.problem_kind = "count"
    elif result.stated_crc != NOT_CHECKED_CRC and result.stated_crc != result.computed_crc:
        result.problem = (f"line 2 CRC {result.stated_crc} does not match the entries' CRC "
                          f"{result.computed_crc}")
        result.problem_kind = "crc"
    return result


def format_epoch_text(entries: list[tuple[int, int]]) -> str:
    """What ``CheckpointFile.write`` writes for ``entries`` (the caller never passes none)."""
    body = "".join(f"{epoch}{ENTRY_SEPARATOR}{start}{LINE_SEPARATOR}" for epoch, start in entries)
    return f"{len(entries)}{LINE_SEPARATOR}{checkpoint_crc(body)}{LINE_SEPARATOR}{body}"


@dataclass
class BrokerIdentity:
    cluster: str | None
    broker_name: str | None
    broker_id: int | None
    register_check_code: str | None = None
    problem: str | None = None


def parse_broker_identity(text: str, temp: bool = False) -> BrokerIdentity:
    """``BrokerMetadata.decodeFromStr`` (``TempBrokerMetadata`` with ``temp``); ``problem`` says
    what the broker's decoder throws on."""
    parts = java_split(text, IDENTITY_SEPARATOR)
    need = 4 if temp else 3
    if len(parts) < need:
        return BrokerIdentity(*(parts + [None] * 3)[:2], None,
                              problem=f"{len(parts)} '#'-separated fields, {need} expected")
    broker_id = java_number(parts[2], JAVA_LONG)
    return BrokerIdentity(parts[0], parts[1], broker_id, parts[3] if temp else None,
                          None if broker_id is not None else f"brokerId {parts[2]!r} is not a number")


def format_broker_identity(cluster: str, broker_name: str, broker_id: int) -> str:
    """``BrokerMetadata.encodeToStr``."""
    return IDENTITY_SEPARATOR.join((cluster, broker_name, str(broker_id)))
