"""System topics decoded: trace records, pop checkpoint/ack records, delayed and timer messages,
retry/DLQ origins, priority (``system`` object of dump/query/export records), and
``query --traces``.

No reference store holds trace or pop records: the layouts come from RocketMQ 5.x's source
(TraceDataEncoder, PopCheckPoint/AckMsg/BatchAckMsg, PopMessageProcessor, AckMessageProcessor,
AbstractSendMessageProcessor, MessageConst) and the store is forged through mqtool's writer
(:func:`mqtool.forge.systopics.make_system_topic_store`), whose returned expectation the
decoded fields are compared with. The delayed messages' due time is also checked against the
broker-written fixture store: it must equal the tagsCode the broker wrote into the
SCHEDULE_TOPIC_XXXX ConsumeQueue.
"""
from __future__ import annotations

import json

import pytest

from conftest import run_mqtool

from mqtool.forge.systopics import make_system_topic_store
from mqtool.inspect.dump import dump_path
from mqtool.systopics import decode_trace_context

DEFAULT_LEVELS_MS = [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                     3600, 7200]      # messageDelayLevel "1s 5s 10s 30s 1m ... 2h", in seconds


@pytest.fixture(scope="module")
def forged(tmp_path_factory):
    root = tmp_path_factory.mktemp("systopics") / "store"
    expect = make_system_topic_store(root)
    proc = run_mqtool("dump", "--json", "--body", "none", root)
    assert proc.returncode == 0, proc.stderr
    by_offset = {d["commitlog_offset"]: d for d in map(json.loads, proc.stdout.splitlines())
                 if d["record_type"] == "commitlog/message"}
    return root, expect, {name: by_offset[e["commitlog_offset"]] for name, e in expect.items()
                          if isinstance(e, dict) and "commitlog_offset" in e}


def test_trace_records(forged):
    _root, expect, got = forged
    assert "system" not in got["business"]
    (pub,) = got["trace_pub"]["system"]["contexts"]
    # the Pub context's time is when the send began: the business message's born time
    assert pub == {"type": "Pub", "timestamp": expect["business"]["store_timestamp"] - 2,
                   "region_id": "DefaultRegion", "group": "ProducerGroupA", "topic": "TopicTest",
                   "msg_id": expect["uniq_key"], "tags": "TagA", "keys": "order-42",
                   "store_host": "127.0.0.1:10911", "body_length": 16, "cost_time": 3,
                   "msg_type": "Normal_Msg", "offset_msg_id": expect["offset_msg_id"],
                   "success": True}
    before, after = got["trace_sub"]["system"]["contexts"]
    assert before["type"] == "SubBefore" and before["request_id"] == "req-1"
    assert before["msg_id"] == after["msg_id"] == expect["uniq_key"]
    assert after["type"] == "SubAfter" and after["cost_time"] == 12 and after["success"] is True
    assert after["group"] == "GroupA" and after["context_code"] == 0
    bad = got["trace_bad"]["system"]
    assert bad["kind"] == "trace" and "not a trace" in bad["problem"]


def test_trace_context_edge_cases():
    # 13 fields: the 13th is success (no offsetMsgId), as the decoder reads it
    short = decode_trace_context("\x01".join(["Pub", "1", "r", "g", "t", "id", "tag", "k", "h",
                                              "4", "2", "3", "false"]))
    assert short["msg_type"] == "Delay_Msg" and short["success"] is False
    assert "offset_msg_id" not in short
    torn = decode_trace_context("\x01".join(["Pub", "1", "r", "g"]))
    assert "the decoder reads 12" in torn["problem"]
    garbled = decode_trace_context("\x01".join(["SubBefore", "soon", "r", "g", "q", "id", "0",
                                                "k"]))
    assert garbled["problem"].startswith("field timestamp")


def test_pop_records(forged):
    _root, expect, got = forged
    ck, pop = got["ck"]["system"], expect["pop"]["checkpoint"]
    assert ck["kind"] == "pop-checkpoint"
    assert (ck["start_offset"], ck["pop_time"], ck["invisible_time"], ck["num"],
            ck["queue_id"], ck["topic"], ck["consumer_group"], ck["broker_name"]) == (
        pop["so"], pop["pt"], pop["it"], pop["n"], pop["q"], pop["t"], pop["c"], pop["bn"])
    assert ck["revive_time"] == pop["pt"] + pop["it"]          # PopCheckPoint.getReviveTime
    assert ck["queue_offsets"] == [pop["so"] + d for d in pop["d"]]
    ack = got["ack"]["system"]
    assert ack["kind"] == "pop-ack" and ack["ack_offset"] == expect["pop"]["ack"]["ao"]
    batch = got["batch_ack"]["system"]
    assert batch["kind"] == "pop-batch-ack" and batch["ack_offsets"] == [7, 9]
    assert "not JSON" in got["ck_bad"]["system"]["problem"]
    # the checkpoint as it waits in the timer wheel for the revive log
    wheel = got["ck_timer"]["system"]
    assert wheel["kind"] == "timer" and wheel["real_topic"] == "rmq_sys_REVIVE_LOG_DefaultCluster"
    assert wheel["payload"]["kind"] == "pop-checkpoint"
    assert wheel["payload"]["queue_offsets"] == ck["queue_offsets"]


def test_schedule_timer_dlq_priority(forged):
    _root, expect, got = forged
    delayed = got["retry_delayed"]["system"]
    assert (delayed["kind"], delayed["real_topic"], delayed["real_queue_id"],
            delayed["delay_level"]) == ("delayed", "%RETRY%GroupA", 0, 3)
    assert delayed["deliver_timestamp"] == expect["retry_delayed"]["store_timestamp"] + \
        DEFAULT_LEVELS_MS[3 - 1] * 1000
    assert delayed["origin"]["retry_topic"] == "TopicTest"
    assert delayed["origin"]["origin_message_id"] == expect["offset_msg_id"]
    dlq = got["dlq"]["system"]
    assert dlq["kind"] == "dlq" and dlq["consumer_group"] == "GroupA"
    assert dlq["reconsume_times"] == 17
    assert dlq["origin"]["dlq_origin_topic"] == "TopicTest"
    timer = got["timer"]["system"]
    props = expect["timer"]["properties"]
    assert (timer["kind"], timer["real_topic"], timer["real_queue_id"]) == ("timer", "TopicTest", 3)
    assert timer["deliver_timestamp"] == int(props["TIMER_OUT_MS"])
    assert got["priority"]["system"] == {"kind": "priority", "priority": 5}


def test_delay_due_time_equals_the_brokers_tags_code(fixture_store):
    """Broker-written ground truth: the 4.9.8 broker put each SCHEDULE_TOPIC_XXXX message's due
    time into its ConsumeQueue unit's tagsCode."""
    messages = run_mqtool("dump", "--json", "--body", "none", "--topic", "SCHEDULE_TOPIC_XXXX",
                          fixture_store)
    due = {d["commitlog_offset"]: d["system"] for d in map(json.loads, messages.stdout.splitlines())}
    assert due
    units = {}
    for queue_dir in sorted((fixture_store / "consumequeue" / "SCHEDULE_TOPIC_XXXX").iterdir()):
        for path in sorted(queue_dir.iterdir()):
            units.update({u["commitlog_offset"]: u["tags_code"] for u in dump_path(path)
                          if u.get("record_type") == "consumequeue/unit"})
    checked = [o for o in due if o in units]
    assert checked
    for offset in checked:
        assert due[offset]["deliver_timestamp"] == units[offset]
        assert due[offset]["real_topic"]


def test_query_follows_a_message_to_its_traces(forged):
    root, expect, got = forged
    proc = run_mqtool("query", "--uniq-key", expect["uniq_key"], "--traces", "--json",
                      "--body", "none", root)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    traces = {d["commitlog_offset"]: d["found_by"] for d in lines
              if d.get("topic") == "RMQ_SYS_TRACE_TOPIC"}
    assert traces == {got["trace_pub"]["commitlog_offset"]: "trace",
                      got["trace_sub"]["commitlog_offset"]: "trace",
                      got["trace_bad"]["commitlog_offset"]: "trace-key-only"}
    assert "3 trace record(s)" in proc.stderr


def test_export_carries_the_system_fields(forged, tmp_path):
    root, _expect, got = forged
    out = tmp_path / "all.jsonl"
    proc = run_mqtool("export", "--out", out, root)
    assert proc.returncode == 0, proc.stderr
    lines = {d["commitlog_offset"]: d for d in map(json.loads, out.read_text().splitlines())}
    assert lines[got["dlq"]["commitlog_offset"]]["system"]["kind"] == "dlq"
    assert lines[got["timer"]["commitlog_offset"]]["real_topic"] == "TopicTest"
    assert lines[got["ck"]["commitlog_offset"]]["system"]["kind"] == "pop-checkpoint"
