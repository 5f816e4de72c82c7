"""The inner-batch body declaration (formats/innerbatch.py) against hand-made bytes and against
every inner batch the 5.3.3 broker stored in the BatchCQ reference stores."""
from __future__ import annotations

import base64
import gzip
import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import SHARED_STORES, write_log
from mqtool.formats import codecs
from mqtool.formats import commitlog as cl_fmt
from mqtool.formats import innerbatch

BATCHCQ_STORES = ["v5-batchcq-clean", "v5-batchcq-crash"]


def oracle_inner_message(body: bytes, props: bytes, flag: int = 0) -> bytes:
    """MessageDecoder.encodeMessage, written from the Java field list with struct."""
    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
    return struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + \
        struct.pack(">h", len(props)) + props


def test_inner_batch_by_hand():
    first = oracle_inner_message(b"hello", b"KEYS\x01k1\x02UNIQ_KEY\x01AB\x02", flag=3)
    second = oracle_inner_message(b"", b"")
    body = first + second
    messages = innerbatch.parse_inner_batch(body)
    assert [(m.body, m.flag, m.magic_code, m.body_crc) for m in messages] == \
        [(b"hello", 3, 0, 0), (b"", 0, 0, 0)]
    assert messages[0].keys == "k1" and messages[0].uniq_key == "AB" and messages[0].tags is None
    assert messages[1].properties == {}
    assert innerbatch.build_inner_batch(messages) == body
    assert innerbatch.inner_message_length(5, 20) == len(first)
    assert innerbatch.parse_inner_batch(b"") == []


@pytest.mark.parametrize("cut", [1, 10, 21, 30])
def test_torn_inner_batch_is_an_error(cut):
    body = oracle_inner_message(b"x" * 20, b"A\x01b\x02") * 2
    with pytest.raises(innerbatch.InnerBatchError):
        innerbatch.parse_inner_batch(body[:-cut])


def test_total_size_that_disagrees_is_an_error():
    good = oracle_inner_message(b"abc", b"A\x01b\x02")
    bad = struct.pack(">i", len(good) + 4) + good[4:] + b"\0" * 4
    with pytest.raises(innerbatch.InnerBatchError):
        innerbatch.parse_inner_batch(bad)
    negative = good[:16] + struct.pack(">i", -5) + good[20:]
    with pytest.raises(innerbatch.InnerBatchError):
        innerbatch.parse_inner_batch(negative)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.lists(st.tuples(st.binary(max_size=30),
                                                    st.binary(max_size=30)), max_size=4))
def test_any_bytes_parse_or_give_a_batch_error(noise, parts):
    """Garbage, or whole messages followed by garbage: a list of messages or InnerBatchError,
    never another exception; whole messages always round-trip."""
    whole = b"".join(oracle_inner_message(body, props) for body, props in parts)
    assert innerbatch.build_inner_batch(innerbatch.parse_inner_batch(whole)) == whole
    for data in (noise, whole + noise):
        try:
            messages = innerbatch.parse_inner_batch(data)
        except innerbatch.InnerBatchError:
            continue
        assert innerbatch.build_inner_batch(messages) == data


def batchcq_ref(name: str) -> Path:
    ref = SHARED_STORES / name
    if not (ref / "dump.json.gz").is_file():
        pytest.skip(f"../shared/rocketmq-stores/{name} is absent")
    return ref


def inner_batch_records(ref: Path) -> list[dict]:
    with gzip.open(ref / "dump.json.gz", "rt", encoding="utf-8") as fh:
        messages = json.load(fh)["messages"]
    return [m for m in messages if m["sysFlag"] & cl_fmt.INNER_BATCH_FLAG]


@pytest.mark.parametrize("name", BATCHCQ_STORES)
def test_every_stored_inner_batch_round_trips_and_matches_what_was_sent(name):
    """build(parse(body)) == body for every inner-batch record the broker stored, and its
    inner messages are the ones the client sent (write.json ``inner``): tags, keys, UNIQ_KEY,
    body length and body CRC, in order, INNER_NUM of them."""
    ref = batchcq_ref(name)
    records = inner_batch_records(ref)
    assert records
    sent = {m["wroteOffset"]: m for m in write_log(ref)["messages"]
            if m.get("kind") == "innerBatch" and m.get("status") == "PUT_OK"}
    for record in records:
        body = base64.b64decode(record["body"])
        inner = innerbatch.parse_inner_batch(body)
        assert innerbatch.build_inner_batch(inner) == body
        assert record["sysFlag"] & cl_fmt.NEED_UNWRAP_FLAG
        assert int(record["properties"]["INNER_NUM"]) == len(inner)
        assert int(record["properties"]["INNER_BASE"]) == record["queueOffset"]
        send = sent[record["commitLogOffset"]]
        assert (send["innerNum"], send["bodyLen"], send["bodyCRC"]) == \
            (len(inner), len(body), record["bodyCRC"])
        assert [(m.tags, m.keys, m.uniq_key, len(m.body), codecs.body_crc(m.body))
                for m in inner] == \
            [(s["tags"], s["keys"], s["uniqKey"], s["bodyLen"], s["bodyCRC"])
             for s in send["inner"]]
    # every inner batch the broker acknowledged is in the store, and was checked
    assert {r["commitLogOffset"] for r in records} == set(sent)


@pytest.mark.parametrize("name", BATCHCQ_STORES)
def test_writer_encodes_inner_messages_as_the_client_did(name):
    """Each inner message rebuilt from its decoded properties and body by the writer (the
    client's HashMap order, 5.x trailing separator) is byte for byte the one stored."""
    from mqtool.property_order import property_insertion_of
    from mqtool.writer import client_inner_message
    ref = batchcq_ref(name)
    stored = [m for r in inner_batch_records(ref)
              for m in innerbatch.parse_inner_batch(base64.b64decode(r["body"]))]
    insertion = property_insertion_of([m.properties_raw for m in stored])
    assert insertion is not None
    for m in stored:
        rebuilt = client_inner_message(m.body, m.properties, m.flag, insertion=insertion)
        assert rebuilt.properties_raw == m.properties_raw
        assert innerbatch.build_inner_batch([rebuilt]) == innerbatch.build_inner_batch([m])


def test_writer_lays_out_inner_batches_on_a_batch_topic(tmp_path):
    """StoreWriter: one record per inner batch (sysFlag 0xC0, INNER_NUM, INNER_BASE = its queue
    offset), the queue advancing by the batch size, one BatchConsumeQueue unit per record in
    batchconsumequeue/ and nothing in consumequeue/ for the batch topic."""
    from mqtool.formats import consumequeue as cq_fmt
    from mqtool.scan import Scanner
    from mqtool.store import Store
    from mqtool.writer import StoreWriter, client_inner_message, inner_batch_message
    writer = StoreWriter(tmp_path, commitlog_file_size=1 << 20, cq_units_per_file=300,
                         broker_version=5, batch_topics=frozenset({"BatchTopic"}),
                         bcq_units_per_file=50)
    sizes = [3, 1, 10]
    for n, size in enumerate(sizes):
        inner = [client_inner_message(f"m{n}-{j}".encode(),
                                      {"KEYS": f"k{n}-{j}", "UNIQ_KEY": f"U{n:02d}{j:02d}"})
                 for j in range(size)]
        writer.put(inner_batch_message("BatchTopic", 1, inner, {"UNIQ_KEY": f"B{n}",
                                                                "WAIT": "true"},
                                       store_timestamp=1000 + n))
    writer.close()
    assert not (tmp_path / "consumequeue" / "BatchTopic").exists()
    records = list(Scanner(Store(tmp_path).commitlog, check_crc=True).messages())
    assert all(r.body_crc_ok for r in records)
    commitlog = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    bases = [0, 3, 4]
    assert [r.queue_offset for r in records] == bases
    for n, record in enumerate(records):
        assert record.sys_flag & 0xC0 == 0xC0
        props = codecs.decode_properties(record.properties_raw)
        assert (props["INNER_NUM"], props["INNER_BASE"]) == (str(sizes[n]), str(bases[n]))
        inner = innerbatch.parse_inner_batch(
            commitlog[record.body_position:record.body_position + record.body_length])
        assert [m.keys for m in inner] == [f"k{n}-{j}" for j in range(sizes[n])]
    unit_file = tmp_path / "batchconsumequeue" / "BatchTopic" / "1" / f"{0:020d}"
    data = unit_file.read_bytes()
    assert len(data) == 50 * cq_fmt.BATCH_CQ_STORE_UNIT_SIZE
    units = [cq_fmt.batch_consumequeue_unit.parse(data[i * 46:(i + 1) * 46]) for i in range(3)]
    assert [(u.msg_base_offset, u.batch_size) for u in units] == list(zip(bases, sizes))
    assert [u.commitlog_offset for u in units] == [r.offset for r in records]
    assert writer.topic_queue_table["BatchTopic-1"] == sum(sizes)
