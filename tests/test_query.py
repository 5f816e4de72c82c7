"""mqtool query: answers equal the broker's (recover.json queryMessage, its own decode in
dump.json), no 64 cap, fallbacks when the index is missing, stale or damaged, and bad input.

Ground truth is the broker-written reference stores (queryMessage results and MessageDecoder
dumps) and, for forge stores, a plain scan of every record (a code path the index walk does not
share)."""
from __future__ import annotations

import datetime as dt
import gzip
import json
import shutil
import struct
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import FIXTURE_STORE, SHARED_STORES, run_mqtool, shared_store_names, write_log
from mqtool import forge
from mqtool import query as q
from mqtool.formats import codecs
from mqtool.formats import indexfile as idx_fmt
from mqtool.inspect import ms_to_iso
from mqtool.recovery import predict_recovery
from mqtool.scan import MessageRecord, Scanner
from mqtool.store import Store
from mqtool.writer import Message, StoreWriter, checkpoint_bytes

ROLLBACK = 0xC


@lru_cache(maxsize=None)
def load_gz(path: str):
    with gzip.open(path) as fh:
        return json.load(fh)


def broker_dirs() -> list[tuple[str, Path, Path]]:
    """(name, reference folder, store the broker answered queryMessage on)."""
    out = [("fixture/clean-small", FIXTURE_STORE, FIXTURE_STORE / "store")]
    out += [(n, SHARED_STORES / n, SHARED_STORES / n / "recovered") for n in shared_store_names()]
    return out


def raw_dirs() -> list[tuple[str, Path]]:
    return [("fixture/clean-small", FIXTURE_STORE)] + [(n, SHARED_STORES / n)
                                                      for n in shared_store_names()]


def plan_for(store: Store, recover: dict):
    """The recovery the broker ran with (5.3.3 records its configuration)."""
    config = recover.get("storeConfig") or {}
    return predict_recovery(store, broker_version="auto",
                            force_verify_prop_crc=config.get("forceVerifyPropCRC", False))


# --- the broker's own answers ------------------------------------------------------------------

@pytest.mark.parametrize("name,folder,root", broker_dirs(), ids=[d[0] for d in broker_dirs()])
def test_broker_compatible_answers_equal_the_brokers_query_message(name, folder, root):
    recover = load_gz(str(folder / "recover.json.gz"))
    store = Store(root)
    end = plan_for(store, recover).process_offset
    assert end == recover["afterRecovery"]["maxPhyOffset"]
    wrong = []
    for entry in recover["queryMessage"]:
        got = q.broker_query_message(store, entry["topic"], entry["key"], max_offset=end)
        if got != entry["offsets"]:
            wrong.append((entry["kind"], entry["topic"], entry["key"], got, entry["offsets"]))
    assert wrong == [], wrong[:3]
    # the queries cover the cases that make the broker's answer odd
    kinds = {e["kind"] for e in recover["queryMessage"]}
    assert "hot key" in kinds


def _expected(dump: list[dict], topic: str, key: str, uniq: bool,
              inner: dict[int, list[dict]] | None = None) -> list[int]:
    """Offsets of the records carrying the key, once more for each inner message of an inner
    batch that carries it (``inner``: write.json's inner lists by CommitLog offset)."""
    def carries(m: dict) -> bool:
        return (m.get("uniqKey") == key) if uniq else key in (m.get("keys") or "").split(" ")

    out = []
    for m in dump:
        if m["topic"] != topic or m["sysFlag"] & 0xC == ROLLBACK:
            continue
        if carries(m):
            out.append(m["commitLogOffset"])
        out += [m["commitLogOffset"]] * sum(map(carries, (inner or {}).get(m["commitLogOffset"],
                                                                           [])))
    return sorted(out)


@pytest.mark.parametrize("name,folder", raw_dirs(), ids=[d[0] for d in raw_dirs()])
def test_query_finds_exactly_the_messages_the_brokers_decoder_sees(name, folder):
    """On the store as the broker left it (index stale after a crash or damage included),
    every record that carries the key, and nothing else, whatever the count."""
    recover = load_gz(str(folder / "recover.json.gz"))
    dump = load_gz(str(folder / "dump.json.gz"))["messages"]
    store = Store(folder / "store")
    # inner messages of inner batches (5.3.3 BatchCQ stores): mqtool finds them, the broker not
    inner = {m["wroteOffset"]: m["inner"] for m in write_log(folder).get("messages", [])
             if m.get("kind") == "innerBatch" and m.get("status") == "PUT_OK"}
    entries = recover["queryMessage"]
    sample = [e for e in entries if e["kind"] in ("hot key", "absent key")] + entries[::25]
    for entry in sample:
        uniq = "uniq" in entry["kind"].lower()
        if uniq:
            result = q.query_uniq_key(store, entry["key"], entry["topic"])
        else:
            result = q.query_key(store, entry["key"], entry["topic"])
        expected = _expected(dump, entry["topic"], entry["key"], uniq, inner)
        assert result.offsets == expected, (entry, result.notes)
        # whatever else the broker returned belongs to another key with the same hash
        carriers = {m["commitLogOffset"] for m in dump}
        for extra in set(entry["offsets"]) - set(result.offsets):
            assert extra in carriers and extra not in expected, entry


def test_uniq_key_finds_every_copy_across_topics(shared_stores):
    """delay-delivered-small: a delayed message exists twice (SCHEDULE_TOPIC_XXXX and the
    delivered copy); without --topic both come back."""
    folder = shared_stores / "delay-delivered-small"
    dump = load_gz(str(folder / "dump.json.gz"))["messages"]
    by_uniq: dict[str, list[dict]] = {}
    for m in dump:
        if m.get("uniqKey"):
            by_uniq.setdefault(m["uniqKey"], []).append(m)
    twice = [u for u, ms in by_uniq.items()
             if {m["topic"] for m in ms} > {"SCHEDULE_TOPIC_XXXX"}
             and "SCHEDULE_TOPIC_XXXX" in {m["topic"] for m in ms}]
    assert twice
    store = Store(folder / "store")
    for uniq in twice[:5]:
        result = q.query_uniq_key(store, uniq)
        expected = sorted(m["commitLogOffset"] for m in by_uniq[uniq] if m["sysFlag"] & 0xC
                          != ROLLBACK)
        assert result.offsets == expected
        assert {f.record.topic for f in result.found} >= {"SCHEDULE_TOPIC_XXXX"}


def test_msg_id_reads_the_record_the_broker_named(shared_stores):
    """v6-unicode-small: 56-hex offsetMsgIds of IPv6 store hosts."""
    folder = shared_stores / "v6-unicode-small"
    dump = load_gz(str(folder / "dump.json.gz"))["messages"]
    store = Store(folder / "store")
    for m in dump[::300]:
        assert len(m["msgId"]) == 56
        result = q.query_msg_id(store, m["msgId"])
        assert result.offsets == [m["commitLogOffset"]]
        assert result.found[0].record.topic == m["topic"]
        assert result.details["decoded"]["store_host"] == m["storeHost"]


# --- forge stores --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hot_store(tmp_path_factory) -> Path:
    """One topic, so the hot keys have far more than 64 messages."""
    root = tmp_path_factory.mktemp("hot") / "store"
    forge.make_store(root, forge.ForgeOptions(messages=2500, seed=11, topics=("TopicTest",),
                                              body_mean=300, body_max=900))
    return root


def scan_truth(root: Path, topic: str | None, key: str | None = None,
               uniq: str | None = None) -> list[int]:
    out = []
    for rec in Scanner(Store(root).commitlog, check_crc=False):
        if type(rec) is not MessageRecord or rec.sys_flag & 0xC == ROLLBACK:
            continue
        if topic is not None and rec.topic != topic:
            continue
        props = codecs.decode_properties(rec.properties_raw)
        if (props.get("UNIQ_KEY") == uniq) if uniq else key in (props.get("KEYS") or "").split(" "):
            out.append(rec.offset)
    return out


def test_key_query_has_no_64_cap_and_the_broker_mode_does(hot_store):
    truth = scan_truth(hot_store, "TopicTest", "hotkey-0")
    assert len(truth) > 64
    store = Store(hot_store)
    result = q.query_key(store, "hotkey-0", "TopicTest")
    assert result.offsets == truth
    assert all(f.found_by == "index" for f in result.found)
    broker = q.broker_query_message(store, "TopicTest", "hotkey-0")
    assert len(broker) == 64 and broker == sorted(broker)
    # the broker keeps the newest 64 entries
    assert set(broker) <= set(truth) and max(broker) == max(truth)
    explained = q.explain(store, result)
    assert "result-cap" in {r["reason"] for r in explained["reasons"]}
    newest = q.query_key(store, "hotkey-0", "TopicTest", max_results=10)
    assert newest.offsets == truth[-10:]


def test_key_query_time_window(hot_store):
    store = Store(hot_store)
    records = {r.offset: r for r in Scanner(store.commitlog) if type(r) is MessageRecord}
    truth = scan_truth(hot_store, "TopicTest", "hotkey-1")
    times = sorted(records[o].store_timestamp for o in truth)
    lo, hi = times[len(times) // 4], times[3 * len(times) // 4]
    result = q.query_key(store, "hotkey-1", "TopicTest", since=lo, until=hi)
    assert result.offsets == [o for o in truth if lo <= records[o].store_timestamp <= hi]


def test_cli_key_query_json_and_table(hot_store, mqtool):
    truth = scan_truth(hot_store, "TopicTest", "hotkey-2")
    proc = mqtool("query", "--json", "--key", "hotkey-2", "--topic", "TopicTest", hot_store)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    messages = [x for x in lines if x["record_type"] == "commitlog/message"]
    assert [m["commitlog_offset"] for m in messages] == truth
    assert all("hotkey-2" in m["keys"].split(" ") for m in messages)
    assert lines[-1]["record_type"] == "query/summary" and lines[-1]["found"] == len(truth)
    table = mqtool("query", "--key", "hotkey-2", "--topic", "TopicTest", hot_store)
    assert table.returncode == 0 and str(truth[0]) in table.stdout
    absent = mqtool("query", "--key", "no-such-key", "--topic", "TopicTest", hot_store)
    assert absent.returncode == 1 and "0 message(s) found" in absent.stderr
    broker = mqtool("query", "--json", "--broker-compatible", "--key", "hotkey-2", "--topic",
                    "TopicTest", hot_store)
    assert broker.returncode == 0
    got = [json.loads(x) for x in broker.stdout.splitlines()]
    assert len([x for x in got if x["record_type"] == "commitlog/message"]) == 64


def test_missing_index_falls_back_to_a_scan_and_says_so(hot_store, tmp_path, mqtool):
    copy = tmp_path / "store"
    shutil.copytree(hot_store, copy)
    shutil.rmtree(copy / "index")
    truth = scan_truth(hot_store, "TopicTest", "hotkey-3")
    result = q.query_key(Store(copy), "hotkey-3", "TopicTest")
    assert result.offsets == truth
    assert all(f.found_by == "scan" for f in result.found)
    assert any("no IndexFile" in n for n in result.notes)
    proc = mqtool("query", "--key", "hotkey-3", "--topic", "TopicTest", copy)
    assert proc.returncode == 0 and "no IndexFile" in proc.stderr


def test_stale_index_after_a_crash(tmp_path):
    """--crash stops dispatch short of the CommitLog end: the tail is scanned."""
    root = tmp_path / "store"
    forge.make_store(root, forge.ForgeOptions(messages=1500, seed=4, crash=True))
    store = Store(root)
    records = [r for r in Scanner(store.commitlog) if type(r) is MessageRecord]
    with q.IndexSet(store) as index:
        indexed_end = max(f.end_phy_offset for f in index.files if f.used)
    late = [r for r in records if r.offset > indexed_end
            and codecs.decode_properties(r.properties_raw).get("UNIQ_KEY")]
    assert late, "the crash left no unindexed message"
    target = late[-1]
    uniq = codecs.decode_properties(target.properties_raw)["UNIQ_KEY"]
    result = q.query_uniq_key(store, uniq, target.topic)
    assert result.offsets == scan_truth(root, target.topic, uniq=uniq)
    assert target.offset in result.offsets
    assert [f.found_by for f in result.found if f.record.offset == target.offset] == ["scan"]
    assert any("no IndexFile covers" in n for n in result.notes)


def _entry_pos(slots: int, number: int) -> int:
    return idx_fmt.entry_position(slots, number)


def _damage_chain(path: Path, slots: int, key_hash: int, how: str) -> None:
    """Rewrite one chain of an IndexFile: its head's prev pointer made to loop, point forward,
    or past indexCount; or the slot itself past indexCount."""
    data = bytearray(path.read_bytes())
    index_count = struct.unpack_from(">i", data, 36)[0]
    slot_pos = idx_fmt.slot_position(key_hash % slots)
    head = struct.unpack_from(">i", data, slot_pos)[0]
    assert 0 < head < index_count
    prev_pos = _entry_pos(slots, head) + 16
    second = struct.unpack_from(">i", data, prev_pos)[0]
    if how == "self-loop":
        struct.pack_into(">i", data, prev_pos, head)
    elif how == "two-cycle":
        assert second > 0
        struct.pack_into(">i", data, _entry_pos(slots, second) + 16, head)
    elif how == "past-count":
        struct.pack_into(">i", data, prev_pos, index_count + 7)
    elif how == "slot-past-count":
        struct.pack_into(">i", data, slot_pos, index_count + 100)
    elif how == "truncated-file":
        data = data[:_entry_pos(slots, head // 2)]
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["self-loop", "two-cycle", "past-count", "slot-past-count",
                                 "truncated-file"])
def test_damaged_index_chains_end_and_the_answer_stays_complete(hot_store, tmp_path, how):
    copy = tmp_path / "store"
    shutil.copytree(hot_store, copy)
    store = Store(copy)
    key_hash = codecs.index_key_hash(codecs.index_key("TopicTest", "hotkey-4"))
    newest = store.index_files[-1].path
    _damage_chain(newest, store.index_slots, key_hash, how)
    truth = scan_truth(hot_store, "TopicTest", "hotkey-4")
    code = ("import sys; from mqtool.store import Store; from mqtool import query as q;"
            "s = Store(sys.argv[1]); r = q.query_key(s, 'hotkey-4', 'TopicTest');"
            "b = q.broker_query_message(s, 'TopicTest', 'hotkey-4');"
            "print(r.offsets); print([p.kind for p in r.problems])")
    # a chain walk that never ends would hang here: the timeout turns it into a failure
    proc = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    offsets, kinds = proc.stdout.splitlines()
    assert json.loads(offsets) == truth
    expected_kind = {"self-loop": "loop", "two-cycle": "forward-pointer",
                     "past-count": "pointer-past-count",
                     "slot-past-count": "pointer-past-count",
                     "truncated-file": "pointer-past-file"}[how]
    assert expected_kind in kinds
    result = q.query_key(Store(copy), "hotkey-4", "TopicTest")
    assert any("scanned instead" in n for n in result.notes)
    cli = run_mqtool("query", "--explain", "--key", "hotkey-4", "--topic", "TopicTest", copy,
                     timeout=60)
    assert cli.returncode == 0, cli.stderr


def test_broker_walk_of_a_looping_chain_is_cut_and_reported(hot_store, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(hot_store, copy)
    store = Store(copy)
    key_hash = codecs.index_key_hash(codecs.index_key("TopicTest", "hotkey-4"))
    _damage_chain(store.index_files[-1].path, store.index_slots, key_hash, "two-cycle")
    with q.IndexSet(store) as index:
        # a key with the same slot but another hash never fills maxNum: the broker spins
        offsets, problems = index.broker_query_offset("TopicTest", "hotkey-4", 64)
    assert len(offsets) <= 64
    with q.IndexSet(store) as index:
        f = index.files[-1]
        found: list[int] = []
        walk: list[q.ChainProblem] = []
        f.broker_select(key_hash + store.index_slots, 64, 0, q.JAVA_LONG_MAX, found, walk)
    assert found == [] and [p.kind for p in walk] == ["loop"]


# --- hash collisions, abnormal recovery, time windows ---------------------------------------------

def _write_store(root: Path, messages: list[Message], **kw) -> list[int]:
    writer = StoreWriter(root, commitlog_file_size=256 * 1024, cq_units_per_file=100,
                         index_slots=64, index_entries=256, **kw)
    offsets = [writer.put(m)[0] for m in messages]
    last = max(m.store_timestamp for m in messages)
    writer.write_checkpoint(last, last, last)
    writer.close()
    return offsets


def _msg(topic: str, i: int, keys: str | None = None, ts: int = 1_790_000_000_000, **props):
    properties = {"UNIQ_KEY": f"{0x7F000001:08X}0B4C18B4AAC2{i:08X}0000"}
    if keys:
        properties["KEYS"] = keys
    properties.update(props)
    return Message(topic=topic, queue_id=i % 2, body=f"body-{i}".encode(),
                   properties=properties, born_timestamp=ts + i, store_timestamp=ts + i)


def test_hash_collisions_are_dropped_and_the_broker_keeps_them(tmp_path, mqtool):
    # "Aa" and "BB" have the same Java hashCode, so "T#Aa" and "T#BB" share an index slot
    assert codecs.java_string_hash("Aa") == codecs.java_string_hash("BB")
    root = tmp_path / "store"
    messages = [_msg("T", i, "Aa" if i % 3 == 0 else "BB") for i in range(30)]
    offsets = _write_store(root, messages)
    aa = [o for o, m in zip(offsets, messages) if m.properties["KEYS"] == "Aa"]
    store = Store(root)
    result = q.query_key(store, "Aa", "T")
    assert result.offsets == aa
    assert sorted(set(result.collisions)) == sorted(set(offsets) - set(aa))
    assert q.broker_query_message(store, "T", "Aa") == sorted(offsets)
    explained = q.explain(store, result)
    assert "hash-collision" in {r["reason"] for r in explained["reasons"]}
    proc = mqtool("query", "--key", "Aa", "--topic", "T", root)
    assert proc.returncode == 0 and "hash collisions" in proc.stderr


def test_explain_names_index_files_an_abnormal_recovery_deletes(tmp_path):
    """Two IndexFiles; an abort file and a checkpoint whose indexMsgTimestamp is the first file's
    end: the broker's next start deletes the second file, re-dispatches only from the newest
    CommitLog file, and so never re-indexes the messages in between."""
    root = tmp_path / "store"
    ts = 1_790_000_000_000
    messages = [_msg("T", i, f"k{i % 7}", ts=ts + 1000 * i) for i in range(600)]
    messages = [Message(**{**m.__dict__, "body": bytes(800)}) for m in messages]
    _write_store(root, messages)
    store = Store(root)
    assert len(store.index_files) >= 2 and len(store.commitlog.segments) >= 2
    with q.IndexSet(store) as index:
        first_end = index.files[0].end_timestamp
    last = ts + 1000 * 599
    (root / "checkpoint").write_bytes(checkpoint_bytes(last, last, first_end))
    (root / "abort").write_bytes(b"")
    store = Store(root)
    plan = predict_recovery(store, broker_version="4.9")
    assert plan.mode == "abnormal" and plan.index_files_deleted
    deleted = set(plan.index_files_deleted)
    result = q.query_key(store, "k3", "T")
    lost = [f.record.offset for f in result.found
            if all(h.file in deleted for h in f.index_hits)
            and f.record.offset < plan.redispatch_from]
    assert lost
    explained = q.explain(store, result, plan=plan)
    reasons = {r["reason"]: r for r in explained["reasons"]}
    assert set(lost) <= set(reasons["index-file-deleted-by-recovery"]["offsets"])
    assert not set(lost) & set(explained["broker_offsets"]["T"])
    assert explained["broker_finds_all"] is False


def test_explain_uniq_key_outside_mqadmins_window(tmp_path):
    """mqadmin reads the id's time in its own current month: months later, the window starts
    after the message and the broker answers nothing."""
    root = tmp_path / "store"
    ts = 1_790_000_000_000   # 2026-09-21
    moment = dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc)
    month_start = int(moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
                      .timestamp() * 1000)
    delta = ts - month_start
    uniq = f"{0x7F000001:08X}0B4C18B4AAC2{delta:08X}0000"
    msg = Message(topic="T", queue_id=0, body=b"x", properties={"UNIQ_KEY": uniq},
                  born_timestamp=ts, store_timestamp=ts)
    _write_store(root, [msg])
    store = Store(root)
    result = q.query_uniq_key(store, uniq, "T")
    assert len(result.found) == 1
    same_month = q.explain(store, result, now_ms=ts + 3_600_000, tz=dt.timezone.utc)
    assert same_month["broker_offsets"]["T"] == result.offsets
    later = q.explain(store, result, now_ms=ts + 90 * 86_400_000, tz=dt.timezone.utc)
    assert later["broker_offsets"]["T"] == []
    assert "outside-time-window" in {r["reason"] for r in later["reasons"]}


def test_msg_id_and_uniq_key_swapped_are_recognised(hot_store, mqtool):
    rec = next(r for r in Scanner(Store(hot_store).commitlog) if type(r) is MessageRecord
               and r.offset > 0)
    uniq = codecs.decode_properties(rec.properties_raw)["UNIQ_KEY"]
    msg_id = codecs.offset_msg_id(rec.store_ip, rec.store_port, rec.offset)
    ok = mqtool("query", "--json", "--msg-id", msg_id, hot_store)
    assert ok.returncode == 0
    assert json.loads(ok.stdout.splitlines()[0])["uniq_key"] == uniq
    swapped = mqtool("query", "--explain", "--json", "--msg-id", uniq, hot_store)
    assert swapped.returncode == 1 and "--uniq-key" in swapped.stderr
    explanation = json.loads(swapped.stdout.splitlines()[-1])
    assert explanation["reasons"][0]["reason"] == "uniq-key-given-as-msg-id"
    assert explanation["reasons"][0]["offsets"] == [rec.offset]
    reverse = mqtool("query", "--explain", "--json", "--uniq-key", msg_id, hot_store)
    assert reverse.returncode == 1 and "--msg-id" in reverse.stderr
    assert "msg-id-given-as-uniq-key" in reverse.stdout


@pytest.mark.parametrize("call,error,text", [
    (lambda s: q.query_msg_id(s, "XYZ"), q.QueryError, "not a hex digit"),
    (lambda s: q.query_msg_id(s, "ABCD"), q.QueryError, "expected 32"),
    (lambda s: q.query_uniq_key(s, "12" * 20), q.QueryError, "expected 32"),
    (lambda s: q.query_key(s, "two words", "TopicTest"), q.QueryError, "contains a space"),
    (lambda s: q.query_key(s, "", "TopicTest"), q.QueryError, "must not be empty"),
    (lambda s: q.query_queue_offset(s, "Nope", 0, 3), q.QueryError, "no ConsumeQueue"),
    (lambda s: q.query_queue_offset(s, "TopicTest", 77, 3), q.QueryError, "has no queue 77"),
    (lambda s: q.query_queue_offset(s, "TopicTest", 0, -1), q.QueryError, ">= 0"),
    (lambda s: q.query_queue_offset(s, "TopicTest", 0, 99999), q.NotFound,
     "no ConsumeQueue file holds"),
    (lambda s: q.query_queue_time(s, "TopicTest", 9, 0), q.QueryError, "has no queue 9"),
])
def test_bad_queries_raise_one_clear_error(hot_store, call, error, text):
    with pytest.raises(error, match=text):
        call(Store(hot_store))


@pytest.mark.parametrize("args,code,text", [
    (["--msg-id", "XYZ"], 2, "not a hex digit"),
    (["--msg-id", "7F00000100002A9F00000000FFFFFFFF"], 1, "no CommitLog file holds"),
    (["--msg-id", "7F00000100002A9F0000000000000007"], 1, "no message starts at offset 7"),
    (["--uniq-key", "0" * 32], 1, "0 message(s) found"),
    (["--key", "a", "--msg-id", "b"], 2, "exactly one"),
    (["--offset", "3"], 2, "needs --topic and --queue"),
    (["--topic", "TopicTest", "--queue", "0", "--offset", "99999"], 1, "no ConsumeQueue file"),
    (["--topic", "TopicTest", "--queue", "0", "--time", "yesterday"], 2, "not a time"),
    (["--broker-compatible", "--key", "k"], 2, "--topic"),
])
def test_bad_input_gets_one_clear_line(hot_store, mqtool, args, code, text):
    proc = mqtool("query", *args, hot_store)
    assert proc.returncode == code, proc.stderr
    assert text in proc.stderr
    assert "Traceback" not in proc.stderr


def test_not_a_store(tmp_path, mqtool):
    proc = mqtool("query", "--key", "k", tmp_path / "nowhere")
    assert proc.returncode == 2 and proc.stderr.startswith("mqtool: error:")


# --- ConsumeQueue lookups -------------------------------------------------------------------------

def _queue_records(root: Path, topic: str, queue_id: int) -> list[MessageRecord]:
    """Dispatched records of one queue in CommitLog order (NOT and COMMIT get units)."""
    return [r for r in Scanner(Store(root).commitlog) if type(r) is MessageRecord
            and r.topic == topic and r.queue_id == queue_id and r.sys_flag & 0xC in (0, 0x8)]


def test_queue_offset_lookup_reads_the_unit_and_its_record(hot_store):
    records = _queue_records(hot_store, "TopicTest", 1)
    store = Store(hot_store)
    assert len(records) > store.cq_units_per_file  # spans more than one ConsumeQueue file
    for qo in (0, 1, store.cq_units_per_file - 1, store.cq_units_per_file, len(records) - 1):
        result = q.query_queue_offset(store, "TopicTest", 1, qo)
        assert result.offsets == [records[qo].offset]
        assert result.found[0].record.queue_offset == qo
        assert result.details["unit"]["file_offset"] == qo * 20 % (store.cq_units_per_file * 20)
    with pytest.raises(q.NotFound, match="no ConsumeQueue file holds"):
        q.query_queue_offset(store, "TopicTest", 1, 10 ** 6)


def test_pre_blank_units_are_named(tmp_path):
    """A queue whose first unit is queue offset 5: units 0-4 are pre-blank fillers."""
    root = tmp_path / "store"
    messages = [Message(topic="T", queue_id=0, body=b"x", properties={"UNIQ_KEY": "00" * 16},
                        store_timestamp=1_790_000_000_000 + i, queue_offset=5 + i)
                for i in range(3)]
    offsets = _write_store(root, messages)
    store = Store(root)
    with pytest.raises(q.NotFound, match="pre-blank"):
        q.query_queue_offset(store, "T", 0, 2)
    assert q.query_queue_offset(store, "T", 0, 6).offsets == [offsets[1]]
    assert q.queue_bounds(store, store.queue("T", 0)) == (5, 8)
    with pytest.raises(q.NotFound, match="past the queue's end"):
        q.query_queue_offset(store, "T", 0, 9)


def test_queue_time_lookup_finds_the_nearest_store_time(hot_store):
    records = _queue_records(hot_store, "TopicTest", 2)
    store = Store(hot_store)
    times = [r.store_timestamp for r in records]

    def lookup(ts: int) -> int:
        return q.query_queue_time(store, "TopicTest", 2, ts).details["queue_offset"]

    for i in (0, 7, len(records) // 2, len(records) - 1):
        assert times[lookup(times[i])] == times[i]
    per_file = store.cq_units_per_file
    # the broker searches one file; a gap across a file boundary is answered from the later file
    gaps = [i for i in range(len(times) - 1) if times[i + 1] - times[i] >= 4
            and i % per_file != per_file - 1]
    assert gaps
    for i in gaps[:5]:
        near_left = times[i] + 1
        assert lookup(near_left) == i
        near_right = times[i + 1] - 1
        assert times[lookup(near_right)] == times[i + 1]
    assert lookup(times[0] - 10 ** 9) == 0
    assert lookup(times[-1] + 10 ** 9) == len(records) - 1


def test_cli_queue_lookups(hot_store, mqtool):
    records = _queue_records(hot_store, "TopicTest", 0)
    proc = mqtool("query", "--json", "--topic", "TopicTest", "--queue", "0", "--offset", "17",
                  hot_store)
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout.splitlines()[0])
    assert first["commitlog_offset"] == records[17].offset and first["queue_offset"] == 17
    iso = ms_to_iso(records[40].store_timestamp)
    proc = mqtool("query", "--json", "--topic", "TopicTest", "--queue", "0", "--time", iso,
                  hot_store)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert records[summary["queue_offset"]].store_timestamp == records[40].store_timestamp


@pytest.mark.parametrize("zone_hours", [-12, -5, 0, 5.5, 9, 14])
@pytest.mark.parametrize("stored", [1_790_000_000_000, 1_788_220_800_500, 1_798_761_599_000])
def test_uniq_key_time_windows_hold_the_store_time(zone_hours, stored):
    """The producer writes ms since the start of *its* local month (MessageClientIDSetter); the
    windows cover every zone. The second and third times sit at a month's first and last second
    (UTC), where the producer's month differs from the broker's."""
    zone = dt.timezone(dt.timedelta(hours=zone_hours))
    local = dt.datetime.fromtimestamp(stored / 1000, zone)
    month_start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    delta = stored - int(month_start.timestamp() * 1000)
    uniq = f"{0x0A000001:08X}0B4C18B4AAC2{delta:08X}0000"
    windows = q.uniq_key_windows(uniq, stored - 86_400_000, stored + 86_400_000)
    assert any(a <= stored <= b for a, b in windows), windows
    # and no window is wider than the zones and the skew allow
    assert all(b - a <= 28 * 3_600_000 for a, b in windows)
