"""Opening 5.x inner batches: the one place that turns an outer CommitLog record into the messages
a consumer sees.

A BatchCQ topic stores a client's batch as ONE record (sysFlag INNER_BATCH | NEED_UNWRAP) whose
body is the client's encoding of the messages (:mod:`mqtool.formats.innerbatch`), ``INNER_NUM``
their count and ``INNER_BASE`` the queue offset of the first. A consumer unwraps it
(``MessageDecoder.decodeMessages``): every inner message keeps the record's topic, queue, store
time and hosts and gets queue offset INNER_BASE + its position, its own properties (KEYS, TAGS,
UNIQ_KEY, ...) and body. Only the outer record is indexed, so the broker's queryMessage never
finds an inner message by its key or UNIQ_KEY.

:func:`open_inner_batch` never raises on bad bytes: a torn body, or an INNER_NUM/INNER_BASE that
disagrees with the body or the record, comes back as :attr:`OpenedBatch.problem` (one line) with
whatever could be read (nothing for a torn body). ``dump``, ``export``, ``salvage``, ``query``
(through :func:`mqtool.inspect.unwrap_message_dict`) and ``verify`` (``CL_INNER_BATCH``) all use
it; Spark jobs can call :func:`open_inner_batch` on each record they hold (record + stored body).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .formats import codecs
from .formats import commitlog as cl_fmt
from .formats.innerbatch import InnerBatchError, InnerMessage, parse_inner_batch

INNER_BATCH_FLAG = cl_fmt.INNER_BATCH_FLAG


def is_inner_batch(sys_flag: int) -> bool:
    """A record a consumer must unwrap (sysFlag INNER_BATCH)."""
    return bool(sys_flag & INNER_BATCH_FLAG)


@dataclass
class InnerRecord:
    """One inner message as a consumer receives it, and where it lies."""

    position: int                 # index inside the batch, 0-based
    queue_offset: int             # INNER_BASE + position
    message: InnerMessage

    @property
    def properties(self) -> dict[str, str]:
        return self.message.properties

    @property
    def body(self) -> bytes:
        return self.message.body


@dataclass
class OpenedBatch:
    """The inner messages of one outer record, and what was wrong with it (None: whole)."""

    outer_offset: int
    base: int                     # queue offset of the first inner message
    stated_count: int | None      # INNER_NUM as the record says (None: absent or not a number)
    messages: list[InnerRecord] = field(default_factory=list)
    problem: str | None = None

    @property
    def opened(self) -> bool:
        return bool(self.messages)


def _int_property(props: dict[str, str], name: str) -> int | None:
    try:
        return int(props[name])
    except (KeyError, ValueError):
        return None


def open_inner_batch(offset: int, queue_offset: int, properties: dict[str, str],
                     body: bytes) -> OpenedBatch:
    """The inner messages of the record at CommitLog ``offset`` (its QUEUEOFFSET, decoded
    properties and body as a consumer receives it, i.e. decompressed)."""
    stated = _int_property(properties, "INNER_NUM")
    base = _int_property(properties, "INNER_BASE")
    problems = []
    if base is None:
        problems.append(f"INNER_BASE {properties.get('INNER_BASE')!r} is not a queue offset; "
                        f"the record's QUEUEOFFSET {queue_offset} is used")
        base = queue_offset
    elif base != queue_offset:
        problems.append(f"INNER_BASE {base} differs from the record's QUEUEOFFSET {queue_offset}")
    opened = OpenedBatch(offset, base, stated)
    try:
        messages = parse_inner_batch(bytes(body or b""))
    except InnerBatchError as err:
        opened.problem = f"torn inner batch: {err}"
        return opened
    if not messages:
        problems.append("the inner batch body holds no message")
    elif stated is None:
        problems.append(f"INNER_NUM {properties.get('INNER_NUM')!r} is not a count; the body "
                        f"holds {len(messages)} messages")
    elif stated != len(messages):
        problems.append(f"INNER_NUM says {stated} messages, the body holds {len(messages)}")
    opened.messages = [InnerRecord(j, base + j, m) for j, m in enumerate(messages)]
    opened.problem = "; ".join(problems) or None
    return opened


def open_record(record, body: bytes) -> OpenedBatch:
    """:func:`open_inner_batch` of a scanned :class:`mqtool.scan.MessageRecord`."""
    return open_inner_batch(record.offset, record.queue_offset,
                            codecs.decode_properties(record.properties_raw), body)


def batch_carries(opened: OpenedBatch, key: str | None, uniq_key: str | None) -> list[InnerRecord]:
    """The inner messages whose KEYS hold ``key`` or whose UNIQ_KEY is ``uniq_key``."""
    if uniq_key is not None:
        return [m for m in opened.messages if m.properties.get("UNIQ_KEY") == uniq_key]
    return [m for m in opened.messages if key in codecs.message_keys(m.properties)]


__all__ = ["INNER_BATCH_FLAG", "InnerRecord", "OpenedBatch", "is_inner_batch",
           "open_inner_batch", "open_record", "batch_carries"]
