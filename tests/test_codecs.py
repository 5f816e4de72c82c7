"""The value codecs of mqtool.formats.codecs against the spec's vectors, independent
re-computations written here, and what the real broker recorded in the reference stores."""
from __future__ import annotations

import base64
import calendar
import datetime as dt
import functools
import gzip
import json
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import (CLASSIC_BATCH_PROPERTIES, FIXTURE_STORE, SHARED_STORES,
                      classic_batch_offsets, reference_dirs)
from mqtool.formats import codecs
from mqtool.formats import commitlog as cl_fmt


@functools.lru_cache(maxsize=None)
def load_json(path: Path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def dump_messages(ref: Path) -> list[dict]:
    return load_json(ref / "dump.json.gz")["messages"]


def ref_id(ref: Path) -> str:
    return "fixture-" + ref.name if ref.parent != SHARED_STORES else ref.name


REFS = reference_dirs()
REF_IDS = [ref_id(r) for r in REFS]


def shared_ref(name: str) -> Path:
    ref = SHARED_STORES / name
    if not (ref / "dump.json.gz").is_file():
        pytest.skip(f"../shared/rocketmq-stores/{name} is absent")
    return ref


# --- independent oracles (written from the Java definitions, not from the code under test) ----

def oracle_java_hash(text: str) -> int:
    """String.hashCode as the closed form sum(unit_i * 31^(n-1-i)) mod 2^32 over UTF-16 units,
    with the surrogate pairs built by hand from the code point."""
    units: list[int] = []
    for ch in text:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    n = len(units)
    total = sum(u * pow(31, n - 1 - i, 1 << 32) for i, u in enumerate(units)) % (1 << 32)
    return total - (1 << 32) if total >= 1 << 31 else total


DELAY_MS = [1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000,
            480000, 540000, 600000, 1200000, 1800000, 3600000, 7200000]


# --- CRC -----------------------------------------------------------------------------------------

def test_body_crc_spec_vector():
    assert codecs.body_crc(b"Hello RocketMQ") == 1774740973


def test_body_crc_is_masked_to_31_bits():
    # b"a" has a CRC-32 with the top bit set: 0xE8B7BE43
    assert zlib.crc32(b"a") == 0xE8B7BE43
    assert codecs.body_crc(b"a") == 0x68B7BE43
    assert codecs.body_crc(b"") == 0


@pytest.mark.parametrize("ref", REFS, ids=REF_IDS)
def test_body_crc_matches_broker_for_every_message(ref):
    for m in dump_messages(ref):
        if not m["bodyCrcOk"]:
            continue  # the damaged message keeps its original CRC
        body = base64.b64decode(m["body"] or "")
        assert codecs.body_crc(body) == m["bodyCRC"], m["commitLogOffset"]


# --- String.hashCode and the index key hash ------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("abc", 96354),
    ("TagA", 2598919),
    ("TopicTest#OrderID001", -1231272886),
    ("polygenelubricants", -2147483648),
    ("", 0),
])
def test_java_string_hash_spec_vectors(text, expected):
    assert codecs.java_string_hash(text) == expected
    assert oracle_java_hash(text) == expected


def test_index_key_hash_of_min_value_is_zero():
    assert codecs.index_key_hash("polygenelubricants") == 0
    assert codecs.index_key_hash("TopicTest#OrderID001") == 1231272886
    assert codecs.index_key_hash("abc") == 96354


def test_java_string_hash_non_bmp_counts_surrogate_pairs():
    # U+1F600 is the pair D83D DE00: "a" + pair = ((97*31) + 0xD83D)*31 + 0xDE00
    text = "a\U0001F600"
    by_hand = ((97 * 31 + 0xD83D) * 31 + 0xDE00)
    assert codecs.java_string_hash(text) == by_hand
    assert codecs.java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00
    # A whole non-BMP key: the index hash is the absolute value
    key = "Topic#\U0001D11E\U00010348key"
    assert codecs.java_string_hash(key) == oracle_java_hash(key)
    assert codecs.index_key_hash(key) == abs(oracle_java_hash(key))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_java_string_hash_agrees_with_closed_form(text):
    assert codecs.java_string_hash(text) == oracle_java_hash(text)
    h = oracle_java_hash(text)
    assert codecs.index_key_hash(text) == (0 if h == -2**31 else abs(h))


def test_index_key_is_topic_hash_key():
    assert codecs.index_key("TopicTest", "OrderID001") == "TopicTest#OrderID001"


def test_message_keys_split_on_single_spaces():
    assert codecs.message_keys({"KEYS": "a b  c "}) == ["a", "b", "c"]
    assert codecs.message_keys({"KEYS": ""}) == []
    assert codecs.message_keys({}) == []


# --- property CRC digits --------------------------------------------------------------------------

@pytest.mark.parametrize("crc, digits", [(1774740973, "3790474771"), (123, "3210000000"),
                                         (0, "0000000000"), (1000, "0001000000"),
                                         (2**31 - 1, "7463847412")])
def test_prop_crc_digits(crc, digits):
    assert codecs.prop_crc_digits(crc) == digits
    assert codecs.prop_crc_from_digits(digits) == crc
    field = codecs.prop_crc_field(crc)
    assert field == b"__CRC32#\x01" + digits.encode() + b"\x02"
    assert len(field) == codecs.CRC32_RESERVED_LEN
    assert codecs.stored_prop_crc(b"A\x01b\x02" + field) == crc


@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_prop_crc_digits_round_trip(crc):
    digits = codecs.prop_crc_digits(crc)
    assert len(digits) == 10 and digits.isdigit()
    assert codecs.prop_crc_from_digits(digits) == crc


@pytest.mark.parametrize("raw", [None, b"", b"short", b"__CRC32#\x01123456789X\x02",
                                 b"__CRC32#\x0112345678901", b"__CRC32\x01\x011234567890\x02"])
def test_stored_prop_crc_rejects_malformed_tails(raw):
    assert codecs.stored_prop_crc(raw) is None


def test_prop_crc_against_broker_records():
    ref = shared_ref("v5-propcrc-clean")
    seen = 0
    handles = {}
    for m in dump_messages(ref):
        assert codecs.prop_crc_from_digits(m["propCrcDigits"]) == m["propCrcStored"]
        assert codecs.prop_crc_digits(m["propCrcStored"]) == m["propCrcDigits"]
        fh = handles.setdefault(m["file"], open(ref / "store" / "commitlog" / m["file"], "rb"))
        fh.seek(m["filePos"])
        record = fh.read(m["storeSize"])
        assert codecs.record_prop_crc(record) == m["propCrcComputed"]
        assert record[-20:] == codecs.prop_crc_field(m["propCrcStored"])
        layout = m["layout"]  # positions in the file
        start, end = layout["propertiesPos"] - m["filePos"], layout["recordEndPos"] - m["filePos"]
        props_raw = record[start:end]
        assert codecs.stored_prop_crc(props_raw) == m["propCrcStored"]
        seen += 1
    for fh in handles.values():
        fh.close()
    assert seen == 2000


# --- message ids ----------------------------------------------------------------------------------

def test_offset_msg_id_v4_by_hand():
    msg_id = codecs.offset_msg_id(bytes([127, 0, 0, 1]), 10911, 0x1234)
    assert msg_id == "7F000001" + "00002A9F" + "0000000000001234"
    host, offset = codecs.decode_offset_msg_id(msg_id)
    assert codecs.parse_host(host) == (bytes([127, 0, 0, 1]), 10911) and offset == 0x1234


def test_offset_msg_id_v6_by_hand():
    ip = bytes(15) + b"\x01"
    msg_id = codecs.offset_msg_id(ip, 10911, 2**40)
    assert len(msg_id) == 56
    assert msg_id == "00" * 15 + "01" + "00002A9F" + "0000010000000000"
    host, offset = codecs.decode_offset_msg_id(msg_id)
    assert codecs.parse_host(host) == (ip, 10911) and offset == 2**40


@pytest.mark.parametrize("bad", ["", "7F00", "7F000001" * 5, "G" * 32])
def test_offset_msg_id_rejects_bad_lengths(bad):
    with pytest.raises(ValueError):
        codecs.decode_offset_msg_id(bad)


@pytest.mark.parametrize("name", ["fixture", "v6-unicode-small"])
def test_offset_msg_id_matches_broker(name):
    ref = FIXTURE_STORE if name == "fixture" else shared_ref(name)
    messages = dump_messages(ref)
    for m in messages:
        ip, port = codecs.parse_host(m["storeHost"])
        assert codecs.offset_msg_id(ip, port, m["commitLogOffset"]) == m["msgId"]
        host, offset = codecs.decode_offset_msg_id(m["msgId"])
        assert offset == m["commitLogOffset"]
        assert codecs.parse_host(host) == (ip, port)
    if name != "fixture":
        assert all(len(m["msgId"]) == 56 for m in messages)


def test_parse_host_accepts_java_forms():
    assert codecs.parse_host("127.0.0.1:10911") == (bytes([127, 0, 0, 1]), 10911)
    assert codecs.parse_host("[0:0:0:0:0:0:0:1]:10911") == (bytes(15) + b"\x01", 10911)
    assert codecs.parse_host("[fd4f:8444::3d4f]:54684")[1] == 54684
    ip, port = bytes([10, 1, 2, 3]), 65535
    assert codecs.parse_host(codecs.format_host(ip, port)) == (ip, port)
    ip6 = bytes(range(16))
    assert codecs.parse_host(codecs.format_host(ip6, 1)) == (ip6, 1)


def test_format_host_java_forms():
    assert codecs.format_host(bytes([127, 0, 0, 1]), 10911) == "127.0.0.1:10911"
    assert codecs.format_host(bytes(15) + b"\x01", 10911) == "[0:0:0:0:0:0:0:1]:10911"
    assert codecs.format_host(bytes.fromhex("fd85071f000000000000000000000001"), 7) == \
        "[fd85:71f:0:0:0:0:0:1]:7"
    # Java turns an IPv4-mapped address into the IPv4 one
    assert codecs.format_host(bytes(10) + b"\xff\xff" + bytes([10, 1, 2, 3]), 5) == "10.1.2.3:5"


def test_format_host_matches_broker_text():
    """Every host string the broker's decoder printed (IPv6 in brackets, uncompressed)."""
    ref = shared_ref("v6-unicode-small")
    for m in dump_messages(ref):
        for text in (m["bornHost"], m["storeHost"]):
            assert codecs.format_host(*codecs.parse_host(text)) == text


# --- UNIQ_KEY -------------------------------------------------------------------------------------

SPEC_UNIQ = "7F0000010B4C18B4AAC2612D8F8A0000"
# 0x612D8F8A ms = 1630375818 ms = 18 days 20:52:55.818
SPEC_DELTA = dt.timedelta(days=18, hours=20, minutes=52, seconds=55, milliseconds=818)


def utc_ms(*args) -> int:
    return calendar.timegm(dt.datetime(*args).utctimetuple()) * 1000


def test_uniq_key_fields():
    assert 0x612D8F8A == 1630375818 == SPEC_DELTA // dt.timedelta(milliseconds=1)
    info = codecs.decode_uniq_key(SPEC_UNIQ, now_ms=utc_ms(2024, 3, 25))
    assert info["ip"] == "127.0.0.1"
    assert info["pid"] == 0x0B4C
    assert info["class_loader_hash"] == 0x18B4AAC2
    assert info["ms_since_month_start"] == 0x612D8F8A
    assert info["counter"] == 0


@pytest.mark.parametrize("now, month_start", [
    # the time lies before now: this month
    (dt.datetime(2024, 3, 25), dt.datetime(2024, 3, 1)),
    # the time would lie after now: the previous month (February of a leap year)
    (dt.datetime(2024, 3, 10), dt.datetime(2024, 2, 1)),
    # across a year boundary
    (dt.datetime(2024, 1, 5), dt.datetime(2023, 12, 1)),
    # exactly now counts as "not before now" (>=): previous month
    (dt.datetime(2024, 3, 19, 20, 52, 55, 818000), dt.datetime(2024, 2, 1)),
])
def test_uniq_key_approximate_time(now, month_start):
    now_ms = calendar.timegm(now.utctimetuple()) * 1000 + now.microsecond // 1000
    info = codecs.decode_uniq_key(SPEC_UNIQ, now_ms=now_ms, tz=dt.timezone.utc)
    expected = month_start + SPEC_DELTA
    assert info["approx_time_ms"] == (calendar.timegm(expected.utctimetuple()) * 1000
                                      + expected.microsecond // 1000)


def test_uniq_key_time_field_is_unsigned_and_tz_applies():
    # 0xFFFFFFFF ms (> 49 days) only fits when read unsigned; the month start is in tz
    key = "0A000001" + "0001" + "00000001" + "FFFFFFFF" + "0002"
    tz = dt.timezone(dt.timedelta(hours=8))
    now = dt.datetime(2024, 5, 31, tzinfo=tz)
    info = codecs.decode_uniq_key(key, now_ms=int(now.timestamp() * 1000), tz=tz)
    assert info["ms_since_month_start"] == 0xFFFFFFFF and info["counter"] == 2
    start = dt.datetime(2024, 4, 1, tzinfo=tz)  # May 1 + 49.7 days is after now
    assert info["approx_time_ms"] == int(start.timestamp() * 1000) + 0xFFFFFFFF


def test_uniq_key_ipv6():
    key = "FD00" + "00" * 13 + "01" + "1234" + "89ABCDEF" + "00000010" + "FFFF"
    assert len(key) == 56
    info = codecs.decode_uniq_key(key, now_ms=utc_ms(2024, 3, 25))
    assert info["ip"] == "fd00::1"
    assert info["pid"] == 0x1234
    assert info["class_loader_hash"] == struct.unpack(">i", bytes.fromhex("89ABCDEF"))[0]
    assert info["counter"] == 0xFFFF


@pytest.mark.parametrize("bad", ["", "7F00000", "ZZ" * 16])
def test_uniq_key_rejects_garbage(bad):
    with pytest.raises(ValueError):
        codecs.decode_uniq_key(bad, now_ms=0)


def test_uniq_keys_of_broker_store_decode():
    for m in dump_messages(FIXTURE_STORE):
        info = codecs.decode_uniq_key(m["uniqKey"], now_ms=m["storeTimestamp"])
        raw = bytes.fromhex(m["uniqKey"])
        assert info["pid"] == int.from_bytes(raw[4:6], "big")
        assert info["counter"] == int.from_bytes(raw[14:16], "big")
        assert info["approx_time_ms"] < m["storeTimestamp"]


# --- tagsCode -------------------------------------------------------------------------------------

def test_tags_code_rules():
    assert codecs.tags_code("TopicTest", {"TAGS": "TagA"}, 5) == 2598919
    assert codecs.tags_code("TopicTest", {}, 5) == 0
    assert codecs.tags_code("TopicTest", {"TAGS": ""}, 5) == 0
    assert codecs.tags_code("TopicTest", {"TAGS": "a||b"}, 5) == oracle_java_hash("a||b")
    # DELAY only matters in SCHEDULE_TOPIC_XXXX
    assert codecs.tags_code("TopicTest", {"TAGS": "TagA", "DELAY": "3"}, 5) == 2598919
    sched = codecs.SCHEDULE_TOPIC
    assert sched == "SCHEDULE_TOPIC_XXXX"
    for level in range(1, 19):
        assert codecs.tags_code(sched, {"DELAY": str(level), "TAGS": "x"}, 10**12) == \
            10**12 + DELAY_MS[level - 1]
    # clamped to the highest level; level 0 keeps the tag hash
    assert codecs.tags_code(sched, {"DELAY": "99"}, 7) == 7 + 7200000
    assert codecs.tags_code(sched, {"DELAY": "0", "TAGS": "TagA"}, 7) == 2598919
    # a level the table lacks: +1000 ms
    assert codecs.tags_code(sched, {"DELAY": "2"}, 7, delays={1: 1000, 3: 9000}) == 7 + 1000


def test_delay_level_table_default():
    table = codecs.delay_level_table()
    assert [table[i] for i in range(1, 19)] == DELAY_MS
    assert codecs.delay_level_table("2d 3h") == {1: 2 * 86400000, 2: 3 * 3600000}


@functools.lru_cache(maxsize=None)
def broker_units(ref: Path) -> list[tuple[str, int, list]]:
    cqs = load_json(ref / "recover.json.gz")["consumeQueues"]
    return [(topic, int(qid), q["units"]) for topic, queues in cqs.items()
            for qid, q in queues.items()]


@functools.lru_cache(maxsize=None)
def broker_batch_units(ref: Path) -> list[tuple[str, int, list]]:
    """The BatchConsumeQueue units the broker's recovery holds (5.3.3 BatchCQ stores only):
    ``[msgBaseOffset, commitLogOffset, size, tagsCode, batchNum, compactedOffset]``."""
    bcqs = load_json(ref / "recover.json.gz").get("batchConsumeQueues", {})
    return [(topic, int(qid), q["units"]) for topic, queues in bcqs.items()
            for qid, q in queues.items()]


def unit_on_disk(ref: Path, topic: str, queue_id: int, queue_offset: int, units_per_file: int):
    """(offset, size, tagsCode) at a queue offset of the store/ CQ file, read with struct."""
    file_size = units_per_file * 20
    logical = queue_offset * 20
    name = f"{logical - logical % file_size:020d}"
    path = ref / "store" / "consumequeue" / topic / str(queue_id) / name
    if not path.is_file():
        return None
    with open(path, "rb") as fh:
        fh.seek(logical % file_size)
        raw = fh.read(20)
    return struct.unpack(">qiq", raw) if len(raw) == 20 else None


@pytest.mark.parametrize("ref", REFS, ids=REF_IDS)
def test_tags_code_matches_broker_consume_queues(ref):
    """Every CQ unit the broker's recovery holds: tagsCode from the decoded message equals the
    broker's, with the SCHEDULE_TOPIC_XXXX delivery-time rule checked independently.

    One broker quirk: units that 4.9.8's abnormal recovery dispatched itself (crash-lost-small,
    whose CQ files were zeroed past their flushed position) carry the TAGS hash even in
    SCHEDULE_TOPIC_XXXX: the schedule service's delay table is not loaded yet during recovery, so
    the level is clamped to 0. Units the running broker wrote always follow the delay rule."""
    by_offset = {m["commitLogOffset"]: m for m in dump_messages(ref)}
    geometry = json.loads((ref / "geometry.json").read_text())
    units_per_file = geometry["mappedFileSizeConsumeQueue"] // 20
    checked = scheduled = rebuilt_by_recovery = 0
    for topic, queue_id, units in broker_units(ref):
        for queue_offset, offset, size, tags in units:
            m = by_offset[offset]
            assert (m["topic"], m["queueId"], m["storeSize"]) == (topic, queue_id, size)
            props = m["properties"]
            tag_hash = oracle_java_hash(props["TAGS"]) if props.get("TAGS") else 0
            written_by_broker = unit_on_disk(ref, topic, queue_id, queue_offset,
                                             units_per_file) == (offset, size, tags)
            if topic == "SCHEDULE_TOPIC_XXXX" and int(props.get("DELAY", "0")) > 0:
                level = min(int(props["DELAY"]), 18)
                assert queue_id == level - 1
                if written_by_broker:
                    assert tags == m["storeTimestamp"] + DELAY_MS[level - 1]
                    assert codecs.tags_code(m["topic"], props, m["storeTimestamp"]) == tags
                    scheduled += 1
                else:
                    assert tags in (tag_hash, m["storeTimestamp"] + DELAY_MS[level - 1])
                    rebuilt_by_recovery += tags == tag_hash
            else:
                assert tags == tag_hash
                assert codecs.tags_code(m["topic"], props, m["storeTimestamp"]) == tags
            checked += 1
    assert checked > 0
    # a store that holds delay-level messages (most mixes: 2%) has their units checked by the
    # delivery-time rule; a mix without them (the BatchCQ stores) has none to check
    holds_delayed = any(m["topic"] == "SCHEDULE_TOPIC_XXXX" and int(m["properties"].get(
        "DELAY", "0")) > 0 for m in by_offset.values())
    assert (scheduled > 0) == holds_delayed
    assert rebuilt_by_recovery == (28 if ref.name == "crash-lost-small" else 0)


@pytest.mark.parametrize("ref", [r for r in REFS if broker_batch_units(r)] or [None],
                         ids=[ref_id(r) for r in REFS if broker_batch_units(r)] or ["none"])
def test_tags_code_matches_broker_batch_consume_queues(ref):
    """Every BatchConsumeQueue unit the broker's recovery holds: the tagsCode rule is the one of
    ConsumeQueue units, msgBaseOffset/batchNum are INNER_BASE/INNER_NUM of an inner batch (the
    record's queue offset and 1 otherwise)."""
    if ref is None:
        pytest.skip("no reference store has a BatchCQ topic")
    by_offset = {m["commitLogOffset"]: m for m in dump_messages(ref)}
    checked = inner = 0
    for topic, queue_id, units in broker_batch_units(ref):
        for base, offset, size, tags, batch_num, compacted in units:
            m = by_offset[offset]
            props = m["properties"]
            assert (m["topic"], m["queueId"], m["storeSize"]) == (topic, queue_id, size)
            assert tags == (oracle_java_hash(props["TAGS"]) if props.get("TAGS") else 0)
            assert codecs.tags_code(m["topic"], props, m["storeTimestamp"]) == tags
            if m["sysFlag"] & cl_fmt.INNER_BATCH_FLAG:
                assert (base, batch_num) == (int(props["INNER_BASE"]), int(props["INNER_NUM"]))
                inner += 1
            else:
                assert (base, batch_num) == (m["queueOffset"], 1)
            assert codecs.batch_position(props, m["queueOffset"]) == (base, batch_num)
            assert compacted == -1
            checked += 1
    assert checked > 0 and inner > 0


# --- properties codec -----------------------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    (b"", {}),
    (None, {}),
    (b"A\x01b", {"A": "b"}),
    (b"A\x01b\x02", {"A": "b"}),
    (b"A\x01b\x02\x02\x02", {"A": "b"}),
    # segments shorter than 3 characters are dropped ("a" 0x01 and "ab"); 3 is enough
    (b"a\x01\x02ab\x02k\x01v", {"k": "v"}),
    # empty name / empty value dropped
    (b"\x01value\x02name\x01\x02K\x01V", {"K": "V"}),
    # only the first 0x01 separates
    (b"k\x01v\x01w", {"k": "v\x01w"}),
    # no separator at all
    (b"novalue\x02k\x01v", {"k": "v"}),
    # duplicate name: the last one wins
    (b"K\x01first\x02X\x01y\x02K\x01second", {"K": "second", "X": "y"}),
    # lengths are counted in characters, not bytes: "\u00e9" + 0x01 + "x" is 3 characters
    ("\u00e9\x01x".encode(), {"\u00e9": "x"}),
])
def test_decode_properties_rules(raw, expected):
    assert codecs.decode_properties(raw) == expected


def test_decode_properties_replaces_invalid_utf8():
    assert codecs.decode_properties(b"k\x01\xff\xfe") == {"k": "\ufffd\ufffd"}


def test_encode_properties():
    assert codecs.encode_properties({"A": "1", "B": "2"}) == b"A\x011\x02B\x012"
    assert codecs.encode_properties({"A": None, "B": "2"}) == b"B\x012"
    assert codecs.encode_properties({}) == b""


prop_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02",
                                           blacklist_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(prop_text, prop_text, max_size=8))
def test_properties_round_trip(props):
    raw = codecs.encode_properties(props)
    assert codecs.decode_properties(raw) == props
    assert codecs.decode_properties(raw + b"\x02") == props


def _empty_value_pairs_removed(raw: bytes) -> bytes:
    return b"\x02".join(seg for seg in raw.split(b"\x02") if seg and not seg.endswith(b"\x01"))


# --- java_hashmap_order ---------------------------------------------------------------------------

def oracle_hashmap_iteration(keys: list[str]) -> list[str]:
    """java.util.HashMap.put/resize simulated literally: a table of bucket lists, threshold
    0.75 x capacity checked after each insert, a resize splitting each bucket into its lo/hi
    halves in order."""
    capacity = 16
    table: list[list[str]] = [[] for _ in range(capacity)]
    size = 0

    def spread(key: str) -> int:
        h = oracle_java_hash(key) & 0xFFFFFFFF
        return h ^ (h >> 16)

    for key in keys:
        bucket = table[spread(key) & (capacity - 1)]
        if key in bucket:
            continue
        bucket.append(key)
        size += 1
        if size > capacity * 0.75:
            new_table: list[list[str]] = [[] for _ in range(capacity * 2)]
            for index, chain in enumerate(table):
                for k in chain:
                    new_table[index + (capacity if spread(k) & capacity else 0)].append(k)
            table, capacity = new_table, capacity * 2
    return [k for chain in table for k in chain]


def test_java_hashmap_order_small_cases():
    assert codecs.java_hashmap_order(["b", "a"]) == ["a", "b"]
    # "Aa" and "BB" share hashCode 2112: same bucket, insertion order kept
    assert oracle_java_hash("Aa") == oracle_java_hash("BB") == 2112
    assert codecs.java_hashmap_order(["BB", "Aa"]) == ["BB", "Aa"]
    assert codecs.java_hashmap_order(["Aa", "BB"]) == ["Aa", "BB"]
    keys = ["TAGS", "KEYS", "WAIT", "UNIQ_KEY", "userProp0", "CLUSTER"]
    assert codecs.java_hashmap_order(keys) == oracle_hashmap_iteration(keys)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=10), unique=True, max_size=40))
def test_java_hashmap_order_matches_simulated_hashmap(keys):
    assert codecs.java_hashmap_order(keys) == oracle_hashmap_iteration(keys)


@pytest.mark.parametrize("ref", REFS, ids=REF_IDS)
def test_stored_property_order_is_a_hashmap_order(ref):
    """The broker serialises its HashMap: the order of the stored names (empty values included)
    is what a HashMap holding them iterates, whatever order they were inserted in. A record of
    a classic batch holds two serialised maps back to back: the message's own (as the client
    encoded it into the batch body), then the batch's (WAIT, CLUSTER) appended by the broker."""
    messages = dump_messages(ref)
    batch_records = classic_batch_offsets(ref)
    checked_batch_records = 0
    handles = {}
    try:
        for m in messages[:400] + [m for m in messages[400:]
                                   if m["commitLogOffset"] in batch_records][:100]:
            fh = handles.setdefault(m["file"], open(ref / "store" / "commitlog" / m["file"], "rb"))
            fh.seek(m["filePos"])
            record = fh.read(m["storeSize"])
            props_raw = raw_properties_of(record, m["sysFlag"])
            if "propCrcStored" in m and m.get("hasPropCrc"):
                props_raw = props_raw[:-codecs.CRC32_RESERVED_LEN]
            names = [seg.split(b"\x01", 1)[0].decode() for seg in props_raw.split(b"\x02") if seg]
            if m["commitLogOffset"] in batch_records:
                own = [n for n in names if n not in CLASSIC_BATCH_PROPERTIES]
                batch = [n for n in names if n in CLASSIC_BATCH_PROPERTIES]
                assert batch and names == own + batch
                assert batch == codecs.java_hashmap_order(batch) == oracle_hashmap_iteration(batch)
                names = own
                checked_batch_records += 1
            assert names == codecs.java_hashmap_order(names) == oracle_hashmap_iteration(names)
            decoded = codecs.decode_properties(props_raw)
            assert decoded == {k: v for k, v in m["properties"].items() if k != "__CRC32#"}
            assert codecs.decode_properties(_empty_value_pairs_removed(props_raw)) == decoded
    finally:
        for fh in handles.values():
            fh.close()
    assert (checked_batch_records > 0) == bool(batch_records)


def raw_properties_of(record: bytes, sys_flag: int) -> bytes:
    """The properties bytes of a record, located with struct by the spec's layout table."""
    born = 20 if sys_flag & 0x10 else 8
    store = 20 if sys_flag & 0x20 else 8
    pos = 48 + born + 8 + store + 4 + 8
    body_len = struct.unpack_from(">i", record, pos)[0]
    pos += 4 + max(body_len, 0)
    magic = struct.unpack_from(">I", record, 4)[0]
    if magic == cl_fmt.MESSAGE_MAGIC_CODE_V2:
        topic_len = struct.unpack_from(">h", record, pos)[0]
        pos += 2 + topic_len
    else:
        topic_len = struct.unpack_from(">b", record, pos)[0]
        pos += 1 + topic_len
    props_len = struct.unpack_from(">h", record, pos)[0]
    return record[pos + 2:pos + 2 + max(props_len, 0)]
