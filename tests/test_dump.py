"""`mqtool dump` of single files, filters, body modes and bad input, checked against the broker.

Ground truth is the broker-written fixture store and its dump.json.gz / recover.json.gz; stores
with LZ4/ZSTD bodies are written with mqtool's broker-exact writer (the reference stores only
hold zlib bodies).
"""
from __future__ import annotations

import ast
import base64
import gzip
import hashlib
import json
import os
import shutil
import stat
import struct
import zlib
from pathlib import Path

import pytest

from conftest import FIXTURE_STORE
from mqtool.formats import codecs
from mqtool.formats import commitlog as cl_fmt
from mqtool.inspect import DumpOptions, MessageFilter, dump_path, iter_index_file, parse_time
from mqtool.writer import Message, StoreWriter

REPO = Path(__file__).resolve().parent.parent
DUMP = FIXTURE_STORE / "dump.json.gz"
RECOVER = FIXTURE_STORE / "recover.json.gz"
INDEX_SLOTS = 1000  # geometry.json of the reference stores


@pytest.fixture(scope="module")
def broker_dump():
    with gzip.open(DUMP, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def broker_recover():
    with gzip.open(RECOVER, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _lines(proc) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _messages(records) -> list[dict]:
    return [r for r in records if r["record_type"] == "commitlog/message"]


def _one_line_error(proc, code: int = 2) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("mqtool: error: "), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


# --- ConsumeQueue --------------------------------------------------------------------------------

def test_every_cq_file_matches_the_broker_units(fixture_store, broker_recover):
    checked = 0
    for topic, queues in broker_recover["consumeQueues"].items():
        for qid, expected in queues.items():
            path = fixture_store / "consumequeue" / topic / qid / "00000000000000000000"
            if not path.exists():  # the broker lists the empty delay-level queues too
                assert expected["units"] == [] and expected["maxOffset"] == 0
                continue
            checked += 1
            records = list(dump_path(path))
            units = [r for r in records if r["record_type"] == "consumequeue/unit"]
            assert [[u["queue_offset"], u["commitlog_offset"], u["size"], u["tags_code"]]
                    for u in units] == expected["units"], (topic, qid)
            assert all(u["status"] == "valid" and u["topic"] == topic
                       and u["queue_id"] == int(qid) for u in units)
            end = records[-1]
            assert end["record_type"] == "consumequeue/end"
            assert end["queue_offset"] == expected["maxOffset"] == len(units)
            assert end["file_offset"] == 20 * len(units)
            assert end["units_after_end"] == 300 - len(units) - 1
            assert end["nonzero_units_after_end"] == 0
    assert checked == len(list((fixture_store / "consumequeue").glob("*/*/0*"))) == 27


def test_cq_dump_through_the_cli_flags_pre_blank_units(tmp_path, fixture_store, broker_recover,
                                                       mqtool):
    # a queue recreated at queue offset 1000 starts with pre-blank units (0, 0x7FFFFFFF, 0),
    # the way the broker's fillPreBlank writes them: file 00000000000000018000 of a 300-unit
    # geometry holds queue offsets 900..1199
    root = tmp_path / "store"
    writer = StoreWriter(root, commitlog_file_size=1 << 20, cq_units_per_file=300,
                         index_slots=100, index_entries=400)
    msg = Message("T", 0, b"x", {"TAGS": "a"}, store_timestamp=1_700_000_000_000,
                  queue_offset=1000)
    offset, size, _ = writer.put(msg)
    writer.close()
    cq_file = root / "consumequeue" / "T" / "0" / "00000000000000018000"
    records = _lines(mqtool("dump", cq_file, "--json"))
    units = [r for r in records if r["record_type"] == "consumequeue/unit"]
    assert [u["status"] for u in units] == ["pre_blank"] * 100 + ["valid"]
    assert units[0]["queue_offset"] == 900 and units[0]["size"] == 0x7FFFFFFF
    assert (units[-1]["queue_offset"], units[-1]["commitlog_offset"], units[-1]["size"]) == (
        1000, offset, size)
    assert records[-1]["record_type"] == "consumequeue/end"

    real = fixture_store / "consumequeue" / "TopicTest" / "0" / "00000000000000000000"
    table = mqtool("dump", real)
    assert table.returncode == 0
    assert "q-offset" in table.stdout and "end of written units" in table.stdout
    first = broker_recover["consumeQueues"]["TopicTest"]["0"]["units"][0]
    assert str(first[1]) in table.stdout

    queue_dir = mqtool("dump", real.parent, "--json")
    assert [r for r in _lines(queue_dir) if r["record_type"] == "consumequeue/unit"] == [
        r for r in _lines(mqtool("dump", real, "--json"))
        if r["record_type"] == "consumequeue/unit"]


def test_batch_consume_queue_file(tmp_path, mqtool):
    """46-byte units (5.x BatchConsumeQueue), built here from the declaration; the reference
    stores have none."""
    from mqtool.formats.consumequeue import batch_consumequeue_unit
    units = [dict(commitlog_offset=0, size=300, tags_code=7, store_timestamp=1_700_000_000_000,
                  msg_base_offset=0, batch_size=1, compacted_offset=-1, reserved=0),
             dict(commitlog_offset=300, size=900, tags_code=-5, store_timestamp=1_700_000_000_001,
                  msg_base_offset=1, batch_size=4, compacted_offset=-1, reserved=0),
             dict(commitlog_offset=-1, size=10, tags_code=0, store_timestamp=0,
                  msg_base_offset=5, batch_size=1, compacted_offset=-1, reserved=0)]
    root = tmp_path / "store"
    path = root / "batchconsumequeue" / "BatchTopic" / "3" / "00000000000000000000"
    path.parent.mkdir(parents=True)
    data = b"".join(batch_consumequeue_unit.build(u) for u in units)
    path.write_bytes(data + b"\0" * 46 * 7)
    (root / "checkpoint").write_bytes(b"\0" * 4096)

    records = _lines(mqtool("dump", path, "--json"))
    got = [r for r in records if r["record_type"] == "batchconsumequeue/unit"]
    assert [{k: r[k] for k in units[0]} for r in got] == units
    assert [r["status"] for r in got] == ["valid", "valid", "invalid"]
    assert [r["unit_index"] for r in got] == [0, 1, 2]
    assert all((r["topic"], r["queue_id"]) == ("BatchTopic", 3) for r in got)
    assert records[-1] == {"record_type": "batchconsumequeue/end", "file": path.name,
                           "topic": "BatchTopic", "queue_id": 3, "file_offset": 138,
                           "unit_index": 3, "units_after_end": 6, "nonzero_units_after_end": 0}
    table = mqtool("dump", path)
    assert table.returncode == 0 and "base offset" in table.stdout and "invalid" in table.stdout

    info = json.loads(mqtool("info", root, "--json").stdout)
    (summary,) = info["batch_consume_queues"]
    assert (summary["topic"], summary["queue_id"], summary["units"], summary["invalid_units"],
            summary["min_offset"], summary["max_offset"]) == ("BatchTopic", 3, 2, 1, 0, 5)


@pytest.mark.parametrize("kind, unit_size", [("consumequeue", 20), ("batchconsumequeue", 46)])
def test_queue_file_with_a_partial_last_unit(tmp_path, fixture_store, mqtool, kind, unit_size):
    # bytes past the last whole unit (a file cut mid-unit) come as one partial-unit record after
    # the units: 2 whole units and 7 bytes, the units taken from the broker-written CQ file or
    # built from the BatchConsumeQueue declaration
    from mqtool.formats.consumequeue import batch_consumequeue_unit
    real = fixture_store / "consumequeue" / "TopicTest" / "0" / "00000000000000000000"
    whole = real.read_bytes()[:2 * 20] if kind == "consumequeue" else b"".join(
        batch_consumequeue_unit.build(dict(commitlog_offset=300 * i, size=300, tags_code=7,
                                           store_timestamp=1_700_000_000_000, msg_base_offset=i,
                                           batch_size=1, compacted_offset=-1, reserved=0))
        for i in range(2))
    path = tmp_path / "store" / kind / "TopicTest" / "0" / "00000000000000000000"
    path.parent.mkdir(parents=True)
    path.write_bytes(whole + b"\x01" * 7)
    records = _lines(mqtool("dump", path, "--json"))
    assert records[-1] == {"record_type": f"{kind}/partial-unit", "file": path.name,
                           "topic": "TopicTest", "queue_id": 0, "file_offset": 2 * unit_size,
                           "length": 7,
                           "detail": f"file size {2 * unit_size + 7} is not a multiple of "
                                     f"{unit_size}; the last 7 bytes are not a whole unit"}
    assert [r["record_type"] for r in records[:-1]] == [f"{kind}/unit"] * 2


# --- IndexFile -----------------------------------------------------------------------------------

def _index_keys(message: dict) -> set[int]:
    keys = [message["uniqKey"]] if message["uniqKey"] else []
    keys += [k for k in (message["keys"] or "").split(" ") if k]
    return {codecs.index_key_hash(codecs.index_key(message["topic"], k)) for k in keys}


def test_index_dump_header_slots_and_entries(fixture_store, broker_dump, broker_recover, mqtool):
    running = broker_recover["runningIndexFiles"]
    by_offset = {m["commitLogOffset"]: m for m in broker_dump["messages"]}
    total_entries = 0
    for name, header in running.items():
        records = _lines(mqtool("dump", fixture_store / "index" / name, "--json"))
        ours = records[0]
        assert ours["record_type"] == "index/header"
        for broker_key, our_key in (("fileSize", "file_size"),
                                    ("beginTimestamp", "begin_timestamp"),
                                    ("endTimestamp", "end_timestamp"),
                                    ("beginPhyOffset", "begin_phy_offset"),
                                    ("endPhyOffset", "end_phy_offset"),
                                    ("hashSlotCount", "hash_slot_count"),
                                    ("indexCount", "index_count")):
            assert ours[our_key] == header[broker_key], broker_key
        assert (ours["slot_count"], ours["entry_count"], ours["size_ok"]) == (1000, 4000, True)
        slots = [r for r in records if r["record_type"] == "index/slot"]
        entries = [r for r in records if r["record_type"] == "index/entry"]
        assert len(slots) == header["hashSlotCount"]  # every used slot was counted once
        assert all(s["valid"] for s in slots)
        assert [e["number"] for e in entries] == list(range(1, header["indexCount"]))
        for entry in entries:
            message = by_offset[entry["phy_offset"]]
            assert entry["key_hash"] in _index_keys(message)
            assert entry["slot"] == entry["key_hash"] % INDEX_SLOTS
            assert 0 <= entry["prev_index"] < entry["number"]
        # the head of each slot is the newest entry of that slot
        newest = {}
        for entry in entries:
            newest[entry["slot"]] = entry["number"]
        assert {s["slot"]: s["entry"] for s in slots} == newest
        total_entries += len(entries)
    # one entry per UNIQ_KEY and per KEYS item (repeats included); ROLLBACK is not indexed
    expected = sum((1 if m["uniqKey"] else 0) + len([k for k in (m["keys"] or "").split(" ") if k])
                   for m in broker_dump["messages"] if m["sysFlag"] & 0xC != 0xC)
    assert total_entries == expected


def test_follow_slot_reproduces_the_broker_query(fixture_store, broker_recover, mqtool):
    index_files = sorted((fixture_store / "index").iterdir())
    queries = [q for q in broker_recover["queryMessage"] if 0 < len(q["offsets"]) < 64]
    assert len(queries) > 100
    for query in queries[::10]:
        key_hash = codecs.index_key_hash(codecs.index_key(query["topic"], query["key"]))
        found = []
        for path in index_files:
            chain = list(iter_index_file(path, follow_slot=key_hash % INDEX_SLOTS))
            entries = [r for r in chain if r["record_type"] == "index/entry"]
            assert [e["chain_position"] for e in entries] == list(range(len(entries)))
            assert all(e["slot"] == key_hash % INDEX_SLOTS for e in entries)
            found += [e["phy_offset"] for e in entries if e["key_hash"] == key_hash]
        assert sorted(found) == query["offsets"], query

    # the CLI on one real chain: newest first, each entry's prev is the next one shown
    query = queries[0]
    slot = codecs.index_key_hash(codecs.index_key(query["topic"], query["key"])) % INDEX_SLOTS
    records = _lines(mqtool("dump", index_files[0], "--follow-slot", slot, "--json"))
    assert records[0]["record_type"] == "index/header"
    assert (records[1]["record_type"], records[1]["slot"]) == ("index/slot", slot)
    entries = [r for r in records if r["record_type"] == "index/entry"]
    assert entries[0]["number"] == records[1]["entry"]
    for newer, older in zip(entries, entries[1:]):
        assert newer["prev_index"] == older["number"]
    assert entries[-1]["prev_index"] == 0
    assert not [r for r in records if r["record_type"] == "index/note"]
    table = mqtool("dump", index_files[0], "--follow-slot", slot)
    assert table.returncode == 0 and str(entries[0]["phy_offset"]) in table.stdout


def _patch(path: Path, position: int, value: int) -> None:
    data = bytearray(path.read_bytes())
    data[position:position + 4] = struct.pack(">i", value)
    path.write_bytes(bytes(data))


def test_follow_slot_stops_on_loops_and_bad_pointers(tmp_path, fixture_store, mqtool):
    source = sorted((fixture_store / "index").iterdir())[0]
    chain = [r for r in iter_index_file(source, follow_slot=5) if r["record_type"] == "index/entry"]
    assert len(chain) >= 3
    entries_start = 40 + 4 * INDEX_SLOTS

    def entry_prev_position(number: int) -> int:
        return entries_start + 20 * number + 16

    looped = tmp_path / source.name
    shutil.copyfile(source, looped)
    _patch(looped, entry_prev_position(chain[-1]["number"]), chain[0]["number"])
    records = _lines(mqtool("dump", looped, "--follow-slot", "5", "--json"))
    walked = [r["number"] for r in records if r["record_type"] == "index/entry"]
    assert walked == [e["number"] for e in chain]
    assert "loop" in records[-1]["note"] and records[-1]["entry"] == chain[0]["number"]

    past = tmp_path / "past" / source.name
    past.parent.mkdir()
    shutil.copyfile(source, past)
    _patch(past, entry_prev_position(chain[1]["number"]), 4000 + 17)
    records = _lines(mqtool("dump", past, "--follow-slot", "5", "--json"))
    assert [r["number"] for r in records if r["record_type"] == "index/entry"] == [
        chain[0]["number"], chain[1]["number"]]
    assert "past indexCount" in records[-1]["note"]

    _patch(past, 40 + 4 * 5, 123456)  # the slot itself points nowhere
    records = _lines(mqtool("dump", past, "--follow-slot", "5", "--json"))
    assert records[1]["valid"] is False
    assert records[-1]["record_type"] == "index/note"

    out_of_range = mqtool("dump", source, "--follow-slot", "1000")
    _one_line_error(out_of_range)
    not_index = mqtool("dump", fixture_store / "checkpoint", "--follow-slot", "1")
    _one_line_error(not_index)


# --- message filters -----------------------------------------------------------------------------

def _dump_messages(mqtool, store, *args) -> list[dict]:
    return _messages(_lines(mqtool("dump", store, "--json", "--body", "none", *args)))


def _library_messages(store, **criteria) -> list[dict]:
    return _messages(dump_path(store, DumpOptions(body="none",
                                                  filters=MessageFilter(**criteria))))


def _offsets(messages) -> list[int]:
    return [m.get("commitlog_offset", m.get("fileBasedOffset")) for m in messages]


def test_filters_select_what_the_broker_dump_says(fixture_store, broker_dump, mqtool):
    msgs = broker_dump["messages"]

    got = _dump_messages(mqtool, fixture_store, "--topic", "OrderTopic", "--queue", "2")
    assert _offsets(got) == _offsets([m for m in msgs
                                      if m["topic"] == "OrderTopic" and m["queueId"] == 2])

    start, stop = msgs[700]["commitLogOffset"], msgs[800]["commitLogOffset"]
    records = _lines(mqtool("dump", fixture_store, "--json", "--body", "none",
                            "--from", start, "--to", stop))
    assert _offsets(_messages(records)) == _offsets(msgs[700:800])
    # the file boundary inside the range shows up as the blank record that closes file 0
    blanks = [r for r in records if r["record_type"] == "commitlog/blank"]
    assert [b["file_offset"] for b in blanks] == [1047261]
    # a start inside a record skips that record
    got = _library_messages(fixture_store, from_offset=start + 1, to_offset=stop)
    assert _offsets(got) == _offsets(msgs[701:800])

    since, until = msgs[500]["storeTimestamp"], msgs[900]["storeTimestamp"]
    expected = _offsets([m for m in msgs if since <= m["storeTimestamp"] <= until])
    iso_since = "2026-11-22T00:51:" + f"{(since // 1000) % 60:02d}.{since % 1000:03d}Z"
    assert parse_time(iso_since) == since
    assert _offsets(_dump_messages(mqtool, fixture_store, "--since", iso_since,
                                   "--until", until)) == expected
    spaced = "2026-11-22 00:51:" + f"{(since // 1000) % 60:02d}.{since % 1000:03d}"
    assert _offsets(_library_messages(fixture_store, since=parse_time(spaced),
                                      until=until)) == expected

    got = _dump_messages(mqtool, fixture_store, "--key", "hotkey-0")
    assert _offsets(got) == _offsets([m for m in msgs
                                      if "hotkey-0" in (m["keys"] or "").split(" ")])
    assert len(got) > 10

    uniq = msgs[1234]["uniqKey"]
    got = _dump_messages(mqtool, fixture_store, "--uniq-key", uniq)
    assert _offsets(got) == _offsets([m for m in msgs if m["uniqKey"] == uniq])

    got = _library_messages(fixture_store, topic="TopicTest", key="hotkey-1",
                            since=msgs[1000]["storeTimestamp"])
    assert _offsets(got) == _offsets([
        m for m in msgs if m["topic"] == "TopicTest" and "hotkey-1" in (m["keys"] or "").split()
        and m["storeTimestamp"] >= msgs[1000]["storeTimestamp"]])

    records = _lines(mqtool("dump", fixture_store, "--json", "--topic", "TopicTest"))
    assert all(r["record_type"] == "commitlog/message" for r in records)
    limited = _lines(mqtool("dump", fixture_store, "--json", "--limit", "3"))
    assert len(limited) == 3

    _one_line_error(mqtool("dump", fixture_store, "--since", "yesterday-ish"))


def test_time_parsing_forms():
    assert parse_time("1795308685774") == 1795308685774
    assert parse_time("2026-11-21T10:00:00Z") == parse_time("2026-11-21 10:00:00") \
        == parse_time("2026-11-21T12:00:00+02:00") == 1795255200000


# --- bodies --------------------------------------------------------------------------------------

def test_body_modes_and_truncation(fixture_store, broker_dump, mqtool):
    msgs = broker_dump["messages"]
    stored = [base64.b64decode(m["body"]) for m in msgs]
    plain = [i for i, m in enumerate(msgs) if not m["sysFlag"] & 1]

    hexed = _messages(_lines(mqtool("dump", fixture_store, "--json", "--body", "hex")))
    for i in plain:
        assert hexed[i]["body_encoding"] == "hex" and bytes.fromhex(hexed[i]["body"]) == stored[i]

    texts = _messages(_lines(mqtool("dump", fixture_store, "--json", "--body", "text")))
    for i in plain:
        try:
            expected = stored[i].decode("utf-8")
        except UnicodeDecodeError:
            assert texts[i]["body_encoding"] == "base64"
            assert base64.b64decode(texts[i]["body"]) == stored[i]
        else:
            assert texts[i]["body_encoding"] == "text" and texts[i]["body"] == expected

    none = _messages(_lines(mqtool("dump", fixture_store, "--json", "--body", "none")))
    assert all(m["body"] is None and m["body_encoding"] == "none" for m in none)
    assert [m["body_stored_length"] for m in none] == [m["bodyLength"] for m in msgs]

    cut = _messages(_lines(mqtool("dump", fixture_store, "--json", "--max-body-bytes", "16",
                                  "--no-decompress")))
    for got, expected in zip(cut, stored):
        assert base64.b64decode(got["body"]) == expected[:16]
        assert got["body_truncated"] == (len(expected) > 16)
    _one_line_error(mqtool("dump", fixture_store, "--body", "rot13"))


def test_zlib_bodies_are_inflated_by_default(fixture_store, broker_dump, mqtool):
    msgs = broker_dump["messages"]
    compressed = [i for i, m in enumerate(msgs) if m["sysFlag"] & 1]
    assert len(compressed) == 36
    ours = _messages(_lines(mqtool("dump", fixture_store, "--json")))
    for i in compressed:
        inflated = zlib.decompress(base64.b64decode(msgs[i]["body"]))
        got = ours[i]
        assert base64.b64decode(got["body"]) == inflated
        assert got["body_compression"] == "zlib" and got["body_decompressed"] is True
        assert got["body_stored_length"] == msgs[i]["bodyLength"] == got["body_length"]
        assert got["body_decompress_error"] is None
    for i in set(range(len(msgs))) - set(compressed):
        assert ours[i]["body_compression"] is None and ours[i]["body_decompressed"] is False

    head = _messages(_lines(mqtool("dump", fixture_store, "--json", "--max-body-bytes", "10")))
    for i in compressed:
        inflated = zlib.decompress(base64.b64decode(msgs[i]["body"]))
        assert base64.b64decode(head[i]["body"]) == inflated[:10]
        assert head[i]["body_truncated"] is True


def _compressed_store(root: Path) -> list[bytes]:
    """A store with an LZ4-frame, a ZSTD and a broken zlib body; returns the plain bodies."""
    import lz4.frame
    import zstandard
    plain = [("lz4 body " * 50).encode(), ("zstd body " * 50).encode(), b"not zlib at all"]
    writer = StoreWriter(root, commitlog_file_size=1 << 20, cq_units_per_file=300,
                         index_slots=100, index_entries=400)
    stored = [lz4.frame.compress(plain[0]), zstandard.ZstdCompressor().compress(plain[1]),
              plain[2]]
    flags = [cl_fmt.COMPRESSED_FLAG | (cl_fmt.COMPRESSION_LZ4 << 8),
             cl_fmt.COMPRESSED_FLAG | (cl_fmt.COMPRESSION_ZSTD << 8),
             cl_fmt.COMPRESSED_FLAG | (cl_fmt.COMPRESSION_ZLIB << 8)]
    for i, (body, flag) in enumerate(zip(stored, flags)):
        writer.put(Message("T", 0, body, {"TAGS": "t", "UNIQ_KEY": f"{i:032X}"}, sys_flag=flag,
                           store_timestamp=1_700_000_000_000 + i))
    writer.close()
    return plain


def test_lz4_and_zstd_bodies(tmp_path, mqtool):
    root = tmp_path / "store"
    plain = _compressed_store(root)
    got = _messages(_lines(mqtool("dump", root, "--json")))
    assert [m["body_compression"] for m in got] == ["lz4", "zstd", "zlib"]
    assert base64.b64decode(got[0]["body"]) == plain[0]
    assert base64.b64decode(got[1]["body"]) == plain[1]
    assert got[0]["body_decompressed"] and got[1]["body_decompressed"]
    # a body that does not inflate is kept as stored, and the record says why
    assert base64.b64decode(got[2]["body"]) == plain[2]
    assert got[2]["body_decompressed"] is False
    assert got[2]["body_decompress_error"].startswith("zlib")
    assert all(m["body_crc_ok"] for m in got)

    # without the optional packages the stored bytes stay, with the reason
    blocker = tmp_path / "blocked"
    blocker.mkdir()
    for name in ("lz4", "zstandard"):
        (blocker / f"{name}.py").write_text("raise ImportError('not installed (test)')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(blocker)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    blocked = _messages(_lines(mqtool("dump", root, "--json", env=env)))
    for record, error in zip(blocked[:2], ("lz4", "zstandard")):
        assert record["body_decompressed"] is False
        assert f"'{error}' package is not installed" in record["body_decompress_error"]
        assert record["body_stored_length"] == record["body_length"]
    assert base64.b64decode(blocked[0]["body"]) != plain[0]


# --- checkpoint, abort, lock, config -------------------------------------------------------------

def test_checkpoint_abort_lock_dump(fixture_store, broker_dump, tmp_path, mqtool):
    ckpt = broker_dump["fileState"]["checkpoint"]
    (record,) = _lines(mqtool("dump", fixture_store / "checkpoint", "--json"))
    assert record["record_type"] == "checkpoint"
    assert record["physic_msg_timestamp"] == ckpt["physicMsgTimestamp"]
    assert record["logics_msg_timestamp"] == ckpt["logicsMsgTimestamp"]
    assert record["index_msg_timestamp"] == ckpt["indexMsgTimestamp"]
    assert record["physic_msg_time"] == "2026-11-22T00:51:26.171Z"
    assert record["min_timestamp"] == min(ckpt["physicMsgTimestamp"],
                                          ckpt["logicsMsgTimestamp"]) - 3000
    table = mqtool("dump", fixture_store / "checkpoint")
    assert table.returncode == 0
    assert "1795308686171" in table.stdout and "2026-11-22 00:51:26.171" in table.stdout

    (lock,) = _lines(mqtool("dump", fixture_store / "lock", "--json"))
    assert lock == {"record_type": "lock", "file": "lock", "file_size": 4, "content": "lock",
                    "held": False}
    abort = tmp_path / "abort"
    abort.write_text("31337")
    (record,) = _lines(mqtool("dump", abort, "--json"))
    assert (record["record_type"], record["pid"], record["content"]) == ("abort", 31337, "31337")
    empty_abort = tmp_path / "x" / "abort"
    empty_abort.parent.mkdir()
    empty_abort.write_bytes(b"")
    (record,) = _lines(mqtool("dump", empty_abort, "--json"))
    assert record["pid"] is None and record["content"] == ""


def test_v5_checkpoint_fields(shared_stores, mqtool):
    ref = shared_stores / "v5-clean"
    with gzip.open(ref / "dump.json.gz", "rt", encoding="utf-8") as fh:
        ckpt = json.load(fh)["fileState"]["checkpoint"]
    (record,) = _lines(mqtool("dump", ref / "store" / "checkpoint", "--json"))
    raw = bytes.fromhex(ckpt["rawHex0to40"])
    assert [record[k] for k in ("physic_msg_timestamp", "logics_msg_timestamp",
                                "index_msg_timestamp", "master_flushed_offset",
                                "confirm_phy_offset")] == list(struct.unpack(">5q", raw))
    assert record["master_flushed_offset"] == ckpt["masterFlushedOffset"]
    assert record["confirm_phy_offset"] == ckpt["confirmPhyOffset"]


# --- damage and resync ---------------------------------------------------------------------------

def test_corrupt_region_ends_the_file_unless_resync(store_copy, broker_dump, mqtool):
    msgs = broker_dump["messages"]
    victim = msgs[300]
    segment = store_copy / "commitlog" / victim["file"]
    os.chmod(segment, 0o644)
    data = bytearray(segment.read_bytes())
    data[victim["filePos"] + 4:victim["filePos"] + 8] = b"\0\0\0\1"  # not a magic code
    segment.write_bytes(bytes(data))
    first_file = [m for m in msgs if m["file"] == victim["file"]]

    proc = mqtool("dump", store_copy, "--json", "--body", "none")
    records = _lines(proc)
    corrupt = [r for r in records if r["record_type"] == "commitlog/corrupt"]
    assert len(corrupt) == 1 and corrupt[0]["commitlog_offset"] == victim["commitLogOffset"]
    assert corrupt[0]["code"] == "CL_BAD_MAGIC"
    got = _offsets(_messages(records))
    # the rest of that file is not read, as in the broker's recovery; later files are
    assert got == _offsets(msgs[:300]) + _offsets(msgs[len(first_file):])
    assert "warning" in proc.stderr

    resynced = _lines(mqtool("dump", store_copy, "--json", "--body", "none", "--resync"))
    assert _offsets(_messages(resynced)) == _offsets(msgs[:300] + msgs[301:])
    corrupt = [r for r in resynced if r["record_type"] == "commitlog/corrupt"]
    assert corrupt[0]["length"] == victim["storeSize"]


def test_damaged_body_is_flagged(shared_stores, mqtool):
    ref = shared_stores / "clean-small-damaged"
    damage = json.loads((ref / "damage.json").read_text())["message"]
    records = _messages(_lines(mqtool("dump", ref / "store", "--json", "--body", "none",
                                      "--topic", damage["topic"], "--queue", damage["queueId"])))
    bad = [r for r in records if not r["body_crc_ok"]]
    assert [r["commitlog_offset"] for r in bad] == [damage["commitLogOffset"]]


# --- bad input -----------------------------------------------------------------------------------

def test_bad_input(tmp_path, fixture_store, mqtool):
    _one_line_error(mqtool("dump", tmp_path / "missing"))

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("hello")
    _one_line_error(mqtool("dump", plain))

    random_segment = tmp_path / "commitlog" / "00000000000000000000"
    random_segment.parent.mkdir()
    random_segment.write_bytes(hashlib.sha256(b"seed").digest() * 200)
    proc = mqtool("dump", random_segment, "--json")
    (record,) = _lines(proc)  # the honest answer: one corrupt region, the whole file
    assert record["record_type"] == "commitlog/corrupt" and record["length"] == 6400
    assert "warning" in proc.stderr
    assert mqtool("dump", random_segment).returncode == 0

    empty = tmp_path / "commitlog" / "00000000000001048576"
    empty.write_bytes(b"")
    _one_line_error(mqtool("dump", empty))

    source_cq = fixture_store / "consumequeue" / "TopicTest" / "0" / "00000000000000000000"
    cut = tmp_path / "consumequeue" / "TopicTest" / "0" / "00000000000000000000"
    cut.parent.mkdir(parents=True)
    cut.write_bytes(source_cq.read_bytes()[:20 * 7 + 13])
    proc = mqtool("dump", cut, "--json")
    records = _lines(proc)
    assert [r["record_type"] for r in records] == ["consumequeue/unit"] * 7 + [
        "consumequeue/partial-unit"]
    assert records[-1]["length"] == 13 and "warning" in proc.stderr
    assert mqtool("dump", cut).returncode == 0

    short_index = tmp_path / "index" / "20261122005125786"
    short_index.parent.mkdir()
    short_index.write_bytes((fixture_store / "index" / "20261122005125786").read_bytes()[:30])
    _one_line_error(mqtool("dump", short_index))

    unknown = tmp_path / "weird.bin"
    unknown.write_bytes(b"12345")
    _one_line_error(mqtool("dump", unknown))
    forced = _lines(mqtool("dump", unknown, "--kind", "consumequeue", "--json"))
    assert forced[-1]["record_type"] == "consumequeue/partial-unit"


# --- read-only ------------------------------------------------------------------------------------

def _snapshot(root: Path) -> dict:
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.stat()
        content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        out[str(path)] = (st.st_mtime_ns, st.st_size, stat.S_IMODE(st.st_mode), content)
    return out


def test_info_and_dump_never_write(tmp_path, mqtool):
    store = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", store)
    for path in [store, *store.rglob("*")]:
        os.chmod(path, os.stat(path).st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    before = _snapshot(store)
    try:
        targets = [
            ("info", store), ("info", store, "--json", "--check-crc"),
            ("dump", store, "--json"), ("dump", store, "--limit", "50"),
            ("dump", store / "commitlog" / "00000000000001048576", "--json", "--resync"),
            ("dump", store / "consumequeue" / "TopicTest" / "1" / "00000000000000000000"),
            ("dump", store / "index" / "20261122005125786", "--json"),
            ("dump", store / "index" / "20261122005125786", "--follow-slot", "7"),
            ("dump", store / "checkpoint"), ("dump", store / "lock", "--json"),
            ("dump", store / "config" / "delayOffset.json", "--json"),
        ]
        for args in targets:
            proc = mqtool(*args)
            assert proc.returncode == 0, (args, proc.stderr)
        assert _snapshot(store) == before
    finally:
        for path in [store, *store.rglob("*")]:
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR)


def test_own_code_opens_files_read_only():
    """Every open() in the info/dump code is "rb"; files are mapped only via MappedFile, whose
    map is ACCESS_READ; the lock probe opens O_RDONLY."""
    for module in (*sorted((REPO / "mqtool" / "inspect").glob("*.py")),
                   REPO / "mqtool" / "cli" / "inspect_cmds.py"):
        source = module.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                if name == "open":
                    modes = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
                    modes += [k.value.value for k in node.keywords
                              if k.arg == "mode" and isinstance(k.value, ast.Constant)]
                    assert modes == ["rb"], f"{module.name}:{node.lineno}"
                assert name not in ("write_bytes", "write_text", "unlink", "rename", "chmod",
                                    "remove", "mkdir", "rmdir", "touch"), \
                    f"{module.name}:{node.lineno}"
        for forbidden in ("O_WRONLY", "O_RDWR", "ACCESS_WRITE", '"wb"', '"r+b"', '"ab"',
                          "os.replace", "shutil.", "mmap.mmap("):
            assert forbidden not in source, (module.name, forbidden)
    store_source = (REPO / "mqtool" / "store.py").read_text()
    assert "map_readonly(" in store_source
    # the maps: read-only, and the zero pages laid over holes are private and read-only too
    mapping_source = (REPO / "mqtool" / "mapping.py").read_text()
    assert "access=mmap.ACCESS_READ" in mapping_source and "mmap.PROT_READ," in mapping_source
    assert "PROT_WRITE" not in mapping_source and "ACCESS_WRITE" not in mapping_source
    assert 'open(self.path, "rb")' in store_source and "os.O_RDONLY" in store_source


# --- library entry points used by later commands -------------------------------------------------

def test_message_filter_and_options_from_the_library(fixture_store, broker_dump):
    msgs = broker_dump["messages"]
    options = DumpOptions(body="none", filters=MessageFilter(topic="%RETRY%GroupA", queue_id=1))
    got = [r for r in dump_path(fixture_store, options)]
    assert _offsets(got) == _offsets([m for m in msgs if m["topic"] == "%RETRY%GroupA"
                                      and m["queueId"] == 1])
    assert all(r["body"] is None for r in got)
