"""System topics and system properties: what the broker and the clients store in them.

Read from Apache RocketMQ 5.x's source (commit 8fc57f14); no reference store holds trace or pop
records, the tests forge them through mqtool's writer with these layouts.

Message traces (``client/trace/TraceDataEncoder``, ``TraceConstants``, ``TraceType``,
``AsyncTraceDispatcher``): a trace message goes to ``RMQ_SYS_TRACE_TOPIC`` (or the topic the
client configures; region traces to ``rmq_sys_TRACE_DATA_<region>``); its KEYS are the traced
messages' ids and keys. The body is text: trace contexts separated by ``FIELD_SPLITOR`` (char 2),
each context's fields by ``CONTENT_SPLITOR`` (char 1), the first field the context type. The
fields of each type, in order, are :data:`TRACE_FIELDS` (optional trailing fields appear only
when the line is long enough, as the decoder reads them).

Pop consumption (``store/pop/PopCheckPoint``, ``AckMsg``, ``BatchAckMsg``, ``PopAckConstants``,
``PopMessageProcessor.buildCkMsg``, ``AckMessageProcessor``): checkpoint and ack records go to
``rmq_sys_REVIVE_LOG_<cluster>`` with tag ``ck``, ``ack`` or ``bAck`` and a fastjson body whose
short keys are :data:`POP_CHECKPOINT_FIELDS` / :data:`ACK_FIELDS` (ack also accepts its long
names, fastjson's ``alternateNames``).

Properties (``common/message/MessageConst``): delayed messages (``SCHEDULE_TOPIC_XXXX``) and timer
messages (``rmq_sys_wheel_timer``) keep their real topic and queue in ``REAL_TOPIC`` /
``REAL_QID``; retries and dead letters name their origin with ``ORIGIN_MESSAGE_ID``,
``RETRY_TOPIC``, ``DLQ_ORIGIN_TOPIC``, ``DLQ_ORIGIN_MESSAGE_ID``; 5.4's priority messages (RIP-80)
carry ``_SYS_MSG_PRIORITY_`` (its source is not readable here: the value is read as an integer).
"""
from __future__ import annotations

# --- traces ---------------------------------------------------------------------------------------
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"             # TopicValidator.RMQ_SYS_TRACE_TOPIC
TRACE_TOPIC_PREFIX = "rmq_sys_TRACE_DATA_"      # TraceConstants.TRACE_TOPIC_PREFIX
CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
MESSAGE_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg", "Order_Msg")
TRANSACTION_STATES = ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW")

# (field, kind) per trace type, in line order after the type; kind: str, int, bool, msg_type,
# tx_state. ``TRACE_REQUIRED`` fields must be there (the decoder indexes them unconditionally).
TRACE_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "Pub": (("timestamp", "int"), ("region_id", "str"), ("group", "str"), ("topic", "str"),
            ("msg_id", "str"), ("tags", "str"), ("keys", "str"), ("store_host", "str"),
            ("body_length", "int"), ("cost_time", "int"), ("msg_type", "msg_type"),
            ("offset_msg_id", "str"), ("success", "bool"), ("client_host", "str")),
    "SubBefore": (("timestamp", "int"), ("region_id", "str"), ("group", "str"),
                  ("request_id", "str"), ("msg_id", "str"), ("retry_times", "int"),
                  ("keys", "str")),
    "SubAfter": (("request_id", "str"), ("msg_id", "str"), ("cost_time", "int"),
                 ("success", "bool"), ("keys", "str"), ("context_code", "int"),
                 ("timestamp", "int"), ("group", "str")),
    "EndTransaction": (("timestamp", "int"), ("region_id", "str"), ("group", "str"),
                       ("topic", "str"), ("msg_id", "str"), ("tags", "str"), ("keys", "str"),
                       ("store_host", "str"), ("msg_type", "msg_type"),
                       ("transaction_id", "str"), ("transaction_state", "tx_state"),
                       ("from_transaction_check", "bool")),
    "Recall": (("timestamp", "int"), ("region_id", "str"), ("group", "str"), ("topic", "str"),
               ("msg_id", "str"), ("success", "bool")),
}
# fields the decoder reads whatever the line's length (counted with the type)
TRACE_REQUIRED = {"Pub": 12, "SubBefore": 8, "SubAfter": 6, "EndTransaction": 13, "Recall": 7}
# Pub: 13 fields -> success at 12; 14 -> offsetMsgId, success; 15+ -> and clientHost
PUB_SHORT_SUCCESS_LENGTH = 13

# --- pop ------------------------------------------------------------------------------------------
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"     # PopAckConstants.REVIVE_TOPIC
CK_TAG, ACK_TAG, BATCH_ACK_TAG = "ck", "ack", "bAck"
# JSON key -> field name
POP_CHECKPOINT_FIELDS = {"so": "start_offset", "pt": "pop_time", "it": "invisible_time",
                         "bm": "bit_map", "n": "num", "q": "queue_id", "t": "topic",
                         "c": "consumer_group", "ro": "revive_offset", "d": "queue_offset_diff",
                         "bn": "broker_name", "rp": "reput_times"}
ACK_FIELDS = {"ao": "ack_offset", "so": "start_offset", "c": "consumer_group", "t": "topic",
              "q": "queue_id", "pt": "pop_time", "bn": "broker_name", "aol": "ack_offsets"}
ACK_ALTERNATE_NAMES = {"ackOffset": "ao", "startOffset": "so", "consumerGroup": "c",
                       "topic": "t", "queueId": "q", "popTime": "pt", "brokerName": "bn",
                       "ackOffsetList": "aol"}

# --- properties -------------------------------------------------------------------------------------
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
REAL_TOPIC, REAL_QID = "REAL_TOPIC", "REAL_QID"
DELAY = "DELAY"
ORIGIN_PROPERTIES = {"ORIGIN_MESSAGE_ID": "origin_message_id", "RETRY_TOPIC": "retry_topic",
                     "DLQ_ORIGIN_TOPIC": "dlq_origin_topic",
                     "DLQ_ORIGIN_MESSAGE_ID": "dlq_origin_message_id",
                     "MAX_RECONSUME_TIMES": "max_reconsume_times",
                     "RECONSUME_TIME": "reconsume_time"}
TIMER_PROPERTIES = {"TIMER_OUT_MS": "timer_out_ms", "TIMER_DELIVER_MS": "timer_deliver_ms",
                    "TIMER_DELAY_SEC": "timer_delay_sec", "TIMER_DELAY_MS": "timer_delay_ms",
                    "TIMER_ENQUEUE_MS": "timer_enqueue_ms", "TIMER_DEQUEUE_MS": "timer_dequeue_ms",
                    "TIMER_ROLL_TIMES": "timer_roll_times",
                    "TIMER_DEL_UNIQKEY": "timer_del_uniqkey"}
PRIORITY = "_SYS_MSG_PRIORITY_"
