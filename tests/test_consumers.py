"""Consumer forensics: config files read as the broker's ConfigManager reads them, queue ends
after the next start, committed offsets against them, findings and the ``consumers`` command.

Expected values come from the real brokers' files (recover.json's recovered queues, dump.json's
records) or from the forge's own manifest and an independent CommitLog scan, never from the code
under test."""
from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED_STORES, shared_store_names
from mqtool import config as cfg
from mqtool import forge
from mqtool.consumers import (CONSUMER_CODES, consumer_findings, consumer_report, queue_bounds)
from mqtool.formats import commitlog as cl_fmt
from mqtool.recovery import predict_recovery
from mqtool.scan import Scanner
from mqtool.store import Store

BROKER_PRETTY = '{\n\t"offsetTable":{\n\t\t"TopicTest@GroupA":{0:12,1:7\n\t\t}\n\t}\n}'


def write_pair(config: Path, name: str, main: bytes | None, bak: bytes | None) -> Path:
    config.mkdir(parents=True, exist_ok=True)
    for path, data in ((config / name, main), (config / (name + ".bak"), bak)):
        if data is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(data)
    return config / name


def load_json(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


# --- the parser ---------------------------------------------------------------------------------

def test_parses_what_the_broker_wrote(fixture_store, shared_stores):
    assert cfg.read_fastjson_file(fixture_store / "config" / "delayOffset.json") == {
        "offsetTable": {}}
    # delay-delivered-small: the real scheduler's levels 1 and 2, unquoted keys, pretty-printed
    delivered = cfg.read_fastjson_file(shared_stores / "delay-delivered-small" / "store" /
                                       "config" / "delayOffset.json")
    assert cfg.delay_offset_table(delivered) == ({1: 48, 2: 41}, [])


@pytest.mark.parametrize("text", [
    BROKER_PRETTY,
    '{"offsetTable":{"TopicTest@GroupA":{0:12,1:7}}}',
    '{"offsetTable":{"TopicTest@GroupA":{"0":12,"1":7}},"dataVersion":{"counter":3}}',
    " \n{ 'offsetTable' : { 'TopicTest@GroupA' : { 0 : 12 , 1 : 7 } } , extra: [1,2,{}] }\n",
    '{,"offsetTable":{"TopicTest@GroupA":{0:12,,1:7,},},"x":[,1,,2,],}',
])
def test_layouts_the_broker_accepts_read_alike(text):
    table, problems = cfg.offset_table(cfg.parse_fastjson(text))
    assert table == {"TopicTest@GroupA": {0: 12, 1: 7}} and problems == []


def test_forge_layout_round_trips():
    doc = forge.JavaBean(offsetTable={"T@G": {0: 12, 1: 7}}, dataVersion=forge.JavaBean(
        counter=1, timestamp=5))
    assert cfg.parse_fastjson(forge.fastjson_pretty(doc)) == {
        "offsetTable": {"T@G": {0: 12, 1: 7}}, "dataVersion": {"counter": 1, "timestamp": 5}}


HOSTILE = {
    "truncated": BROKER_PRETTY.encode()[:40],
    "binary": bytes(range(256)) * 4,
    "zeros": bytes(300),
    "trailing-zeros": BROKER_PRETTY.encode() + bytes(64),
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "deep-object": b'{"a":' * 5000 + b"1" + b"}" * 5000,
    "long-number": b'{"offsetTable":{"T@G":{0:' + b"9" * 100_000 + b"}}}",
    "array": b"[1,2,3]",
    "number": b"42",
    "unterminated-string": b'{"offsetTable":{"T@G',
    "not-utf8": b'{"offsetTable":{"T\xff\xfe@G":{0:\xff}}}',
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_main_falls_back_to_the_bak(tmp_path, case):
    path = write_pair(tmp_path / "config", "consumerOffset.json", HOSTILE[case],
                      BROKER_PRETTY.encode())
    load = cfg.read_config(path)
    assert load.outcome == "bak" and load.used == "consumerOffset.json.bak"
    assert load.main.state == "unparsable" and load.main.error
    assert "the broker loads consumerOffset.json.bak instead" in load.reason
    assert cfg.offset_table(load.document)[0] == {"TopicTest@GroupA": {0: 12, 1: 7}}


@pytest.mark.parametrize("main, bak, outcome, used", [
    (None, None, "absent", None),                                  # never persisted
    (b"", None, "empty", None),                                    # load succeeds, table empty
    (b"", b"", "empty", None),
    (None, BROKER_PRETTY.encode(), "bak", "consumerOffset.json.bak"),
    (b"", BROKER_PRETTY.encode(), "bak", "consumerOffset.json.bak"),
    (b"{", b"{", "refuses", None),                                 # loadBak throws: no start
    (bytes(50), bytes(50), "refuses", None),
    (b"{", None, "empty", None),
    (b"null", b"{", "empty", "consumerOffset.json"),               # decodes to nothing; no .bak
    (b"  \n\t ", BROKER_PRETTY.encode(), "empty", "consumerOffset.json"),   # blank: likewise
    (b'""', BROKER_PRETTY.encode(), "empty", "consumerOffset.json"),
    (b'"text"', BROKER_PRETTY.encode(), "bak", "consumerOffset.json.bak"),
    (BROKER_PRETTY.encode(), b"{", "main", "consumerOffset.json"),  # a bad .bak is not read
])
def test_config_manager_load_outcomes(tmp_path, main, bak, outcome, used):
    load = cfg.read_config(write_pair(tmp_path / "config", "consumerOffset.json", main, bak))
    assert (load.outcome, load.used) == (outcome, used), load.reason
    assert load.broker_refuses == (outcome == "refuses")
    json.dumps(load.to_dict())


def test_interrupted_persist_leaves_a_tmp_the_broker_ignores(tmp_path):
    """4.9 persist: tmp written, old content copied to .bak, file deleted, tmp renamed. A crash
    after the delete leaves .tmp (newest) and .bak (previous): the broker loads the .bak."""
    path = write_pair(tmp_path / "config", "consumerOffset.json", None, BROKER_PRETTY.encode())
    (tmp_path / "config" / "consumerOffset.json.tmp").write_text(BROKER_PRETTY.replace("12", "15"))
    load = cfg.read_config(path)
    assert (load.outcome, load.used, load.tmp.state) == ("bak", "consumerOffset.json.bak", "ok")
    assert "consumerOffset.json.tmp is left from an interrupted persist" in load.reason
    assert load.to_dict()["tmp"]["state"] == "ok"


def test_wrong_types_and_ranges_are_reported_not_guessed():
    doc = cfg.parse_fastjson(
        '{"offsetTable":{"A@G":{0:1,1:"7",2:1.5,3:true,4:null,5:99999999999999999999,'
        '99999999999:3,6:-1},"B@G":[1,2],"NoSeparator":{0:1},"C@G":{}}}')
    table, problems = cfg.offset_table(doc)
    assert table == {"A@G": {0: 1, 6: -1}, "C@G": {}}
    assert len(problems) == 8, problems
    assert any("99999999999999999999" in p and "long range" in p for p in problems)
    assert any("queue id 99999999999" in p for p in problems)
    assert cfg.offset_table({"offsetTable": "x"})[1] == [
        "consumerOffset.json: offsetTable is a string, not an object"]
    assert cfg.delay_offset_table({"offsetTable": {1: "a", "x": 2, 3: 4}}) == (
        {3: 4}, ["delayOffset.json: level 1: offset \"a\" is not a whole number in Java's long "
                 "range", "delayOffset.json: level \"x\" is not an integer in Java's int range"])


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES)
def test_standard_json_reads_as_json_does(value):
    text = json.dumps(value)
    assert cfg.parse_fastjson(text) == json.loads(text)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, len(BROKER_PRETTY)))
def test_any_bytes_give_a_document_or_a_fastjson_error(noise, cut):
    for data in (noise, BROKER_PRETTY.encode()[:cut] + noise):
        try:
            document = cfg.parse_fastjson(data.decode("utf-8", errors="replace"))
        except cfg.FastjsonError:
            continue
        cfg.offset_table(document)
        cfg.delay_offset_table(document)
        cfg.topic_names(document)


def test_oversized_file_is_unreadable_not_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(cfg, "MAX_CONFIG_BYTES", 10)
    load = cfg.read_config(write_pair(tmp_path / "config", "topics.json", b"{" + b" " * 20 + b"}",
                                      None))
    assert load.main.state == "unreadable" and load.outcome == "empty"


def test_rocksdb_metadata_is_recognised(tmp_path):
    (tmp_path / "config" / "consumerOffsets").mkdir(parents=True)
    (tmp_path / "config" / "consumerOffsets" / "CURRENT").write_text("MANIFEST-000005\n")
    (tmp_path / "config" / "rdb").mkdir()
    found = cfg.rocksdb_metadata(tmp_path / "config")
    assert set(found) == {"consumerOffsets", "rdb"}
    assert "maybe not RocksDB" in found["rdb"] and "maybe" not in found["consumerOffsets"]


# --- queue ends after the next start: the real brokers' recovered queues ------------------------

DIRECTORY_STORES = [n for n in shared_store_names()
                    if (SHARED_STORES / n / "recover.json.gz").is_file()]


@pytest.mark.parametrize("name", DIRECTORY_STORES)
def test_queue_ends_after_the_start_equal_the_broker(name):
    root = SHARED_STORES / name
    recovered = load_json(root / "recover.json.gz")
    store_config = recovered.get("storeConfig") or {}
    plan = predict_recovery(Store(root / "store"),
                            force_verify_prop_crc=bool(store_config.get("forceVerifyPropCRC")))
    bounds = queue_bounds(Store(root / "store"), plan)
    checked = 0
    for section in ("consumeQueues", "batchConsumeQueues"):
        for topic, queues in (recovered.get(section) or {}).items():
            for qid, queue in queues.items():
                b = bounds.get((topic, int(qid)))
                got = (b.min_after_start, b.max_after_start) if b else (0, 0)
                assert got == (queue["minOffset"], queue["maxOffset"]), (topic, qid)
                checked += 1
    assert checked


@pytest.fixture(scope="module")
def dledger_crash(tmp_path_factory) -> Path:
    """dledger-crash unpacked once for this module (it ships as store.tar.gz)."""
    import tarfile

    archive_path = SHARED_STORES / "dledger-crash" / "store.tar.gz"
    if not archive_path.is_file():
        pytest.skip("../shared/rocketmq-stores is absent")
    dest = tmp_path_factory.mktemp("dledger")
    with tarfile.open(archive_path) as archive:
        archive.extractall(dest, filter="data")
    return dest / "store"


def test_dledger_store_queue_ends_after_its_start_are_the_brokers(dledger_crash, shared_stores):
    """DLedger's own recovery cuts nothing in dledger-crash and re-dispatches nothing: the
    predicted queue ends are the broker's, and an offset past them stays past them."""
    store = Store(dledger_crash)
    plan = predict_recovery(store)
    bounds = queue_bounds(store, plan)
    recovered = load_json(shared_stores / "dledger-crash" / "recover.json.gz")["consumeQueues"]
    for topic, queues in recovered.items():
        for qid, queue in queues.items():
            b = bounds.get((topic, int(qid)))
            got = (b.min_after_start, b.max_after_start) if b else (0, 0)
            assert got == (queue["minOffset"], queue["maxOffset"]), (topic, qid)
    table = {"TopicTest@G": {0: recovered["TopicTest"]["0"]["maxOffset"] + 4}}
    write_pair(dledger_crash / "config", "consumerOffset.json",
               forge.fastjson_pretty(forge.JavaBean(offsetTable=table)).encode(), None)
    report = consumer_report(store, plan)
    assert report.start_predicted
    codes = [f.code for f in consumer_findings(store, plan, report=report)]
    assert codes == ["CONSUMER_OFFSET_AHEAD"]


def _disk_queue_ends(dump: dict) -> dict[tuple[str, int], int]:
    """Queue ends of the records the broker decoded in store/ (dispatchable ones only)."""
    ends: dict[tuple[str, int], int] = defaultdict(int)
    for m in dump["messages"]:
        if cl_fmt.transaction_type(m["sysFlag"]) in (cl_fmt.TRANSACTION_PREPARED_TYPE,
                                                     cl_fmt.TRANSACTION_ROLLBACK_TYPE):
            continue
        key = (m["topic"], m["queueId"])
        ends[key] = max(ends[key], m["queueOffset"] + 1)
    return ends


@pytest.mark.parametrize("name", ["clean-small-damaged", "v5-damaged"])
def test_groups_that_consumed_what_recovery_truncates_are_moved_back(shared_stores, tmp_path,
                                                                     name):
    """The damaged stores: the broker drops every message from the damaged one on (237 in
    clean-small-damaged). A group that had consumed everything written is past the recovered end
    of the queues that lost messages. The offsets file is in the 4.9 or the 5.x layout."""
    src = shared_stores / name
    root = tmp_path / "store"
    shutil.copytree(src / "store", root)
    written = _disk_queue_ends(load_json(src / "dump.json.gz"))
    recovered = load_json(src / "recover.json.gz")["consumeQueues"]
    topics = ["TopicTest", "OrderTopic"]
    table = {f"{t}@GroupX": {q: written[(t, q)] for q in range(4)} for t in topics}
    doc = forge.JavaBean(offsetTable=table)
    if name.startswith("v5-"):
        doc["dataVersion"] = forge.JavaBean(counter=7, stateVersion=0, timestamp=1)
    write_pair(root / "config", "consumerOffset.json", forge.fastjson_pretty(doc).encode(), None)
    store = Store(root)
    plan = predict_recovery(store)
    report = consumer_report(store, plan)
    assert report.offsets_source == "consumerOffset.json"
    assert len(report.rows) == 8
    ahead = set()
    for row in report.rows:
        after = recovered[row.topic][str(row.queue_id)]["maxOffset"]
        assert row.max_after_start == after
        assert row.committed_offset == written[(row.topic, row.queue_id)]
        if after < row.committed_offset:
            ahead.add((row.topic, row.queue_id))
            assert row.next_start.status == "OFFSET_OVERFLOW_BADLY"
            assert row.next_start.next_offset == after
            assert row.next_start.slave_next_offset == row.committed_offset
            assert row.next_start.consumed_then_dropped == row.committed_offset - after
            assert row.next_start.unconsumed_dropped == 0
        else:
            assert row.next_start.status == "OFFSET_OVERFLOW_ONE"
        assert row.lag_messages == 0 and row.lag_bytes == 0
    assert ahead
    findings = consumer_findings(store, plan, report=report)
    flagged = {(f.topic, f.queue_id) for f in findings if f.code == "CONSUMER_OFFSET_AHEAD"}
    assert flagged == ahead
    assert all(f.severity == "warning" and f.file == "config/consumerOffset.json"
               for f in findings if f.code == "CONSUMER_OFFSET_AHEAD")


def test_delay_offset_past_its_queue_is_clamped_at_load(shared_stores, tmp_path):
    src = shared_stores / "delay-delivered-small"
    root = tmp_path / "store"
    shutil.copytree(src / "store", root)
    level1_end = load_json(src / "recover.json.gz")["consumeQueues"]["SCHEDULE_TOPIC_XXXX"][
        "0"]["maxOffset"]
    (root / "config" / "delayOffset.json").chmod(0o644)
    (root / "config" / "delayOffset.json").write_text(
        "{\n\t\"offsetTable\":{1:%d,2:41\n\t}\n}" % (level1_end + 9))
    store = Store(root)
    plan = predict_recovery(store)
    report = consumer_report(store, plan)
    level1 = next(d for d in report.delay if d.level == 1)
    assert (level1.offset, level1.max_at_load, level1.corrected_offset) == (
        level1_end + 9, level1_end, level1_end)
    codes = [f.code for f in consumer_findings(store, plan, report=report)]
    assert codes == ["DELAY_OFFSET_AHEAD"]


def test_v5_store_without_config_has_no_offsets(shared_stores):
    store = Store(shared_stores / "v5-crash" / "store")
    plan = predict_recovery(store)
    report = consumer_report(store, plan)
    assert report.rows == [] and report.offsets_source is None
    assert {f["outcome"] for f in report.configs["files"].values()} == {"absent"}
    assert consumer_findings(store, plan, report=report) == []


@pytest.mark.parametrize("offset, status, fields", [
    # queue: min 10, 100 messages on disk now, 80 left after the start
    (95, "OFFSET_OVERFLOW_BADLY", dict(next_offset=80, slave_next_offset=95, delivers=0,
                                       skips_if_refilled=15, consumed_then_dropped=15,
                                       unconsumed_dropped=5)),
    (80, "OFFSET_OVERFLOW_ONE", dict(next_offset=80, delivers=0, unconsumed_dropped=20)),
    (50, "FOUND", dict(next_offset=50, delivers=30, unconsumed_dropped=20)),
    (4, "OFFSET_TOO_SMALL", dict(next_offset=10, slave_next_offset=4, skips=6, delivers=70)),
    (-1, "NO_OFFSET", dict(delivers=0)),
])
def test_next_start_rules(offset, status, fields):
    from mqtool.consumers import QueueBounds, next_start

    bounds = QueueBounds("T", 0, "consumequeue", 10, 100, 80, 80, 10)
    outcome = next_start(offset, bounds)
    assert outcome.status == status
    for name, value in fields.items():
        assert getattr(outcome, name) == value, name
    empty = next_start(7, QueueBounds("T", 0, None))
    assert (empty.status, empty.next_offset, empty.slave_next_offset) == (
        "NO_MESSAGE_IN_QUEUE", 0, 7)


# --- forge-made stores --------------------------------------------------------------------------

def options(**kw):
    base = dict(messages=600, seed=11, queues=2, commitlog_file_size=256 * 1024, cq_units=50,
                index_slots=100, index_entries=400, body_mean=400, body_max=1600)
    base.update(kw)
    return forge.ForgeOptions(**base)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    cache = {}

    def make(name: str, **kw):
        if name not in cache:
            root = tmp_path_factory.mktemp("consumers") / name
            cache[name] = (root, forge.make_store(root, options(**kw)))
        return cache[name]
    return make


def _records_by_queue(root: Path) -> dict[tuple[str, int], dict[int, tuple[int, int]]]:
    """(topic, queue) -> queue offset -> (record size, store time), from a plain scan."""
    out: dict = defaultdict(dict)
    for r in Scanner(Store(root).commitlog, check_crc=False).messages():
        if cl_fmt.transaction_type(r.sys_flag) in (cl_fmt.TRANSACTION_PREPARED_TYPE,
                                                   cl_fmt.TRANSACTION_ROLLBACK_TYPE):
            continue
        out[(r.topic, r.queue_id)][r.queue_offset] = (r.total_size, r.store_timestamp)
    return out


def test_forge_groups_lag_as_asked(made):
    root, summary = made("groups", consumer_groups=(("GroupB", 5), ("GroupC", -3)))
    produced = summary["queue_offsets"]
    records = _records_by_queue(root)
    store = Store(root)
    plan = predict_recovery(store)
    report = consumer_report(store, plan)
    rows = {(r.group, r.topic, r.queue_id): r for r in report.rows}
    for topic in ("TopicTest", "OrderTopic"):
        for qid in range(2):
            end = produced[topic][str(qid)]
            b = rows[("GroupB", topic, qid)]
            assert b.committed_offset == max(0, end - 5)
            assert b.lag_messages == end - b.committed_offset
            wanted = range(b.committed_offset, end)
            assert b.lag_bytes == sum(records[(topic, qid)][o][0] for o in wanted)
            assert b.oldest_unconsumed_store_time == records[(topic, qid)][b.committed_offset][1]
            assert b.next_start.status == "FOUND" and b.next_start.delivers == len(wanted)
            c = rows[("GroupC", topic, qid)]
            assert c.committed_offset == end + 3 and c.lag_messages == 0
            assert c.next_start.status == "OFFSET_OVERFLOW_BADLY"
            assert c.next_start.next_offset == end
            assert (c.next_start.skips, c.next_start.skips_if_refilled) == (0, 3)
    # each group reads its own retry topic only
    assert ("GroupB", "%RETRY%GroupA", 0) not in rows
    groups = {g["group"]: g for g in report.groups()}
    assert groups["GroupC"]["moved_back"] == 4
    sub = cfg.read_config(root / "config" / "subscriptionGroup.json")
    assert sub.outcome == "main"
    assert cfg.group_names(sub.document) == {"GroupA", "GroupB", "GroupC"}
    findings = consumer_findings(store, plan, report=report)
    ahead = sorted((f.topic, f.queue_id) for f in findings if f.code == "CONSUMER_OFFSET_AHEAD")
    assert ahead == sorted((t, q) for t in ("TopicTest", "OrderTopic") for q in range(2))
    assert {f.code for f in findings} == {"CONSUMER_OFFSET_AHEAD"}


def test_forge_default_store_is_unchanged_by_the_group_option(tmp_path):
    forge.make_store(tmp_path / "a", options(messages=200))
    assert not (tmp_path / "a" / "config" / "subscriptionGroup.json").exists()


def test_crashed_5x_store_dispatches_up_to_the_offsets(made):
    """JVM halt: dispatch stopped short; the abnormal start dispatches the rest, so an offset a
    little past the on-disk queue end is inside the queue after the start."""
    root, summary = made("crash5", broker_version=5, crash=True,
                         consumer_groups=(("GroupD", -1),))
    store = Store(root)
    plan = predict_recovery(store)
    report = consumer_report(store, plan)
    findings = consumer_findings(store, plan, report=report)
    by_queue = {(f.topic, f.queue_id): f.code for f in findings}
    for row in (r for r in report.rows if r.group == "GroupD"):
        written = summary["queue_offsets"][row.topic][str(row.queue_id)]
        dispatched = summary["dispatched_queue_offsets"].get(row.topic, {}).get(
            str(row.queue_id), 0)
        assert row.max_offset == dispatched and row.max_after_start == written
        assert row.committed_offset == dispatched + 1
        expected = ("CONSUMER_OFFSET_AHEAD" if written < dispatched + 1
                    else "CONSUMER_OFFSET_AHEAD_NOW")
        assert by_queue[(row.topic, row.queue_id)] == expected


@pytest.mark.parametrize("kind", ["config-empty", "config-truncate", "config-zeros"])
def test_damaged_offsets_file_falls_back_to_bak(made, tmp_path, kind):
    src, _ = made("groups", consumer_groups=(("GroupB", 5), ("GroupC", -3)))
    root = tmp_path / "s"
    shutil.copytree(src, root)
    before = consumer_report(Store(root), predict_recovery(Store(root)))
    forge.damage_store(root, kind, seed=2)
    store = Store(root)
    plan = predict_recovery(store)
    report = consumer_report(store, plan)
    assert report.offsets_source == "consumerOffset.json.bak"
    assert [r.to_dict() for r in report.rows] == [r.to_dict() for r in before.rows]
    unreadable = [f for f in consumer_findings(store, plan, report=report)
                  if f.code == "CFG_UNREADABLE"]
    assert [(f.file, f.severity) for f in unreadable] == [("config/consumerOffset.json",
                                                           "warning")]
    # the .bak damaged too: the broker refuses to start (empty .bak: it forgets every offset)
    forge.damage_store(root, "config-zeros" if kind != "config-empty" else "config-empty",
                       file="config/consumerOffset.json.bak")
    report = consumer_report(store, plan)
    assert report.rows == []
    load = report.configs["files"]["consumerOffset.json"]
    assert load["outcome"] == ("empty" if kind == "config-empty" else "refuses")
    unreadable = [f for f in consumer_findings(store, plan, report=report)
                  if f.code == "CFG_UNREADABLE"]
    assert [f.severity for f in unreadable] == ["error"]


def test_topic_missing_from_topics_json_and_bad_values(made, tmp_path):
    src, _ = made("groups", consumer_groups=(("GroupB", 5), ("GroupC", -3)))
    root = tmp_path / "s"
    shutil.copytree(src, root)
    topics = cfg.read_fastjson_file(root / "config" / "topics.json")
    del topics["topicConfigTable"]["OrderTopic"]
    del topics["topicConfigTable"]["SCHEDULE_TOPIC_XXXX"]   # the broker adds it itself
    (root / "config" / "topics.json").write_text(json.dumps(topics))
    text = (root / "config" / "consumerOffset.json").read_text()
    (root / "config" / "consumerOffset.json").write_text(
        text.replace('"TopicTest@GroupB":{0:', '"TopicTest@GroupB":{0:"x",7:'))
    store = Store(root)
    plan = predict_recovery(store)
    report = consumer_report(store, plan)
    findings = consumer_findings(store, plan, report=report)
    missing = [f for f in findings if f.code == "TOPIC_NOT_IN_CONFIG"]
    assert [(f.topic, f.count, f.file) for f in missing] == [("OrderTopic", 2,
                                                              "consumequeue/OrderTopic")]
    bad = [f for f in findings if f.code == "CFG_BAD_VALUE"]
    assert len(bad) == 1 and "TopicTest@GroupB queue 0" in bad[0].message
    assert all(r.topic_in_config is (r.topic != "OrderTopic") for r in report.rows)
    keys = [f.key for f in findings]
    assert len(keys) == len(set(keys))
    json.dumps([f.to_dict() for f in findings])


def test_every_config_the_start_loads_is_checked(made, tmp_path):
    src, _ = made("groups", consumer_groups=(("GroupB", 5), ("GroupC", -3)))
    root = tmp_path / "s"
    shutil.copytree(src, root)
    (root / "config" / "consumerFilter.json").write_bytes(b'{"filterDataByTopic":{')
    store = Store(root)
    findings = [f for f in consumer_findings(store, predict_recovery(store))
                if f.code == "CFG_UNREADABLE"]
    assert [(f.file, f.severity) for f in findings] == [("config/consumerFilter.json", "error")]
    assert "refuses to start" not in findings[0].message   # no .bak: it starts, table empty
    assert "EMPTY table" in findings[0].message


def test_offsets_in_rocksdb_are_not_read_from_json(made, tmp_path):
    src, _ = made("groups", consumer_groups=(("GroupB", 5), ("GroupC", -3)))
    root = tmp_path / "s"
    shutil.copytree(src, root)
    (root / "config" / "consumerOffsets").mkdir()
    (root / "config" / "consumerOffsets" / "CURRENT").write_text("MANIFEST-000001\n")
    store = Store(root)
    plan = predict_recovery(store)
    report = consumer_report(store, plan)
    assert report.offsets_source == "rocksdb" and report.rows == []
    assert any("RocksDB" in n for n in report.notes)
    codes = [f.code for f in consumer_findings(store, plan, report=report)]
    assert codes == ["CFG_IN_ROCKSDB"]


def test_every_code_is_documented():
    page = (Path(__file__).resolve().parent.parent / "man" / "mqtool-consumers.1").read_text()
    for code in CONSUMER_CODES:
        assert code in page


# --- the command --------------------------------------------------------------------------------

def test_cli_json_and_table(made, mqtool):
    root, summary = made("groups", consumer_groups=(("GroupB", 5), ("GroupC", -3)))
    proc = mqtool("consumers", "--json", "--group", "GroupB", root)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {r["group"] for r in doc["queues"]} == {"GroupB"}
    assert doc["offsets_source"] == "consumerOffset.json"
    assert doc["configs"]["files"]["consumerOffset.json"]["outcome"] == "main"
    assert set(doc["rules"]) == {"4.9", "5.x"}
    table = mqtool("consumers", root)
    assert table.returncode == 0 and "GroupC" in table.stdout and "moved back" in table.stdout
    assert "offsets from consumerOffset.json" in table.stderr
    info = json.loads(mqtool("info", "--json", root).stdout)
    groups = {g["group"]: g for g in info["consumer_groups"]}
    assert groups["GroupB"]["lag_messages"] == sum(
        r["lag_messages"] for r in doc["queues"] if r["group"] == "GroupB")
    assert "consumer group GroupC" in mqtool("info", root).stdout


@pytest.mark.parametrize("case", ["deep", "binary", "long-number"])
def test_cli_on_hostile_configs_never_tracebacks(made, mqtool, tmp_path, case):
    src, _ = made("groups", consumer_groups=(("GroupB", 5), ("GroupC", -3)))
    root = tmp_path / "s"
    shutil.copytree(src, root)
    for name in cfg.CONSUMER_CONFIGS:
        for path in (root / "config" / name, root / "config" / (name + ".bak")):
            path.write_bytes(HOSTILE[case])
    proc = mqtool("consumers", "--json", root)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["queues"] == []
    assert {f["outcome"] for f in doc["configs"]["files"].values()} == {"refuses"}
    info = mqtool("info", "--json", root)
    assert info.returncode == 0 and json.loads(info.stdout)["consumer_groups"] == []


def test_cli_forge_options(mqtool, tmp_path):
    proc = mqtool("fixture", "make", tmp_path / "s", "-n", "50", "--consumer-group", "bad")
    assert proc.returncode == 2 and "NAME:LAG" in proc.stderr
    proc = mqtool("fixture", "make", tmp_path / "t", "-n", "50", "--consumer-group", "G@x:1")
    assert proc.returncode == 2 and "no '@'" in proc.stderr
    assert mqtool("consumers", tmp_path / "missing").returncode == 2
    proc = mqtool("fixture", "make", tmp_path / "u", "-n", "50", "--consumer-group",
                  "G:-99999999999999999999")
    assert proc.returncode == 2 and "out of range" in proc.stderr
    assert not (tmp_path / "u").exists()


# --- export --unconsumed-by and the offsets clamp ----------------------------------------------

def test_export_unconsumed_by_writes_exactly_the_unconsumed(made, mqtool):
    root, summary = made("groups", consumer_groups=(("GroupB", 5), ("GroupC", -3)))
    records = _records_by_queue(root)
    expected = set()
    for topic in ("TopicTest", "OrderTopic"):
        for qid in range(2):
            end = summary["queue_offsets"][topic][str(qid)]
            expected |= {(topic, qid, o) for o in records[(topic, qid)] if o >= max(0, end - 5)}
    proc = mqtool("export", "--unconsumed-by", "GroupB", "--body", "none", root)
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {(m["topic"], m["queue_id"], m["queue_offset"]) for m in got} == expected
    assert len(got) == len(expected)
    assert mqtool("export", "--unconsumed-by", "GroupC", root).stdout == ""
    proc = mqtool("export", "--unconsumed-by", "Nobody", root)
    assert proc.returncode == 2 and "GroupA, GroupB, GroupC" in proc.stderr


def test_clamp_sets_offsets_past_the_end_to_the_recovered_end(shared_stores, tmp_path):
    from mqtool.consumers_repair import plan_bak_restores, plan_offset_clamp

    src = shared_stores / "clean-small-damaged"
    root = tmp_path / "store"
    shutil.copytree(src / "store", root)
    written = _disk_queue_ends(load_json(src / "dump.json.gz"))
    recovered = load_json(src / "recover.json.gz")["consumeQueues"]
    table = {"TopicTest@GroupX": {q: written[("TopicTest", q)] for q in range(4)},
             "OrderTopic@GroupY": {q: 1 for q in range(4)}}
    text = forge.fastjson_pretty(forge.JavaBean(offsetTable=table))
    write_pair(root / "config", "consumerOffset.json", text.encode(), text.encode())
    store = Store(root)
    plan = predict_recovery(store)
    rewrite = plan_offset_clamp(store, plan)
    assert rewrite is not None and not rewrite.restored_from_bak
    new_table = cfg.offset_table(cfg.parse_fastjson(rewrite.content.decode()))[0]
    for q in range(4):
        assert new_table["TopicTest@GroupX"][q] == min(written[("TopicTest", q)],
                                                       recovered["TopicTest"][str(q)]["maxOffset"])
    assert new_table["OrderTopic@GroupY"] == {q: 1 for q in range(4)}
    assert {c.queue_id for c in rewrite.changes} == {
        q for q in range(4) if recovered["TopicTest"][str(q)]["maxOffset"] < written[("TopicTest", q)]}
    assert plan_bak_restores(store) == []
    # a truncated main file: the clamp starts from the .bak, and the restore copies it
    (root / "config" / "consumerOffset.json").write_text(text[:30])
    rewrite = plan_offset_clamp(store, plan)
    assert rewrite.restored_from_bak
    assert cfg.offset_table(cfg.parse_fastjson(rewrite.content.decode()))[0] == new_table
    restores = plan_bak_restores(store)
    assert [(r.file, r.content) for r in restores] == [("config/consumerOffset.json",
                                                        text.encode())]


def test_info_lines_need_no_prediction(made):
    from mqtool.consumers import group_summary_lines

    root, summary = made("groups", consumer_groups=(("GroupB", 5), ("GroupC", -3)))
    store = Store(root)
    report = consumer_report(store, None)
    assert not report.start_predicted and report.broker_version is None
    lag = sum(min(5, summary["queue_offsets"][t][str(q)]) for t in ("TopicTest", "OrderTopic")
              for q in range(2))
    lines = group_summary_lines(report)
    assert [line.split(":")[0] for line in lines] == ["GroupA", "GroupB", "GroupC"]
    assert f"lag {lag:,} message(s)" in lines[1]
    with_plan = consumer_report(store, predict_recovery(store))
    assert [r.lag_bytes for r in report.rows] == [r.lag_bytes for r in with_plan.rows]


def test_salvage_unconsumed_by_matches_export(made, mqtool, tmp_path):
    root, _ = made("groups", consumer_groups=(("GroupB", 5), ("GroupC", -3)))
    exported = mqtool("export", "--unconsumed-by", "GroupB", "--body", "none", root).stdout
    proc = mqtool("salvage", "--unconsumed-by", "GroupB", "--body", "none", "--out",
                  tmp_path / "out.jsonl", "--map", tmp_path / "map.json", root)
    assert proc.returncode == 0, proc.stderr
    salvaged = (tmp_path / "out.jsonl").read_text().splitlines()

    def keys(lines):
        return sorted((m["topic"], m["queue_id"], m["queue_offset"])
                      for m in map(json.loads, lines))
    assert keys(salvaged) == keys(exported.splitlines()) and salvaged


def test_findings_point_at_their_entry(made, tmp_path):
    src, _ = made("groups", consumer_groups=(("GroupB", 5), ("GroupC", -3)))
    root = tmp_path / "s"
    shutil.copytree(src, root)
    store = Store(root)
    plan = predict_recovery(store)
    findings = consumer_findings(store, plan)
    data = (root / "config" / "consumerOffset.json").read_bytes()
    ahead = [f for f in findings if f.code == "CONSUMER_OFFSET_AHEAD"]
    assert len({f.key for f in ahead}) == len(ahead) == 4
    for f in ahead:
        # the committed offset is written right there
        assert data[f.offset:].startswith(str(f.queue_offset).encode())
        line_start = data.rfind(b"\n", 0, f.offset)
        assert f"{f.topic}@GroupC".encode() in data[line_start:f.offset]
    # a damaged main file: the finding points where decoding fails
    (root / "config" / "consumerOffset.json").write_bytes(data[:100] + b"\xff\x00" + data[102:])
    unreadable = [f for f in consumer_findings(store, plan) if f.code == "CFG_UNREADABLE"]
    assert [f.offset for f in unreadable] == [100]


# --- the re-dispatched ends recover's dispatch counts --------------------------------------------

def _recover_plan(store_root: Path, tmp_path: Path, workers: int):
    """recover's RecoveryPlan, planned (dry run) on the store in place."""
    from mqtool.repair.planners import plan_recover
    from mqtool.repair.transaction import Stage

    stage_root = tmp_path / f"stage-{workers}"
    return plan_recover(Store(store_root), Stage(store_root, stage_root),
                        workers=workers).recovery


def _verify_plan(store_root: Path, workers: int):
    """The RecoveryPlan verify's consumer findings were made with."""
    import mqtool.verify.run as run

    seen = []
    original = run.consumer_findings

    def spy(store, plan, *args, **kwargs):
        seen.append(plan)
        return original(store, plan, *args, **kwargs)

    run.consumer_findings = spy
    try:
        run.verify_store(Store(store_root), workers=workers)
    finally:
        run.consumer_findings = original
    (plan,) = seen
    return plan


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("make_args", [
    ("-n", "3000", "--seed", "11", "--crash", "--commitlog-file-size", "256k",
     "--transaction-ratio", "0.2"),
    ("-n", "2000", "--seed", "12", "--crash", "--broker-version", "5",
     "--commitlog-file-size", "256k", "--topics", "TopicA,TopicB", "--batch-cq-topics", "TopicA"),
    ("-n", "2000", "--seed", "13", "--crash", "--commitlog-file-size", "128k",
     "--damage", "bit-flip"),
], ids=["4.9-transactions", "5.x-batchcq", "damaged"])
def test_the_dispatch_counts_the_same_queue_ends_as_a_scan(tmp_path, make_args, workers):
    """Abnormal recovery's dispatch leaves each queue's end after the re-dispatched records on
    the plan; consumer forensics take them instead of scanning the range again: they are what
    that scan finds, on 1 and 2 workers."""
    from conftest import run_mqtool
    from mqtool.consumers import _redispatched_ends

    args = [a for a in make_args if a not in ("--damage", "bit-flip")]
    store_root = tmp_path / "store"
    proc = run_mqtool("fixture", "make", store_root, *args)
    assert proc.returncode == 0, proc.stderr
    if "--damage" in make_args:
        proc = run_mqtool("fixture", "damage", store_root, "--kind", "bit-flip", "--seed", "3")
        assert proc.returncode == 0, proc.stderr
    plan = _recover_plan(store_root, tmp_path, workers)
    assert plan.mode == "abnormal"
    carried = plan.redispatched_ends
    assert carried, "the dispatch counted no ends"
    plan.redispatched_ends = None
    scanned = _redispatched_ends(Store(store_root), plan)
    assert carried == scanned
    # verify's workers count the same ends from each file's judged records
    report_plan = _verify_plan(store_root, workers)
    assert report_plan.redispatched_ends == scanned


@pytest.mark.parametrize("name", [n for n in shared_store_names() if "dledger" not in n])
def test_the_dispatch_counts_the_brokers_stores_queue_ends_as_a_scan(name, tmp_path):
    from mqtool.consumers import _redispatched_ends

    store_root = tmp_path / "store"
    shutil.copytree(SHARED_STORES / name / "store", store_root)
    plan = _recover_plan(store_root, tmp_path, 1)
    carried = plan.redispatched_ends
    plan.redispatched_ends = None
    scanned = _redispatched_ends(Store(store_root), plan)
    if plan.mode == "abnormal":   # the crashed stores: the dispatch walked the whole range
        assert carried is not None
    if carried is not None:
        assert carried == scanned
    verified = _verify_plan(store_root, 1)
    if verified.mode == "abnormal":
        assert verified.redispatched_ends == scanned
