"""The batch scanner (scan.scan_buffer_batches) and the numpy codecs it and verify use, held equal
to the reference paths: scan_buffer record by record, decode_properties, java_string_hash.

Segments are built with the construct declaration (test_scanner's strategies), mutated, or
written by the store writer; the reference stores are compared event by event."""
from __future__ import annotations

import mmap
import random
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import SHARED_STORES, available_walks, reference_dirs, use_walk
from test_scanner import SCALE, build_record, mutated_segments, segments
from mqtool import codec, scan
from mqtool.formats import codecs
from mqtool.formats import commitlog as cl_fmt
from mqtool.store import Store
from mqtool.writer import Message, StoreWriter

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_events(buf, base, **kw) -> list:
    return list(scan.scan_buffer(buf, base, name="segment", **kw))


def batch_events(buf, base, **kw) -> list:
    """The batch scanner's events, batches expanded into records while each is current."""
    events = []
    for event in scan.scan_buffer_batches(buf, base, name="segment", **kw):
        if type(event) is scan.RecordBatch:
            assert len(event) > 0
            events.extend(event.records())
        else:
            assert type(event) is not scan.MessageRecord
            events.append(event)
    return events


def assert_same_scan(buf, base, **kw):
    expected = reference_events(buf, base, **kw)
    for walk in available_walks():       # the numpy path and the native core
        with use_walk(walk):
            assert batch_events(buf, base, **kw) == expected, walk
            # batch boundaries anywhere change nothing
            for size in (1, 2, 3):
                assert batch_events(buf, base, batch_records=size, **kw) == expected, walk


# --- generated and damaged segments --------------------------------------------------------------

@settings(max_examples=150 * SCALE, **SETTINGS)
@given(segments(max_records=8), st.booleans(), st.booleans())
def test_batches_equal_records_on_generated_segments(segment, check_crc, resync):
    buf, base, _, _ = segment
    assert_same_scan(buf, base, check_crc=check_crc, resync=resync)


@settings(max_examples=300 * SCALE, **SETTINGS)
@given(mutated_segments(), st.booleans(), st.booleans())
def test_batches_equal_records_on_mutated_segments(segment, check_crc, resync):
    buf, base = segment
    assert_same_scan(buf, base, check_crc=check_crc, resync=resync)


@settings(max_examples=200 * SCALE, **SETTINGS)
@given(st.one_of(segments(max_records=8), mutated_segments().map(lambda m: (*m, None, None))),
       st.data(), st.booleans())
def test_hints_change_nothing(segment, data, check_crc):
    """Hints (where ConsumeQueue units say records start) may be missing, wrong or duplicated:
    the scan is the same."""
    buf, base = segment[0], segment[1]
    starts = [e.offset - base for e in reference_events(buf, base, resync=True)
              if type(e) is scan.MessageRecord]
    true = data.draw(st.lists(st.sampled_from(starts), unique=True) if starts else st.just([]))
    wrong = data.draw(st.lists(st.integers(0, len(buf) + 8), max_size=6))
    hints = np.array(true + wrong + true[:2], dtype=np.int64)
    expected = reference_events(buf, base, check_crc=check_crc, resync=True)
    for size in (1, 3, 1000):
        for walk in available_walks():
            with use_walk(walk):
                assert batch_events(buf, base, check_crc=check_crc, resync=True, hints=hints,
                                    batch_records=size) == expected, walk


@settings(max_examples=100 * SCALE, **SETTINGS)
@given(segments(max_records=6), st.data(), st.booleans())
def test_batches_equal_records_on_ranges(segment, data, check_crc):
    buf, base, _, _ = segment
    start = data.draw(st.integers(0, max(len(buf), 1)))
    stop = data.draw(st.integers(0, len(buf) + 10))
    assert_same_scan(buf, base, start=start, stop=stop, check_crc=check_crc, resync=True)


@settings(max_examples=100 * SCALE, **SETTINGS)
@given(st.binary(max_size=400), st.booleans(), st.booleans())
def test_batches_equal_records_on_random_bytes(buf, check_crc, resync):
    assert_same_scan(buf, 0, check_crc=check_crc, resync=resync)


def test_a_bad_record_inside_a_run_splits_it_and_is_reported_by_the_reference_path():
    records, pos = [], 0
    for i in range(7):
        fields = _plain_fields(i)
        record = build_record(fields, pos)
        records.append(record)
        pos += len(record)
    data = bytearray(b"".join(records))
    third = len(records[0]) + len(records[1])
    struct.pack_into(">I", data, third + 4, 0x12345678)         # bad magic at record 2
    buf = bytes(data) + bytes(64)
    events = list(scan.scan_buffer_batches(buf, 0, resync=True))
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["RecordBatch", "CorruptRegion", "RecordBatch", "UnwrittenTail"]
    assert len(events[0]) == 2 and len(events[2]) == 4
    assert events[1].code == "CL_BAD_MAGIC" and events[1].offset == third
    assert batch_events(buf, 0, resync=True) == reference_events(buf, 0, resync=True)


def _plain_fields(i: int) -> dict:
    body = bytes([i]) * (10 + i)
    props = f"TAGS\x01t{i}\x02KEYS\x01k{i} x{i}".encode()
    return dict(total_size=0, magic_code=cl_fmt.MESSAGE_MAGIC_CODE, body_crc=zlib.crc32(body) & 0x7FFFFFFF,
                queue_id=i % 3, flag=0, queue_offset=i, physical_offset=0, sys_flag=0,
                born_timestamp=i, born_host=dict(ip=bytes(4), port=1), store_timestamp=1000 + i,
                store_host=dict(ip=bytes(4), port=2), reconsume_times=0,
                prepared_transaction_offset=0, body_length=len(body), body=body,
                topic_length=5, topic=b"Topic", properties_length=len(props), properties=props,
                _prop_crc=False, _true_offset=True)


def _plain_records(count: int) -> tuple[list[bytes], bytes]:
    """``count`` plain records laid out back to back, and the buffer they make."""
    records, pos = [], 0
    for i in range(count):
        record = build_record(_plain_fields(i), pos)
        records.append(record)
        pos += len(record)
    return records, b"".join(records)


def test_columns_are_the_record_fields():
    records, buf = _plain_records(5)
    (batch,) = list(scan.scan_buffer_batches(buf, 1 << 30))
    expected = reference_events(buf, 1 << 30)
    assert list(batch.offsets) == [r.offset for r in expected]
    for name in ("total_size", "queue_id", "queue_offset", "physical_offset", "sys_flag",
                 "store_timestamp", "body_length", "body_crc"):
        assert getattr(batch, name).tolist() == [getattr(r, name) for r in expected], name
    assert [batch.topics.names[t] for t in batch.topic_id] == [r.topic for r in expected]
    assert [batch.properties_raw(i) for i in range(len(batch))] == \
        [r.properties_raw for r in expected]
    assert batch.body_crc_ok.tolist() == [scan.FLAG_TRUE] * 5
    assert batch.prop_crc_ok.tolist() == [scan.FLAG_NONE] * 5


# --- stores: written by the writer, and by the broker ---------------------------------------------

def _scan_both(store: Store, check_crc: bool) -> None:
    for segment in store.commitlog.segments:
        expected = list(scan.scan_segment(segment, check_crc=check_crc, resync=True))
        got = []
        for event in scan.scan_segment_batches(segment, check_crc=check_crc, resync=True):
            got.extend(event.records() if type(event) is scan.RecordBatch else [event])
        assert got == expected, segment.name


@pytest.mark.parametrize("broker_version, prop_crc", [(4, False), (5, True)])
def test_writer_store_with_every_record_shape(tmp_path, broker_version, prop_crc):
    root = tmp_path / "store"
    writer = StoreWriter(root, commitlog_file_size=256 * 1024, cq_units_per_file=200,
                         index_slots=64, index_entries=1024, broker_version=broker_version,
                         prop_crc=prop_crc)
    rng = random.Random(3)
    topics = ["TopicTest", "Ordér", "%RETRY%G", "T" * 127, "SCHEDULE_TOPIC_XXXX"]
    if broker_version >= 5:
        topics.append("V2" + "x" * 198)     # longer than 127 bytes: a V2 record
    v4, v6 = bytes([10, 0, 0, 1]), bytes(15) + b"\x01"
    for i in range(900):
        topic = topics[i % len(topics)]
        props = {"TAGS": rng.choice(["a", "täg", "标签", "x" * 300]), "KEYS": f"k{i} é{i}  z",
                 "UNIQ_KEY": f"{i:032X}"}
        if topic == "SCHEDULE_TOPIC_XXXX":
            props["DELAY"] = str(rng.choice([1, 3, 18, 0]))
        writer.put(Message(topic=topic, queue_id=i % 3,
                           body=bytes([i % 251]) * rng.randint(0, 3000), properties=props,
                           store_timestamp=10 ** 12 + i, sys_flag=rng.choice([0, 4, 8, 12]),
                           born_host=(v6 if i % 5 == 0 else v4, 1000 + i),
                           store_host=(v6 if i % 7 == 0 else v4, 10911)))
    writer.close()
    store = Store(root)
    assert len(store.commitlog.segments) > 2
    for check_crc in (True, False):
        _scan_both(store, check_crc)


@pytest.mark.parametrize("ref", reference_dirs(),
                         ids=lambda r: ("fixture-" if r.parent != SHARED_STORES else "") + r.name)
def test_reference_stores_scan_identically(ref):
    for kind in ("store", "recovered"):
        if (ref / kind / "commitlog").is_dir():
            store = Store(ref / kind)
            for check_crc in (True, False):
                _scan_both(store, check_crc)


def test_damaged_reference_store_scans_identically(store_copy):
    store = Store(store_copy)
    segment = store.commitlog.segments[0]
    data = bytearray(segment.path.read_bytes())
    rng = random.Random(11)
    for _ in range(40):
        data[rng.randrange(200_000)] ^= 1 << rng.randrange(8)
    data[300_000:301_000] = bytes(1000)
    segment.path.write_bytes(bytes(data))
    _scan_both(Store(store_copy), True)


# --- the numpy codecs ------------------------------------------------------------------------------

def test_gather_reads_any_alignment():
    raw = bytes(range(256)) * 4
    positions = np.array([0, 1, 5, 1000, 1019], dtype=np.int64)
    got = codec.gather(raw, ">i4", positions)
    assert got.tolist() == [struct.unpack_from(">i", raw, p)[0] for p in positions]
    header = codec.gather(raw, codec.MESSAGE_HEADER_DTYPE, np.array([3, 900]))
    assert header["queue_offset"].tolist() == [struct.unpack_from(">q", raw, p + 20)[0]
                                               for p in (3, 900)]


def test_message_dtypes_follow_the_declarations():
    assert codec.MESSAGE_HEADER_DTYPE.itemsize == codec.MESSAGE_HEADER.size
    for flags, dtype in codec.MESSAGE_MIDDLE_DTYPES.items():
        assert dtype.itemsize == codec.MESSAGE_MIDDLE[flags].size
        assert dtype.names[-1] == "body_length"


property_values_text = st.one_of(
    st.text(alphabet="TAGSKEYUNIQ_DLxé键😀 \x01\x02", max_size=60),
    st.lists(st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TAG", "KEYSX", ""]),
                       st.text(alphabet="ab é键😀 \x01", max_size=8)), max_size=6).map(
        lambda pairs: "\x02".join(f"{n}\x01{v}" for n, v in pairs)))


@settings(max_examples=300 * SCALE, **SETTINGS)
@given(st.lists(st.one_of(property_values_text.map(lambda t: t.encode("utf-8")),
                          st.binary(max_size=40)), max_size=8))
def test_property_values_equal_decode_properties(props_list):
    buf = b"".join(props_list)
    lengths = np.array([len(p) for p in props_list], dtype=np.int64)
    ends = np.cumsum(lengths)
    data, begins = codec.property_blob(buf, ends - lengths, ends)
    names = ("TAGS", "KEYS", "UNIQ_KEY", "DELAY")
    values = codec.property_values(data, begins, names)
    for i, raw in enumerate(props_list):
        assert data[begins[i]:begins[i] + len(raw)].tobytes() == raw
        expected = codecs.decode_properties(raw)
        for name in names:
            start, end = values[name][0][i], values[name][1][i]
            got = None if start < 0 else data[start:end].tobytes().decode("utf-8", errors="replace")
            assert got == expected.get(name), (raw, name)


@settings(max_examples=200 * SCALE, **SETTINGS)
@given(st.lists(st.text(alphabet="ab é  键", max_size=12)
                | st.text(alphabet="ab ", min_size=250, max_size=300), max_size=8))
def test_split_spans_equal_str_split(texts):
    raw = b"".join(t.encode() for t in texts)
    lengths = np.array([len(t.encode()) for t in texts], dtype=np.int64)
    ends = np.cumsum(lengths)
    owner, starts, stops = codec.split_spans(np.frombuffer(raw, dtype=np.uint8), ends - lengths,
                                             ends, ord(" "))
    got = [[] for _ in texts]
    for o, a, b in zip(owner.tolist(), starts.tolist(), stops.tolist()):
        got[o].append(raw[a:b].decode())
    assert got == [[k for k in t.split(" ") if k] for t in texts]


hash_texts = st.one_of(st.text(max_size=40), st.text(alphabet="abc#_-09", max_size=300),
                       st.text(alphabet="é键\u0800\uffff\u07ffa", min_size=250, max_size=600))


@settings(max_examples=300 * SCALE, **SETTINGS)
@given(hash_texts, hash_texts)
def test_fast_java_hash_equals_reference(prefix, text):
    assert codecs.java_string_hash_fast(text) == codecs.java_string_hash(text)
    assert codecs.java_hash_extend(codecs.java_hash_extend(0, prefix), text) == \
        codecs.java_string_hash(prefix + text) & 0xFFFFFFFF
    assert codecs.index_key_hash_after(codecs.index_key_prefix_hash(prefix), text) == \
        codecs.index_key_hash(codecs.index_key(prefix, text))


@settings(max_examples=200 * SCALE, **SETTINGS)
@given(st.lists(st.one_of(hash_texts.map(lambda t: t.encode("utf-8", errors="surrogatepass")),
                          st.binary(max_size=30)), max_size=12),
       st.lists(st.integers(0, 2**32 - 1), min_size=12, max_size=12))
def test_vector_java_hashes_equal_reference(raws, prefixes):
    data = np.frombuffer(b"".join(raws), dtype=np.uint8)
    lengths = np.array([len(r) for r in raws], dtype=np.int64)
    ends = np.cumsum(lengths)
    prefix = np.array(prefixes[:len(raws)], dtype=np.uint32)
    hashes, exact = codec.java_hashes(data, ends - lengths, ends, prefix)
    for i, raw in enumerate(raws):
        text = raw.decode("utf-8", errors="replace")
        if exact[i]:
            assert int(hashes[i]) == codecs.java_hash_extend(prefixes[i], text)
        else:
            # only what the vector path leaves to the scalar one: malformed UTF-8 or
            # characters outside the BMP (surrogate pairs)
            try:
                assert any(ord(c) > 0xFFFF for c in raw.decode("utf-8"))
            except UnicodeDecodeError:
                pass
    assert codec.index_hashes_of(np.array([0x80000000, 0xFFFFFFFF, 5], dtype=np.uint32)).tolist() \
        == [0, 1, 5]


def test_scanning_does_not_keep_the_mapping_busy(tmp_path):
    # batches hold no buffer export: the file's mapping closes while a batch is alive
    record = build_record(_plain_fields(1), 0)
    path = tmp_path / "seg"
    path.write_bytes(record * 1)
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    batches = [e for e in scan.scan_buffer_batches(mapped, 0) if type(e) is scan.RecordBatch]
    mapped.close()
    assert len(batches) == 1 and batches[0].total_size.tolist() == [len(record)]


def test_batches_of_decoded_records_have_the_same_columns():
    records, buf = _plain_records(4)
    (mapped,) = list(scan.scan_buffer_batches(buf, 4096))
    decoded = scan.RecordBatch.from_records(reference_events(buf, 4096), 4096, mapped.topics)
    for name in scan._COLUMNS:
        if name != "properties_position":
            assert getattr(decoded, name).tolist() == getattr(mapped, name).tolist(), name
    assert decoded.records() == mapped.records()
    for batch in (mapped, decoded):
        source, starts, ends = batch.properties_source()
        assert [bytes(source[a:b]) for a, b in zip(starts, ends)] == \
            [r.properties_raw for r in batch.records()]
