"""`mqtool info`: every number checked against what the broker wrote or decoded.

Ground truth: dump.json.gz (the broker's raw decode: messageCount, fileScan, fileState with the
checkpoint, abort/lock and IndexFile headers), recover.json.gz (topicQueueTable and the
ConsumeQueue units after the broker's own recovery) and geometry.json.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import reference_dirs
from mqtool.inspect import store_info
from mqtool.store import Store

# Stores whose recovery changed nothing (clean shutdown, no damage): their ConsumeQueues and
# topicQueueTable after recovery are what the files in store/ say.
UNTOUCHED_BY_RECOVERY = {"clean-small", "clean-multi", "v6-unicode-small",
                         "delay-delivered-small", "v5-clean", "v5-propcrc-clean"}


def _json_gz(path: Path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _ids(paths):
    return [p.name if p.parent.name != "rocketmq-4.9.8" else f"fixture-{p.name}" for p in paths]


@pytest.fixture(scope="module")
def infos():
    """store_info of every reference store, computed once."""
    return {ref: store_info(Store(ref / "store")) for ref in reference_dirs()}


@pytest.mark.parametrize("ref", reference_dirs(), ids=_ids(reference_dirs()))
def test_commitlog_numbers_match_the_broker_scan(ref, infos):
    info = infos[ref]
    dump = _json_gz(ref / "dump.json.gz")
    cl = info["commitlog"]
    assert cl["messages"] == dump["messageCount"]
    broker_files = dump["fileState"]["commitlogFiles"]
    assert [(f["name"], f["size"]) for f in cl["files"]] == [(f["name"], f["size"])
                                                             for f in broker_files]
    for ours, scan in zip(cl["files"], dump["fileScan"]):
        assert ours["messages"] == scan["messages"]
        assert ours["scan_end"]["position"] == scan["scanEndPos"]
        assert scan["end"].startswith({"blank": "blank@", "unwritten": "zeros@",
                                       "corrupt": "illegal-magic@"}[ours["scan_end"]["kind"]])
    messages = dump["messages"]
    assert cl["min_offset"] == 0
    assert cl["end_of_data"] == max(m["commitLogOffset"] + m["storeSize"] for m in messages)
    tx_names = {0: "NOT", 4: "PREPARED", 8: "COMMIT", 12: "ROLLBACK"}
    by_tx = defaultdict(int)
    for m in messages:
        by_tx[tx_names[m["sysFlag"] & 0xC]] += 1
    assert cl["by_transaction"] == {name: by_tx.get(name, 0) for name in tx_names.values()}
    assert cl["compressed"] == sum(1 for m in messages if m["sysFlag"] & 1)
    assert cl["first_store_timestamp"] == messages[0]["storeTimestamp"]
    assert cl["last_store_timestamp"] == messages[-1]["storeTimestamp"]
    if "messageVersion" in messages[0]:
        assert cl["v2_records"] == sum(1 for m in messages if m["messageVersion"] == "V2")


@pytest.mark.parametrize("ref", reference_dirs(), ids=_ids(reference_dirs()))
def test_topic_queue_table_matches_the_broker(ref, infos):
    info = infos[ref]
    dump = _json_gz(ref / "dump.json.gz")
    expected = defaultdict(lambda: {"messages": 0, "offsets": [], "prepared": 0, "rollback": 0})
    for m in dump["messages"]:
        q = expected[(m["topic"], m["queueId"])]
        tx = m["sysFlag"] & 0xC
        if tx in (0, 8):
            q["messages"] += 1
            q["offsets"].append(m["queueOffset"])
        elif tx == 4:
            q["prepared"] += 1
        else:
            q["rollback"] += 1
    rows = {(r["topic"], r["queue_id"]): r for r in info["topics"]}
    for key, q in expected.items():
        cl = rows[key]["commitlog"]
        assert cl["messages"] == q["messages"], key
        assert cl["prepared"] == q["prepared"] and cl["rollback"] == q["rollback"], key
        if q["offsets"]:
            assert (cl["min_queue_offset"], cl["max_queue_offset"]) == (min(q["offsets"]),
                                                                        max(q["offsets"]))
    # every CQ directory appears, with its file count
    cq_files = dump["fileState"]["consumeQueueFiles"]
    for topic, queues in cq_files.items():
        for qid, files in queues.items():
            assert rows[(topic, int(qid))]["consume_queue"]["files"] == len(files)

    if ref.name not in UNTOUCHED_BY_RECOVERY:
        return
    recover = _json_gz(ref / "recover.json.gz")
    table = recover["afterRecovery"]["topicQueueTable"]
    for (topic, qid), row in rows.items():
        key = f"{topic}-{qid}"
        cq = row["consume_queue"]
        broker_cq = recover["consumeQueues"][topic][str(qid)]
        assert cq["max_offset"] == broker_cq["maxOffset"] == table[key], key
        assert cq["min_offset"] == broker_cq["minOffset"], key
        assert cq["units"] == len(broker_cq["units"]), key
        assert cq["max_physic_offset"] == broker_cq["maxPhysicOffset"], key
        assert cq["units_past_commitlog_end"] == 0
        if row["commitlog"] and row["commitlog"]["messages"]:
            assert row["commitlog"]["max_queue_offset"] + 1 == table[key]


@pytest.mark.parametrize("ref", reference_dirs(), ids=_ids(reference_dirs()))
def test_checkpoint_abort_lock_index_and_geometry(ref, infos):
    info = infos[ref]
    state = _json_gz(ref / "dump.json.gz")["fileState"]
    geometry = json.loads((ref / "geometry.json").read_text())

    ckpt = state["checkpoint"]
    ours = info["checkpoint"]
    assert ours["file_size"] == ckpt["fileSize"]
    for broker_key, our_key in (("physicMsgTimestamp", "physic_msg_timestamp"),
                                ("logicsMsgTimestamp", "logics_msg_timestamp"),
                                ("indexMsgTimestamp", "index_msg_timestamp"),
                                ("masterFlushedOffset", "master_flushed_offset"),
                                ("confirmPhyOffset", "confirm_phy_offset")):
        if broker_key in ckpt:
            assert ours[our_key] == ckpt[broker_key]
    assert ours["physic_msg_time"].endswith("Z")
    if "bytes40toEndAllZero" in ckpt:
        assert ours["rest_zero"] == ckpt["bytes40toEndAllZero"]

    assert info["abort"]["present"] == state["abortFileExists"]
    assert info["abort"]["last_shutdown_abnormal"] == state["abortFileExists"]
    if "abortFileContent" in state:  # 5.3.3: the PID
        assert info["abort"]["content"] == state["abortFileContent"]
        if state["abortFileContent"]:
            assert info["abort"]["pid"] == int(state["abortFileContent"])
        assert info["abort"]["bak_content"] == state["abortBakFileContent"]
    assert info["lock"]["present"] == state["lockFileExists"]
    assert info["lock"]["held"] is False
    if "lockFileContent" in state:
        assert info["lock"]["content"] == state["lockFileContent"]

    broker_index = state["indexFiles"]
    assert [f["name"] for f in info["index"]["files"]] == sorted(broker_index)
    for f in info["index"]["files"]:
        header = broker_index[f["name"]]
        assert f["size"] == header["fileSize"] and f["size_ok"]
        for broker_key, our_key in (("beginTimestamp", "begin_timestamp"),
                                    ("endTimestamp", "end_timestamp"),
                                    ("beginPhyOffset", "begin_phy_offset"),
                                    ("endPhyOffset", "end_phy_offset"),
                                    ("hashSlotCount", "hash_slot_count"),
                                    ("indexCount", "index_count")):
            assert f[our_key] == header[broker_key]
        assert f["entries_used"] == header["indexCount"] - 1
        assert f["full"] == (header["indexCount"] == geometry["maxIndexNum"])

    geo = info["geometry"]
    assert geo["commitlog_file_size"] == geometry["mappedFileSizeCommitLog"]
    assert geo["cq_file_size"] == geometry["mappedFileSizeConsumeQueue"]
    assert geo["index_slots"] == geometry["maxHashSlotNum"]
    assert geo["index_entries"] == geometry["maxIndexNum"]
    assert {geo["commitlog_file_size_source"], geo["cq_units_per_file_source"],
            geo["index_geometry_source"]} == {"inferred"}
    if "rootEntries" in state:
        assert info["stray_files"] == []


def test_info_json_through_the_cli(fixture_store, mqtool):
    proc = mqtool("info", fixture_store, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    dump = _json_gz(fixture_store.parent / "dump.json.gz")
    assert info["commitlog"]["messages"] == dump["messageCount"] == 2000
    assert info["config"]["delayOffset.json"] == {"source": "delayOffset.json",
                                                  "fallback_to_bak": False, "outcome": "main",
                                                  "levels": {}}
    assert info["consume_queues"]["queues"] == sum(
        len(q) for q in dump["fileState"]["consumeQueueFiles"].values())


def test_info_screen_is_compact_and_says_the_essentials(fixture_store, mqtool):
    proc = mqtool("info", fixture_store)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= 40, proc.stdout
    text = " ".join(proc.stdout.split())
    for expected in ("2000 messages", "end of data 2745792", "blank@1047261 size=1315",
                     "unwritten@648640", "last shutdown clean", "present, not held",
                     "physic_msg_timestamp", "1795308686171", "2026-11-22 00:51:26.171",
                     "delayOffset.json", "TopicTest", "20261122005125786"):
        assert expected in text, expected
    per_queue = mqtool("info", fixture_store, "--queues")
    assert per_queue.returncode == 0
    assert "0..184" in per_queue.stdout  # TopicTest-0: queue offsets 0..184, 185 CQ units


def test_info_reports_damage_overrides_strays_and_config_fallback(store_copy, mqtool):
    # a bad magic in the middle of the first file ends that file's scan, the next still counts
    dump = _json_gz(Path(__file__).resolve().parent.parent / "fixtures" / "rocketmq-4.9.8"
                    / "clean-small" / "dump.json.gz")
    victim = dump["messages"][100]
    segment = store_copy / "commitlog" / victim["file"]
    data = bytearray(segment.read_bytes())
    data[victim["filePos"] + 4:victim["filePos"] + 8] = b"\x12\x34\x56\x78"
    os.chmod(segment, 0o644)
    segment.write_bytes(bytes(data))
    (store_copy / "junk.bin").write_bytes(b"x")
    (store_copy / "commitlog" / "notes.txt").write_text("x")
    config = store_copy / "config"
    (config / "consumerOffset.json").write_text("")
    (config / "consumerOffset.json.bak").write_text(
        '{"offsetTable":{"TopicTest@g1":{0:5,1:7},"OrderTopic@g1":{0:1}}}')
    (config / "topics.json").write_text(
        '{"topicConfigTable":{"A":{},"B":{},"C":{}},"dataVersion":{"counter":1}}')

    proc = mqtool("info", store_copy, "--json", "--cq-units", "600")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    files = info["commitlog"]["files"]
    assert files[0]["messages"] == 100
    assert files[0]["scan_end"]["kind"] == "corrupt"
    assert files[0]["scan_end"]["position"] == victim["filePos"]
    assert files[0]["scan_end"]["code"] == "CL_BAD_MAGIC"
    assert [f["messages"] for f in files[1:]] == [773, 465]
    assert info["commitlog"]["corrupt_regions"][0]["commitlog_offset"] == victim["commitLogOffset"]
    assert info["stray_files"] == ["junk.bin"]
    assert info["commitlog"]["stray_files"] == ["commitlog/notes.txt"]
    assert info["geometry"]["cq_units_per_file"] == 600
    assert info["geometry"]["cq_units_per_file_source"] == "override"
    offsets = info["config"]["consumerOffset.json"]
    reason = offsets.pop("reason")
    assert offsets == {"source": "consumerOffset.json.bak", "fallback_to_bak": True,
                       "outcome": "bak", "topic_groups": 2, "queues": 3}
    assert "consumerOffset.json is empty" in reason and "consumerOffset.json.bak" in reason
    assert info["config"]["topics.json"]["topics"] == 3

    screen = mqtool("info", store_copy)
    assert screen.returncode == 0
    text = " ".join(screen.stdout.split())  # undo rich's line wrapping
    assert "corrupt@" in text and "CL_BAD_MAGIC" in text
    assert "consumerOffset.json (read consumerOffset.json.bak)" in text
    assert "junk.bin" in text


GOOD_TOPICS = '{"topicConfigTable":{"A":{},"B":{}},"dataVersion":{"counter":1}}'


@pytest.mark.parametrize("main", ["null", " \n\t"])
def test_info_config_a_main_file_that_decodes_to_nothing_hides_a_good_bak(store_copy, mqtool,
                                                                          main):
    # ConfigManager.load falls back to the .bak only when the main file is missing, empty or
    # fails to decode; `null` and blank text decode (to a null table) without failing, so the
    # broker starts with an empty topic table even though topics.json.bak holds two topics
    config = store_copy / "config"
    (config / "topics.json").write_text(main)
    (config / "topics.json.bak").write_text(GOOD_TOPICS)
    proc = mqtool("info", store_copy, "--json")
    assert proc.returncode == 0, proc.stderr
    topics = json.loads(proc.stdout)["config"]["topics.json"]
    assert topics["source"] == "topics.json"
    assert topics["fallback_to_bak"] is False
    assert topics["outcome"] == "empty"
    assert "topics" not in topics
    screen = mqtool("info", store_copy)
    assert screen.returncode == 0
    assert "topics.json: the broker starts with an empty table" in " ".join(screen.stdout.split())
    dumped = mqtool("dump", config / "topics.json", "--json")
    assert dumped.returncode == 0, dumped.stderr
    record = json.loads(dumped.stdout.splitlines()[0])
    assert record["source"] == "topics.json" and record["data"] is None


def test_info_config_an_undecodable_bak_behind_a_broken_main_file_stops_the_broker(store_copy,
                                                                                 mqtool):
    config = store_copy / "config"
    (config / "topics.json").write_text('{"topicConfigTable":{')
    (config / "topics.json.bak").write_text('{"topicConfigTable" 1}')
    proc = mqtool("info", store_copy, "--json")
    assert proc.returncode == 0, proc.stderr
    topics = json.loads(proc.stdout)["config"]["topics.json"]
    assert topics["source"] is None and topics["outcome"] == "refuses"
    assert "refuses to start" in topics["reason"]
    screen = mqtool("info", store_copy)
    assert "topics.json: the broker refuses to start" in " ".join(screen.stdout.split())
    dumped = mqtool("dump", config / "topics.json")
    assert dumped.returncode == 2
    assert dumped.stderr.startswith("mqtool: error:") and "refuses to start" in dumped.stderr


@pytest.mark.parametrize("bak", [None, ""])
def test_info_config_a_broken_main_file_without_a_usable_bak_means_an_empty_table(store_copy,
                                                                                mqtool, bak):
    config = store_copy / "config"
    (config / "topics.json").write_text('{"topicConfigTable":{')
    (config / "topics.json.bak").unlink(missing_ok=True)
    if bak is not None:
        (config / "topics.json.bak").write_text(bak)
    proc = mqtool("info", store_copy, "--json")
    assert proc.returncode == 0, proc.stderr
    topics = json.loads(proc.stdout)["config"]["topics.json"]
    assert topics["source"] is None and topics["outcome"] == "empty"


def test_info_sees_a_lock_held_by_a_live_process(store_copy, mqtool):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR)\n"
         "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
         "print('locked', flush=True)\n"
         "time.sleep(60)\n", str(store_copy / "lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = mqtool("info", store_copy, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["lock"] == {"present": True, "held": True,
                                                   "content": "lock"}
        assert "held by a live process" in " ".join(mqtool("info", store_copy).stdout.split())
    finally:
        holder.kill()
        holder.wait()


def test_info_abnormal_shutdown_is_reported(store_copy, mqtool):
    (store_copy / "abort").write_text("4242")
    (store_copy / "abort.bak").write_text("")
    info = json.loads(mqtool("info", store_copy, "--json").stdout)
    assert info["abort"] == {"present": True, "last_shutdown_abnormal": True, "content": "4242",
                             "pid": 4242, "bak_present": True, "bak_content": ""}
    screen = " ".join(mqtool("info", store_copy).stdout.split())
    assert "last shutdown abnormal" in screen and "PID 4242" in screen


def test_info_bad_input_is_one_line_exit_2(tmp_path, mqtool):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "readme.txt").write_text("hello")
    (tmp_path / "file").write_bytes(b"abc")
    for target in (tmp_path / "missing", tmp_path / "plain", tmp_path / "file"):
        proc = mqtool("info", target)
        assert proc.returncode == 2, (target, proc.stderr)
        assert proc.stdout == ""
        assert proc.stderr.startswith("mqtool: error: ") and proc.stderr.count("\n") == 1
    proc = mqtool("info", tmp_path / "plain", "--cq-units", "0")
    assert proc.returncode == 2


def test_check_crc_counts_the_damaged_records(shared_stores):
    body = store_info(Store(shared_stores / "clean-small-damaged" / "store"), check_crc=True)
    assert body["commitlog"]["body_crc_mismatches"] == 1
    assert body["commitlog"]["messages"] == 2000  # a CRC mismatch is still a decodable record
    props = store_info(Store(shared_stores / "v5-propcrc-damaged" / "store"), check_crc=True)
    assert props["commitlog"]["prop_crc_mismatches"] == 1
    assert props["commitlog"]["body_crc_mismatches"] == 0
    clean = store_info(Store(shared_stores / "v5-propcrc-clean" / "store"), check_crc=True)
    assert (clean["commitlog"]["body_crc_mismatches"],
            clean["commitlog"]["prop_crc_mismatches"]) == (0, 0)


def test_property_crc_presence_counts_each_records_own_tail(tmp_path):
    """info counts the records whose properties end with a well-formed property CRC field
    (codecs.stored_prop_crc) from the batches' bytes: the same count as asking record by
    record, also where the field's key, a digit or its separator is broken."""
    from mqtool import forge
    from mqtool.formats import codecs
    from mqtool.scan import MessageRecord, scan_segment

    root = tmp_path / "store"
    forge.make_store(root, forge.ForgeOptions(messages=2000, seed=6, broker_version=5,
                                              prop_crc=True, commitlog_file_size=256 * 1024))
    seg = Store(root).commitlog.segments[1]
    records = [e for e in scan_segment(seg, check_crc=False) if type(e) is MessageRecord]
    # the field is the last 20 bytes of a record: key, 0x01, ten digits, 0x02
    for record, where, value in ((records[3], 0, b"X"), (records[7], 12, b"x"),
                                 (records[11], 19, b"\x03"), (records[15], 8, b"\x02")):
        with open(seg.path, "r+b") as fh:
            fh.seek(record.offset + record.total_size - 20 + where - seg.base_offset)
            fh.write(value)
    store = Store(root)
    expected = sum(codecs.stored_prop_crc(event.properties_raw) is not None
                   for seg in store.commitlog.segments
                   for event in scan_segment(seg, check_crc=False)
                   if type(event) is MessageRecord)
    total = store_info(store)["commitlog"]
    assert expected == total["messages"] - 4
    assert total["prop_crc_records"] == expected
    # a batch the scanner builds from decoded records (a record off its fast path) answers alike
    from mqtool.scan import RecordBatch, TopicTable
    decoded = [e for e in scan_segment(seg, check_crc=False) if type(e) is MessageRecord]
    batch = RecordBatch.from_records(decoded, seg.base_offset, TopicTable())
    assert batch.stored_prop_crc_present().tolist() == [
        codecs.stored_prop_crc(r.properties_raw) is not None for r in decoded]
    assert batch.stored_prop_crc_present().sum() == len(decoded) - 4
