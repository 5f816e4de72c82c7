"""The fixture forge: stores it makes read back as the broker would lay them out, and every
damage kind changes exactly the bytes its JSON report names.

Expectations come from the options asked for, from the spec's constants (written out here), from
the forge's record of what it intended (``Manifest``), and from the broker-written reference store
- never from re-reading the forge's own output with the forge.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
import zlib
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from mqtool import forge
from mqtool.errors import MqtoolError
from mqtool.formats import codecs
from mqtool.formats import checkpoint as ckpt_fmt
from mqtool.formats import commitlog as cl_fmt
from mqtool.formats import consumequeue as cq_fmt
from mqtool.formats import indexfile as idx_fmt
from mqtool.scan import MessageRecord, Scanner, message_at
from mqtool.config import read_config, text_keys
from mqtool.store import Store

# MessageStoreConfig.messageDelayLevel default, in ms (spec §3)
DELAY_MS = [1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
            420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000]
V1, V2 = 0xDAA320A7, 0xDAA320AB
SMALL_FILE = 256 * 1024


def options(**kw) -> forge.ForgeOptions:
    base = dict(messages=900, seed=5, commitlog_file_size=SMALL_FILE, cq_units=50,
                index_slots=100, index_entries=400, delay_ratio=0.05, transaction_ratio=0.09,
                compress_ratio=0.05)
    base.update(kw)
    return forge.ForgeOptions(**base)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def tree_dirs(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir()}


def records(root: Path) -> list[MessageRecord]:
    store = Store(root)
    return [e for e in Scanner(store.commitlog) if type(e) is MessageRecord]


def cq_units(queue) -> list[tuple[int, int, int]]:
    units = []
    for seg in queue.segments:
        data = seg.path.read_bytes()
        for pos in range(0, len(data), cq_fmt.CQ_STORE_UNIT_SIZE):
            unit = cq_fmt.consumequeue_unit.parse(data[pos:pos + cq_fmt.CQ_STORE_UNIT_SIZE])
            if not cq_fmt.is_valid_unit(unit.commitlog_offset, unit.size):
                return units
            units.append((unit.commitlog_offset, unit.size, unit.tags_code))
    return units


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Stores made once per module: name -> (root, summary)."""
    cache = {}

    def make(name: str, **kw):
        if name not in cache:
            root = tmp_path_factory.mktemp("forge") / name
            cache[name] = (root, forge.make_store(root, options(**kw)))
        return cache[name]
    return make


# --- determinism and the fast path ------------------------------------------------------------

def test_same_seed_gives_identical_bytes_and_other_seed_differs(tmp_path):
    a = forge.make_store(tmp_path / "a", options(messages=400))
    forge.make_store(tmp_path / "b", options(messages=400))
    forge.make_store(tmp_path / "c", options(messages=400, seed=6))
    first, again, other = (tree_bytes(tmp_path / n) for n in "abc")
    assert first == again
    assert first["commitlog/00000000000000000000"] != other["commitlog/00000000000000000000"]
    assert a["messages"] == 400


def test_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "keep.txt").write_text("precious")
    with pytest.raises(MqtoolError):
        forge.make_store(tmp_path, options(messages=10))
    assert (tmp_path / "keep.txt").read_text() == "precious"


def test_sizes_parse_like_broker_settings():
    assert forge.parse_size("1048576") == 1 << 20
    assert forge.parse_size("1m") == forge.parse_size("1M") == 1 << 20
    assert forge.parse_size("64m") == 64 << 20
    assert forge.parse_size("1g") == forge.parse_size("1GiB") == 1 << 30
    assert forge.parse_body_size("1k/4k") == (1024, 4096)
    with pytest.raises(ValueError):
        forge.parse_size("lots")


# --- layout -----------------------------------------------------------------------------------

def test_layout_names_and_sizes(made):
    root, summary = made("clean")
    o = options()
    cl_files = sorted((root / "commitlog").iterdir())
    assert len(cl_files) >= 3
    for i, path in enumerate(cl_files):
        assert path.name == f"{i * o.commitlog_file_size:020d}"
        assert path.stat().st_size == o.commitlog_file_size
    cq_file_size = o.cq_units * 20
    cq_files = list((root / "consumequeue").glob("*/*/*"))
    assert cq_files
    assert any(int(p.name) > 0 for p in cq_files), "some queue should roll over"
    for path in cq_files:
        assert path.stat().st_size == cq_file_size
        assert len(path.name) == 20 and int(path.name) % cq_file_size == 0
        assert path.parent.name.isdigit()
    index_files = sorted((root / "index").iterdir())
    assert len(index_files) >= 2
    for path in index_files:
        assert len(path.name) == 17 and path.name.isdigit()
        assert path.stat().st_size == 40 + 4 * o.index_slots + 20 * o.index_entries
    assert (root / "lock").read_bytes() == b"lock"
    assert not (root / "abort").exists()
    assert summary["commitlog"]["files"] == [p.name for p in cl_files]


def test_checkpoint_of_a_clean_shutdown(made):
    root, _ = made("clean")
    recs = records(root)
    data = (root / "checkpoint").read_bytes()
    assert len(data) == 4096
    ckpt = ckpt_fmt.checkpoint.parse(data)
    last = max(r.store_timestamp for r in recs)
    assert ckpt.physic_msg_timestamp == last
    assert ckpt.logics_msg_timestamp == last
    # indexMsgTimestamp moves only when an IndexFile fills: the end of the newest full file
    headers = [idx_fmt.index_header.parse(p.read_bytes()[:40])
               for p in sorted((root / "index").iterdir())]
    full = [h for h in headers if h.index_count >= options().index_entries]
    assert full
    assert ckpt.index_msg_timestamp == full[-1].end_timestamp


# --- the records ------------------------------------------------------------------------------

def test_records_read_back_with_the_requested_mix(made):
    root, summary = made("clean")
    o = options()
    recs = records(root)
    assert len(recs) == o.messages == summary["messages"]
    assert all(r.offset_ok and r.body_crc_ok is not False for r in recs)
    stored_topics = Counter(r.topic for r in recs)
    assert set(stored_topics) <= set(o.topics) | {"SCHEDULE_TOPIC_XXXX"}
    assert set(o.topics) <= set(stored_topics)
    assert dict(stored_topics) == summary["records_by_topic"]
    assert {r.queue_id for r in recs if r.topic != "SCHEDULE_TOPIC_XXXX"} == set(range(o.queues))
    kinds = Counter()
    for r in recs:
        tran = r.sys_flag & 0xC
        if tran:
            kinds[{4: "prepared", 8: "commit", 12: "rollback"}[tran]] += 1
        elif r.topic == "SCHEDULE_TOPIC_XXXX":
            kinds["delay"] += 1
        else:
            kinds["normal"] += 1
    assert kinds == Counter({k: v for k, v in summary["kinds"].items() if v})
    assert all(summary["kinds"][k] > 0 for k in forge.KINDS)
    # store timestamps never go back and move in small steps
    times = [r.store_timestamp for r in recs]
    assert all(0 <= b - a <= 10 for a, b in zip(times, times[1:]))
    assert all(len(r.properties["UNIQ_KEY"]) == 32 for r in recs)
    assert all(r.store_ip == bytes([127, 0, 0, 1]) and r.store_port == 10911 for r in recs)


def test_queue_offsets_are_consecutive_per_queue(made):
    root, summary = made("clean")
    seen = defaultdict(list)
    for r in records(root):
        if r.sys_flag & 0xC in (4, 12):
            assert r.queue_offset == 0
            continue
        seen[(r.topic, r.queue_id)].append(r.queue_offset)
    for key, offsets in seen.items():
        assert offsets == list(range(len(offsets))), key
        assert summary["queue_offsets"][key[0]][str(key[1])] == len(offsets)


def test_consume_queue_units_point_at_their_records(made):
    root, _ = made("clean")
    store = Store(root)
    by_offset = {r.offset: r for r in records(root)}
    pointed = set()
    for queue in store.consume_queues:
        for queue_offset, (offset, size, tags_code) in enumerate(cq_units(queue)):
            rec = message_at(store.commitlog, offset)
            assert rec.total_size == size
            assert (rec.topic, rec.queue_id, rec.queue_offset) == \
                (queue.topic, queue.queue_id, queue_offset)
            assert tags_code == codecs.tags_code(rec.topic, rec.properties, rec.store_timestamp)
            pointed.add(offset)
    for offset, rec in by_offset.items():
        # PREPARED and ROLLBACK records get no unit; everything else does
        assert (offset in pointed) == (rec.sys_flag & 0xC in (0, 8)), offset


def test_delay_messages_sit_in_the_schedule_topic(made):
    root, summary = made("clean")
    store = Store(root)
    delayed = [r for r in records(root) if r.topic == "SCHEDULE_TOPIC_XXXX"]
    assert len(delayed) == summary["kinds"]["delay"] > 0
    for r in delayed:
        props = r.properties
        level = int(props["DELAY"])
        assert 1 <= level <= 18 and r.queue_id == level - 1
        assert props["REAL_TOPIC"] in options().topics
        assert 0 <= int(props["REAL_QID"]) < options().queues
    queues = [q for q in store.consume_queues if q.topic == "SCHEDULE_TOPIC_XXXX"]
    assert queues
    for queue in queues:
        for offset, _size, tags_code in cq_units(queue):
            rec = message_at(store.commitlog, offset)
            assert tags_code == rec.store_timestamp + DELAY_MS[int(rec.properties["DELAY"]) - 1]


def test_transactions_compression_keys_and_ids(made):
    root, _ = made("clean")
    recs = records(root)
    by_offset = {r.offset: r for r in recs}
    for r in recs:
        tran = r.sys_flag & 0xC
        props = r.properties
        if tran == 4:
            assert props["TRAN_MSG"] == "true" and props["PGROUP"]
            assert r.prepared_transaction_offset == 0
        elif tran in (8, 12):
            half = by_offset[r.prepared_transaction_offset]
            assert half.sys_flag & 0xC == 4 and half.offset < r.offset
            assert props["PGROUP"] and "TRAN_MSG" not in props
    compressed = [r for r in recs if r.sys_flag & 1]
    assert compressed
    store = Store(root)
    for r in compressed:
        # what the 4.9.8 client + broker wrote in the reference stores: ZLIB bits and flag 0x1
        assert r.sys_flag & 0x701 == 0x301
        raw = zlib.decompress(store.commitlog.read(r.body_position, r.body_length))
        assert raw.startswith(b'{"i":')
    key_use = Counter(k for r in recs for k in codecs.message_keys(r.properties))
    assert key_use.most_common(1)[0][1] >= 10, "hot keys are shared by many messages"
    assert any(not k.isascii() for k in key_use)
    tags = Counter(r.properties.get("TAGS") for r in recs)
    assert any(t and not t.isascii() for t in tags)
    assert 0.03 < tags[None] / len(recs) < 0.2
    assert any(r.body_length == 0 for r in recs)
    assert max(len(v) for r in recs for v in r.properties.values()) >= 500
    assert any(not v.isascii() for r in recs for k, v in r.properties.items()
               if k.startswith("userProp"))


def test_uniq_keys_are_built_like_message_client_id_setter(made):
    root, _ = made("clean")
    counters = defaultdict(list)
    for r in records(root):
        key = r.properties["UNIQ_KEY"]
        raw = bytes.fromhex(key)
        born = r.born_timestamp
        t = dt.datetime.fromtimestamp(born / 1000, dt.timezone.utc)
        month = int(dt.datetime(t.year, t.month, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
        assert int.from_bytes(raw[10:14], "big") == born - month
        # the producer's IP is its born host
        assert raw[:4] == r.born_ip
        counters[raw[:10]].append(int.from_bytes(raw[14:16], "big"))
    assert len(counters) >= 2
    for values in counters.values():
        assert values == list(range(len(values)))


def test_mix_matches_what_the_broker_wrote(made, fixture_store):
    """Our sysflags and property names are ones the real client + 4.9.8 broker produced."""
    root, _ = made("clean")
    ours = records(root)
    theirs = [e for e in Scanner(Store(fixture_store).commitlog) if type(e) is MessageRecord]
    assert {r.sys_flag & 0xC for r in ours} == {r.sys_flag & 0xC for r in theirs}
    # compression bits combine with any transaction type (the 5.3.3 store has 0x305 too)
    assert {r.sys_flag & ~0xC for r in ours} == {r.sys_flag & ~0xC for r in theirs}
    their_names = {k for r in theirs for k in r.properties}
    assert {k for r in ours for k in r.properties} <= their_names
    # property bytes in both stores follow the same HashMap order rules: no trailing separator
    assert all(not r.properties_raw.endswith(b"\x02") for r in ours)


# --- variants ---------------------------------------------------------------------------------

def test_ipv6_hosts(made):
    root, summary = made("v6", ipv6=True)
    recs = records(root)
    assert all(r.sys_flag & 0x20 for r in recs)
    born_v6 = [r for r in recs if r.sys_flag & 0x10]
    assert len(born_v6) == summary["born_ipv6"] and 0 < len(born_v6) < len(recs)
    for r in recs:
        assert len(r.born_ip) == (16 if r.sys_flag & 0x10 else 4)
        assert len(codecs.offset_msg_id(r.store_ip, r.store_port, r.offset)) == 56
        assert len(r.properties["UNIQ_KEY"]) == (56 if r.sys_flag & 0x10 else 32)


def test_long_topics_v2_records_only_with_broker_5(made):
    root4, s4 = made("long4", long_topic=True)
    recs4 = records(root4)
    assert {r.magic_code for r in recs4} == {V1}
    assert max(len(r.topic) for r in recs4) == 127
    assert s4["v2_records"] == 0
    root5, s5 = made("long5", long_topic=True, broker_version=5)
    recs5 = records(root5)
    v2 = [r for r in recs5 if r.magic_code == V2]
    assert len(v2) == s5["v2_records"] > 0
    assert all(len(r.topic.encode()) > 127 and r.topic.startswith("%RETRY%") for r in v2)
    assert all(len(r.topic.encode()) <= 127 for r in recs5 if r.magic_code == V1)
    assert any(len(r.topic) == 127 for r in recs5)
    assert 128 <= max(len(r.topic) for r in v2) <= 255
    # each long topic has its own ConsumeQueue directory
    assert {q.topic for q in Store(root5).consume_queues} >= {r.topic for r in v2}


def test_prop_crc_verifies(made):
    root, _ = made("propcrc", broker_version=5, prop_crc=True)
    store = Store(root)
    recs = records(root)
    assert recs
    for r in recs:
        stored = codecs.stored_prop_crc(r.properties_raw)
        assert stored is not None
        assert stored == codecs.record_prop_crc(store.commitlog.read(r.offset, r.total_size))
        assert r.prop_crc_ok is True


def test_fastjson_configs(made):
    root, summary = made("clean")
    config = root / "config"
    for name in ("topics.json", "consumerOffset.json", "delayOffset.json"):
        assert (config / name).read_bytes() == (config / (name + ".bak")).read_bytes()
    text = (config / "consumerOffset.json").read_text()
    assert "{0:" in text and '"0"' not in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    offsets = read_config(config / "consumerOffset.json")
    assert offsets.used == "consumerOffset.json"
    table = text_keys(offsets.document)["offsetTable"]
    for topic in options().topics:
        queues = table[f"{topic}@GroupA"]
        for qid, value in queues.items():
            assert 0 <= value <= summary["queue_offsets"][topic][qid]
    topics = read_config(config / "topics.json").document
    for topic in summary["topics"]:
        assert topics["topicConfigTable"][topic]["readQueueNums"] == options().queues
    assert topics["topicConfigTable"]["SCHEDULE_TOPIC_XXXX"]["writeQueueNums"] == 18
    delay = read_config(config / "delayOffset.json").document
    for level, value in delay["offsetTable"].items():
        assert 0 <= value <= summary["queue_offsets"]["SCHEDULE_TOPIC_XXXX"][str(int(level) - 1)]
    # an empty main file falls back to .bak, as ConfigManager does
    (config / "delayOffset.json").write_text("")
    assert read_config(config / "delayOffset.json").used == "delayOffset.json.bak"


def test_fastjson_layout_matches_the_broker_file(fixture_store):
    assert forge.fastjson_pretty(forge.JavaBean(offsetTable={})) == \
        (fixture_store / "config" / "delayOffset.json").read_text()
    assert forge.fastjson_pretty(forge.JavaBean(offsetTable={"T@G": {0: 12, 1: 7}})) == \
        '{\n\t"offsetTable":{\n\t\t"T@G":{0:12,1:7\n\t\t}\n\t}\n}'


def test_crash_store(made):
    root, summary = made("crash", crash=True)
    o = options()
    store = Store(root)
    recs = records(root)
    assert len(recs) == o.messages
    assert (root / "abort").read_bytes() == b""
    # the preallocated next file: full size, all zeros, right after the last data file
    files = sorted((root / "commitlog").iterdir())
    last_data = max(r.offset for r in recs)
    expected_next = last_data - last_data % o.commitlog_file_size + o.commitlog_file_size
    assert files[-1].name == f"{expected_next:020d}"
    assert files[-1].stat().st_size == o.commitlog_file_size
    assert files[-1].read_bytes().count(0) == o.commitlog_file_size
    # the checkpoint lags the last message by seconds
    ckpt = store.read_checkpoint()
    last_ts = recs[-1].store_timestamp
    assert 2000 <= last_ts - ckpt.physic_msg_timestamp <= 5000
    assert last_ts - ckpt.logics_msg_timestamp >= 1000
    # dispatch stopped before the CommitLog end: the CQs and the index point below it
    highest_unit = max(offset for q in store.consume_queues for offset, _, _ in cq_units(q))
    tracked = [r for r in recs if r.sys_flag & 0xC in (0, 8)]
    assert highest_unit < tracked[-1].offset
    assert sum(len(cq_units(q)) for q in store.consume_queues) < len(tracked)
    assert summary["dispatched_messages"] < o.messages
    newest_index = sorted((root / "index").iterdir())[-1]
    assert idx_fmt.index_header.parse(newest_index.read_bytes()[:40]).end_phy_offset \
        < recs[-1].offset


def test_crash_store_of_broker_5_has_a_pid_in_abort(made):
    root, _ = made("crash5", crash=True, broker_version=5)
    assert (root / "abort").read_text().isdigit()
    assert (root / "abort.bak").read_bytes() == b""
    assert len((root / "checkpoint").read_bytes()) == 4096


def test_no_index_option(tmp_path):
    forge.make_store(tmp_path / "s", options(messages=50, index=False))
    assert not (tmp_path / "s" / "index").exists()
    assert len(records(tmp_path / "s")) == 50


# --- the CLI: make ----------------------------------------------------------------------------

def test_cli_make_matches_the_library(mqtool, tmp_path):
    proc = mqtool("fixture", "make", tmp_path / "cli", "--messages", 300, "--seed", 9,
                  "--commitlog-file-size", "256k", "--cq-units", 50, "--index-slots", 100,
                  "--index-entries", 400, "--delay-ratio", 0.05, "--transaction-ratio", 0.09,
                  "--compress-ratio", 0.05)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["messages"] == 300
    forge.make_store(tmp_path / "lib", options(messages=300, seed=9))
    assert tree_bytes(tmp_path / "cli") == tree_bytes(tmp_path / "lib")


def test_cli_make_rejects_bad_input(mqtool, tmp_path):
    proc = mqtool("fixture", "make", tmp_path / "x", "--messages", 10, "--body-size", "big")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("mqtool: error: ") and proc.stderr.count("\n") == 1
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    proc = mqtool("fixture", "make", tmp_path / "full", "--messages", 10)
    assert proc.returncode == 2 and "not empty" in proc.stderr


# --- damage -----------------------------------------------------------------------------------

@pytest.fixture
def victim(made, tmp_path):
    root, _ = made("clean")
    copy = tmp_path / "victim"
    shutil.copytree(root, copy)
    return copy


def changed(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def diff_positions(old: bytes, new: bytes) -> list[int]:
    return [i for i in range(min(len(old), len(new))) if old[i] != new[i]]


def test_damage_torn_tail(victim):
    before = tree_bytes(victim)
    original = records(victim)
    report = forge.damage_store(victim, "torn-tail", seed=1)
    after = tree_bytes(victim)
    assert changed(before, after) == [report["file"]]
    last = original[-1]
    start, end = report["range"]["file_start"], report["range"]["file_end"]
    base = int(Path(report["file"]).name)
    assert (report["range"]["start"], report["range"]["end"]) == \
        (last.offset + last.total_size // 2, last.end)
    new = after[report["file"]]
    assert new[start:end] == bytes(end - start)
    assert before[report["file"]][start:end].hex().startswith(report["old_hex"])
    assert new[:start] == before[report["file"]][:start] and new[end:] == before[report["file"]][end:]
    assert report["records"][0]["offset"] == last.offset == base + start - last.total_size // 2


@pytest.mark.parametrize("target", ["body", "header"])
def test_damage_bit_flip(victim, target):
    before = tree_bytes(victim)
    original = {r.offset: r for r in records(victim)}
    report = forge.damage_store(victim, "bit-flip", seed=3, target=target)
    after = tree_bytes(victim)
    assert changed(before, after) == [report["file"]]
    name = report["file"]
    positions = diff_positions(before[name], after[name])
    assert positions == [report["range"]["file_start"]]
    pos = positions[0]
    assert before[name][pos] ^ after[name][pos] == 1 << report["bit"]
    assert report["old_hex"] == before[name][pos:pos + 1].hex()
    assert report["new_hex"] == after[name][pos:pos + 1].hex()
    # a file other than the last one holding data
    last_file = max(r.offset for r in original.values()) // SMALL_FILE * SMALL_FILE
    assert int(Path(name).name) != last_file
    rec = original[report["records"][0]["offset"]]
    where = report["range"]["start"]
    if target == "body":
        assert rec.body_position <= where < rec.body_position + rec.body_length
    else:
        assert rec.offset <= where < rec.offset + 48
        assert report["field"] in {sc.name for sc in cl_fmt.message_header.subcons}


def test_damage_zero_range(victim):
    before = tree_bytes(victim)
    original = records(victim)
    report = forge.damage_store(victim, "zero-range", seed=4)
    after = tree_bytes(victim)
    name = report["file"]
    assert changed(before, after) == [name]
    start, end = report["range"]["file_start"], report["range"]["file_end"]
    assert after[name][start:end] == bytes(end - start)
    assert after[name][:start] == before[name][:start] and after[name][end:] == before[name][end:]
    g_start, g_end = report["range"]["start"], report["range"]["end"]
    hit = [r.offset for r in original if r.offset < g_end and r.end > g_start]
    assert [r["offset"] for r in report["records"]] == hit and hit
    in_file = [r for r in original if r.offset // SMALL_FILE == g_start // SMALL_FILE]
    assert hit[0] != in_file[0].offset and hit[-1] != in_file[-1].offset, "middle of the file"


def test_damage_truncate_file(victim):
    before = tree_bytes(victim)
    report = forge.damage_store(victim, "truncate-file", seed=2)
    after = tree_bytes(victim)
    name = report["file"]
    assert changed(before, after) == [name]
    assert len(after[name]) == report["new_size"] < report["old_size"] == len(before[name])
    assert after[name] == before[name][:report["new_size"]]
    assert report["records"] and report["records"][0]["offset"] <= report["range"]["start"]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_damage_delete_file(victim, seed):
    before = tree_bytes(victim)
    report = forge.damage_store(victim, "delete-file", seed=seed)
    after = tree_bytes(victim)
    assert changed(before, after) == [report["file"]]
    assert report["file"] not in after
    assert report["old_size"] == len(before[report["file"]])
    if report["file_kind"] == "commitlog":
        names = sorted(k for k in before if k.startswith("commitlog/"))
        assert report["file"] not in (names[0], names[-1])
    else:
        topic, qid = report["file"].split("/")[1:3]
        assert (report["queue"]["topic"], str(report["queue"]["queue_id"])) == (topic, qid)
        assert report["queue"]["units"] > 0


def test_damage_delete_file_kinds_vary_by_seed(made, tmp_path):
    root, _ = made("clean")
    kinds = set()
    for seed in range(8):
        copy = tmp_path / f"s{seed}"
        shutil.copytree(root, copy)
        kinds.add(forge.damage_store(copy, "delete-file", seed=seed)["file_kind"])
    assert kinds == {"commitlog", "consumequeue"}


def test_damage_stray_file(victim):
    before, dirs_before = tree_bytes(victim), tree_dirs(victim)
    report = forge.damage_store(victim, "stray-file", seed=5)
    after = tree_bytes(victim)
    assert changed(before, after) == [report["file"]]
    assert report["file"].startswith("commitlog/")
    assert len(after[report["file"]]) == report["new_size"]
    new_dirs = tree_dirs(victim) - dirs_before
    assert new_dirs == set(report["dirs"])
    assert all(d.startswith("consumequeue/") for d in new_dirs)
    # the store still opens; the junk is reported as stray, not as a segment
    store = Store(victim)
    assert [p.name for p in store.commitlog.stray_files] == [Path(report["file"]).name]


@pytest.mark.parametrize("direction", ["ahead", "behind"])
def test_damage_stale_checkpoint(victim, direction):
    old = ckpt_fmt.checkpoint.parse((victim / "checkpoint").read_bytes())
    report = forge.damage_store(victim, "stale-checkpoint", seed=6, direction=direction)
    new = ckpt_fmt.checkpoint.parse((victim / "checkpoint").read_bytes())
    assert report["direction"] == direction
    shift = report["shift_ms"]
    assert (shift > 0) == (direction == "ahead") and abs(shift) >= 86_400_000
    for name in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp"):
        assert new[name] == old[name] + shift
        assert report["old"][name] == old[name] and report["new"][name] == new[name]
    assert new.padding == old.padding


def test_damage_is_deterministic(made, tmp_path):
    root, _ = made("clean")
    reports = []
    for name in ("a", "b"):
        shutil.copytree(root, tmp_path / name)
        reports.append(forge.damage_store(tmp_path / name, "zero-range", seed=11))
    assert reports[0] == reports[1]
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")


def test_cli_damage_bit_flip_at_an_offset(mqtool, victim):
    target = records(victim)[5]
    before = tree_bytes(victim)
    proc = mqtool("fixture", "damage", victim, "--kind", "bit-flip", "--seed", 1,
                  "--offset", target.offset)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["kind"] == "bit-flip"
    assert report["records"][0]["offset"] == target.offset
    assert report["records"][0]["topic"] == target.topic
    assert changed(before, tree_bytes(victim)) == [report["file"]]


def test_cli_damage_refuses_a_locked_store(mqtool, victim):
    before = tree_bytes(victim)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, sys, time\n"
         "f = open(sys.argv[1], 'r+b')\n"
         "fcntl.lockf(f, fcntl.LOCK_EX, 1, 0)\n"
         "print('locked', flush=True)\n"
         "time.sleep(60)\n", str(victim / "lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = mqtool("fixture", "damage", victim, "--kind", "torn-tail", "--seed", 1)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 3
    assert proc.stderr.startswith("mqtool: error: ") and "lock" in proc.stderr
    assert tree_bytes(victim) == before


def test_cli_damage_rejects_unknown_kind(mqtool, victim):
    proc = mqtool("fixture", "damage", victim, "--kind", "melt")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
