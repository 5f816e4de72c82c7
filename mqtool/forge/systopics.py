"""A store holding what 5.x brokers and clients write to system topics, forged through
:mod:`mqtool.writer`: a business message and its trace records, pop checkpoint and ack records
(first as timer messages, then delivered to the revive log), a delayed retry, a dead letter, a
timer message and a 5.4 priority message. Layouts from RocketMQ 5.x's source (see
:mod:`mqtool.formats.systopics`): ``TraceDataEncoder.encoderFromContextBean`` and
``AsyncTraceDispatcher.sendTraceDataByMQ``, ``PopMessageProcessor.buildCkMsg``,
``AckMessageProcessor`` (fastjson bodies, keys sorted as fastjson sorts them),
``AbstractSendMessageProcessor`` (retry / DLQ properties), ``HookUtils`` (timer rewrite).

:func:`make_system_topic_store` returns what it meant to write, per message: the expectation
tests compare ``dump``/``export``/``query`` with.
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import writer as w
from ..errors import StoreLayoutError
from ..formats import systopics as st
from .mix import CLUSTER_NAME, LOCK_CONTENT, STORE_HOST_V4

BASE_TIME_MS = 1_795_400_000_000
BROKER_NAME = "broker-a"
REVIVE_TOPIC = st.REVIVE_TOPIC_PREFIX + CLUSTER_NAME
C1, C2 = st.CONTENT_SPLITOR, st.FIELD_SPLITOR


def _fastjson(value: dict) -> bytes:
    """JSON.toJSONString of a bean: fields sorted by name, nulls left out, no spaces."""
    return json.dumps({k: v for k, v in sorted(value.items()) if v is not None},
                      separators=(",", ":")).encode()


def pub_trace(ts: int, group: str, topic: str, msg_id: str, tags: str, keys: str,
              store_host: str, body_length: int, cost: int, offset_msg_id: str) -> str:
    return C1.join(["Pub", str(ts), "DefaultRegion", group, topic, msg_id, tags, keys,
                    store_host, str(body_length), str(cost), "0", offset_msg_id, "true"]) + C2


def sub_traces(ts: int, group: str, request_id: str, msg_id: str, keys: str, cost: int) -> str:
    before = C1.join(["SubBefore", str(ts), "DefaultRegion", group, request_id, msg_id, "0",
                      keys]) + C2
    after = C1.join(["SubAfter", request_id, msg_id, str(cost), "true", keys, "0", str(ts + cost),
                     group]) + C2
    return before + after


def make_system_topic_store(root: Path) -> dict:
    """Write the store under ``root`` (absent or empty); returns the expectation."""
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise StoreLayoutError(f"{root}: exists and is not empty")
    store = w.StoreWriter(root, commitlog_file_size=64 * 1024, broker_version=5,
                          cq_units_per_file=300, index_slots=1000, index_entries=4000)
    clock = BASE_TIME_MS
    expect: dict = {}

    def put(name: str, topic: str, body: bytes, props: dict, queue_id: int = 0, **fields):
        nonlocal clock
        clock += 10
        msg = w.Message(topic=topic, queue_id=queue_id, body=body, properties=props,
                        born_timestamp=clock - 2, store_timestamp=clock,
                        born_host=(bytes([10, 0, 0, 9]), 51000), store_host=STORE_HOST_V4,
                        **fields)
        offset, _size, _qo = store.put(msg)
        expect[name] = {"commitlog_offset": offset, "topic": topic,
                        "store_timestamp": clock, "properties": props}
        return offset

    uniq = "7F00000100002A9F0000000000ABCDEF"
    try:
        offset = put("business", "TopicTest", b"order 42 created",
                     {"UNIQ_KEY": uniq, "KEYS": "order-42", "TAGS": "TagA", "WAIT": "true"})
        offset_msg_id = f"7F00000100002A9F{offset:016X}"
        pub = pub_trace(clock - 2, "ProducerGroupA", "TopicTest", uniq, "TagA", "order-42",
                        "127.0.0.1:10911", 16, 3, offset_msg_id)
        put("trace_pub", st.TRACE_TOPIC, pub.encode(),
            {"UNIQ_KEY": "7F00000100002A9F0000000000AB0001", "KEYS": f"{uniq} order-42",
             "WAIT": "true"})
        put("trace_sub", st.TRACE_TOPIC,
            sub_traces(clock + 5, "GroupA", "req-1", uniq, "order-42", 12).encode(),
            {"UNIQ_KEY": "7F00000100002A9F0000000000AB0002", "KEYS": f"{uniq} order-42",
             "WAIT": "true"})
        # a body in the trace topic that is no trace (a misconfigured producer)
        put("trace_bad", st.TRACE_TOPIC, b'{"hello":"not a trace"}',
            {"UNIQ_KEY": "7F00000100002A9F0000000000AB0003", "KEYS": uniq, "WAIT": "true"})
        pop_time = clock
        ck = {"so": 7, "pt": pop_time, "it": 60000, "bm": 0, "n": 3, "q": 1, "t": "TopicTest",
              "c": "PopGroup", "ro": 0, "d": [0, 1, 2], "bn": BROKER_NAME}
        ck_uid = f"TopicTest@1@7@PopGroup@{pop_time}@{BROKER_NAME}@ck"
        # buildCkMsg sets TIMER_DELIVER_MS (reviveTime - ackTimeInterval): the timer rewrite
        # stores it in rmq_sys_wheel_timer first, with REAL_TOPIC the revive log
        deliver = pop_time + 60000 - 1000
        put("ck_timer", st.TIMER_TOPIC, _fastjson(ck),
            {"TAGS": st.CK_TAG, "UNIQ_KEY": ck_uid, "TIMER_DELIVER_MS": str(deliver),
             "TIMER_OUT_MS": str(deliver - deliver % 1000), st.REAL_TOPIC: REVIVE_TOPIC,
             st.REAL_QID: "0"})
        put("ck", REVIVE_TOPIC, _fastjson(ck),
            {"TAGS": st.CK_TAG, "UNIQ_KEY": ck_uid, "TIMER_DELIVER_MS": str(deliver)})
        ack = {"ao": 8, "so": 7, "c": "PopGroup", "t": "TopicTest", "q": 1, "pt": pop_time,
               "bn": BROKER_NAME}
        put("ack", REVIVE_TOPIC, _fastjson(ack),
            {"TAGS": st.ACK_TAG, "UNIQ_KEY": f"TopicTest@1@8@PopGroup@{pop_time}@{BROKER_NAME}@ack"})
        batch = {**{k: v for k, v in ack.items() if k != "ao"}, "ao": 0, "aol": [7, 9]}
        put("batch_ack", REVIVE_TOPIC, _fastjson(batch),
            {"TAGS": st.BATCH_ACK_TAG, "UNIQ_KEY": f"TopicTest@1@7@PopGroup@{pop_time}@bAck"})
        put("ck_bad", REVIVE_TOPIC, b"ck?", {"TAGS": st.CK_TAG, "UNIQ_KEY": "bad@ck"})
        origin = {"UNIQ_KEY": uniq, "KEYS": "order-42", "TAGS": "TagA", "WAIT": "false",
                  "RETRY_TOPIC": "TopicTest", "ORIGIN_MESSAGE_ID": offset_msg_id,
                  "MAX_RECONSUME_TIMES": "16"}
        # sendMessageBack: delay level 3 + reconsumeTimes, through SCHEDULE_TOPIC_XXXX
        put("retry_delayed", st.SCHEDULE_TOPIC, b"order 42 created",
            {**origin, st.DELAY: "3", st.REAL_TOPIC: "%RETRY%GroupA", st.REAL_QID: "0"},
            queue_id=2, reconsume_times=1)
        put("dlq", "%DLQ%GroupA", b"order 42 created",
            {**origin, "DLQ_ORIGIN_TOPIC": "TopicTest", "DLQ_ORIGIN_MESSAGE_ID": uniq},
            reconsume_times=17)
        due = clock + 3_600_000
        put("timer", st.TIMER_TOPIC, b"remind me",
            {"UNIQ_KEY": "7F00000100002A9F0000000000AB0010", "TIMER_DELIVER_MS": str(due),
             "TIMER_OUT_MS": str(due - due % 1000), st.REAL_TOPIC: "TopicTest",
             st.REAL_QID: "3", "WAIT": "true"})
        put("priority", "TopicTest", b"urgent",
            {"UNIQ_KEY": "7F00000100002A9F0000000000AB0020", st.PRIORITY: "5", "WAIT": "true"})
        store.write_checkpoint(clock, clock)
    finally:
        store.close()
    (root / "lock").write_bytes(LOCK_CONTENT)
    expect["pop"] = {"checkpoint": ck, "ack": ack, "batch_ack": batch, "deliver": deliver}
    expect["uniq_key"] = uniq
    expect["offset_msg_id"] = offset_msg_id
    return expect
