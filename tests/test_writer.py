"""The writer's struct packing equals the construct declaration's build, for every variant."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqtool import writer
from mqtool.formats import codecs
from mqtool.formats import commitlog as fmt

hosts = st.one_of(
    st.tuples(st.binary(min_size=4, max_size=4), st.integers(0, 65535)),
    st.tuples(st.binary(min_size=16, max_size=16), st.integers(0, 65535)))
int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                    min_size=1, max_size=12)


@st.composite
def messages(draw):
    return writer.Message(
        topic=draw(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=80)),
        queue_id=draw(int32), body=draw(st.binary(max_size=300)),
        properties=draw(st.dictionaries(prop_text, prop_text, max_size=6)),
        flag=draw(int32), sys_flag=draw(st.integers(0, 0x7FF)) & ~0x30,
        born_timestamp=draw(int64), born_host=draw(hosts), store_timestamp=draw(int64),
        store_host=draw(hosts), reconsume_times=draw(int32),
        prepared_transaction_offset=draw(int64))


def declared_build(msg, offset, queue_offset, magic, props):
    topic = msg.topic.encode()
    sys_flag = msg.sys_flag | (fmt.BORNHOST_V6_FLAG if len(msg.born_host[0]) == 16 else 0) \
        | (fmt.STOREHOSTADDRESS_V6_FLAG if len(msg.store_host[0]) == 16 else 0)
    return fmt.commitlog_message.build(dict(
        total_size=fmt.message_length(magic, sys_flag, len(msg.body), len(topic), len(props)),
        magic_code=magic, body_crc=codecs.body_crc(msg.body), queue_id=msg.queue_id,
        flag=msg.flag, queue_offset=queue_offset, physical_offset=offset, sys_flag=sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=dict(ip=msg.born_host[0], port=msg.born_host[1]),
        store_timestamp=msg.store_timestamp,
        store_host=dict(ip=msg.store_host[0], port=msg.store_host[1]),
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
        body_length=len(msg.body), body=msg.body or None, topic_length=len(topic), topic=topic,
        properties_length=len(props), properties=props or None))


@settings(max_examples=300, deadline=None)
@given(messages(), st.integers(0, 2**40), st.integers(0, 2**40), st.booleans())
def test_encode_message_equals_the_declarations_build(msg, offset, queue_offset, v2):
    magic = fmt.MESSAGE_MAGIC_CODE_V2 if v2 else fmt.MESSAGE_MAGIC_CODE
    if not v2 and len(msg.topic.encode()) > 127:
        magic = fmt.MESSAGE_MAGIC_CODE_V2
    props = writer.encode_properties(msg, prop_crc=False)
    packed = writer.encode_message(msg, offset, queue_offset, magic=magic, properties=props)
    assert packed == declared_build(msg, offset, queue_offset, magic, props)


@settings(max_examples=100, deadline=None)
@given(messages())
def test_property_crc_covers_the_record_before_its_last_20_bytes(msg):
    props = writer.encode_properties(msg, prop_crc=True)
    record = writer.encode_message(msg, 0, 0, magic=fmt.MESSAGE_MAGIC_CODE_V2, properties=props,
                                   prop_crc=True)
    parsed = fmt.commitlog_message.parse(record)
    assert parsed.properties.endswith(b"\x02")
    assert codecs.stored_prop_crc(parsed.properties) == codecs.record_prop_crc(record)
    assert codecs.decode_properties(parsed.properties)[codecs.PROP_CRC_KEY] == \
        codecs.prop_crc_digits(codecs.record_prop_crc(record))
