"""The native joins of verify (and of the reput's index keys) against the numpy code they stand
in for, which stays the reference: the properties read straight from the CommitLog buffer
(``property_spans``), the keys buildIndex puts (``index_key_spans``), the join of record offsets
with ConsumeQueue units and index entries (``join_sorted``; ``join_groups`` for all queues of a
batch at once) and the IndexFile chain check's
usual answer (``index_chains_clean``). On every reference store, on forged IndexFile damage and
on random input: the same answers, and no crash on absurd input."""
from __future__ import annotations

import mmap
import os
import random
import shutil

import numpy as np
import pytest

from conftest import FIXTURE_STORE, reference_dirs
from mqtool import codec, scan
from mqtool.scan import native
from mqtool.store import Store
from mqtool.verify import batches as verify_batches
from mqtool.verify import index as verify_index
from mqtool.verify.findings import _Sink
from mqtool.verify.queues import _segment_ranges

needs_native = pytest.mark.skipif(native.core is None, reason=f"no native core ({native.reason})")
NAMES = ("TAGS", "KEYS", "UNIQ_KEY", "DELAY", "CLUSTER", "INNER_NUM", "A")
PATTERNS = [(name + "\x01").encode() for name in NAMES]
KEY_SEPARATOR = ord(" ")


def value_bytes(blob, spans) -> list:
    """Each record's value as bytes (None where absent): the blobs differ, the values may not."""
    data = np.asarray(blob, dtype=np.uint8)
    return [data[s:e].tobytes() if s >= 0 else None
            for s, e in zip(spans[0].tolist(), spans[1].tolist())]


def key_pieces(data, owner, starts, ends) -> list:
    data = np.asarray(data, dtype=np.uint8)
    return [(o, data[s:e].tobytes()) for o, s, e in zip(owner.tolist(), starts.tolist(),
                                                          ends.tolist())]


def assert_same_properties(buf, starts, ends):
    """property_spans and index_key_spans of the native core against the numpy path."""
    blob, begins = codec.property_blob(buf, starts, ends)
    expected = codec._property_values_numpy(blob, begins, NAMES)
    got_blob, got_begins, got_spans = native.core.property_spans(
        buf, np.ascontiguousarray(starts, dtype=np.int64),
        np.ascontiguousarray(ends, dtype=np.int64), PATTERNS)
    got = dict(zip(NAMES, got_spans))
    assert len(got_begins) == len(starts)
    for name in NAMES:
        assert value_bytes(got_blob, got[name]) == value_bytes(blob, expected[name]), name
    want_keys = codec._index_key_spans_numpy(blob, expected["UNIQ_KEY"], expected["KEYS"],
                                             KEY_SEPARATOR)
    got_keys = native.core.index_key_spans(got_blob, *got["UNIQ_KEY"], *got["KEYS"],
                                           KEY_SEPARATOR)
    assert key_pieces(got_blob, *got_keys) == key_pieces(blob, *want_keys)


def store_batches(root):
    for seg in Store(root).commitlog.segments:
        if seg.length == 0:
            continue
        with open(seg.path, "rb") as fh, \
                mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            for event in scan.scan_buffer_batches(buf, seg.base_offset, check_crc=False,
                                                  resync=True, layout=seg.layout):
                if type(event) is scan.RecordBatch:
                    yield buf, event


@needs_native
@pytest.mark.parametrize("ref", reference_dirs(), ids=lambda p: p.name)
def test_same_properties_and_index_keys_on_the_reference_stores(ref):
    if not (ref / "store").is_dir():
        pytest.skip(f"{ref} has no store/")
    seen = 0
    for buf, batch in store_batches(ref / "store"):
        assert_same_properties(*batch.properties_source())
        seen += len(batch)
    assert seen > 0


@needs_native
def test_same_properties_and_index_keys_on_awkward_bytes():
    rng = random.Random(25)
    pieces = [b"", b"TAGS\x01x\x02KEYS\x01a b\x02", b"TAGS\x01\x02TAGS\x01y", b"KEYS\x01  a  b ",
              b"A\x01\x01\x02A\x01z\x02", b"UNIQ_KEY\x01" + bytes(range(250, 256)),
              b"\x02\x02KEYS\x01 \x02", "KEYS\x01cl\u00e9 \u4e2d".encode(), b"CLUSTER\x01c"]
    for _ in range(3000):
        props = [rng.choice(pieces + [rng.randbytes(rng.randint(0, 40))])
                 for _ in range(rng.randint(1, 8))]
        gaps = [rng.randbytes(rng.randint(0, 3)) for _ in props]
        data, starts, ends = b"", [], []
        for gap, p in zip(gaps, props):
            data += gap
            starts.append(len(data))
            data += p
            ends.append(len(data))
        assert_same_properties(data, np.array(starts), np.array(ends))
    # absurd ranges: clamped to the buffer, never read outside it
    data = rng.randbytes(100)
    big = [-2**63, -1, 0, 50, 100, 101, 2**62, 2**63 - 1]
    for _ in range(2000):
        starts = np.array([rng.choice(big) for _ in range(4)], dtype=np.int64)
        ends = np.array([rng.choice(big) for _ in range(4)], dtype=np.int64)
        blob, begins, spans = native.core.property_spans(data, starts, ends, PATTERNS)
        assert len(blob) <= len(data) * 4 + 5
        native.core.index_key_spans(blob, *spans[2], *spans[1], KEY_SEPARATOR)
        native.core.index_key_spans(data, starts, ends, starts, ends, KEY_SEPARATOR)


@needs_native
def test_join_sorted_is_the_numpy_join():
    rng = random.Random(5)
    saved = native.core
    for _ in range(3000):
        records = np.unique(np.array([rng.randrange(60) for _ in range(rng.randint(1, 20))],
                                     dtype=np.int64))
        probes = np.sort(np.array([rng.randrange(-5, 70) for _ in range(rng.randint(0, 25))],
                                  dtype=np.int64))
        if rng.random() < 0.3:
            rng.shuffle(probes)     # an index's entries need not come sorted
        for first_only in (True, False):
            answers = []
            for core in (saved, None):
                native.core = core
                try:
                    j, hit, after = verify_batches._join_sorted(records, probes, first_only)
                finally:
                    native.core = saved
                answers.append((j[hit].tolist(), hit.tolist(), after[~hit].tolist()))
            assert answers[0] == answers[1], (records, probes, first_only)


@needs_native
def test_join_groups_is_the_numpy_join_of_each_group():
    """verify joins every queue of a batch at once (``join_groups``); numpy joins them one
    at a time: the same answers, duplicates and units between records included."""
    rng = random.Random(11)
    saved = native.core
    for _ in range(1500):
        records, rstarts, probes, pstarts = [], [0], [], [0]
        for _ in range(rng.randint(0, 6)):
            group = np.unique(np.array([rng.randrange(80) for _ in range(rng.randint(1, 12))],
                                       dtype=np.int64))
            units = sorted(rng.randrange(-3, 85) for _ in range(rng.randint(0, 14)))
            records.append(group)
            probes.append(np.array(units, dtype=np.int64))
            rstarts.append(rstarts[-1] + len(group))
            pstarts.append(pstarts[-1] + len(units))
        records = np.concatenate(records) if records else np.zeros(0, np.int64)
        probes = np.concatenate(probes) if probes else np.zeros(0, np.int64)
        rstarts, pstarts = np.array(rstarts, np.int64), np.array(pstarts, np.int64)
        for first_only in (True, False):
            answers = []
            for core in (saved, None):
                native.core = core
                try:
                    j, hit, after = verify_batches._join_groups(records, rstarts, probes,
                                                                pstarts, first_only)
                finally:
                    native.core = saved
                answers.append((j.tolist(), hit.tolist(), after.tolist()))
            assert answers[0] == answers[1], (records, rstarts, probes, pstarts, first_only)


@needs_native
def test_join_groups_refuses_bounds_outside_its_arrays():
    records = np.arange(5, dtype=np.int64)
    for rstarts, pstarts in (([0, 9], [0, 2]), ([3, 1], [0, 2]), ([0, 5], [0, 3]),
                             ([0, 5], [1, 2]), ([0, 5, 5], [0, 2]), ([], []), ([-1, 2], [0, 2])):
        with pytest.raises(ValueError):
            native.core.join_groups(records, np.array(rstarts, np.int64), records[:2],
                                    np.array(pstarts, np.int64), True)


# --- IndexFile chains -------------------------------------------------------------------------

def index_findings(root, use_native: bool) -> list:
    """_check_index_structure (its chain check included) of every IndexFile, on one path."""
    store = Store(root)
    starts, ends = _segment_ranges(list(store.commitlog.segments))
    out = []
    saved = native.core
    native.core = saved if use_native else None
    try:
        for info in store.index_files:
            sink, deferred, blind = _Sink(), [], []
            verify_index._check_index_structure(store, info, starts, ends,
                                                store.commitlog.min_offset, sink, deferred,
                                                blind)
            out.append(([f.to_dict() if hasattr(f, "to_dict") else repr(f)
                         for f in sink.findings + deferred], dict(sink.extra), blind))
    finally:
        native.core = saved
    return out


@needs_native
@pytest.mark.parametrize("ref", reference_dirs(), ids=lambda p: p.name)
def test_same_index_findings_on_the_reference_stores(ref):
    if not (ref / "store").is_dir():
        pytest.skip(f"{ref} has no store/")
    assert index_findings(ref / "store", True) == index_findings(ref / "store", False)


@needs_native
def test_the_chain_check_answers_clean_on_a_regular_index_file():
    store = Store(FIXTURE_STORE / "store")
    info = store.index_files[0]
    slots = store.index_slots
    header = np.frombuffer(open(info.path, "rb").read(40), verify_index.INDEX_HEADER_DTYPE, 1)[0]
    count = int(header["index_count"])
    with open(info.path, "rb") as fh:
        slot_values = np.frombuffer(fh.read(40 + 4 * slots)[40:], ">i4").astype(np.int32)
    start = verify_index.idx_fmt.entry_position(slots, 0)
    assert native.core.index_chains_clean(str(info.path), start, count, slot_values, count, slots)
    # entries past the file, a hostile count: refused, not allocated or read
    assert not native.core.index_chains_clean(str(info.path), start, 2**62, slot_values, count,
                                              slots)
    assert not native.core.index_chains_clean(str(info.path), 2**63, 5, slot_values, count, slots)
    assert not native.core.index_chains_clean("/nonexistent/index", start, 5, slot_values, count,
                                              slots)
    assert not native.core.index_chains_clean(str(info.path), start, count, slot_values, count, 0)


@needs_native
def test_same_index_findings_on_forged_index_damage(tmp_path):
    """Bytes of an IndexFile's slots and entries mutated (links, hashes, timeDiffs, slot heads):
    the native answer never hides a finding the reference makes."""
    source = FIXTURE_STORE / "store"
    store = Store(source)
    slots = store.index_slots
    index_path = store.index_files[0].path
    size = os.path.getsize(index_path)
    header = np.frombuffer(open(index_path, "rb").read(40), verify_index.INDEX_HEADER_DTYPE, 1)[0]
    count = int(header["index_count"])
    entries_start = verify_index.idx_fmt.entry_position(slots, 0)
    entries_end = min(size, entries_start + 20 * count)
    used_slots = np.flatnonzero(np.frombuffer(open(index_path, "rb").read(40 + 4 * slots)[40:],
                                              ">i4"))
    root = tmp_path / "store"
    shutil.copytree(source, root)
    target = root / index_path.relative_to(source)
    original = target.read_bytes()
    rng = random.Random(9)
    clean = index_findings(source, False)
    differed = 0
    for i in range(120):
        data = bytearray(original)
        for _ in range(rng.randint(1, 3)):
            roll = rng.random()
            if roll < 0.25 and len(used_slots):     # a slot head
                at = 40 + 4 * int(rng.choice(used_slots.tolist()))
                data[at:at + 4] = rng.choice([0, 1, count - 1, count, count + 5, -1, 2**31 - 1]
                                             ).to_bytes(4, "big", signed=True)
            else:                                   # a field of an entry
                entry = rng.randrange(1, max(2, count))
                field = rng.choice([(0, 4), (12, 4), (16, 4)])
                at = entries_start + 20 * entry + field[0]
                if at + 4 > entries_end:
                    continue
                if rng.random() < 0.5:
                    data[at + rng.randrange(4)] ^= 1 << rng.randrange(8)
                else:
                    data[at:at + 4] = rng.choice([0, -1, 1, entry, entry + 1, count, -2**31]
                                                 ).to_bytes(4, "big", signed=True)
        target.write_bytes(bytes(data))
        native_findings = index_findings(root, True)
        reference = index_findings(root, False)
        assert native_findings == reference, i
        differed += reference != clean
    assert differed > 80       # the mutations reach the chain check's findings
