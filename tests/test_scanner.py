"""The fast CommitLog scanner (mqtool.scan) against the interpreted construct declaration, on
random records built with the declaration, on mutated bytes, on stores made by the writer, and
on what the real broker's own decoder found in the reference stores."""
from __future__ import annotations

import functools
import gzip
import json
import os
import struct
import tracemalloc
import zlib
from pathlib import Path

import construct
import numpy
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from conftest import SHARED_STORES, reference_dirs
from mqtool import codec, scan
from mqtool.errors import ParseError
from mqtool.formats import commitlog as cl_fmt
from mqtool.formats import consumequeue as cq_fmt
from mqtool.formats import indexfile as idx_fmt
from mqtool.store import CommitLog, Store
from mqtool.writer import Message, StoreWriter

V1, V2, BLANK = cl_fmt.MESSAGE_MAGIC_CODE, cl_fmt.MESSAGE_MAGIC_CODE_V2, cl_fmt.BLANK_MAGIC_CODE
MASK = 0x7FFFFFFF

# MQTOOL_HYPOTHESIS_SCALE=20 runs 20x the examples (a longer local bug hunt)
SCALE = int(os.environ.get("MQTOOL_HYPOTHESIS_SCALE", "1"))

int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)


def crc(data: bytes) -> int:
    return zlib.crc32(data) & MASK


# --- building records with the declaration -----------------------------------------------------

@st.composite
def message_fields(draw):
    """Field values for commitlog_message (total_size and physical_offset filled in later)."""
    magic = draw(st.sampled_from([V1, V2]))
    born_v6, store_v6 = draw(st.booleans()), draw(st.booleans())
    sys_flag = (draw(int32) & ~0x30) | (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0)
    body = draw(st.binary(max_size=300))
    topic = draw(st.one_of(
        st.text(max_size=40).map(lambda t: t.encode("utf-8")[:127]),
        st.binary(max_size=127 if magic == V1 else 400)))
    props = draw(st.one_of(
        st.just(b""),
        st.binary(max_size=150),
        st.dictionaries(st.text(alphabet="ABCKEYSTAGxyz_", min_size=1, max_size=8),
                        st.text(max_size=12), max_size=5).map(
            lambda d: b"\x02".join(f"{k}\x01{v}".encode() for k, v in d.items()))))
    with_prop_crc = draw(st.booleans())
    return dict(
        total_size=0, magic_code=magic,
        body_crc=draw(st.one_of(st.just(crc(body)), int32)),
        queue_id=draw(int32), flag=draw(int32), queue_offset=draw(int64), physical_offset=0,
        sys_flag=sys_flag, born_timestamp=draw(int64),
        born_host=dict(ip=draw(st.binary(min_size=16 if born_v6 else 4,
                                         max_size=16 if born_v6 else 4)), port=draw(int32)),
        store_timestamp=draw(int64),
        store_host=dict(ip=draw(st.binary(min_size=16 if store_v6 else 4,
                                          max_size=16 if store_v6 else 4)), port=draw(int32)),
        reconsume_times=draw(int32), prepared_transaction_offset=draw(int64),
        body_length=len(body), body=body or None,
        topic_length=len(topic), topic=topic,
        properties_length=len(props) + (20 if with_prop_crc else 0),
        properties=(props + bytes(20) if with_prop_crc else props) or None,
        _prop_crc=with_prop_crc, _true_offset=draw(st.booleans()))


def build_record(fields: dict, position: int) -> bytes:
    """The record at a global position, built by the interpreted declaration; with the
    property-CRC tail filled by hand (zlib over everything before the last 20 bytes)."""
    values = {k: v for k, v in fields.items() if not k.startswith("_")}
    values["total_size"] = cl_fmt.message_length(
        values["magic_code"], values["sys_flag"], values["body_length"], values["topic_length"],
        values["properties_length"])
    values["physical_offset"] = position if fields["_true_offset"] else position ^ 0x5A5A
    record = cl_fmt.commitlog_message.build(values)
    if fields["_prop_crc"]:
        digits = str(crc(record[:-20]))[::-1].ljust(10, "0")
        record = record[:-20] + b"__CRC32#\x01" + digits.encode() + b"\x02"
    return record


@st.composite
def segments(draw, max_records=6):
    """(bytes of one CommitLog file, global base, record positions, tail kind)."""
    base = draw(st.sampled_from([0, 1 << 20, 1 << 30, 7 * (1 << 30)]))
    records, positions = [], []
    pos = 0
    for fields in draw(st.lists(message_fields(), max_size=max_records)):
        record = build_record(fields, base + pos)
        positions.append(pos)
        records.append(record)
        pos += len(record)
    tail = draw(st.sampled_from(["blank", "zeros", "none"]))
    data = b"".join(records)
    if tail == "blank":
        rest = draw(st.integers(8, 200))
        filler = draw(st.sampled_from([b"\0", b"\xAB"]))
        data += struct.pack(">iI", rest, BLANK) + filler * (rest - 8)
    elif tail == "zeros":
        data += bytes(draw(st.integers(1, 200)))
    return data, base, positions, tail


# --- comparing scanner output with the declaration ----------------------------------------------

def declaration_view(buf: bytes, pos: int):
    """The interpreted declaration's parse of the record at pos, or None when it refuses."""
    try:
        return cl_fmt.commitlog_message.parse(buf[pos:])
    except construct.ConstructError:
        return None


def lengths_agree(parsed, pos: int, limit: int) -> bool:
    expected = cl_fmt.message_length(parsed.magic_code, parsed.sys_flag, parsed.body_length,
                                     parsed.topic_length, parsed.properties_length)
    return expected == parsed.total_size and pos + parsed.total_size <= limit


def expected_prop_crc_ok(record: bytes, props: bytes, check_crc: bool):
    if len(props) < 20 or props[-20:-11] != b"__CRC32#\x01":
        return None
    digits, end = props[-11:-1], props[-1:]
    if end != b"\x02" or not digits.isdigit():
        return False
    return crc(record[:-20]) == int(digits[::-1]) if check_crc else None


def assert_same_as_declaration(rec: scan.MessageRecord, buf: bytes, base: int, check_crc: bool):
    pos = rec.offset - base
    parsed = declaration_view(buf, pos)
    assert parsed is not None, f"scanner accepted a record the declaration refuses at {pos}"
    assert lengths_agree(parsed, pos, len(buf))
    record = buf[pos:pos + parsed.total_size]
    body = parsed.body or b""
    props = parsed.properties or b""
    assert rec == scan.MessageRecord(
        offset=base + pos, total_size=parsed.total_size, magic_code=parsed.magic_code,
        body_crc=parsed.body_crc, queue_id=parsed.queue_id, flag=parsed.flag,
        queue_offset=parsed.queue_offset, physical_offset=parsed.physical_offset,
        sys_flag=parsed.sys_flag, born_timestamp=parsed.born_timestamp,
        born_ip=parsed.born_host.ip, born_port=parsed.born_host.port,
        store_timestamp=parsed.store_timestamp, store_ip=parsed.store_host.ip,
        store_port=parsed.store_host.port, reconsume_times=parsed.reconsume_times,
        prepared_transaction_offset=parsed.prepared_transaction_offset,
        body_length=parsed.body_length, body_position=rec.body_position,
        topic=parsed.topic.decode("utf-8", errors="replace"), properties_raw=props,
        body_crc_ok=(crc(body) == parsed.body_crc) if check_crc and parsed.body_length > 0
        else None,
        prop_crc_ok=expected_prop_crc_ok(record, props, check_crc))
    body_at = rec.body_position - base
    assert buf[body_at:body_at + len(body)] == body
    assert rec.offset_ok == (parsed.physical_offset == rec.offset)
    assert rec.end == rec.offset + len(record)


def check_events(events: list, buf: bytes, base: int, *, check_crc: bool, resync: bool):
    """Invariants of any scan: contiguous events from 0, every record equal to the
    declaration's parse, every corrupt region refused by the declaration (or its lengths
    disagree), nothing past the file end."""
    limit = len(buf)
    pos = 0
    for i, event in enumerate(events):
        assert event.offset == base + pos, (i, event)
        last = i == len(events) - 1
        if isinstance(event, scan.MessageRecord):
            assert_same_as_declaration(event, buf, base, check_crc)
            pos += event.total_size
        elif isinstance(event, scan.BlankRecord):
            assert struct.unpack_from(">iI", buf, pos) == (event.total_size, BLANK)
            assert last
            return
        elif isinstance(event, scan.UnwrittenTail):
            assert event.length > 0
            assert not any(buf[pos:pos + min(8, event.length)])
            assert resync or last
            pos += event.length
        elif isinstance(event, scan.CorruptRegion):
            assert event.code in ("CL_BAD_MAGIC", "CL_LENGTH_MISMATCH", "CL_TRUNCATED")
            assert event.length > 0 and event.detail
            parsed = declaration_view(buf, pos)
            assert parsed is None or not lengths_agree(parsed, pos, limit), \
                f"scanner refused a record the declaration accepts at {pos}: {event}"
            assert resync or last
            pos += event.length
        else:  # pragma: no cover
            raise AssertionError(f"unknown event {event!r}")
        assert pos <= limit
    assert pos == limit


def scan_all(buf: bytes, base: int, **kw) -> list:
    return list(scan.scan_buffer(buf, base, name="segment", **kw))


# --- generated segments -----------------------------------------------------------------------

@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments(), st.booleans())
def test_scanner_equals_declaration_on_generated_segments(segment, check_crc):
    buf, base, positions, tail = segment
    events = scan_all(buf, base, check_crc=check_crc)
    check_events(events, buf, base, check_crc=check_crc, resync=False)
    records = [e for e in events if isinstance(e, scan.MessageRecord)]
    assert [r.offset - base for r in records] == positions
    end = positions[-1] + records[-1].total_size if records else 0
    if tail == "blank":
        assert events[-1] == scan.BlankRecord(base + end, len(buf) - end)
    elif tail == "zeros":
        assert events[-1] == scan.UnwrittenTail(base + end, len(buf) - end)
    else:
        assert len(events) == len(records)
    # resync changes nothing on a well-formed file
    assert scan_all(buf, base, check_crc=check_crc, resync=True) == events


@st.composite
def mutated_segments(draw):
    buf, base, positions, tail = draw(segments(max_records=4))
    assume(buf)
    data = bytearray(buf)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "splice", "zero", "insert"]))
        if not data:
            break
        a = draw(st.integers(0, len(data) - 1))
        if kind == "truncate":
            del data[a:]
        elif kind == "flip":
            data[a] ^= 1 << draw(st.integers(0, 7))
        elif kind == "splice":
            b = draw(st.integers(0, len(data) - 1))
            n = draw(st.integers(1, 64))
            chunk = bytes(data[b:b + n])
            data[a:a + len(chunk)] = chunk
        elif kind == "zero":
            n = draw(st.integers(1, 120))
            data[a:a + n] = bytes(len(data[a:a + n]))
        else:
            data[a:a] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data), base


@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_segments(), st.booleans(), st.booleans())
def test_scanner_never_raises_and_agrees_on_mutated_bytes(segment, check_crc, resync):
    buf, base = segment
    events = scan_all(buf, base, check_crc=check_crc, resync=resync)
    check_events(events, buf, base, check_crc=check_crc, resync=resync)


@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400), st.booleans(), st.booleans())
def test_scanner_on_random_bytes(buf, check_crc, resync):
    events = scan_all(buf, 0, check_crc=check_crc, resync=resync)
    check_events(events, buf, 0, check_crc=check_crc, resync=resync)


@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_fields(), st.integers(0, 2**40), st.booleans())
def test_decode_message_equals_declaration(fields, position, check_crc):
    record = build_record(fields, position)
    rec = scan.decode_message(record, 0, len(record), position, check_crc)
    assert_same_as_declaration(rec, record, position, check_crc)
    assert rec.offset_ok == fields["_true_offset"]


# --- specific behaviours ------------------------------------------------------------------------

def simple_record(position: int, *, body=b"body-bytes", topic=b"TopicTest", props=b"TAGS\x01TagA",
                  body_crc=None, physical_offset=None, born_v6=False, store_v6=False) -> bytes:
    sys_flag = (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0)
    return cl_fmt.commitlog_message.build(dict(
        total_size=cl_fmt.message_length(V1, sys_flag, len(body), len(topic), len(props)),
        magic_code=V1, body_crc=crc(body) if body_crc is None else body_crc, queue_id=1, flag=0,
        queue_offset=7, physical_offset=position if physical_offset is None else physical_offset,
        sys_flag=sys_flag, born_timestamp=1, born_host=dict(ip=bytes(16 if born_v6 else 4), port=1),
        store_timestamp=2, store_host=dict(ip=bytes(16 if store_v6 else 4), port=2),
        reconsume_times=0, prepared_transaction_offset=0, body_length=len(body), body=body or None,
        topic_length=len(topic), topic=topic, properties_length=len(props),
        properties=props or None))


def file_of(records: int, zero_tail: int, *, base: int = 0) -> tuple[bytes, list[int]]:
    """``records`` records from position 0, then ``zero_tail`` zero bytes."""
    data, positions = b"", []
    for i in range(records):
        positions.append(len(data))
        data += simple_record(base + len(data), body=b"x" * (i * 7 + 1))
    return data + bytes(zero_tail), positions


def test_blank_record_ends_the_file_whatever_follows():
    data, positions = file_of(3, 0)
    end = len(data)
    buf = data + struct.pack(">iI", 100, BLANK) + simple_record(end + 8) + b"\xff" * 30
    events = scan_all(buf, 0)
    assert events[-1] == scan.BlankRecord(end, 100)
    assert [e.offset for e in events[:-1]] == positions


def test_unwritten_tail():
    buf, positions = file_of(3, 4096)
    events = scan_all(buf, 1 << 20)
    end = events[-2].end - (1 << 20)
    assert end == len(buf) - 4096
    assert events[-1] == scan.UnwrittenTail((1 << 20) + end, 4096)
    assert [e.offset - (1 << 20) for e in events[:-1]] == positions


def test_truncated_record_at_file_end():
    buf, positions = file_of(3, 0)
    cut = buf[:positions[2] + 60]
    events = scan_all(cut, 0)
    assert isinstance(events[-1], scan.CorruptRegion)
    assert events[-1].code == "CL_TRUNCATED"
    assert events[-1].offset == positions[2]
    assert events[-1].length == 60
    assert events[-1].total_size == len(buf) - positions[2]
    # fewer than 8 trailing non-zero bytes
    events = scan_all(buf[:positions[2] + 5], 0)
    assert events[-1] == scan.CorruptRegion(positions[2], 5, "CL_TRUNCATED", events[-1].detail, 0)


def test_resync_finds_the_next_record_after_a_zeroed_range():
    buf, positions = file_of(6, 0)
    damaged = bytearray(buf)
    # zero the whole second record and the first half of the third
    damaged[positions[1]:positions[2] + 20] = bytes(positions[2] + 20 - positions[1])
    events = scan_all(bytes(damaged), 0, resync=True)
    assert [type(e).__name__ for e in events] == ["MessageRecord", "UnwrittenTail",
                                                  "MessageRecord", "MessageRecord",
                                                  "MessageRecord"]
    assert events[1] == scan.UnwrittenTail(positions[1], positions[3] - positions[1])
    assert [e.offset for e in events[2:]] == positions[3:]
    # without resync the broker's rule: the scan of the file ends at the zeros
    events = scan_all(bytes(damaged), 0)
    assert events[-1] == scan.UnwrittenTail(positions[1], len(buf) - positions[1])
    check_events(events, bytes(damaged), 0, check_crc=True, resync=False)


def test_resync_skips_a_bad_magic_to_the_next_record():
    buf, positions = file_of(4, 64)
    damaged = bytearray(buf)
    damaged[positions[1] + 5] ^= 0xFF  # inside MAGICCODE
    events = scan_all(bytes(damaged), 0, resync=True)
    corrupt = events[1]
    assert isinstance(corrupt, scan.CorruptRegion) and corrupt.code == "CL_BAD_MAGIC"
    assert corrupt.offset == positions[1] and corrupt.length == positions[2] - positions[1]
    assert [e.offset for e in events if isinstance(e, scan.MessageRecord)] == \
        [positions[0]] + positions[2:]
    assert "magic_code" in corrupt.detail  # the declaration names the failing field


class SearchCountingBuffer(bytes):
    """The scanned bytes, counting how many bytes ``find`` looks through (instrumenting the
    input, not the scanner: any search the scanner makes through ``find`` is counted)."""

    searched = 0

    def find(self, sub, start=0, end=None):
        end = len(self) if end is None else end
        hit = super().find(sub, start, end)
        SearchCountingBuffer.searched += (hit + len(sub) if hit >= 0 else end) - start
        return hit


def test_resync_cost_is_linear_in_the_bytes_searched():
    # a bad record, then 1000 V1 magic sequences that are not records, then zeros
    data = bytearray(1 << 20)
    struct.pack_into(">iI", data, 0, 200, 0x12345678)
    for i in range(1000):
        struct.pack_into(">iI", data, 64 + 16 * i, 5, V1)
    buf = SearchCountingBuffer(bytes(data))
    SearchCountingBuffer.searched = 0
    events = scan_all(buf, 0, resync=True)
    assert events[0].code == "CL_BAD_MAGIC" and events[0].length == len(buf)
    assert SearchCountingBuffer.searched <= 4 * len(buf), SearchCountingBuffer.searched


def test_length_mismatch_is_reported():
    record = bytearray(simple_record(0))
    struct.pack_into(">i", record, 0, len(record) + 4)
    buf = bytes(record) + bytes(64)
    events = scan_all(buf, 0)
    assert events[0].code == "CL_LENGTH_MISMATCH" and events[0].offset == 0


def test_body_crc_and_physical_offset_flags():
    good = simple_record(0)
    bad_crc = simple_record(len(good), body_crc=12345)
    wrong_pos = simple_record(len(good) + len(bad_crc), physical_offset=999)
    empty_body = simple_record(len(good) + len(bad_crc) + len(wrong_pos), body=b"", body_crc=0)
    buf = good + bad_crc + wrong_pos + empty_body
    events = scan_all(buf, 0)
    assert [e.body_crc_ok for e in events] == [True, False, True, None]
    assert [e.offset_ok for e in events] == [True, True, False, True]
    assert [e.body_crc_ok for e in scan_all(buf, 0, check_crc=False)] == [None] * 4
    # a bad CRC or a wrong PHYSICALOFFSET is not a sync point
    assert scan.find_sync_point(buf, 1, len(buf), 0) == len(buf) - len(empty_body)


@pytest.mark.usefixtures("walk_path")
def test_split_scans_cover_the_file_exactly_once():
    buf, positions = file_of(12, 256)
    whole = [e.offset for e in scan_all(buf, 0) if isinstance(e, scan.MessageRecord)]
    for cut in range(1, len(buf), 97):
        first = [e.offset for e in scan.scan_buffer(buf, 0, stop=cut)
                 if isinstance(e, scan.MessageRecord)]
        second = [e.offset for e in scan.scan_buffer(buf, 0, start=cut)
                  if isinstance(e, scan.MessageRecord)]
        assert first + second == whole == positions


@pytest.mark.parametrize("born_v6, store_v6", [(False, False), (True, False), (False, True),
                                               (True, True)])
def test_struct_codecs_match_declaration_sizes(born_v6, store_v6):
    assert scan.HEADER is codec.MESSAGE_HEADER
    assert codec.MESSAGE_HEADER.size == struct.calcsize(codec.MESSAGE_HEADER.format) == \
        cl_fmt.message_header.sizeof() == 48
    flags = (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0)
    middle = codec.MESSAGE_MIDDLE[flags]
    assert scan.MIDDLE[flags] is middle
    host = {False: cl_fmt.host_v4.sizeof(), True: cl_fmt.host_v6.sizeof()}
    # born host, STORETIMESTAMP, store host, RECONSUMETIMES, PREPARED_TRANSACTION_OFFSET, BODYLEN
    assert middle.size == struct.calcsize(middle.format) == \
        host[born_v6] + 8 + host[store_v6] + 4 + 8 + 4
    # where the declaration puts the body and the fields of such a record
    record = simple_record(0, born_v6=born_v6, store_v6=store_v6)
    parsed = cl_fmt.commitlog_message.parse(record)
    assert record[codec.MESSAGE_HEADER.size + middle.size:][:parsed.body_length] == parsed.body
    assert middle.unpack_from(record, 48) == (
        parsed.born_host.ip, parsed.born_host.port, parsed.store_timestamp, parsed.store_host.ip,
        parsed.store_host.port, parsed.reconsume_times, parsed.prepared_transaction_offset,
        parsed.body_length)
    assert scan.MIN_MESSAGE_SIZE == 91


FIXED_CODECS = {
    "message_header": (codec.MESSAGE_HEADER, cl_fmt.message_header),
    "blank_record": (codec.BLANK_RECORD, cl_fmt.blank_record),
    "consumequeue_unit": (codec.CQ_UNIT, cq_fmt.consumequeue_unit),
    "batch_consumequeue_unit": (codec.BATCH_CQ_UNIT, cq_fmt.batch_consumequeue_unit),
    "index_header": (codec.INDEX_HEADER, idx_fmt.index_header),
    "index_entry": (codec.INDEX_ENTRY, idx_fmt.index_entry),
}


@pytest.mark.parametrize("name", sorted(FIXED_CODECS))
def test_fixed_struct_codec_size_equals_declaration(name):
    packer, decl = FIXED_CODECS[name]
    assert packer.size == struct.calcsize(packer.format) == decl.sizeof()


def test_length_field_codecs_equal_declaration():
    fields = {sc.name: sc.subcon for sc in cl_fmt.commitlog_message.subcons}
    assert codec.TOPIC_LENGTH[V1].size == fields["topic_length"].cases[V1].sizeof() == 1
    assert codec.TOPIC_LENGTH[V2].size == fields["topic_length"].cases[V2].sizeof() == 2
    assert codec.PROPERTIES_LENGTH.size == fields["properties_length"].sizeof() == 2
    assert codec.INDEX_SLOT.size == idx_fmt.index_slot.sizeof() == 4
    for value in (-2**31, -1, 0, 4000, 2**31 - 1):
        assert codec.INDEX_SLOT.pack(value) == idx_fmt.index_slot.build(value)
    for value in (-128, -1, 0, 127):
        assert codec.TOPIC_LENGTH[V1].pack(value) == fields["topic_length"].cases[V1].build(value)
    for value in (-2**15, 0, 255, 2**15 - 1):
        assert codec.TOPIC_LENGTH[V2].pack(value) == fields["topic_length"].cases[V2].build(value)
        assert codec.PROPERTIES_LENGTH.pack(value) == fields["properties_length"].build(value)


NUMPY_CODECS = {
    "consumequeue_unit": (codec.CQ_DTYPE, cq_fmt.consumequeue_unit),
    "batch_consumequeue_unit": (codec.BATCH_CQ_DTYPE, cq_fmt.batch_consumequeue_unit),
    "index_entry": (codec.INDEX_ENTRY_DTYPE, idx_fmt.index_entry),
    "index_slot": (codec.INDEX_SLOT_DTYPE, idx_fmt.index_slot),
}


@settings(max_examples=60 * SCALE, deadline=None)
@given(st.sampled_from(sorted(NUMPY_CODECS)), st.data())
def test_numpy_dtypes_equal_declaration(name, data):
    """The numpy views of CQ units and index entries read what the declaration parses."""
    dtype, decl = NUMPY_CODECS[name]
    assert dtype.itemsize == decl.sizeof()
    count = data.draw(st.integers(1, 4))
    raw = data.draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))
    rows = numpy.frombuffer(raw, dtype=dtype)
    for i in range(count):
        parsed = decl.parse(raw[i * dtype.itemsize:(i + 1) * dtype.itemsize])
        if dtype.names is None:
            assert int(rows[i]) == parsed
        else:
            assert {n: int(rows[i][n]) for n in dtype.names} == \
                {sc.name: parsed[sc.name] for sc in decl.subcons}


@settings(max_examples=60 * SCALE, deadline=None)
@given(st.sampled_from(sorted(FIXED_CODECS)), st.data())
def test_fixed_struct_codecs_equal_declaration(name, data):
    """For any bytes of the right size: struct unpack == the declaration's parse, and struct
    pack of those values == the declaration's build == the bytes."""
    packer, decl = FIXED_CODECS[name]
    raw = data.draw(st.binary(min_size=packer.size, max_size=packer.size))
    if name == "blank_record":
        raw = raw[:4] + struct.pack(">I", BLANK)
    parsed = decl.parse(raw)
    values = tuple(parsed[sc.name] for sc in decl.subcons)
    assert packer.unpack(raw) == values
    assert packer.pack(*values) == decl.build(parsed) == raw


@pytest.mark.usefixtures("walk_path")
def test_message_at_and_read_body(tmp_path):
    root = tmp_path / "store"
    writer = StoreWriter(root, commitlog_file_size=8192, cq_units_per_file=10, index_slots=8,
                         index_entries=32)
    offsets = [writer.put(Message(topic="T", queue_id=0, body=bytes([i]) * (100 + i * 50),
                                  properties={"TAGS": "a"}, store_timestamp=1000 + i))[0]
               for i in range(40)]
    writer.close()
    log = CommitLog(root / "commitlog")
    assert len(log.segments) > 2
    for i, offset in enumerate(offsets):
        rec = scan.message_at(log, offset)
        assert rec.offset == offset and rec.body_crc_ok and rec.offset_ok
        assert scan.read_body(log, rec) == bytes([i]) * (100 + i * 50)
        assert scan.read_record_bytes(log, rec)[:4] == struct.pack(">i", rec.total_size)
    with pytest.raises(ParseError):
        scan.message_at(log, offsets[1] + 3)
    with pytest.raises(ParseError):
        scan.message_at(log, 10 ** 9)
    assert [r.offset for r in scan.Scanner(log).messages()] == offsets
    # an offset range: records starting inside it
    assert [r.offset for r in scan.Scanner(log).messages(offsets[5], offsets[20])] == \
        offsets[5:20]


def _writer_store(root: Path, files: int) -> int:
    file_size = 64 * 1024
    writer = StoreWriter(root, commitlog_file_size=file_size, cq_units_per_file=100,
                         index_slots=64, index_entries=256)
    i = 0
    while writer.commitlog.offset < files * file_size - 4096:
        writer.put(Message(topic="MemTopic", queue_id=i % 4, body=bytes([i % 251]) * 1500,
                           properties={"TAGS": "t", "KEYS": f"k{i}"}, store_timestamp=10 ** 12 + i))
        i += 1
    writer.close()
    return i


def _scan_peak(root: Path) -> tuple[int, int]:
    store = Store(root)
    tracemalloc.start()
    try:
        count = sum(1 for e in scan.Scanner(store.commitlog) if isinstance(e, scan.MessageRecord))
        return count, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_scanner_memory_does_not_grow_with_store_size(tmp_path):
    small, large = tmp_path / "small", tmp_path / "large"
    n_small, n_large = _writer_store(small, 6), _writer_store(large, 12)
    count_small, peak_small = _scan_peak(small)
    count_large, peak_large = _scan_peak(large)
    assert (count_small, count_large) == (n_small, n_large)
    # streaming: twice the data, about the same peak; and far below the data scanned
    assert peak_large < peak_small * 1.5 + 32 * 1024, (peak_small, peak_large)
    assert peak_large < 12 * 64 * 1024 // 4


# --- the broker's own scan of the reference stores ----------------------------------------------

REFS = reference_dirs()
REF_IDS = ["fixture-" + r.name if r.parent != SHARED_STORES else r.name for r in REFS]


@functools.lru_cache(maxsize=2)
def dump(ref: Path) -> dict:
    with gzip.open(ref / "dump.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.mark.usefixtures("walk_path")
@pytest.mark.parametrize("ref", REFS, ids=REF_IDS)
def test_scanner_matches_broker_file_scan(ref):
    """Per file: the same messages at the same offsets as the broker's MessageDecoder, and the
    same end (``blank@pos size=N`` or ``zeros@pos``); CRC flags as the broker computed them."""
    d = dump(ref)
    by_offset = {m["commitLogOffset"]: m for m in d["messages"]}
    store = Store(ref / "store")
    scanner = scan.Scanner(store.commitlog, check_crc=True)
    scans = {s["name"]: s for s in d["fileScan"]}
    assert [s.name for s in store.commitlog.segments] == [s["name"] for s in d["fileScan"]]
    seen = 0
    for segment in store.commitlog.segments:
        events = list(scanner.scan_segment(segment))
        expect = scans[segment.name]
        records = [e for e in events if isinstance(e, scan.MessageRecord)]
        assert len(records) == expect["messages"]
        kind, _, where = expect["end"].partition("@")
        if kind == "blank":
            pos, size = (int(x) for x in where.split(" size="))
            assert events[-1] == scan.BlankRecord(segment.base_offset + pos, size)
        else:
            assert kind == "zeros"
            pos = int(where)
            assert events[-1] == scan.UnwrittenTail(segment.base_offset + pos, segment.length - pos)
        assert len(events) == len(records) + 1
        for rec in records:
            m = by_offset[rec.offset]
            assert (rec.total_size, rec.queue_id, rec.queue_offset, rec.sys_flag, rec.topic,
                    rec.store_timestamp, rec.body_crc) == (
                m["storeSize"], m["queueId"], m["queueOffset"], m["sysFlag"], m["topic"],
                m["storeTimestamp"], m["bodyCRC"])
            assert rec.offset_ok
            if m["bodyLength"] > 0:
                assert rec.body_crc_ok == m["bodyCrcOk"]
            if "propCrcOk" in m:
                assert rec.prop_crc_ok == m["propCrcOk"]
            elif m.get("hasPropCrc") is False:
                assert rec.prop_crc_ok is None
            seen += 1
    assert seen == len(d["messages"])
