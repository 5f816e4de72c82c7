"""The native core (``mqtool._native``, Rust) against the numpy path it stands in for.

The numpy batch path (:func:`mqtool.scan.batches._fast_batch`) is the reference: on every
reference store, every damage ``mqtool fixture damage`` forges and a corpus of >= 100,000 mutated
CommitLog buffers (plain and DLedger), both paths give the same batches, column for column, and
the same events. The native entry points are fuzzed with absurd ranges and lengths: they answer
None or a run inside the buffer, never crash, and a panic arrives as ValueError."""
from __future__ import annotations

import json
import mmap
import os
import random
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

from conftest import (DLEDGER_STORES, FIXTURE_STORE, REPO, SHARED_STORES, reference_dirs,
                      run_mqtool)
from test_scanner import build_record
from mqtool import codec, native_core, scan
from mqtool.formats import codecs
from mqtool.scan import batches, native
from mqtool.store import COMMITLOG_LAYOUT, DLEDGER_LAYOUT, Store

needs_native = pytest.mark.skipif(native.core is None, reason=f"no native core ({native.reason})")
V1, V2 = 0xDAA320A7, 0xDAA320AB
COLUMNS = [name for name in batches._COLUMNS if name != "topic_id"]


# --- comparing both paths ---------------------------------------------------------------------

def run_columns(batch) -> tuple | None:
    """A batch as plain values: every column (topic ids as names) with its dtype."""
    if batch is None:
        return None
    # dtype.str: str(dtype) costs more than the rest of a small run's comparison
    cols = tuple((name, getattr(batch, name).dtype.str, getattr(batch, name).tolist())
                 for name in COLUMNS)
    return cols + (("topic", batch.topic_id.dtype.str,
                    [batch.topics.names[t] for t in batch.topic_id.tolist()]),)


def both_runs(buf, pos, base, check_crc, layout, max_records=batches._BATCH_RECORDS,
              stop=None, max_bytes=batches._BATCH_BYTES):
    limit = len(buf)
    stop = limit if stop is None else stop
    args = (buf, pos, stop, limit, base, check_crc)
    numpy_run = batches._fast_batch(*args, batches.TopicTable(), max_records, max_bytes,
                                    layout=layout)
    native_run = batches._native_batch(*args, batches.TopicTable(), max_records, max_bytes,
                                       layout=layout)
    return run_columns(numpy_run), run_columns(native_run)


def scan_events(buf, base, use_native: bool, monkeypatch=None, **kw) -> list:
    """scan_buffer_batches' events on one path, batches as column values."""
    saved = native.core
    native.core = saved if use_native else None
    try:
        return [run_columns(e) if type(e) is scan.RecordBatch else e
                for e in scan.scan_buffer_batches(buf, base, name="segment", **kw)]
    finally:
        native.core = saved


def assert_same_scan(buf, base, **kw):
    expected = scan_events(buf, base, False, **kw)
    assert scan_events(buf, base, True, **kw) == expected


def segment_files(root):
    store = Store(root)
    return [(s.path, s.base_offset, s.layout) for s in store.commitlog.segments]


def assert_same_store(root):
    for path, base, layout in segment_files(root):
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                continue
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                for check_crc, resync in ((True, True), (False, False)):
                    events = scan_events(buf, base, False, check_crc=check_crc, resync=resync,
                                         layout=layout)
                    assert scan_events(buf, base, True, check_crc=check_crc, resync=resync,
                                       layout=layout) == events, (path, check_crc, resync)
                    # the pass that parses the properties too, split over threads, from
                    # every batch's start
                    for event in events:
                        if type(event) is tuple:
                            pos = event[0][2][0]
                            expected = run_columns(batches._fast_batch(
                                buf, pos, len(buf), len(buf), base, check_crc,
                                batches.TopicTable(), layout=layout))
                            assert_same_fused(buf, pos, base, check_crc, layout,
                                              batches._BATCH_RECORDS, None, expected, threads=3)


# --- the module itself --------------------------------------------------------------------------

def test_the_extension_is_built_where_cargo_is():
    """An install on a machine with a Rust toolchain builds the native core (the build is
    optional: without cargo mqtool runs the numpy path)."""
    if os.environ.get("MQTOOL_NATIVE", "").strip().lower() in native_core.OFF_VALUES:
        assert native.core is None and native.reason == "MQTOOL_NATIVE=0"
        return
    if shutil.which("cargo") is None:
        pytest.skip("no Rust toolchain here")
    assert native.core is not None, native.reason


@needs_native
def test_the_native_layout_is_the_declarations():
    theirs = native.core.layout()
    for key, value in native.expected_layout().items():
        assert theirs[key] == value, key
    assert theirs["flags"] == (batches.FLAG_NONE, batches.FLAG_FALSE, batches.FLAG_TRUE)


@needs_native
def test_a_panic_is_a_value_error():
    with pytest.raises(ValueError, match="native self-test failed: deliberate"):
        native.core._panic_for_test()


def test_version_says_which_path_runs():
    env = dict(os.environ, MQTOOL_NATIVE="0")
    proc = run_mqtool("--version", env=env)
    assert proc.stdout.strip() == "mqtool 0.1.0 (numpy path: MQTOOL_NATIVE=0)"
    env.pop("MQTOOL_NATIVE")
    proc = run_mqtool("--version", env=env)
    expected = "native core" if native.core is not None else f"numpy path: {native.reason}"
    assert proc.stdout.strip() == f"mqtool 0.1.0 ({expected})"


@needs_native
def test_native_crc32_ranges_is_zlib():
    rng = random.Random(1)
    data = rng.randbytes(5000)
    starts = np.array([0, 10, 4999, 5000, 300, -1, 4000], dtype=np.int64)
    ends = np.array([5000, 10, 5000, 5000, 4300, 10, 6000], dtype=np.int64)
    expected = [zlib.crc32(data[s:e]) if 0 <= s <= e <= len(data) else -1
                for s, e in zip(starts.tolist(), ends.tolist())]
    assert native.core.crc32_ranges(data, starts, ends).tolist() == expected


# --- reference stores and forged damage -----------------------------------------------------------

@needs_native
@pytest.mark.parametrize("ref", reference_dirs(), ids=lambda p: p.name)
def test_same_batches_on_the_reference_stores(ref):
    if not (ref / "store").is_dir():
        pytest.skip(f"{ref} has no store/")
    assert_same_store(ref / "store")


@needs_native
@pytest.mark.parametrize("name", DLEDGER_STORES)
def test_same_batches_on_the_dledger_stores(name, unpack_shared):
    assert_same_store(unpack_shared(name))


DAMAGES = [("torn-tail", ()), ("bit-flip", ("--target", "body")),
           ("bit-flip", ("--target", "header")), ("bit-flip", ("--target", "properties")),
           ("zero-range", ("--length", "300")), ("truncate-file", ()),
           ("delete-file", ()), ("stray-file", ()), ("stale-checkpoint", ()),
           ("config-empty", ()), ("config-truncate", ()), ("config-zeros", ())]


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("native-small") / "store"
    proc = run_mqtool("fixture", "make", root, "-n", "1500", "--seed", "4",
                      "--commitlog-file-size", "256k", "--broker-version", "5")
    assert proc.returncode == 0, proc.stderr
    return root


def verify_report(root, use_native: bool) -> dict:
    from mqtool.verify import verify_store
    saved = native.core
    native.core = saved if use_native else None
    try:
        return verify_store(Store(root)).to_dict()
    finally:
        native.core = saved


@needs_native
@pytest.mark.parametrize("kind,extra", DAMAGES, ids=lambda v: v if isinstance(v, str) else
                         "-".join(v[1::2]) or "default")
def test_same_scan_and_findings_on_every_forged_damage(small_store, tmp_path, kind, extra):
    # the kinds that change CommitLog bytes get two seeds, the others (queues, config) one
    for seed in (1, 2) if kind in ("torn-tail", "bit-flip", "zero-range", "truncate-file") else (1,):
        root = tmp_path / f"s{seed}"
        shutil.copytree(small_store, root)
        proc = run_mqtool("fixture", "damage", root, "--kind", kind, "--seed", str(seed), *extra)
        assert proc.returncode == 0, proc.stderr
        assert_same_store(root)
        assert verify_report(root, True) == verify_report(root, False)


@needs_native
def test_same_scan_and_findings_on_dledger_entry_damage(tmp_path, unpack_shared):
    source = unpack_shared("dledger-clean")
    for seed in (1, 2, 3):
        root = tmp_path / f"s{seed}"
        shutil.copytree(source, root)
        proc = run_mqtool("fixture", "damage", root, "--kind", "bit-flip", "--target",
                          "entry-header", "--seed", str(seed))
        assert proc.returncode == 0, proc.stderr
        assert_same_store(root)
        assert verify_report(root, True) == verify_report(root, False)


# --- a corpus of mutated buffers ----------------------------------------------------------------

def random_record(rng: random.Random, position: int) -> bytes:
    magic = rng.choice([V1, V2])
    born_v6, store_v6 = rng.random() < 0.2, rng.random() < 0.2
    sys_flag = (rng.choice([0, 0, 1, 2, 4, 8, 0x40, 0x100, 0x2000]) & ~0x30) \
        | (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0)
    body = rng.randbytes(rng.choice([0, 1, 10, 60, 200]))
    topic = rng.choice([b"TopicTest", b"OrderTopic", b"%RETRY%GroupA", b"", "t\u00e9st".encode(),
                        b"\xff\xfe", b"x" * 127] + ([b"y" * 300] if magic == V2 else []))
    props = rng.choice([b"", b"TAGS\x01tagA\x02KEYS\x01k1 k2\x02", b"UNIQ_KEY\x01ABC\x02",
                        rng.randbytes(rng.randint(1, 40))])
    prop_crc = rng.random() < 0.4
    fields = dict(
        total_size=0, magic_code=magic,
        body_crc=zlib.crc32(body) & 0x7FFFFFFF if rng.random() < 0.8 else rng.randint(-2**31, 2**31 - 1),
        queue_id=rng.randint(0, 7), flag=0, queue_offset=rng.randint(0, 1 << 40), physical_offset=0,
        sys_flag=sys_flag, born_timestamp=rng.randint(0, 1 << 42),
        born_host=dict(ip=rng.randbytes(16 if born_v6 else 4), port=rng.randint(0, 65535)),
        store_timestamp=rng.randint(0, 1 << 42),
        store_host=dict(ip=rng.randbytes(16 if store_v6 else 4), port=10911),
        reconsume_times=rng.randint(0, 3), prepared_transaction_offset=rng.randint(0, 1 << 30),
        body_length=len(body), body=body or None, topic_length=len(topic), topic=topic,
        properties_length=len(props) + (20 if prop_crc else 0),
        properties=(props + bytes(20) if prop_crc else props) or None,
        _prop_crc=prop_crc, _true_offset=rng.random() < 0.9)
    return build_record(fields, position)


def seed_segment(rng: random.Random, layout: str, base: int) -> bytes:
    out = bytearray()
    for _ in range(rng.randint(1, 6)):
        if layout == DLEDGER_LAYOUT:
            record = random_record(rng, base + len(out) + 48)
            out += codec.DLEDGER_ENTRY_HEADER.pack(1, 48 + len(record), rng.randint(0, 99), 1,
                                                   base + len(out), 0, 0, 0, len(record))
            out += record
        else:
            out += random_record(rng, base + len(out))
    out += bytes(rng.choice([0, 8, 100]))
    return bytes(out)


EXTREMES = [0, 1, -1, 2**31 - 1, -2**31, 91, 20, 48, 96, 127, 128, 255, 0x7FFF, 0xDAA320A7,
            0xDAA320AB]


def mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if not buf:
            break
        kind = rng.randrange(6)
        at = rng.randrange(len(buf))
        if kind == 0:
            buf[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            value = rng.choice(EXTREMES + [len(buf) - at, rng.randrange(len(buf) + 200)])
            size = rng.choice([1, 2, 4, 8])
            raw = (value & ((1 << 8 * size) - 1)).to_bytes(size, "big")
            buf[at:at + size] = raw[:len(buf) - at]
        elif kind == 2:
            del buf[at:]
        elif kind == 3:
            buf[at:at + rng.randint(1, 64)] = bytes(len(buf[at:at + rng.randint(1, 64)]))
        elif kind == 4:
            src = rng.randrange(len(buf))
            chunk = bytes(buf[src:src + rng.randint(1, 120)])
            buf[at:at + len(chunk)] = chunk
        else:
            buf[at:at] = rng.randbytes(rng.randint(1, 8))
    return bytes(buf)


FUSED_NAMES = ("TAGS", "KEYS", "UNIQ_KEY", "DELAY", "CLUSTER")
FUSED_PATTERNS = [(name + "\x01").encode() for name in FUSED_NAMES]


def assert_same_fused(buf, pos, base, check_crc, layout, max_records, stop, expected,
                      threads=1, reference=True):
    """scan_run with the properties parsed in the same pass, split into pieces of one record
    on ``threads`` threads: the run ``expected`` (run_columns of the numpy path's) and, with
    ``reference``, the values and TAGS codes of the numpy property path on it."""
    limit = len(buf)
    stop = limit if stop is None else stop
    run = native.core.scan_run(buf, pos, stop, limit, base, check_crc, layout == DLEDGER_LAYOUT,
                               max_records, batches._BATCH_BYTES, FUSED_PATTERNS, 0, threads, 1,
                               (2, 1, ord(" ")))
    if expected is None:
        assert run is None
        return
    columns, topic_index, topics, (spans, hashes, exact, keys) = run
    got = tuple((name, col.dtype.str, col.tolist()) for name, col in zip(COLUMNS, columns))
    assert got == expected[:-1]
    assert [topics[t].decode("utf-8", "replace") for t in topic_index.tolist()] == \
        expected[-1][2]
    n = len(topic_index)
    assert all(len(a) == n for pair in spans for a in pair) and len(hashes) == len(exact) == n
    if not reference:
        return
    values = dict(zip(COLUMNS, columns))
    starts = values["properties_position"]
    blob, begins = codec.property_blob(buf, starts, starts + values["properties_length"])
    want = codec._property_values_numpy(blob, begins, FUSED_NAMES)
    data = np.frombuffer(buf, dtype=np.uint8)
    for name, span in zip(FUSED_NAMES, spans):
        assert value_bytes(data, span) == value_bytes(blob, want[name]), name
    assert codec.string_hash_codes(data, *spans[0], hashed=(hashes, exact)).tolist() == \
        codec.string_hash_codes(blob, *want["TAGS"]).tolist()
    # the keys buildIndex puts, hashed as topic#key where the text is plain UTF-8
    owner, k_starts, k_ends, k_hashes, k_exact = keys
    w_owner, w_starts, w_ends = codec._index_key_spans_numpy(blob, want["UNIQ_KEY"],
                                                             want["KEYS"], ord(" "))
    assert owner.tolist() == w_owner.tolist()
    assert value_bytes(data, (k_starts, k_ends)) == value_bytes(blob, (w_starts, w_ends))
    names = [topics[t].decode("utf-8", "replace") for t in topic_index.tolist()]
    for k in np.flatnonzero(k_exact).tolist():
        text = bytes(data[k_starts[k]:k_ends[k]]).decode("utf-8")
        assert int(k_hashes[k]) == codecs.java_hash_extend(
            codecs.index_key_prefix_hash(names[owner[k]]), text)


def value_bytes(data, span) -> list:
    return [None if s < 0 else bytes(data[s:e]) for s, e in zip(span[0].tolist(),
                                                                span[1].tolist())]


@needs_native
def test_same_runs_on_100000_mutated_buffers():
    rng = random.Random(25)
    bases = [0, 1 << 20, 7 * (1 << 30)]
    seeds = [(seed_segment(rng, layout, base), base, layout)
             for layout in (COMMITLOG_LAYOUT, DLEDGER_LAYOUT) for base in bases for _ in range(20)]
    accepted = 0
    for i in range(100_000):
        data, base, layout = seeds[i % len(seeds)]
        buf = mutate(rng, data)
        check_crc = i % 3 != 0
        pos = 0 if i % 4 else rng.randrange(len(buf) + 1)
        max_records = rng.choice([1, 2, 3, batches._BATCH_RECORDS])
        stop = None if i % 5 else rng.randrange(len(buf) + 1)
        if i % 2:
            # the pass that parses the properties too, on threads
            numpy_run = run_columns(batches._fast_batch(
                buf, pos, len(buf) if stop is None else stop, len(buf), base, check_crc,
                batches.TopicTable(), max_records, batches._BATCH_BYTES, layout=layout))
            assert_same_fused(buf, pos, base, check_crc, layout, max_records, stop, numpy_run,
                              threads=2 + i % 3 if i % 16 == 1 else 1,
                              reference=i % 8 == 1)
        else:
            numpy_run, native_run = both_runs(buf, pos, base, check_crc, layout, max_records,
                                              stop)
            assert native_run == numpy_run, (i, buf, pos, base, check_crc, layout, max_records,
                                             stop)
        accepted += numpy_run is not None
        if i % 200 == 0:
            assert_same_scan(buf, base, check_crc=check_crc, resync=bool(i % 400),
                             layout=layout, batch_records=max_records)
    assert accepted > 20_000      # the corpus reaches the decoding, not only the first checks


# --- the native entry points on absurd input ----------------------------------------------------

@needs_native
def test_native_entry_points_survive_absurd_ranges():
    rng = random.Random(7)
    big = [0, 1, -1, 2**31, -2**31, 2**62, -2**62, 2**63 - 1, -2**63]
    corpus = [b"", b"\0" * 7, rng.randbytes(300)]
    corpus += [mutate(rng, seed_segment(rng, layout, 0))
               for layout in (COMMITLOG_LAYOUT, DLEDGER_LAYOUT) for _ in range(30)]
    for i in range(20_000):
        data = corpus[i % len(corpus)]
        n = len(data)
        pick = lambda: rng.choice(big + [n, n + 1, n - 1, rng.randint(-5, n + 5)])  # noqa: E731
        args = (pick(), pick(), pick(), pick(), bool(i & 1), bool(i & 2), pick(), pick())
        fused = (FUSED_PATTERNS, rng.choice([None, 0, 4, 5, 99]), rng.choice([1, 2, 64, 999]),
                 rng.choice([0, 1, 2, 4096]),
                 rng.choice([None, (2, 1, 32), (0, 99, 0), (99, 4, 2)])) if i & 4 else ()
        run = native.core.scan_run(data, *args, *fused)
        if run is None:
            continue
        columns, topic_index, topics = run[:3]
        values = dict(zip(COLUMNS, columns))
        assert len(topic_index) == len(values["position"]) > 0
        assert all(0 <= p and p + t <= n for p, t in zip(values["position"].tolist(),
                                                          values["total_size"].tolist()))
        assert set(topic_index.tolist()) <= set(range(len(topics)))
    # the buffer kinds the scanner hands over: bytes, bytearray, memoryview, mmap
    data = seed_segment(random.Random(3), COMMITLOG_LAYOUT, 0)
    page = mmap.PAGESIZE
    with mmap.mmap(-1, page * ((len(data) + page - 1) // page)) as mapped:
        mapped[len(mapped) - len(data):] = data
        for buf in (data, bytearray(data), memoryview(data), mapped):
            native.core.scan_run(buf, 0, 2**63 - 1, 2**63 - 1, 0, True, False, 2**62, 2**62)
    with pytest.raises(TypeError):
        native.core.scan_run("not bytes", 0, 1, 1, 0, True, False, 1, 1)
    with pytest.raises(OverflowError):
        native.core.scan_run(data, 2**64, 1, 1, 0, True, False, 1, 1)


def test_numpy_path_is_used_without_the_extension(tmp_path):
    """MQTOOL_NATIVE=0 (as an install without a Rust toolchain) runs the numpy path: same
    verify report as the native one."""
    env = dict(os.environ, MQTOOL_NATIVE="0")
    store = FIXTURE_STORE / "store"
    with_numpy = run_mqtool("verify", "--json", store, env=env)
    default = run_mqtool("verify", "--json", store)
    assert with_numpy.returncode == default.returncode
    assert json.loads(with_numpy.stdout) == json.loads(default.stdout)


@needs_native
def test_native_java_hashes_equal_the_numpy_path_and_java():
    """String.hashCode of TAGS and of topic#key: the native core and the numpy path agree on
    which strings they hash exactly (well-formed 1- to 3-byte UTF-8) and on those hashes, which
    are Java's (codecs.java_hash_extend over the decoded text)."""
    rng = random.Random(11)
    alphabet = ["a", "Z", "0", "#", " ", "\u00e9", "\u4e2d", "\U0001d11e", "\x00"]
    strings = []
    for _ in range(6000):
        k = rng.choice([0, 1, 3, 10, 40, 255, 256, 257, 300])
        roll = rng.random()
        if roll < 0.6:
            strings.append("".join(rng.choice("abcXYZ_-#019") for _ in range(k)).encode())
        elif roll < 0.85:
            strings.append("".join(rng.choice(alphabet) for _ in range(min(k, 50))).encode())
        else:
            strings.append(rng.randbytes(min(k, 30)))
    lengths = np.array([len(s) for s in strings], dtype=np.int64)
    data = np.frombuffer(b"".join(strings), dtype=np.uint8)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    prefix = np.array([rng.randrange(1 << 32) for _ in strings], dtype=np.uint32)
    for pre in (None, prefix):
        expected, expected_exact = codec._java_hashes_numpy(data, starts, ends, pre)
        hashes, exact = native.core.java_hashes(data, starts, ends, pre)
        assert exact.tolist() == expected_exact.tolist()
        assert hashes[exact].tolist() == expected[exact].tolist()
        for i in np.flatnonzero(exact)[::7].tolist():
            java = codecs.java_hash_extend(0 if pre is None else int(pre[i]),
                                           strings[i].decode("utf-8"))
            assert int(hashes[i]) == java & 0xFFFFFFFF
    # ranges outside the data are refused, not read
    hashes, exact = native.core.java_hashes(data, np.array([-1, 5, len(data)], dtype=np.int64),
                                            np.array([3, 2, len(data) + 9], dtype=np.int64))
    assert exact.tolist() == [False, False, False]


@needs_native
def test_native_property_values_equal_the_numpy_path():
    """TAGS, KEYS, UNIQ_KEY and the other properties verify and the index rebuild read: the
    native split of a property blob gives the numpy path's spans, on real records and on
    property bytes made to be awkward (empty values, repeated names, random bytes)."""
    names = ("TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TRAN_MSG", "WAIT", "A", "INNER_NUM")
    patterns = [(name + "\x01").encode() for name in names]

    def same(blob, begins):
        expected = codec._property_values_numpy(blob, begins, names)
        got = dict(zip(names, native.core.property_values(blob, begins, patterns)))
        for name in names:
            assert [a.tolist() for a in got[name]] == [a.tolist() for a in expected[name]], name

    for path, base, layout in segment_files(FIXTURE_STORE / "store"):
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            for event in scan.scan_buffer_batches(buf, base, resync=True, layout=layout):
                if type(event) is scan.RecordBatch:
                    same(*codec.property_blob(*event.properties_source()))
    rng = random.Random(3)
    for _ in range(3000):
        props = [rng.choice([b"", b"TAGS\x01x\x02KEYS\x01a b\x02", b"TAGS\x01\x02TAGS\x01y",
                             rng.randbytes(rng.randint(0, 30)), b"A\x01\x01\x02A\x01z\x02",
                             b"UNIQ_KEY\x01" + rng.randbytes(5)])
                 for _ in range(rng.randint(1, 6))]
        lengths = np.array([len(p) for p in props], dtype=np.int64)
        ends = np.cumsum(lengths)
        same(*codec.property_blob(np.frombuffer(b"".join(props), dtype=np.uint8),
                                  ends - lengths, ends))
