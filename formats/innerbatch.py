"""The body of a 5.x inner-batch record (sysFlag INNER_BATCH | NEED_UNWRAP, a BatchCQ topic).

A client sending a batch to a BatchCQ topic encodes its messages back to back
(``MessageDecoder.encodeMessages`` / ``encodeMessage``) and the broker stores those bytes
unchanged as the body of ONE CommitLog record, whose ``INNER_NUM`` property counts them and whose
``INNER_BASE`` is the queue offset of the first (consumers unwrap them with
``MessageDecoder.decodeMessages``). Each inner message:

* ``total_size`` - the inner message's own length, these 22 bytes of fields included;
* ``magic_code`` and ``body_crc`` - always 0 as the client writes them (the record's body CRC
  covers the whole batch);
* ``flag``, ``body`` (4-byte length), ``properties`` (2-byte length, the client's serialised
  HashMap with keys, UNIQ_KEY, tags and user properties).

Declarations: ``inner_message`` and ``inner_batch_body``; :func:`parse_inner_batch` and
:func:`build_inner_batch` are the checked codec (``build(parse(b)) == b`` for every well-formed
body), :class:`InnerMessage` the decoded value.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from construct import Bytes, GreedyRange, Int16sb, Int32sb, Struct, this

from . import codecs

# TOTALSIZE, MAGICCODE, BODYCRC, FLAG, body length, properties length
INNER_MESSAGE_FIXED_SIZE = 4 + 4 + 4 + 4 + 4 + 2

inner_message = Struct(
    "total_size" / Int32sb,
    "magic_code" / Int32sb,
    "body_crc" / Int32sb,
    "flag" / Int32sb,
    "body_length" / Int32sb,
    "body" / Bytes(this.body_length),
    "properties_length" / Int16sb,
    "properties" / Bytes(this.properties_length),
)

inner_batch_body = GreedyRange(inner_message)


def inner_message_length(body_length: int, properties_length: int) -> int:
    """The ``total_size`` encodeMessage writes for these lengths."""
    return INNER_MESSAGE_FIXED_SIZE + body_length + properties_length


@dataclass
class InnerMessage:
    """One message of an inner batch as its client encoded it."""

    body: bytes = b""
    properties_raw: bytes = b""
    flag: int = 0
    magic_code: int = 0
    body_crc: int = 0
    properties: dict[str, str] = field(default_factory=dict)  # decoded from properties_raw

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> str | None:
        return self.properties.get("KEYS")

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")


class InnerBatchError(ValueError):
    """A body that is not a sequence of whole inner messages (torn, or lengths that disagree)."""


def split_inner_batch(body: bytes) -> list[tuple[int, int]]:
    """(start, total_size) of each inner message, checking every length before anything is
    parsed: construct's parsers must never see unchecked bytes."""
    spans, pos, end = [], 0, len(body)
    while pos < end:
        if end - pos < INNER_MESSAGE_FIXED_SIZE:
            raise InnerBatchError(f"inner message at {pos}: {end - pos} bytes left, "
                                  f"{INNER_MESSAGE_FIXED_SIZE} needed")
        total = int.from_bytes(body[pos:pos + 4], "big", signed=True)
        body_length = int.from_bytes(body[pos + 16:pos + 20], "big", signed=True)
        if body_length < 0 or pos + 22 + body_length > end:
            raise InnerBatchError(f"inner message at {pos}: body length {body_length} "
                                  f"runs past the batch ({end - pos} bytes left)")
        props_at = pos + 20 + body_length
        props_length = int.from_bytes(body[props_at:props_at + 2], "big", signed=True)
        if props_length < 0 or total != inner_message_length(body_length, props_length) \
                or pos + total > end:
            raise InnerBatchError(f"inner message at {pos}: total size {total} disagrees with "
                                  f"body {body_length} + properties {props_length} bytes "
                                  f"({end - pos} bytes left)")
        spans.append((pos, total))
        pos += total
    return spans


def parse_inner_batch(body: bytes) -> list[InnerMessage]:
    """The inner messages of a batch body (MessageDecoder.decodeMessages), raising
    :class:`InnerBatchError` on a torn or inconsistent body."""
    body = bytes(body or b"")
    messages = []
    for start, total in split_inner_batch(body):
        c = inner_message.parse(body[start:start + total])
        messages.append(InnerMessage(
            body=bytes(c.body), properties_raw=bytes(c.properties), flag=c.flag,
            magic_code=c.magic_code, body_crc=c.body_crc,
            properties=codecs.decode_properties(bytes(c.properties))))
    return messages


def build_inner_batch(messages: list[InnerMessage]) -> bytes:
    """The batch body of these inner messages (MessageDecoder.encodeMessages); the stored
    ``properties_raw`` bytes are used as they are."""
    return b"".join(inner_message.build(dict(
        total_size=inner_message_length(len(m.body), len(m.properties_raw)),
        magic_code=m.magic_code, body_crc=m.body_crc, flag=m.flag,
        body_length=len(m.body), body=m.body,
        properties_length=len(m.properties_raw), properties=m.properties_raw))
        for m in messages)
