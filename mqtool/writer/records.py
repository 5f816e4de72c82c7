"""CommitLog records as CommitLog.doAppend encodes them: the message the broker is about to store,
its property bytes in the broker's HashMap order, and the record packed with the struct codecs
derived from :mod:`mqtool.formats.commitlog`."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..codec import MESSAGE_HEADER, MESSAGE_MIDDLE, PROPERTIES_LENGTH, TOPIC_LENGTH
from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..formats import innerbatch as innerbatch_fmt
from ..property_order import PRODUCER_UNIQ_KEY_FIRST, PropertyInsertion, broker_property_order


@dataclass
class Message:
    """A message as the broker is about to store it (after producer and broker set it up)."""

    topic: str
    queue_id: int
    body: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[bytes, int] = (b"\x7f\x00\x00\x01", 0)
    store_timestamp: int = 0
    store_host: tuple[bytes, int] = (b"\x7f\x00\x00\x01", 10911)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int | None = None        # None: computed from the body
    queue_offset: int | None = None    # None: assigned by the writer like the broker
    raw_properties: bytes | None = None  # exact bytes, bypassing the HashMap ordering
    # a classic batch's own properties (MessageExtBatch: WAIT, CLUSTER, its UNIQ_KEY), which the
    # batch encoder up to 5.3.3 appends to each message's properties as a second serialised map;
    # the store code after 5.3.3 (5.3.4+) stores each message's own properties only
    batch_properties: dict[str, str] | None = None


#: how a classic batch's messages are laid out: the batch's properties appended to every message
#: (4.x - 5.3.3), or each message with its own properties only (5.3.4+)
APPENDED_BATCH_PROPERTIES = "appended"
OWN_PROPERTIES_ONLY = "own"
CLASSIC_BATCH_LAYOUTS = (APPENDED_BATCH_PROPERTIES, OWN_PROPERTIES_ONLY)


def client_inner_message(body: bytes, properties: dict[str, str], flag: int = 0,
                         broker_version: int = 5,
                         insertion: PropertyInsertion = PRODUCER_UNIQ_KEY_FIRST
                         ) -> innerbatch_fmt.InnerMessage:
    """One message of an inner batch as a client encodes it (its own HashMap order)."""
    ordered = broker_property_order(properties, insertion)
    return innerbatch_fmt.InnerMessage(
        body=body, flag=flag, properties=dict(ordered),
        properties_raw=codecs.encode_properties(ordered, trailing_separator=broker_version >= 5))


def inner_batch_message(topic: str, queue_id: int, inner: list[innerbatch_fmt.InnerMessage],
                        properties: dict[str, str] | None = None, **fields) -> Message:
    """The one CommitLog record a BatchCQ topic stores for an inner batch: sysFlag
    INNER_BATCH | NEED_UNWRAP, the client's batch encoding as body, INNER_NUM the message count
    (the writer sets INNER_BASE to the queue offset it assigns). ``properties`` are the
    record's own (UNIQ_KEY, WAIT, the broker's CLUSTER); ``fields`` go to :class:`Message`."""
    sys_flag = fields.pop("sys_flag", 0) | cl_fmt.INNER_BATCH_FLAG | cl_fmt.NEED_UNWRAP_FLAG
    return Message(topic=topic, queue_id=queue_id, body=innerbatch_fmt.build_inner_batch(inner),
                   properties={**(properties or {}), "INNER_NUM": str(len(inner))},
                   sys_flag=sys_flag, **fields)


def host_flags(msg: Message) -> int:
    flags = msg.sys_flag & ~(cl_fmt.BORNHOST_V6_FLAG | cl_fmt.STOREHOSTADDRESS_V6_FLAG)
    if len(msg.born_host[0]) == 16:
        flags |= cl_fmt.BORNHOST_V6_FLAG
    if len(msg.store_host[0]) == 16:
        flags |= cl_fmt.STOREHOSTADDRESS_V6_FLAG
    return flags


def message_magic(topic: str, broker_version: int = 4) -> int:
    """V2 only from 5.1 on, and only for topics longer than 127 bytes (autoMessageVersionOnTopicLen)."""
    if broker_version >= 5 and len(topic.encode("utf-8")) > 127:
        return cl_fmt.MESSAGE_MAGIC_CODE_V2
    return cl_fmt.MESSAGE_MAGIC_CODE


def encode_properties(msg: Message, prop_crc: bool, broker_version: int = 4,
                      insertion: PropertyInsertion = PRODUCER_UNIQ_KEY_FIRST,
                      classic_batches: str = APPENDED_BATCH_PROPERTIES) -> bytes:
    """The stored property bytes: the broker's HashMap order, a trailing 0x02 from 5.x on, and
    with ``prop_crc`` 20 reserved bytes for the ``__CRC32#`` field. A classic batch's message
    carries its own map (as its client serialised it), followed by the batch's unless
    ``classic_batches`` is :data:`OWN_PROPERTIES_ONLY`."""
    if msg.raw_properties is not None:
        raw = msg.raw_properties
    elif msg.batch_properties is not None and classic_batches == APPENDED_BATCH_PROPERTIES:
        raw = codecs.encode_properties(broker_property_order(msg.properties, insertion),
                                       trailing_separator=broker_version >= 5)
        batch = codecs.encode_properties(broker_property_order(msg.batch_properties, insertion),
                                         trailing_separator=broker_version >= 5)
        if raw and batch and not raw.endswith(b"\x02"):
            raw += b"\x02"
        raw += batch
    else:
        raw = codecs.encode_properties(broker_property_order(msg.properties, insertion),
                                       trailing_separator=broker_version >= 5)
    if prop_crc:
        if raw and not raw.endswith(b"\x02"):
            raw += b"\x02"
        raw += b"\0" * codecs.CRC32_RESERVED_LEN
    return raw


def encode_message(msg: Message, physical_offset: int, queue_offset: int, *, magic: int,
                   properties: bytes, prop_crc: bool = False) -> bytes:
    """The record bytes, packed with the struct codecs derived from ``commitlog_message`` (tests
    prove them equal to the declaration's build); with ``prop_crc`` the reserved last 20 bytes of
    the properties receive the ``__CRC32#`` field computed over the rest of the record."""
    topic = msg.topic.encode("utf-8")
    body = msg.body or b""
    sys_flag = host_flags(msg)
    size = cl_fmt.message_length(magic, sys_flag, len(body), len(topic), len(properties))
    record = b"".join((
        MESSAGE_HEADER.pack(size, magic,
                            codecs.body_crc(body) if msg.body_crc is None else msg.body_crc,
                            msg.queue_id, msg.flag, queue_offset, physical_offset, sys_flag,
                            msg.born_timestamp),
        MESSAGE_MIDDLE[sys_flag & (cl_fmt.BORNHOST_V6_FLAG | cl_fmt.STOREHOSTADDRESS_V6_FLAG)].pack(
            msg.born_host[0], msg.born_host[1], msg.store_timestamp, msg.store_host[0],
            msg.store_host[1], msg.reconsume_times, msg.prepared_transaction_offset, len(body)),
        body, TOPIC_LENGTH[magic].pack(len(topic)), topic,
        PROPERTIES_LENGTH.pack(len(properties)), properties))
    if prop_crc:
        crc = codecs.record_prop_crc(record)
        record = record[:-codecs.CRC32_RESERVED_LEN] + codecs.prop_crc_field(crc)
    return record
