"""mqtool export (replay JSON lines, real topics of parked messages) and mqtool diff (master vs
slave, backup vs live)."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from conftest import run_mqtool
from mqtool import forge
from mqtool.writer import Message, StoreWriter

# MessageStoreConfig.messageDelayLevel default, in ms (spec §3)
DELAY_MS = [1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
            420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000]
TX_KIND = {0x4: "transaction-prepared", 0x8: "transaction-commit", 0xC: "transaction-rollback"}


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def master(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("master") / "store"
    forge.make_store(root, forge.ForgeOptions(messages=2000, seed=5, delay_ratio=0.05,
                                              transaction_ratio=0.06))
    return root


@pytest.fixture(scope="module")
def master_dump(master) -> dict[int, dict]:
    proc = run_mqtool("dump", "--json", "--messages-only", master)
    assert proc.returncode == 0, proc.stderr
    return {m["commitlog_offset"]: m for m in jsonl(proc.stdout)}


# --- export ---------------------------------------------------------------------------------------

def test_export_is_the_dump_plus_replay_fields(master, master_dump, mqtool):
    proc = mqtool("export", master, "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr
    exported = jsonl(proc.stdout)
    assert [m["commitlog_offset"] for m in exported] == sorted(master_dump)
    kinds = set()
    for m in exported:
        base = {k: v for k, v in m.items() if k not in ("kind", "real_topic", "real_queue_id",
                                                          "delay_level", "deliver_timestamp",
                                                          "transaction_id",
                                                          "beyond_truncation")}
        assert base == master_dump[m["commitlog_offset"]]
        props = m["properties"]
        kinds.add(m["kind"])
        if m["topic"] == "SCHEDULE_TOPIC_XXXX":
            assert m["kind"] == "delayed"
            assert m["real_topic"] == props["REAL_TOPIC"] != "SCHEDULE_TOPIC_XXXX"
            assert m["real_queue_id"] == int(props["REAL_QID"])
            level = min(int(props["DELAY"]), len(DELAY_MS))
            assert m["delay_level"] == int(props["DELAY"])
            assert m["deliver_timestamp"] == m["store_timestamp"] + DELAY_MS[level - 1]
        elif m["sys_flag"] & 0xC:
            assert m["kind"] == TX_KIND[m["sys_flag"] & 0xC]
            assert m["real_topic"] == m["topic"]
        elif m["topic"].startswith("%RETRY%"):
            assert m["kind"] == "retry"
        else:
            assert m["kind"] == "normal" and m["real_topic"] == m["topic"]
            assert m["real_queue_id"] == m["queue_id"]
        assert m["beyond_truncation"] is False
    assert {"delayed", "normal", "retry", "transaction-commit"} <= kinds
    assert "exported 2000 message(s)" in proc.stderr


def test_export_topic_selects_by_real_topic(master, master_dump, mqtool, tmp_path):
    out = tmp_path / "topictest.jsonl"
    proc = mqtool("export", master, "--topic", "TopicTest", "--out", out)
    assert proc.returncode == 0, proc.stderr
    got = [m["commitlog_offset"] for m in jsonl(out.read_text(encoding="utf-8"))]
    expected = sorted(o for o, m in master_dump.items() if m["topic"] == "TopicTest"
                      or (m["topic"] == "SCHEDULE_TOPIC_XXXX"
                          and m["properties"].get("REAL_TOPIC") == "TopicTest"))
    assert got == expected
    assert any(master_dump[o]["topic"] == "SCHEDULE_TOPIC_XXXX" for o in got)
    two = jsonl(mqtool("export", master, "--topic", "TopicTest", "--topic", "OrderTopic").stdout)
    assert {m["real_topic"] for m in two} == {"TopicTest", "OrderTopic"}


def test_export_time_window(master, master_dump, mqtool):
    times = sorted(m["store_timestamp"] for m in master_dump.values())
    lo, hi = times[500], times[1500]
    got = jsonl(mqtool("export", master, "--since", str(lo), "--until", str(hi)).stdout)
    assert [m["commitlog_offset"] for m in got] == sorted(
        o for o, m in master_dump.items() if lo <= m["store_timestamp"] <= hi)


def test_half_timer_and_system_topics_are_marked(tmp_path, mqtool):
    root = tmp_path / "store"
    writer = StoreWriter(root, commitlog_file_size=1 << 20, cq_units_per_file=100,
                         index_slots=64, index_entries=256)
    ts = 1_790_000_000_000
    cases = [
        ("RMQ_SYS_TRANS_HALF_TOPIC", 0, {"REAL_TOPIC": "Orders", "REAL_QID": "2",
                                         "__transactionId__": "tx-1", "TRAN_MSG": "true"},
         ("transaction-half", "Orders", 2)),
        ("rmq_sys_wheel_timer", 0, {"REAL_TOPIC": "Orders", "REAL_QID": "1",
                                    "TIMER_OUT_MS": str(ts + 60_000)},
         ("timer", "Orders", 1)),
        ("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0, {"TAGS": "d"}, ("transaction-op", None, None)),
        ("%DLQ%GroupA", 0, {}, ("dlq", "%DLQ%GroupA", 0)),
        ("Orders", 3, {}, ("normal", "Orders", 3)),
    ]
    for i, (topic, queue_id, props, _) in enumerate(cases):
        writer.put(Message(topic=topic, queue_id=queue_id, body=f"m{i}".encode(),
                           properties={"UNIQ_KEY": f"{i:032X}", **props},
                           born_timestamp=ts + i, store_timestamp=ts + i))
    writer.close()
    proc = mqtool("export", root)
    assert proc.returncode == 0, proc.stderr
    got = jsonl(proc.stdout)
    for m, (topic, _, props, (kind, real_topic, real_queue)) in zip(got, cases):
        assert m["topic"] == topic and m["kind"] == kind
        if real_topic is not None:
            assert (m["real_topic"], m["real_queue_id"]) == (real_topic, real_queue)
    assert got[0]["transaction_id"] == "tx-1"
    assert got[1]["deliver_timestamp"] == ts + 60_000
    orders = jsonl(mqtool("export", root, "--topic", "Orders").stdout)
    assert [m["kind"] for m in orders] == ["transaction-half", "timer", "normal"]


def test_export_live_only_leaves_out_what_recovery_truncates(master, master_dump, tmp_path,
                                                               mqtool):
    copy = tmp_path / "store"
    shutil.copytree(master, copy)
    damage = json.loads(mqtool("fixture", "damage", copy, "--kind", "bit-flip", "--file",
                               "commitlog/00000000000001048576", "--seed", "2").stdout)
    victim = damage["records"][0]["offset"]
    everything = jsonl(mqtool("export", copy).stdout)
    assert victim not in {m["commitlog_offset"] for m in everything}
    assert {m["commitlog_offset"] for m in everything if m["beyond_truncation"]} == {
        o for o in master_dump if o > victim}
    live = mqtool("export", copy, "--live-only")
    assert [m["commitlog_offset"] for m in jsonl(live.stdout)] == sorted(
        o for o in master_dump if o < victim)
    assert "1 damaged record(s) left out" in live.stderr


def test_delivered_delay_messages_in_a_reference_store(shared_stores, mqtool):
    folder = shared_stores / "delay-delivered-small"
    with gzip.open(folder / "dump.json.gz") as fh:
        broker = json.load(fh)["messages"]
    got = jsonl(mqtool("export", folder / "store", "--no-decompress").stdout)
    assert [m["commitlog_offset"] for m in got] == [b["commitLogOffset"] for b in broker]
    parked = [m for m in got if m["topic"] == "SCHEDULE_TOPIC_XXXX"]
    assert parked and all(m["kind"] == "delayed" and m["real_topic"] != m["topic"]
                          for m in parked)
    delivered = [m for m in got if m["topic"] != "SCHEDULE_TOPIC_XXXX"
                 and "REAL_TOPIC" in m["properties"] and "DELAY" in m["properties"]]
    assert delivered
    uniq_parked = {m["uniq_key"]: m for m in parked}
    for m in delivered[:20]:
        twin = uniq_parked[m["uniq_key"]]
        assert twin["real_topic"] == m["topic"] and twin["real_queue_id"] == m["queue_id"]
        assert m["store_timestamp"] >= twin["deliver_timestamp"] - 1000


@pytest.mark.parametrize("args,text", [
    (["--format", "csv"], "--format must be one of jsonl"),
    (["--since", "soon"], "not a time"),
])
def test_export_bad_input(master, mqtool, args, text):
    proc = mqtool("export", master, *args)
    assert proc.returncode == 2 and text in proc.stderr


def test_export_refuses_to_write_into_the_store(master, mqtool):
    proc = mqtool("export", master, "--out", master / "export.jsonl")
    assert proc.returncode == 2 and not (master / "export.jsonl").exists()


# --- diff -----------------------------------------------------------------------------------------

def test_identical_stores(master, tmp_path, mqtool):
    copy = tmp_path / "copy"
    shutil.copytree(master, copy)
    proc = mqtool("diff", "--json", master, copy)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["identical"] is True
    assert result["commitlog"]["first_divergent_offset"] is None
    assert result["commitlog"]["records_same"] == 2000
    assert "\nidentical: same CommitLog records" in mqtool("diff", master, copy).stdout


def test_master_and_lagging_slave(master, master_dump, tmp_path, mqtool):
    """The forge is deterministic per seed, so the same seed with fewer messages is the
    master's prefix: a slave that stopped replicating."""
    slave = tmp_path / "slave"
    forge.make_store(slave, forge.ForgeOptions(messages=1500, seed=5, delay_ratio=0.05,
                                               transaction_ratio=0.06))
    proc = mqtool("diff", "--json", master, slave)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    offsets = sorted(master_dump)
    cl = result["commitlog"]
    assert cl["first_divergent_offset"] == offsets[1500]
    assert cl["records_same"] == 1500
    assert cl["records_only_in_a"]["count"] == 500 and cl["records_only_in_b"]["count"] == 0
    assert cl["records_only_in_a"]["first"][0]["commitlog_offset"] == offsets[1500]
    assert cl["records_different"]["count"] == 0
    # per queue: the slave's queue ends where the master's goes on
    slave_next: dict[tuple[str, int], int] = {}
    for o in offsets[:1500]:
        m = master_dump[o]
        if m["sys_flag"] & 0xC in (0, 0x8):
            key = (m["topic"], m["queue_id"])
            slave_next[key] = m["queue_offset"] + 1
    for q in result["consume_queues"]["queues"]:
        key = (q["topic"], q["queue_id"])
        assert q["first_divergent_queue_offset"] == slave_next.get(key, 0)
        assert q["units_only_in_b"] == 0 and q["units_different"] == 0
    text = mqtool("diff", master, slave).stdout
    assert f"first divergent offset {offsets[1500]}" in text


def test_a_flipped_byte_is_one_different_record(master, tmp_path, mqtool):
    copy = tmp_path / "store"
    shutil.copytree(master, copy)
    damage = json.loads(mqtool("fixture", "damage", copy, "--kind", "bit-flip", "--seed",
                               "4").stdout)
    result = json.loads(mqtool("diff", "--json", master, copy).stdout)
    victim = damage["records"][0]["offset"]
    cl = result["commitlog"]
    assert cl["first_divergent_offset"] == victim
    assert cl["first_divergent_byte"] == damage["range"]["start"]
    assert cl["records_different"]["count"] == 1
    assert cl["records_different"]["first"][0]["commitlog_offset"] == victim
    assert result["consume_queues"]["queues_different"] == 0


def test_diff_bad_input(master, tmp_path, mqtool):
    proc = mqtool("diff", master, tmp_path / "absent")
    assert proc.returncode == 2 and "no such file" in proc.stderr


# --- read-only ------------------------------------------------------------------------------------

READ_ONLY_ARGS = [
    ["query", "--json", "--explain", "--key", "hotkey-0", "--topic", "TopicTest", "{store}"],
    ["query", "--json", "--scan", "--key", "hotkey-0", "--topic", "TopicTest", "{store}"],
    ["query", "--json", "--topic", "TopicTest", "--queue", "0", "--offset", "3", "{store}"],
    ["salvage", "{store}", "--out", "{out}/salvage.jsonl", "--map", "{out}/map.json"],
    ["export", "{store}", "--out", "{out}/export.jsonl"],
    ["diff", "--json", "{store}", "{store}"],
]


@pytest.mark.parametrize("args", READ_ONLY_ARGS, ids=[" ".join(a[:3]) for a in READ_ONLY_ARGS])
def test_commands_never_open_a_store_file_for_writing(tmp_path, args):
    """Under test_readonly's audit hook (any write-mode open or mmap inside the store fails) on a
    copy of the reference store; every byte and mtime compared afterwards."""
    import subprocess
    import sys

    from conftest import FIXTURE_STORE
    from test_readonly import GUARD, snapshot
    store = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", store)
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(store=store, out=out) for a in args]
    before = snapshot(store)
    proc = subprocess.run([sys.executable, "-c", GUARD, str(store), "--no-progress", *argv],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(store) == before
