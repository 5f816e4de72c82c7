"""The construct declarations of mqtool.formats: parse and build against bytes laid out by hand
with ``struct`` from the spec's tables, static sizes, compiled == interpreted, and byte-exact
round trips over every record, unit and file of the broker-written stores."""
from __future__ import annotations

import functools
import gzip
import json
import struct
from pathlib import Path

import construct
import pytest

from conftest import SHARED_STORES, reference_dirs
from mqtool.formats import checkpoint as ckpt_fmt
from mqtool.formats import codecs
from mqtool.formats import commitlog as cl_fmt
from mqtool.formats import consumequeue as cq_fmt
from mqtool.formats import indexfile as idx_fmt

V1, V2, BLANK = 0xDAA320A7, 0xDAA320AB, 0xCBD43194


def plain(value):
    """A parse result as plain dicts/lists (construct's private ``_io`` keys dropped)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


@functools.lru_cache(maxsize=None)
def compiled(decl):
    return decl.compile()


def check_declaration(decl, data: bytes, expected: dict):
    """parse == expected, build(expected) == data, compiled parse == interpreted parse,
    compiled build == data."""
    parsed = plain(decl.parse(data))
    assert parsed == expected
    assert decl.build(expected) == data
    assert plain(compiled(decl).parse(data)) == parsed
    assert compiled(decl).build(expected) == data


# --- CommitLog message record -------------------------------------------------------------------

def hand_record(*, magic=V1, born_v6=False, store_v6=False, body=b"hello", topic=b"TopicTest",
                props=b"TAGS\x01TagA\x02KEYS\x01k1 k2", sys_flag_extra=0x1 | 0x8):
    """A record laid out with struct from the spec's table, and the values it must parse to."""
    sys_flag = sys_flag_extra | (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0)
    born_ip = bytes(range(1, 17)) if born_v6 else bytes([10, 0, 0, 7])
    store_ip = bytes(range(100, 116)) if store_v6 else bytes([127, 0, 0, 1])
    tail = (struct.pack(">i", len(body)) + body
            + (struct.pack(">h", len(topic)) if magic == V2 else struct.pack(">b", len(topic)))
            + topic + struct.pack(">h", len(props)) + props)
    middle = (born_ip + struct.pack(">i", 52007) + struct.pack(">q", 1795308685774)
              + store_ip + struct.pack(">i", 10911) + struct.pack(">i", 3)
              + struct.pack(">q", 123456789))
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(middle) + len(tail)
    head = struct.pack(">iIiiiqqiq", total, magic, 1774740973, -1, -5, 2**40 + 7, 3 * 2**30,
                       sys_flag, 1700000000001)
    data = head + middle + tail
    expected = dict(
        total_size=total, magic_code=magic, body_crc=1774740973, queue_id=-1, flag=-5,
        queue_offset=2**40 + 7, physical_offset=3 * 2**30, sys_flag=sys_flag,
        born_timestamp=1700000000001, born_host=dict(ip=born_ip, port=52007),
        store_timestamp=1795308685774, store_host=dict(ip=store_ip, port=10911),
        reconsume_times=3, prepared_transaction_offset=123456789,
        body_length=len(body), body=body or None,
        topic_length=len(topic), topic=topic,
        properties_length=len(props), properties=props or None)
    return data, expected


VARIANTS = [(magic, born, store) for magic in (V1, V2) for born in (False, True)
            for store in (False, True)]


VARIANT_IDS = [f"{'V2' if m == V2 else 'V1'}-born{6 if b else 4}-store{6 if s else 4}"
               for m, b, s in VARIANTS]


@pytest.mark.parametrize("magic, born_v6, store_v6", VARIANTS, ids=VARIANT_IDS)
def test_commitlog_message_by_hand(magic, born_v6, store_v6):
    data, expected = hand_record(magic=magic, born_v6=born_v6, store_v6=store_v6)
    check_declaration(cl_fmt.commitlog_message, data, expected)
    # the spec's overhead: 91 bytes for V1 with IPv4 hosts, +12 per IPv6 host, +1 for V2
    overhead = 91 + 12 * born_v6 + 12 * store_v6 + (magic == V2)
    assert len(data) == overhead + 5 + 9 + len(expected["properties"])
    assert cl_fmt.message_length(magic, expected["sys_flag"], 5, 9,
                                 len(expected["properties"])) == len(data)
    # STORETIMESTAMP sits at 56 only with an IPv4 born host
    assert struct.unpack_from(">q", data, 68 if born_v6 else 56)[0] == 1795308685774


@pytest.mark.parametrize("magic", [V1, V2])
def test_commitlog_message_empty_body_and_properties(magic):
    data, expected = hand_record(magic=magic, body=b"", props=b"", topic=b"T")
    assert expected["body"] is None and expected["properties"] is None
    check_declaration(cl_fmt.commitlog_message, data, expected)
    assert len(data) == 91 + (magic == V2) + 1


def test_commitlog_message_v2_long_topic():
    topic = ("%RETRY%" + "g" * 248).encode()
    assert len(topic) == 255
    data, expected = hand_record(magic=V2, topic=topic)
    check_declaration(cl_fmt.commitlog_message, data, expected)


def test_commitlog_message_rejects_other_magic():
    data, _ = hand_record()
    bad = data[:4] + struct.pack(">I", 0xDAA320A8) + data[8:]
    for decl in (cl_fmt.commitlog_message, compiled(cl_fmt.commitlog_message)):
        with pytest.raises(construct.ConstructError):
            decl.parse(bad)


def test_message_header_and_hosts_static_sizes():
    assert cl_fmt.message_header.sizeof() == 48
    assert cl_fmt.host_v4.sizeof() == 8
    assert cl_fmt.host_v6.sizeof() == 20
    data, expected = hand_record()
    header = {k: expected[k] for k in ("total_size", "magic_code", "body_crc", "queue_id", "flag",
                                       "queue_offset", "physical_offset", "sys_flag",
                                       "born_timestamp")}
    check_declaration(cl_fmt.message_header, data[:48], header)
    with pytest.raises(construct.SizeofError):
        cl_fmt.commitlog_message.sizeof()


def test_message_fields_in_java_order():
    assert cl_fmt.MESSAGE_FIELDS == (
        "total_size", "magic_code", "body_crc", "queue_id", "flag", "queue_offset",
        "physical_offset", "sys_flag", "born_timestamp", "born_host", "store_timestamp",
        "store_host", "reconsume_times", "prepared_transaction_offset", "body_length", "body",
        "topic_length", "topic", "properties_length", "properties")


def test_blank_record_by_hand():
    data = struct.pack(">iI", 1315, BLANK)
    assert data == bytes.fromhex("00000523CBD43194")
    check_declaration(cl_fmt.blank_record, data, dict(total_size=1315, magic_code=BLANK))
    assert cl_fmt.blank_record.sizeof() == 8 == cl_fmt.END_FILE_MIN_BLANK_LENGTH
    for decl in (cl_fmt.blank_record, compiled(cl_fmt.blank_record)):
        with pytest.raises(construct.ConstructError):
            decl.parse(struct.pack(">iI", 8, V1))


def test_sys_flag_helpers():
    assert cl_fmt.describe_sys_flag(0x301 | 0x30) == {
        "compressed": True, "multi_tags": False, "transaction": "NOT", "born_host_v6": True,
        "store_host_v6": True, "need_unwrap": False, "inner_batch": False,
        "compression": "zlib"}
    assert cl_fmt.transaction_type(0x4 | 0x1) == cl_fmt.TRANSACTION_PREPARED_TYPE
    assert cl_fmt.transaction_type(0xC) == cl_fmt.TRANSACTION_ROLLBACK_TYPE
    assert cl_fmt.compression_type(0x201) == cl_fmt.COMPRESSION_ZSTD
    assert cl_fmt.magic_version(V2) == "V2" and cl_fmt.magic_version(BLANK) == "BLANK"
    assert cl_fmt.magic_version(0) == "UNKNOWN"


# --- ConsumeQueue units ---------------------------------------------------------------------------

def test_consumequeue_unit_by_hand():
    data = struct.pack(">qiq", 2097152, 4802, -1231272886)
    check_declaration(cq_fmt.consumequeue_unit, data,
                      dict(commitlog_offset=2097152, size=4802, tags_code=-1231272886))
    assert cq_fmt.consumequeue_unit.sizeof() == 20 == cq_fmt.CQ_STORE_UNIT_SIZE


def test_consumequeue_pre_blank_unit():
    data = bytes(8) + bytes.fromhex("7FFFFFFF") + bytes(8)
    check_declaration(cq_fmt.consumequeue_unit, data, dict(cq_fmt.PRE_BLANK_UNIT))
    assert cq_fmt.is_pre_blank(0, 0x7FFFFFFF, 0)
    assert cq_fmt.is_valid_unit(0, 0x7FFFFFFF)  # what the broker's naive test accepts
    assert not cq_fmt.is_valid_unit(0, 0) and not cq_fmt.is_valid_unit(-1, 10)


def test_consumequeue_ext_address_boundary():
    assert cq_fmt.is_ext_address(-2147483649)
    assert not cq_fmt.is_ext_address(-2147483648)
    data = struct.pack(">qiq", 5, 6, -2**63 + 100)
    check_declaration(cq_fmt.consumequeue_unit, data,
                      dict(commitlog_offset=5, size=6, tags_code=-2**63 + 100))


def test_batch_consumequeue_unit_by_hand():
    data = struct.pack(">qiqqqhii", 4096, 700, 96354, 1795308685774, 1000, 16, -1, 0)
    assert len(data) == 46
    check_declaration(cq_fmt.batch_consumequeue_unit, data, dict(
        commitlog_offset=4096, size=700, tags_code=96354, store_timestamp=1795308685774,
        msg_base_offset=1000, batch_size=16, compacted_offset=-1, reserved=0))
    assert cq_fmt.batch_consumequeue_unit.sizeof() == 46 == cq_fmt.BATCH_CQ_STORE_UNIT_SIZE
    assert cq_fmt.is_valid_batch_unit(4096, 700, 1000, 16)
    assert not cq_fmt.is_valid_batch_unit(4096, 700, 1000, 0)


# --- IndexFile ------------------------------------------------------------------------------------

def test_index_header_by_hand():
    data = struct.pack(">qqqqii", 1795308685774, 1795308686387, 0, 2237621, 986, 4000)
    check_declaration(idx_fmt.index_header, data, dict(
        begin_timestamp=1795308685774, end_timestamp=1795308686387, begin_phy_offset=0,
        end_phy_offset=2237621, hash_slot_count=986, index_count=4000))
    assert idx_fmt.index_header.sizeof() == 40 == idx_fmt.INDEX_HEADER_SIZE


def test_index_entry_by_hand():
    data = struct.pack(">iqii", 1231272886, 2237621, 17, 3)
    check_declaration(idx_fmt.index_entry, data,
                      dict(key_hash=1231272886, phy_offset=2237621, time_diff=17, prev_index=3))
    assert idx_fmt.index_entry.sizeof() == 20 == idx_fmt.INDEX_ENTRY_SIZE


def test_index_file_small_geometry_by_hand():
    slots, entries = 3, 5
    header = struct.pack(">qqqqii", 1000, 3000, 10, 500, 2, 3)
    slot_table = struct.pack(">3i", 2, 0, 1)
    entry_rows = [(0, 0, 0, 0), (96354, 10, 0, 0), (2598919, 500, 2, 0), (0, 0, 0, 0),
                  (0, 0, 0, 0)]
    data = header + slot_table + b"".join(struct.pack(">iqii", *e) for e in entry_rows)
    decl = idx_fmt.index_file(slots, entries)
    assert decl.sizeof() == len(data) == idx_fmt.index_file_size(slots, entries) == 40 + 12 + 100
    check_declaration(decl, data, dict(
        header=dict(begin_timestamp=1000, end_timestamp=3000, begin_phy_offset=10,
                    end_phy_offset=500, hash_slot_count=2, index_count=3),
        slots=[2, 0, 1],
        entries=[dict(key_hash=k, phy_offset=p, time_diff=t, prev_index=n)
                 for k, p, t, n in entry_rows]))
    assert idx_fmt.slot_position(2) == 48
    assert idx_fmt.entry_position(slots, 2) == 40 + 12 + 40


def test_index_geometry_helpers():
    assert idx_fmt.index_file_size(1000, 4000) == 84040
    assert idx_fmt.index_file_size(5_000_000, 20_000_000) == 420_000_040
    assert idx_fmt.geometries_for_size(84040) == [(1000, 4000)]
    assert idx_fmt.geometries_for_size(420_000_040) == [(5_000_000, 20_000_000)]
    assert idx_fmt.geometries_for_size(84041) == []
    assert idx_fmt.entry_position(5_000_000, 0) == 20_000_040


# --- checkpoint -----------------------------------------------------------------------------------

def test_checkpoint_4x_by_hand():
    data = struct.pack(">qqq", 1795308686171, 1795308686429, 1795308686387).ljust(4096, b"\0")
    check_declaration(ckpt_fmt.checkpoint, data, dict(
        physic_msg_timestamp=1795308686171, logics_msg_timestamp=1795308686429,
        index_msg_timestamp=1795308686387, master_flushed_offset=0, confirm_phy_offset=0,
        padding=bytes(4056)))
    assert ckpt_fmt.checkpoint.sizeof() == 4096 == ckpt_fmt.CHECKPOINT_SIZE


def test_checkpoint_5x_by_hand():
    data = struct.pack(">qqqqq", 1795310729293, 1795310729902, 1795310729650, 2**33,
                       4232040).ljust(4096, b"\0")
    check_declaration(ckpt_fmt.checkpoint, data, dict(
        physic_msg_timestamp=1795310729293, logics_msg_timestamp=1795310729902,
        index_msg_timestamp=1795310729650, master_flushed_offset=2**33,
        confirm_phy_offset=4232040, padding=bytes(4056)))


def test_checkpoint_min_timestamps():
    assert ckpt_fmt.min_timestamp(10_000, 20_000) == 7_000
    assert ckpt_fmt.min_timestamp(1_000, 20_000) == 0
    assert ckpt_fmt.min_timestamp_index(10_000, 20_000, 5_000) == 5_000
    assert ckpt_fmt.min_timestamp_index(10_000, 20_000, 9_000) == 7_000


# --- round trips over the broker-written stores ---------------------------------------------------

REFS = reference_dirs()
REF_IDS = ["fixture-" + r.name if r.parent != SHARED_STORES else r.name for r in REFS]


@functools.lru_cache(maxsize=4)
def dump(ref: Path) -> dict:
    with gzip.open(ref / "dump.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


def geometry(ref: Path) -> dict:
    return json.loads((ref / "geometry.json").read_text())


@pytest.mark.parametrize("ref", REFS, ids=REF_IDS)
def test_every_commitlog_record_round_trips(ref):
    """Every record the broker decoded, at the position it gave: parse agrees with the broker's
    decode and build(parse(bytes)) == bytes. The fixture store also goes through the
    interpreted declaration and compares it with the compiled one."""
    decl = compiled(cl_fmt.commitlog_message)
    interpreted = ref.parent != SHARED_STORES
    files = {}
    magics, host_flags = set(), set()
    messages = dump(ref)["messages"]
    for m in messages:
        data = files.get(m["file"])
        if data is None:
            data = files[m["file"]] = (ref / "store" / "commitlog" / m["file"]).read_bytes()
        record = data[m["filePos"]:m["filePos"] + m["storeSize"]]
        parsed = decl.parse(record)
        if interpreted:
            assert plain(cl_fmt.commitlog_message.parse(record)) == plain(parsed)
            assert cl_fmt.commitlog_message.build(parsed) == record
        assert decl.build(parsed) == record
        assert parsed.total_size == m["storeSize"]
        assert parsed.physical_offset == m["commitLogOffset"]
        assert (parsed.queue_id, parsed.queue_offset, parsed.sys_flag, parsed.flag) == \
            (m["queueId"], m["queueOffset"], m["sysFlag"], m["flag"])
        assert (parsed.body_crc, parsed.born_timestamp, parsed.store_timestamp) == \
            (m["bodyCRC"], m["bornTimestamp"], m["storeTimestamp"])
        assert codecs.parse_host(m["bornHost"]) == (parsed.born_host.ip, parsed.born_host.port)
        assert codecs.parse_host(m["storeHost"]) == (parsed.store_host.ip, parsed.store_host.port)
        assert parsed.topic.decode("utf-8") == m["topic"]
        assert max(parsed.body_length, 0) == m["bodyLength"]
        assert cl_fmt.message_length(parsed.magic_code, parsed.sys_flag, parsed.body_length,
                                     parsed.topic_length, parsed.properties_length) == len(record)
        magics.add(parsed.magic_code)
        host_flags.add(parsed.sys_flag & 0x30)
    assert len(messages) > 0
    if ref.name == "v5-clean":
        assert V2 in magics
        assert sum(1 for m in messages if m["messageVersion"] == "V2") == 729
    if ref.name == "v6-unicode-small":
        assert host_flags == {0x20, 0x30}  # born v4 or v6, store always v6 (::1)


@pytest.mark.parametrize("ref", REFS, ids=REF_IDS)
def test_blank_records_round_trip(ref):
    blanks = 0
    for scan in dump(ref)["fileScan"]:
        if not scan["end"].startswith("blank@"):
            continue
        pos, size = scan["end"][len("blank@"):].split(" size=")
        pos, size = int(pos), int(size)
        with open(ref / "store" / "commitlog" / scan["name"], "rb") as fh:
            fh.seek(pos)
            data = fh.read(8)
        parsed = cl_fmt.blank_record.parse(data)
        assert parsed.total_size == size == scan["size"] - pos
        assert cl_fmt.blank_record.build(parsed) == data
        blanks += 1
    assert blanks >= 1


@pytest.mark.parametrize("ref", REFS, ids=REF_IDS)
def test_every_consumequeue_unit_round_trips(ref):
    decl = compiled(cq_fmt.consumequeue_unit)
    units = 0
    for path in sorted((ref / "store" / "consumequeue").rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        assert len(data) % 20 == 0
        for pos in range(0, len(data), 20):
            raw = data[pos:pos + 20]
            parsed = decl.parse(raw)
            assert (parsed.commitlog_offset, parsed.size, parsed.tags_code) == \
                struct.unpack(">qiq", raw)
            assert decl.build(parsed) == raw
            units += 1
    assert units > 0


@pytest.mark.parametrize("ref", REFS, ids=REF_IDS)
def test_every_index_file_round_trips(ref):
    geo = geometry(ref)
    decl = compiled(idx_fmt.index_file(geo["maxHashSlotNum"], geo["maxIndexNum"]))
    headers = dump(ref)["fileState"]["indexFiles"]
    paths = sorted((ref / "store" / "index").iterdir())
    assert [p.name for p in paths] == sorted(headers)
    for path in paths:
        data = path.read_bytes()
        parsed = decl.parse(data)
        assert decl.build(parsed) == data
        expect = headers[path.name]
        assert expect["fileSize"] == len(data)
        h = parsed.header
        assert (h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, h.end_phy_offset,
                h.hash_slot_count, h.index_count) == (
            expect["beginTimestamp"], expect["endTimestamp"], expect["beginPhyOffset"],
            expect["endPhyOffset"], expect["hashSlotCount"], expect["indexCount"])
        # entry 0 is never written; entries past indexCount are zero
        assert parsed.entries[0] == dict(key_hash=0, phy_offset=0, time_diff=0, prev_index=0)
        assert all(e.key_hash == 0 and e.phy_offset == 0 for e in parsed.entries[h.index_count:])
        assert all(0 <= s < h.index_count for s in parsed.slots)


@pytest.mark.parametrize("ref", REFS, ids=REF_IDS)
def test_checkpoint_round_trips(ref):
    data = (ref / "store" / "checkpoint").read_bytes()
    parsed = ckpt_fmt.checkpoint.parse(data)
    assert ckpt_fmt.checkpoint.build(parsed) == data
    assert plain(compiled(ckpt_fmt.checkpoint).parse(data)) == plain(parsed)
    expect = dump(ref)["fileState"]["checkpoint"]
    assert (parsed.physic_msg_timestamp, parsed.logics_msg_timestamp,
            parsed.index_msg_timestamp) == (expect["physicMsgTimestamp"],
                                            expect["logicsMsgTimestamp"],
                                            expect["indexMsgTimestamp"])
    if "masterFlushedOffset" in expect:
        assert (parsed.master_flushed_offset, parsed.confirm_phy_offset) == \
            (expect["masterFlushedOffset"], expect["confirmPhyOffset"])
        assert data[:40].hex().upper() == expect["rawHex0to40"]
    assert parsed.padding == bytes(4056)
