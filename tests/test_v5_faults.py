"""5.x fault cases made with the forge: a flipped property byte, a torn V2 record."""
from __future__ import annotations

import gzip
import json
import struct

import pytest

from conftest import SHARED_STORES, sparse_copytree
from mqtool.formats import commitlog as cl_fmt
from mqtool.scan import Scanner
from mqtool.store import Store


@pytest.fixture
def v5_store(tmp_path, mqtool):
    root = tmp_path / "v5"
    proc = mqtool("fixture", "make", root, "-n", "1200", "--seed", "9", "--broker-version", "5",
                  "--long-topic", "--prop-crc")
    assert proc.returncode == 0, proc.stderr
    return root


def last_data_file(root) -> str:
    """5.3.2+ normal recovery starts at the last file the ConsumeQueues point into: damage in
    earlier files is not seen by the broker, so the cases aim at the last file with data."""
    last = max(r.offset for r in Scanner(Store(root).commitlog).messages())
    return f"commitlog/{last - last % (1 << 20):020d}"


def findings(mqtool, root, *extra):
    proc = mqtool("verify", "--json", *extra, root)
    return proc.returncode, json.loads(proc.stdout)


def test_flipped_property_byte_is_seen_by_the_property_crc_only(v5_store, mqtool):
    proc = mqtool("fixture", "damage", v5_store, "--kind", "bit-flip", "--target", "properties",
                  "--seed", "3", "--file", last_data_file(v5_store))
    assert proc.returncode == 0, proc.stderr
    damage = json.loads(proc.stdout)
    record = damage["records"][0]
    code, report = findings(mqtool, v5_store)
    assert code == 1
    prop = [f for f in report["findings"] if f["code"] == "CL_PROP_CRC_MISMATCH"]
    assert [(f["file"], f["offset"]) for f in prop] == [(record["file"], record["file_pos"])]
    assert not [f for f in report["findings"] if f["code"] == "CL_CRC_MISMATCH"]
    # the broker sees it only with forceVerifyPropCRC: then it truncates at that record
    assert report["recovery"]["process_offset"] != record["offset"]
    _, forced = findings(mqtool, v5_store, "--force-verify-prop-crc")
    assert forced["recovery"]["process_offset"] == record["offset"]


def test_torn_v2_record_ends_the_broker_scan_there(v5_store, mqtool):
    last_base = int(last_data_file(v5_store).split("/")[1])
    v2 = [r for r in Scanner(Store(v5_store).commitlog).messages()
          if r.magic_code == cl_fmt.MESSAGE_MAGIC_CODE_V2 and r.offset >= last_base]
    assert v2, "the forge wrote no V2 record"
    target = v2[len(v2) // 2]
    proc = mqtool("fixture", "damage", v5_store, "--kind", "torn-tail", "--offset", target.offset)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["records"][0]["offset"] == target.offset
    code, report = findings(mqtool, v5_store)
    assert code == 1
    at_target = [f for f in report["findings"] if f.get("commitlog_offset") == target.offset
                 or (f["file"].endswith(f"{target.offset - target.offset % (1 << 20):020d}")
                     and f["offset"] == target.offset % (1 << 20))]
    assert {f["code"] for f in at_target} & {"CL_CRC_MISMATCH", "CL_LENGTH_MISMATCH",
                                            "CL_PROP_CRC_MISMATCH"}
    assert report["recovery"]["process_offset"] == target.offset


@pytest.mark.parametrize("broker_version", [4, 5])
def test_empty_last_queue_file_is_deleted_by_5x_and_refused_by_4x(tmp_path, broker_version):
    """MappedFileQueue.doLoad from 5.1.3 deletes an empty last file of any queue; 4.9 refuses to
    start over its size."""
    from mqtool.forge import ForgeOptions, make_store
    from mqtool.recovery import predict_recovery
    from mqtool.repair import run_repair
    from mqtool.verify import verify_store
    root = tmp_path / "store"
    make_store(root, ForgeOptions(messages=300, seed=1, broker_version=broker_version))
    queue = root / "consumequeue" / "TopicTest" / "0"
    first = sorted(queue.iterdir())[-1]
    empty = queue / f"{int(first.name) + first.stat().st_size:020d}"
    empty.write_bytes(b"")
    rel = f"consumequeue/TopicTest/0/{empty.name}"
    plan = predict_recovery(Store(root), broker_version="auto")
    sized = [f for f in verify_store(Store(root)).findings if f.code == "CQ_FILE_SIZE"]
    assert [(f.file, f.severity) for f in sized] == [
        (rel, "warning" if broker_version == 5 else "error")]
    if broker_version == 5:
        assert plan.refuses_to_start == []
        assert any(rel in note and "deletes the empty last file" in note for note in plan.notes)
    else:
        assert plan.refuses_to_start == [f"{rel} is 0 bytes, not {first.stat().st_size}"]
    notes = run_repair("recover", root).plan.notes
    if broker_version == 5:
        assert f"{rel}: empty last file deleted, as 5.1.3+ does on load" in notes
    else:
        # padded so the broker can load it (then dropped as a file past the queue's end)
        assert any(note.startswith(f"{rel}: 0 bytes resized") for note in notes)
    assert not empty.exists()
    assert [f for f in verify_store(Store(root)).findings if f.severity == "error"] == []


# --- a damaged PHYSICALOFFSET in a broker-written crashed 5.3.3 store ----------------------------

_ENTRY = struct.Struct(">iqii")          # IndexFile entry: hash, phyOffset, timeDiff, prevIndex


def _index_entries(data: bytes, slots: int) -> list[tuple]:
    count = struct.unpack_from(">i", data, 36)[0]         # header: indexCount at 36
    start = 40 + 4 * slots
    return [_ENTRY.unpack_from(data, start + 20 * i) for i in range(1, count)]


def test_a_damaged_physical_offset_is_indexed_where_the_broker_indexes_it(tmp_path, mqtool):
    """One bit of a record's PHYSICALOFFSET flipped in a copy of v5-crash (a record the abnormal
    recovery dispatches again). The broker's dispatch request carries the offset the record
    states: its rebuilt IndexFile is the one the broker wrote for the undamaged store with that
    record's entries holding the stated offset, and its ConsumeQueue unit (already covered) is
    unchanged. verify names the damage; query finds the message where it is and says why the
    broker's queryMessage does not."""
    reference = SHARED_STORES / "v5-crash"
    if not (reference / "store").is_dir():
        pytest.skip(f"{reference} is absent")
    geometry = json.loads((reference / "geometry.json").read_text())
    with gzip.open(reference / "dump.json.gz", "rt", encoding="utf-8") as fh:
        messages = json.load(fh)["messages"]
    # a message with several keys in the part of the CommitLog the rebuilt IndexFile covers
    victim = next(m for m in messages if m["commitLogOffset"] >= 3_400_000
                  and " " in (m.get("keys") or ""))
    real = victim["commitLogOffset"]
    stated = real ^ 0x10
    store = sparse_copytree(reference / "store", tmp_path / "store")
    segment = store / "commitlog" / victim["file"]
    field = victim["filePos"] + 28                 # PHYSICALOFFSET: bytes 28-35 of a record
    data = bytearray(segment.read_bytes())
    assert int.from_bytes(data[field:field + 8], "big") == real
    data[field + 7] ^= 0x10
    segment.write_bytes(bytes(data))

    proc = mqtool("verify", "--json", store)
    assert proc.returncode == 1, proc.stderr
    mismatch = [(f["file"], f["offset"]) for f in json.loads(proc.stdout)["findings"]
                if f["code"] == "CL_OFFSET_MISMATCH"]
    assert mismatch == [(f"commitlog/{victim['file']}", victim["filePos"])]

    key = victim["keys"].split()[1]
    proc = mqtool("query", "--key", key, "--topic", victim["topic"], "--explain", "--json",
                  "--body", "none", store)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["commitlog_offset"] for r in lines if r["record_type"] == "commitlog/message"] \
        == [real]

    proc = mqtool("recover", store)
    assert proc.returncode in (0, 1), proc.stderr
    recovered = reference / "recovered"
    slots = geometry["maxHashSlotNum"]
    broker_files = sorted(p.name for p in (recovered / "index").iterdir())
    ours = sorted(p.name for p in (store / "index").iterdir() if p.is_file())
    assert len(ours) == len(broker_files)
    changed = 0
    for mine, theirs in zip(ours, broker_files):
        expected = bytearray((recovered / "index" / theirs).read_bytes())
        entries = _index_entries(expected, slots)
        for i, (key_hash, phy, diff, prev) in enumerate(entries, start=1):
            if phy == real:                      # the broker's rule: the stated offset
                _ENTRY.pack_into(expected, 40 + 4 * slots + 20 * i, key_hash, stated, diff,
                                 prev)
                changed += 1
        assert (store / "index" / mine).read_bytes() == bytes(expected), mine
    assert changed == 1 + len(victim["keys"].split())      # UNIQ_KEY and each key
    queue = f"consumequeue/{victim['topic']}/{victim['queueId']}"
    for unit_file in sorted((recovered / queue).iterdir()):
        assert (store / queue / unit_file.name).read_bytes() == unit_file.read_bytes()

    proc = mqtool("query", "--key", key, "--topic", victim["topic"], "--explain", "--json",
                  "--body", "none", store)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    found = [r for r in lines if r["record_type"] == "commitlog/message"]
    assert [(r["commitlog_offset"], r["found_by"]) for r in found] == \
        [(real, "index-stated-offset")]
    (explanation,) = [r for r in lines if r["record_type"] == "query/explanation"]
    assert not explanation["broker_finds_all"]
    assert [(r["reason"], r["offsets"]) for r in explanation["reasons"]] == \
        [("damaged-physical-offset", [real])]
    proc = mqtool("query", "--key", key, "--topic", victim["topic"], "--broker-compatible",
                  "--json", "--body", "none", store)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["commitlog_offset"] for r in lines if r["record_type"] == "query/unreadable"] \
        == [stated]
