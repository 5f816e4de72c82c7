"""IndexWriter's bulk path (build_index holding keys back, put_many) writes the same IndexFiles
as putting each key at once, on the key streams of real stores: hot keys shared by hundreds of
messages, keys repeated within one message, non-ASCII keys and topics, roll-over to new files,
and RepairIndexWriter continuing a kept file or rebuilding the ones after it."""
from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from conftest import FIXTURE_STORE, SHARED_STORES
from mqtool.formats import indexfile as idx_fmt
from mqtool.repair import RepairIndexWriter
from mqtool.scan import Scanner
from mqtool.store import Store
from mqtool.writer import IndexWriter

STORES = [FIXTURE_STORE] + [SHARED_STORES / name for name in
                            ("clean-multi", "v6-unicode-small", "crash-small", "v5-clean")]
IDS = ["fixture-clean-small", "clean-multi", "v6-unicode-small", "crash-small", "v5-clean"]
# (slots, entries): the stores' own, then small files that roll over every few records (and
# fill mid-record), then few slots so that chains of one slot run through most keys
GEOMETRIES = [None, (97, 60), (7, 3000)]
BATCHES = (1, 13, 4096)


def _records(ref: Path) -> list[tuple]:
    if not ref.is_dir():
        pytest.skip(f"{ref} is absent")
    return [(r.topic, r.offset, r.sys_flag, r.store_timestamp, r.properties)
            for r in Scanner(Store(ref / "store").commitlog, check_crc=False).messages()]


def _hot_and_repeated(records) -> list[tuple]:
    """The same records with a key every one of them carries and their first key again at the
    end of KEYS (the stores have hot keys in tens to hundreds of messages, and few messages
    repeating a key), and store times spread over hours, every 50th a minute behind (the
    stores were written within seconds: every timeDiff would be 0)."""
    out = []
    first = records[0][3]
    for n, (topic, offset, sys_flag, stamp, props) in enumerate(records):
        props = dict(props)
        keys = [k for k in props.get("KEYS", "").split(" ") if k]
        props["KEYS"] = " ".join(["hot", *keys, *keys[:1]])
        stamp = first + (stamp - first) * 5000 + n * 300 - (60_000 if n % 50 == 49 else 0)
        out.append((topic, offset, sys_flag, stamp, props))
    return out


STREAMS = {"as-stored": lambda records: records, "hot-and-repeated": _hot_and_repeated}


def _geometry(ref: Path, geometry) -> tuple[int, int]:
    if geometry is not None:
        return geometry
    g = json.loads((ref / "geometry.json").read_text())
    return g["maxHashSlotNum"], g["maxIndexNum"]


def _write(writer: IndexWriter, records) -> dict[str, bytes]:
    for rec in records:
        writer.build_index(*rec)
    writer.close()
    return {name: (writer.directory / name).read_bytes() for name in writer.files}


def _keys(records) -> list[list[str]]:
    out = []
    for _, _, _, _, props in records:
        keys = [props["UNIQ_KEY"]] if "UNIQ_KEY" in props else []
        keys += [k for k in props.get("KEYS", "").split(" ") if k]
        out.append(keys)
    return out


# clean-multi (the largest store, ~9,000 records) runs on its own geometry only: on the small
# ones its key-by-key reference alone took 90 s and the four other stores roll over as often
BULK_CASES = [pytest.param(ref, geometry, id=f"{ref_id}-{geometry_id}")
              for ref, ref_id in zip(STORES, IDS)
              for geometry, geometry_id in zip(GEOMETRIES, ("own", "97x60", "7x3000"))
              if ref_id != "clean-multi" or geometry is None]


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("ref,geometry", BULK_CASES)
def test_bulk_writes_the_same_files_as_key_by_key(ref, geometry, stream, tmp_path):
    records = STREAMS[stream](_records(ref))
    slots, entries = _geometry(ref, geometry)
    expected = _write(IndexWriter(tmp_path / "one", slots, entries), records)
    if geometry == (97, 60):
        assert len(expected) > 20
    for batch in BATCHES:
        got = _write(IndexWriter(tmp_path / f"bulk{batch}", slots, entries, batch=batch), records)
        assert list(got) == list(expected), batch
        for name in expected:
            assert got[name] == expected[name], (batch, name)


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("ref", STORES, ids=IDS)
def test_the_key_streams_hold_the_hard_cases(ref, stream):
    records = STREAMS[stream](_records(ref))
    keys = _keys(records)
    # the broker chains topic#key: a hot key is hot within a topic
    counts = collections.Counter((rec[0], k) for rec, ks in zip(records, keys) for k in ks)
    hot = counts.most_common(1)[0][1]
    repeated = sum(len(set(ks)) < len(ks) for ks in keys)
    if stream == "hot-and-repeated":
        assert hot >= 300 and repeated >= 300
    elif ref.name == "clean-multi":
        assert hot >= 100 and repeated >= 5
    if ref.name == "v6-unicode-small":
        assert any(not key.isascii() for _, key in counts)


def test_bulk_files_equal_the_brokers(tmp_path):
    """An independent check: the broker's own IndexFiles of the fixture store (the names differ:
    the broker names a file by its creation time in its zone)."""
    records = _records(FIXTURE_STORE)
    slots, entries = _geometry(FIXTURE_STORE, None)
    got = _write(IndexWriter(tmp_path / "bulk", slots, entries, batch=100), records)
    broker = sorted((FIXTURE_STORE / "store" / "index").iterdir())
    assert [p.read_bytes() for p in broker] == list(got.values())


def _split_record_boundary(files: dict[str, bytes], slots: int) -> int:
    """Index of a file whose last record's keys continue in the next file."""
    headers = [idx_fmt.index_header.parse(data[:idx_fmt.INDEX_HEADER_SIZE])
               for data in files.values()]
    for i in range(len(headers) - 1):
        if headers[i].end_phy_offset == headers[i + 1].begin_phy_offset:
            return i
    raise AssertionError("no record split over two files")


@pytest.mark.parametrize("ref", STORES, ids=IDS)
def test_repair_writer_rebuilds_files_after_a_kept_one(ref, tmp_path):
    """Files after a kept full one rebuilt under their names, the boundary record's keys that
    the kept file holds skipped: both ways give the files the uninterrupted writer wrote."""
    records = _records(ref)
    slots, entries = 97, 60
    whole = _write(IndexWriter(tmp_path / "whole", slots, entries), records)
    names = list(whole)
    i = _split_record_boundary(whole, slots)
    seed = tmp_path / "whole" / names[i]
    header = idx_fmt.index_header.parse(whole[names[i]][:idx_fmt.INDEX_HEADER_SIZE])
    boundary = header.end_phy_offset
    entries_parsed = idx_fmt.index_file(slots, entries).parse(whole[names[i]])["entries"]
    in_seed = sum(1 for e in entries_parsed[1:header.index_count] if e.phy_offset == boundary)
    assert in_seed >= 1
    for batch in (0, 1, 13, 4096):
        out = tmp_path / f"rebuilt{batch}"
        writer = RepairIndexWriter(out, slots, entries, kept=names[:i + 1],
                                   seed=(names[i], seed), reuse_names=names[i + 1:], batch=batch)
        writer.skip_first_keys(boundary, in_seed)
        for rec in records:
            if rec[1] >= boundary:
                writer.build_index(*rec)
        writer.finish()
        assert writer.files == names, batch
        assert writer.created == names[i + 1:], batch
        for name in names[i + 1:]:
            assert (out / name).read_bytes() == whole[name], (batch, name)


@pytest.mark.parametrize("damaged_slots", [False, True], ids=["intact", "damaged-slots"])
@pytest.mark.parametrize("ref", STORES, ids=IDS)
def test_repair_writer_continues_a_kept_file(ref, damaged_slots, tmp_path):
    """The last file kept and continued (it is copied and mapped): both ways the same bytes, equal
    to the uninterrupted writer's when the file is intact. With slots holding values putKey
    rejects (past the count, negative) the two ways still agree."""
    records = _records(ref)
    slots, entries = _geometry(ref, None)
    half = len(records) // 2
    first = _write(IndexWriter(tmp_path / "first", slots, entries), records[:half])
    whole = _write(IndexWriter(tmp_path / "whole", slots, entries), records)
    names = list(first)
    seed = tmp_path / "first" / names[-1]
    if damaged_slots:
        data = bytearray(seed.read_bytes())
        count = int.from_bytes(data[36:40], "big")
        for slot, value in ((0, count + 3), (1, -5), (2, 0x7FFFFFFF), (3, count), (5, 1)):
            pos = idx_fmt.slot_position(slot)
            data[pos:pos + 4] = value.to_bytes(4, "big", signed=True)
        seed.write_bytes(bytes(data))
    end = idx_fmt.index_header.parse(seed.read_bytes()[:idx_fmt.INDEX_HEADER_SIZE]).end_phy_offset
    results = []
    for batch in (0, 1, 13, 4096):
        out = tmp_path / f"continued{batch}"
        writer = RepairIndexWriter(out, slots, entries, kept=names, seed=(names[-1], seed),
                                   batch=batch)
        for rec in records:
            if rec[1] > end:
                writer.build_index(*rec)
        writer.finish()
        results.append({name: (out / name).read_bytes() for name in writer.files
                        if (out / name).exists()})
    assert all(r == results[0] for r in results)
    if not damaged_slots:
        assert list(whole)[:len(names)] == names
        for name, data in results[0].items():
            assert data == whole[name], name


def test_put_many_equals_put_hashed_across_files(tmp_path):
    """put_many given the keys of many records at once (roll-over inside the call, a hot key in
    most of them) against put_hashed one by one."""
    records = _records(FIXTURE_STORE)
    one = IndexWriter(tmp_path / "one", 13, 50)
    many = IndexWriter(tmp_path / "many", 13, 50)
    hashes, offsets, stamps = [], [], []
    for n, (topic, offset, _, stamp, props) in enumerate(records):
        # the last store times so far ahead that timeDiff clamps to Integer.MAX_VALUE (not
        # earlier ones: a later file is named after the last name, a millisecond at a time)
        stamp += (1 << 31) * 1000 + n if n >= len(records) - 40 else 0
        for key in ["hot", *_keys([(0, 0, 0, 0, props)])[0]]:
            h = one.key_hash(topic, key)
            one.put_hashed(h, offset, stamp)
            hashes.append(h)
            offsets.append(offset)
            stamps.append(stamp)
    many.put_many(hashes, offsets, stamps)
    one.close()
    many.close()
    assert one.files == many.files and len(one.files) > 100
    assert one.index_msg_timestamp == many.index_msg_timestamp
    for name in one.files:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes()
