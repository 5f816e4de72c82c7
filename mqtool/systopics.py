"""What system topics and system properties say, decoded for ``dump``, ``query`` and ``export``:
trace records, pop checkpoint and ack records, delayed and timer messages (real topic/queue,
due time), retry and dead-letter origins, message priority.

:func:`system_fields` returns the ``system`` object of a message record (None when the message
carries nothing of the kind). It never raises: a body that is not what its topic or tag claims
gives a ``problem`` string instead of fields. Layouts and names: :mod:`mqtool.formats.systopics`.
Transaction half and op records are decoded elsewhere.
"""
from __future__ import annotations

import json

from .formats import codecs
from .formats import systopics as st
from .formats.epoch import JAVA_INT, JAVA_LONG, java_number, java_split


def is_trace_topic(topic: str) -> bool:
    return topic == st.TRACE_TOPIC or topic.startswith(st.TRACE_TOPIC_PREFIX)


#: the properties that give any message a ``system`` object (its origin, its priority)
SYSTEM_PROPERTIES: tuple[str, ...] = (*st.ORIGIN_PROPERTIES, st.PRIORITY)


def is_system_topic(topic: str) -> bool:
    """True when :func:`system_fields` gives every message of ``topic`` a ``system`` object
    (others get one only through :data:`SYSTEM_PROPERTIES`)."""
    return (is_trace_topic(topic) or topic.startswith(st.REVIVE_TOPIC_PREFIX)
            or topic in (st.SCHEDULE_TOPIC, st.TIMER_TOPIC)
            or topic.startswith(st.RETRY_PREFIX) or topic.startswith(st.DLQ_PREFIX))


def _convert(text: str, kind: str):
    if kind == "str":
        return text
    if kind == "int":
        value = java_number(text, JAVA_LONG)
        return value if value is not None else _bad(text, "a number")
    if kind == "bool":
        return text.lower() == "true"       # Boolean.parseBoolean: anything else is false
    if kind == "msg_type":
        n = int(text) if text.isdigit() else -1
        return st.MESSAGE_TYPES[n] if 0 <= n < len(st.MESSAGE_TYPES) else _bad(text, "a MessageType")
    if kind == "tx_state":
        return text if text in st.TRANSACTION_STATES else _bad(text, "a LocalTransactionState")
    raise ValueError(kind)


class _Bad(ValueError):
    pass


def _bad(text: str, what: str):
    raise _Bad(f"{text!r} is not {what}")


def decode_trace_context(line: str) -> dict:
    """One trace context (TraceDataEncoder.decoderFromTraceDataString's rules)."""
    parts = java_split(line, st.CONTENT_SPLITOR)
    kind = parts[0]
    fields = st.TRACE_FIELDS.get(kind)
    if fields is None:
        return {"type": kind[:40], "problem": "not a trace type (Pub, SubBefore, SubAfter, "
                                              "EndTransaction, Recall): the client skips it"}
    need = st.TRACE_REQUIRED[kind]
    if len(parts) < need:
        return {"type": kind, "problem": f"{len(parts)} fields, the decoder reads {need} (it "
                                         "throws on this context)"}
    names = list(fields)
    if kind == "Pub" and len(parts) == st.PUB_SHORT_SUCCESS_LENGTH:
        names = [f for f in fields if f[0] not in ("offset_msg_id", "client_host")]
    if kind == "SubAfter" and len(parts) == 8:
        names = names[:6]                   # timestamp and group only come as a pair
    out = {"type": kind}
    try:
        for (name, conv), text in zip(names, parts[1:]):
            out[name] = _convert(text, conv)
    except _Bad as err:
        out["problem"] = f"field {name}: {err} (the decoder throws on this context)"
    return out


def decode_trace_body(body: bytes) -> dict:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return {"kind": "trace", "contexts": [], "problem": "the body is not UTF-8 text"}
    contexts = [decode_trace_context(c) for c in java_split(text, st.FIELD_SPLITOR) if c]
    out = {"kind": "trace", "contexts": contexts}
    if not contexts:
        out["problem"] = "no trace context in the body"
    elif all("problem" in c for c in contexts):
        out["problem"] = "no context decodes: the body is not a trace"
    return out


def _json_object(body: bytes) -> tuple[dict | None, str | None]:
    try:
        value = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        return None, f"the body is not JSON ({str(err)[:80]})"
    if not isinstance(value, dict):
        return None, "the body is JSON but not an object"
    return value, None


def decode_pop_body(tags: str | None, body: bytes) -> dict:
    """A revive-log record: PopCheckPoint (tag ck) or AckMsg/BatchAckMsg (ack, bAck)."""
    kind = {st.CK_TAG: "pop-checkpoint", st.ACK_TAG: "pop-ack",
            st.BATCH_ACK_TAG: "pop-batch-ack"}.get(tags or "")
    if kind is None:
        return {"kind": "pop", "problem": f"tag {tags!r} is none of ck, ack, bAck"}
    value, problem = _json_object(body)
    if value is None:
        return {"kind": kind, "problem": problem}
    out: dict = {"kind": kind}
    if kind == "pop-checkpoint":
        for key, name in st.POP_CHECKPOINT_FIELDS.items():
            if key in value:
                out[name] = value[key]
        try:
            out["revive_time"] = int(out["pop_time"]) + int(out["invisible_time"])
            diff = out.get("queue_offset_diff") or []
            out["queue_offsets"] = [int(out["start_offset"]) + int(d) for d in diff]
        except (KeyError, TypeError, ValueError):
            out["problem"] = "not a PopCheckPoint (so, pt, it missing or not numbers)"
    else:
        for key, item in value.items():
            key = st.ACK_ALTERNATE_NAMES.get(key, key)
            if key in st.ACK_FIELDS:
                out[st.ACK_FIELDS[key]] = item
        if "start_offset" not in out or "consumer_group" not in out:
            out["problem"] = "not an AckMsg (so, c missing)"
    return out


def origin_fields(properties: dict[str, str]) -> dict:
    return {name: properties[key] for key, name in st.ORIGIN_PROPERTIES.items()
            if key in properties}


def _body_topic(topic: str) -> bool:
    return is_trace_topic(topic) or topic.startswith(st.REVIVE_TOPIC_PREFIX)


def needs_body(topic: str, properties: dict[str, str]) -> bool:
    """True when :func:`system_fields` reads the body of a message of ``topic``: a trace or
    revive-log record, also while it waits as a delayed or timer message for its real topic
    (the broker's pop records carry TIMER_DELIVER_MS, so they pass through the timer wheel)."""
    return _body_topic(topic) or (topic in (st.SCHEDULE_TOPIC, st.TIMER_TOPIC)
                                  and _body_topic(properties.get(st.REAL_TOPIC) or ""))


def _payload(topic: str, properties: dict[str, str], body: bytes | None) -> dict | None:
    if is_trace_topic(topic):
        return decode_trace_body(body or b"")
    if topic.startswith(st.REVIVE_TOPIC_PREFIX):
        return decode_pop_body(properties.get("TAGS"), body or b"")
    return None


def system_fields(topic: str, properties: dict[str, str], body: bytes | None,
                  store_timestamp: int, reconsume_times: int = 0) -> dict | None:
    """The decoded ``system`` object of one message, or None."""
    out: dict | None = _payload(topic, properties, body)
    if out is not None:
        pass
    elif topic == st.SCHEDULE_TOPIC:
        out = {"kind": "delayed", "real_topic": properties.get(st.REAL_TOPIC),
               "real_queue_id": codecs.property_int(properties.get(st.REAL_QID)),
               "delay_level": codecs.property_int(properties.get(st.DELAY)),
               # the ConsumeQueue's tagsCode: store time + the level's delay (default levels)
               "deliver_timestamp": codecs.tags_code(topic, properties, store_timestamp)}
    elif topic == st.TIMER_TOPIC:
        out = {"kind": "timer", "real_topic": properties.get(st.REAL_TOPIC),
               "real_queue_id": codecs.property_int(properties.get(st.REAL_QID)),
               "deliver_timestamp": codecs.property_int(properties.get("TIMER_OUT_MS")
                                                        or properties.get("TIMER_DELIVER_MS"))}
        for key, name in st.TIMER_PROPERTIES.items():
            if key in properties:
                value = properties[key]
                out[name] = value if key == "TIMER_DEL_UNIQKEY" else codecs.property_int(value)
        if "timer_del_uniqkey" in out:
            out["kind"] = "timer-delete"
    elif topic.startswith(st.RETRY_PREFIX) or topic.startswith(st.DLQ_PREFIX):
        retry = topic.startswith(st.RETRY_PREFIX)
        prefix = st.RETRY_PREFIX if retry else st.DLQ_PREFIX
        out = {"kind": "retry" if retry else "dlq", "consumer_group": topic[len(prefix):],
               "reconsume_times": reconsume_times}
    if out is not None and out["kind"] in ("delayed", "timer"):
        inner = _payload(out["real_topic"] or "", properties, body)
        if inner is not None:
            out["payload"] = inner          # what the real topic will hold once it is due
    origin = origin_fields(properties)
    if origin:
        out = out if out is not None else {"kind": "origin"}
        out["origin"] = origin
    if st.PRIORITY in properties:
        out = out if out is not None else {"kind": "priority"}
        text = properties[st.PRIORITY]
        priority = java_number(text, JAVA_INT)
        out["priority"] = priority
        if priority is None:
            out["priority_problem"] = f"{st.PRIORITY} {text[:40]!r} is not a number"
    return out
