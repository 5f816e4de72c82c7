"""The fixture forge: deterministic stores laid out as a broker lays them out, and fault injection.

:func:`make_store` generates a message mix like the one the reference stores were written with
(topics x queues, tags, keys with hot keys, UNIQ_KEY, user properties, delay levels,
transactions, zlib bodies, IPv6 hosts, V2 records, property CRC) and hands every message to
:mod:`mqtool.writer`, which appends it to the CommitLog and dispatches it to ConsumeQueues and
IndexFiles as the 4.9.8 broker does. ``crash=True`` leaves what a JVM halt in ASYNC_FLUSH
leaves: an ``abort`` file, a lagging checkpoint, dispatch stopped short of the CommitLog end and
the preallocated next CommitLog file.

:func:`damage_store` injects one fault (torn tail, bit flip, zeroed range, truncated or deleted
file, stray files, stale checkpoint) and describes exactly what it changed.

Everything is a function of the seed: the same arguments give byte-identical stores and damage.
"""
from __future__ import annotations

import calendar
import datetime as _dt
import json
import os
import random
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import writer as w
from .errors import StoreLayoutError, StoreLockedError
from .formats import codecs
from .formats import commitlog as cl_fmt
from .formats import consumequeue as cq_fmt
from .codec import CQ_UNIT as _CQ_UNIT
from .scan import MessageRecord, Scanner
from .store import Store
from .lock import holding_store_lock

# --- the message mix ----------------------------------------------------------------------------

from .vocabulary import DEFAULT_TOPICS
SCHEDULE_TOPIC = codecs.SCHEDULE_TOPIC
MAX_DELAY_LEVEL = len(codecs.delay_level_table())
TAG_POOL = ("TagA", "TagB", "TagC", "täg-ü", "标签", "order_created", "order_paid")
HOT_KEYS = tuple(f"hotkey-{i}" for i in range(5))
CLUSTER_NAME = "DefaultCluster"
PRODUCER_GROUP = "TxProducerGroup"
CONSUMER_GROUP = "GroupA"
STORE_PORT = 10911
STORE_HOST_V4 = (bytes([127, 0, 0, 1]), STORE_PORT)
STORE_HOST_V6 = (bytes(15) + b"\x01", STORE_PORT)
# The ratios of the reference stores: 8% empty bodies, 10% without TAGS, 2% with a 1-2 KB
# property, 5% with a producer flag.
EMPTY_BODY_RATIO = 0.08
NO_TAGS_RATIO = 0.10
BIG_PROPERTY_RATIO = 0.02
FLAG_RATIO = 0.05
INNER_BATCH_MAX = 10        # messages in an inner batch: 2 .. this, as the 5.3.3 reference mix
HOT_KEY_RATIO = 0.15
NON_ASCII_KEY_RATIO = 0.05
REPEATED_KEY_RATIO = 0.02
# The client compresses with ZLIB at level 5 (MixAll.MESSAGE_COMPRESS_LEVEL default).
ZLIB_LEVEL = 5
ZLIB_SYS_FLAG = cl_fmt.COMPRESSED_FLAG | (cl_fmt.COMPRESSION_ZLIB << 8)
TEXT_ALPHABET = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
                 "äöüßéΩЖфあうい中文消息標☃")
KINDS = ("normal", "delay", "prepared", "commit", "rollback")
LOCK_CONTENT = b"lock"
# What the 5.3.3 broker leaves in compaction/ on a clean shutdown.
COMPACTION_CHECKPOINT = '{\n\t"empty":true,\n\t"queueOffsetMap":{}\n}'


def parse_size(text: str | int) -> int:
    """``1048576``, ``1m``, ``64M``, ``128k``, ``1g``, ``1GiB`` -> bytes."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*", str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (use e.g. 1048576, 1m, 64m, 1g)")
    number, unit = int(match.group(1)), match.group(2).lower()
    return number * {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[unit]


def parse_body_size(text: str) -> tuple[int, int]:
    """``MEAN/MAX`` (or just ``MEAN``, with MAX = 4 x MEAN) -> (mean, max) in bytes."""
    parts = str(text).split("/")
    if len(parts) > 2 or not all(p.strip() for p in parts):
        raise ValueError(f"--body-size must be MEAN or MEAN/MAX, got {text!r}")
    mean = parse_size(parts[0])
    largest = parse_size(parts[1]) if len(parts) == 2 else 4 * mean
    if largest < mean:
        raise ValueError(f"--body-size: max {largest} is below the mean {mean}")
    return mean, largest


def long_topic_name(length: int = 127) -> str:
    """The reference stores' long topic: ``LongTopic_`` then the alphabet from ``k`` on."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    name = "LongTopic_"
    i = letters.index("k")
    while len(name) < length:
        name += letters[i % 26]
        i += 1
    return name


def long_retry_topic_name(length: int) -> str:
    """A ``%RETRY%`` topic of ``length`` characters, as the 5.x reference store's long groups."""
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    name = f"%RETRY%LongGroup{length}_"
    i = letters.index("U")
    while len(name) < length:
        name += letters[i % 26]
        i += 1
    return name


@dataclass
class ForgeOptions:
    """What ``mqtool fixture make`` asks for."""

    messages: int
    seed: int = 0
    topics: tuple[str, ...] = DEFAULT_TOPICS
    queues: int = 4
    long_topic: bool = False
    keys: bool = True
    tags: bool = True
    user_properties: bool = True
    delay_ratio: float = 0.02
    transaction_ratio: float = 0.03
    compress_ratio: float = 0.03
    body_mean: int = 1024
    body_max: int = 4096
    ipv6: bool = False
    broker_version: int = 4
    prop_crc: bool = False
    crash: bool = False
    index: bool = True
    commitlog_file_size: int = 1024 * 1024
    cq_units: int = 300
    index_slots: int = 1000
    index_entries: int = 4000
    batch_cq_topics: tuple[str, ...] = ()
    # share of a BatchCQ topic's sends that are inner batches (one record of 2-10 messages)
    inner_batch_ratio: float = 0.5

    def validate(self) -> None:
        if self.messages < 0:
            raise ValueError("--messages must be >= 0")
        if self.queues < 1 or self.queues > 1024:
            raise ValueError("--queues must be between 1 and 1024")
        if self.broker_version not in (4, 5):
            raise ValueError("--broker-version must be 4 or 5")
        if self.batch_cq_topics and self.broker_version < 5:
            raise StoreLayoutError("--batch-cq-topics needs --broker-version 5 "
                                   "(BatchConsumeQueue exists from 5.0)")
        unknown = set(self.batch_cq_topics) - set(self.topics)
        if unknown:
            raise StoreLayoutError(f"--batch-cq-topics names topics not in --topics: "
                                   f"{', '.join(sorted(unknown))}")
        if self.prop_crc and self.broker_version < 5:
            raise ValueError("--prop-crc needs --broker-version 5 (the property CRC is 5.2+)")
        for name in ("delay_ratio", "transaction_ratio", "compress_ratio", "inner_batch_ratio"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be between 0 and 1")
        if self.delay_ratio + self.transaction_ratio > 1.0:
            raise ValueError("--delay-ratio + --transaction-ratio must not exceed 1")
        if not self.topics:
            raise ValueError("--topics must name at least one topic")
        if len(set(self.topics)) != len(self.topics):
            raise ValueError("--topics lists a topic twice")
        for topic in self.topics:
            self._check_topic(topic)
        if self.body_mean < 0 or self.body_max < self.body_mean:
            raise ValueError("--body-size needs 0 <= mean <= max")
        if self.body_max > cl_fmt.DEFAULT_MAX_MESSAGE_SIZE:
            raise ValueError(f"--body-size max must be <= {cl_fmt.DEFAULT_MAX_MESSAGE_SIZE} "
                             "(the broker's maxMessageSize)")
        if self.commitlog_file_size < self.body_max + MAX_NON_BODY_BYTES:
            raise ValueError(f"--commitlog-file-size {self.commitlog_file_size} cannot hold a "
                             f"record with a {self.body_max}-byte body; use at least "
                             f"{self.body_max + MAX_NON_BODY_BYTES}")
        if self.cq_units < 1:
            raise ValueError("--cq-units must be >= 1")
        if self.index_slots < 1 or self.index_entries < 2:
            raise ValueError("--index-slots must be >= 1 and --index-entries >= 2")

    def _check_topic(self, topic: str) -> None:
        raw = topic.encode("utf-8")
        if not raw or topic in (".", "..") or "/" in topic or "\0" in topic:
            raise ValueError(f"topic {topic!r} cannot be a directory name")
        if topic == SCHEDULE_TOPIC:
            raise ValueError(f"{SCHEDULE_TOPIC} is filled by --delay-ratio, not --topics")
        # 4.9 rejects topics over 127; 5.x stores %RETRY%/%DLQ% topics up to 255 as V2 records
        limit = 255 if self.broker_version >= 5 and topic.startswith(("%RETRY%", "%DLQ%")) \
            else 127
        if len(raw) > limit:
            raise ValueError(f"topic {topic[:20]}... is {len(raw)} bytes; the broker allows {limit}")

    def all_topics(self, rng: random.Random | None = None) -> list[str]:
        topics = list(self.topics)
        if self.long_topic:
            extra = [long_topic_name()]
            if self.broker_version >= 5:
                length = (rng or random.Random(self.seed)).randint(128, 255)
                extra.append(long_retry_topic_name(length))
            topics += [t for t in extra if t not in topics]
        return topics


# Worst case of everything but the body: 2 KB property, user properties, keys, topic, headers.
MAX_NON_BODY_BYTES = 8 * 1024


@dataclass
class Intent:
    """What the generator meant one record to be (kept apart from what the files say)."""

    kind: str
    topic: str
    queue_id: int
    real_topic: str | None = None
    real_queue_id: int | None = None
    delay_level: int = 0
    compressed: bool = False
    born_v6: bool = False
    prepared_ref: int | None = None   # which earlier PREPARED record a COMMIT/ROLLBACK ends
    inner_num: int = 1                # messages in the record: >1 for an inner batch


@dataclass
class Producer:
    ip: bytes
    port: int
    pid: int
    class_loader_hash: int
    counter: int = 0

    def uniq_key(self, born_timestamp: int, month_start: int) -> str:
        """MessageClientIDSetter.createUniqID: IP, pid, class loader hash, ms since the month
        started (cast to int), counter."""
        elapsed = (born_timestamp - month_start) & 0xFFFFFFFF
        raw = (self.ip + (self.pid & 0xFFFF).to_bytes(2, "big")
               + (self.class_loader_hash & 0xFFFFFFFF).to_bytes(4, "big")
               + elapsed.to_bytes(4, "big") + (self.counter & 0xFFFF).to_bytes(2, "big"))
        self.counter += 1
        return raw.hex().upper()


def month_start_ms(millis: int) -> int:
    """Start of the (UTC) month holding ``millis``, the UNIQ_KEY time origin."""
    t = _dt.datetime.fromtimestamp(millis / 1000, _dt.timezone.utc)
    return calendar.timegm((t.year, t.month, 1, 0, 0, 0)) * 1000


def _next_month_start_ms(month_start: int) -> int:
    t = _dt.datetime.fromtimestamp(month_start / 1000, _dt.timezone.utc)
    year, month = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
    return calendar.timegm((year, month, 1, 0, 0, 0)) * 1000


class MessageGenerator:
    """Produces ``(Message, Intent)`` for record i = 0, 1, ... from one ``random.Random(seed)``."""

    def __init__(self, options: ForgeOptions):
        self.options = options
        rng = self.rng = random.Random(options.seed)
        # fixed time bases derived from the seed (never the wall clock): 2020-09 .. 2027-01
        self.born_clock = 1_600_000_000_000 + rng.randrange(200_000_000_000)
        self.store_clock = self.born_clock + rng.randrange(1, 50)
        self.month_start = month_start_ms(self.born_clock)
        self.next_month = _next_month_start_ms(self.month_start)
        self.topics = options.all_topics(rng)
        # earlier topics are busier, as in the reference mix
        weights = [len(self.topics) - i for i in range(len(self.topics))]
        self.cum_weights = [sum(weights[:i + 1]) for i in range(len(weights))]
        self.producers = self._producers(rng, options.ipv6)
        self.store_host = STORE_HOST_V6 if options.ipv6 else STORE_HOST_V4
        self.text_pool = "".join(rng.choices(TEXT_ALPHABET, k=4096))
        self.ascii_pool = "".join(rng.choices(TEXT_ALPHABET[:62], k=4096))
        pool_chars = max(64 * 1024, 2 * options.body_max)
        self.body_pool = "".join(rng.choices(TEXT_ALPHABET, k=pool_chars)).encode("utf-8")
        lo = max(1, 2 * options.body_mean - options.body_max)
        hi = max(lo, min(options.body_max, 2 * options.body_mean - lo))
        self.body_range = (lo, hi)
        self.prepared_count = 0

    @staticmethod
    def _producers(rng: random.Random, ipv6: bool) -> list[Producer]:
        producers = []
        for i in range(3 if ipv6 else 2):
            if ipv6 and i > 0:
                ip = b"\xfd" + bytes(rng.randrange(256) for _ in range(15))
            else:
                ip = bytes([10, rng.randrange(256), rng.randrange(256), rng.randrange(1, 255)])
            producers.append(Producer(ip, rng.randrange(1024, 65536), rng.randrange(1, 1 << 22),
                                      rng.randrange(-2 ** 31, 2 ** 31)))
        return producers

    def _text(self, pool: str, length: int) -> str:
        start = self.rng.randrange(len(pool) - length) if length < len(pool) else 0
        return pool[start:start + length]

    def _body(self, i: int) -> bytes:
        rng = self.rng
        if self.options.body_max == 0 or rng.random() < EMPTY_BODY_RATIO:
            return b""
        size = rng.randint(*self.body_range)
        head = b'{"i":%d,"text":"' % i
        tail = b'"}'
        fill = size - len(head) - len(tail)
        if fill <= 0:
            return head[:size]
        pool = self.body_pool
        start = rng.randrange(len(pool) - fill) if fill < len(pool) else 0
        # cut on UTF-8 character boundaries so every body stays valid text
        while start > 0 and pool[start] & 0xC0 == 0x80:
            start -= 1
        end = min(len(pool), start + fill)
        while end < len(pool) and pool[end] & 0xC0 == 0x80:
            end -= 1
        text = pool[start:end]
        return head + text + b" " * (fill - len(text)) + tail

    def _keys(self, i: int) -> str | None:
        rng = self.rng
        count = rng.randrange(4)
        if not count:
            return None
        seed = self.options.seed
        items = []
        for j in range(count):
            r = rng.random()
            if r < HOT_KEY_RATIO:
                items.append(rng.choice(HOT_KEYS))
            elif r < HOT_KEY_RATIO + NON_ASCII_KEY_RATIO:
                items.append(f"kéy-{seed}-{i}-{j}-键")
            else:
                items.append(f"key-{seed}-{i}-{j}")
        if rng.random() < REPEATED_KEY_RATIO:
            items.append(items[0])
        return " ".join(items)

    def next(self, i: int) -> tuple[w.Message, Intent]:
        rng, options = self.rng, self.options
        topic = rng.choices(self.topics, cum_weights=self.cum_weights)[0]
        queue_id = rng.randrange(options.queues)
        producer = self.producers[rng.randrange(len(self.producers))]
        self.born_clock += rng.randint(1, 5)
        self.store_clock = max(self.store_clock, self.born_clock + rng.randrange(4))
        if self.born_clock >= self.next_month:
            self.month_start, self.next_month = self.next_month, \
                _next_month_start_ms(self.next_month)

        props: dict[str, str] = {}
        if options.tags and rng.random() >= NO_TAGS_RATIO:
            props["TAGS"] = rng.choice(TAG_POOL)
        keys = self._keys(i) if options.keys else None
        if keys:
            props["KEYS"] = keys
        props["WAIT"] = "true"
        props["UNIQ_KEY"] = producer.uniq_key(self.born_clock, self.month_start)
        if options.user_properties:
            for n in range(3):
                if rng.random() < 0.5:
                    props[f"userProp{n}"] = self._text(self.text_pool, rng.randint(1, 24))
            if rng.random() < BIG_PROPERTY_RATIO:
                props["bigProp"] = self._text(self.ascii_pool, rng.randint(1024, 2048))

        kind = "normal"
        sys_flag = 0
        r = rng.random()
        if r < options.transaction_ratio:
            kind = ("prepared", "commit", "rollback")[rng.randrange(3)]
            if kind != "prepared" and not self.prepared_count:
                kind = "prepared"
        elif r < options.transaction_ratio + options.delay_ratio:
            kind = "delay"
        intent = Intent(kind, topic, queue_id, born_v6=len(producer.ip) == 16)
        if kind == "prepared":
            sys_flag |= cl_fmt.TRANSACTION_PREPARED_TYPE
            props["TRAN_MSG"] = "true"
            props["PGROUP"] = PRODUCER_GROUP
            self.prepared_count += 1
        elif kind in ("commit", "rollback"):
            sys_flag |= (cl_fmt.TRANSACTION_COMMIT_TYPE if kind == "commit"
                         else cl_fmt.TRANSACTION_ROLLBACK_TYPE)
            # EndTransactionProcessor drops TRAN_MSG from the final record; PGROUP stays
            props["PGROUP"] = PRODUCER_GROUP
            intent.prepared_ref = rng.randrange(self.prepared_count)
        elif kind == "delay":
            # the broker clamps levels above the maximum and rewrites DELAY with the clamped one
            level = min(rng.randint(1, MAX_DELAY_LEVEL + 2), MAX_DELAY_LEVEL)
            props["DELAY"] = str(level)
            props["REAL_TOPIC"] = topic
            props["REAL_QID"] = str(queue_id)
            intent.real_topic, intent.real_queue_id = topic, queue_id
            intent.topic, intent.queue_id = SCHEDULE_TOPIC, level - 1
            intent.delay_level = level
        props["CLUSTER"] = CLUSTER_NAME
        if kind == "normal" and topic in options.batch_cq_topics \
                and rng.random() < options.inner_batch_ratio:
            return self._inner_batch(i, intent, producer), intent

        body = self._body(i)
        if body and rng.random() < options.compress_ratio:
            body = zlib.compress(body, ZLIB_LEVEL)
            sys_flag |= ZLIB_SYS_FLAG
            intent.compressed = True
        flag = rng.randrange(1, 65536) if rng.random() < FLAG_RATIO else 0
        reconsume = rng.randint(1, 3) if intent.topic.startswith("%RETRY%") else 0
        msg = w.Message(
            topic=intent.topic, queue_id=intent.queue_id, body=body, properties=props,
            flag=flag, sys_flag=sys_flag, born_timestamp=self.born_clock,
            born_host=(producer.ip, producer.port), store_timestamp=self.store_clock,
            store_host=self.store_host, reconsume_times=reconsume)
        return msg, intent

    def _inner_batch(self, i: int, intent: Intent, producer: Producer) -> w.Message:
        """One send of 2-10 messages to a BatchCQ topic, stored as one inner-batch record. The
        inner bodies share the body budget so the record fits where a single message would."""
        rng, options = self.rng, self.options
        count = rng.randint(2, INNER_BATCH_MAX)
        inner = []
        for j in range(count):
            props: dict[str, str] = {}
            if options.tags and rng.random() >= NO_TAGS_RATIO:
                props["TAGS"] = rng.choice(TAG_POOL)
            keys = self._keys(i) if options.keys else None
            if keys:
                props["KEYS"] = keys
            props["UNIQ_KEY"] = producer.uniq_key(self.born_clock, self.month_start)
            if options.user_properties and rng.random() < 0.5:
                props["userProp0"] = self._text(self.text_pool, rng.randint(1, 24))
            body = self._body(i)[:options.body_max // INNER_BATCH_MAX]
            inner.append(w.client_inner_message(body, props,
                                                broker_version=options.broker_version))
        intent.inner_num = count
        outer = {"UNIQ_KEY": producer.uniq_key(self.born_clock, self.month_start),
                 "WAIT": "true", "CLUSTER": CLUSTER_NAME}
        return w.inner_batch_message(
            intent.topic, intent.queue_id, inner, outer, born_timestamp=self.born_clock,
            born_host=(producer.ip, producer.port), store_timestamp=self.store_clock,
            store_host=self.store_host)


# --- config files (fastjson) --------------------------------------------------------------------

class JavaBean(dict):
    """A value fastjson serialises as a bean: fields sorted by name, one per line."""


def fastjson_pretty(value, depth: int = 0) -> str:
    """``JSON.toJSONString(obj, true)`` as fastjson 1.2.x writes it.

    Beans and String-keyed maps put each entry on its own line (tab-indented); maps with Integer
    keys write them unquoted on one line and only close on a new line; an empty map is ``{}``."""
    if isinstance(value, JavaBean):
        inner = "\t" * (depth + 1)
        fields = [f"\n{inner}{json.dumps(k, ensure_ascii=False)}:{fastjson_pretty(v, depth + 1)}"
                  for k, v in sorted(value.items())]
        return "{" + ",".join(fields) + "\n" + "\t" * depth + "}"
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = "\t" * (depth + 1)
        entries = []
        for k, v in value.items():
            if isinstance(k, int):
                entries.append(f"{k}:{fastjson_pretty(v, depth + 1)}")
            else:
                entries.append(f"\n{inner}{json.dumps(k, ensure_ascii=False)}:"
                               f"{fastjson_pretty(v, depth + 1)}")
        return "{" + ",".join(entries) + "\n" + "\t" * depth + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(str(value), ensure_ascii=False)


def _write_config(config_dir: Path, name: str, document) -> None:
    """The file and its ``.bak`` (ConfigManager.persist keeps the previous version there)."""
    text = fastjson_pretty(document)
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / name).write_text(text, encoding="utf-8")
    (config_dir / (name + ".bak")).write_text(text, encoding="utf-8")


def _data_version(timestamp: int, counter: int, broker_version: int) -> JavaBean:
    version = JavaBean(counter=counter, timestamp=timestamp)
    if broker_version >= 5:
        version["stateVersion"] = 0
    return version


def _topic_config(name: str, queues: int, broker_version: int) -> JavaBean:
    config = JavaBean(order=False, perm=6, readQueueNums=queues, topicFilterType="SINGLE_TAG",
                      topicName=name, topicSysFlag=0, writeQueueNums=queues)
    if broker_version >= 5:
        config["attributes"] = {}
    return config


def write_configs(root: Path, options: ForgeOptions, topics: list[str],
                  cq_max: dict[tuple[str, int], int], timestamp: int,
                  rng: random.Random) -> None:
    """config/topics.json, consumerOffset.json, delayOffset.json (each with a .bak)."""
    config_dir = Path(root) / "config"
    table = {}
    system = {"TBW102": 8, "SELF_TEST_TOPIC": 1, "OFFSET_MOVED_EVENT": 1,
              "RMQ_SYS_TRANS_HALF_TOPIC": 1, SCHEDULE_TOPIC: MAX_DELAY_LEVEL}
    for name, queues in sorted({**system, **{t: options.queues for t in topics}}.items()):
        table[name] = _topic_config(name, queues, options.broker_version)
    counter = len(topics) + 1
    _write_config(config_dir, "topics.json", JavaBean(
        dataVersion=_data_version(timestamp, counter, options.broker_version),
        topicConfigTable=table))

    offsets = {}
    for topic in sorted(topics):
        queues = {}
        for qid in range(options.queues):
            produced = cq_max.get((topic, qid), 0)
            if produced:
                queues[qid] = rng.randint(0, produced)
        if queues:
            offsets[f"{topic}@{CONSUMER_GROUP}"] = queues
    consumer = JavaBean(offsetTable=offsets)
    delay = {}
    for level in range(1, MAX_DELAY_LEVEL + 1):
        produced = cq_max.get((SCHEDULE_TOPIC, level - 1), 0)
        if produced:
            delay[level] = rng.randint(0, produced)
    delay_doc = JavaBean(offsetTable=delay)
    if options.broker_version >= 5:
        consumer["dataVersion"] = _data_version(timestamp, 1, options.broker_version)
        delay_doc["dataVersion"] = _data_version(timestamp, 1, options.broker_version)
    _write_config(config_dir, "consumerOffset.json", consumer)
    _write_config(config_dir, "delayOffset.json", delay_doc)


# --- make ---------------------------------------------------------------------------------------

@dataclass
class Manifest:
    """The generator's own record of what it meant to write (tests compare files against it)."""

    messages: int = 0
    kinds: Counter = field(default_factory=Counter)
    compressed: int = 0
    born_v6: int = 0
    v2_records: int = 0
    records_by_topic: Counter = field(default_factory=Counter)
    # (stored topic, queue id) -> CQ units the broker would dispatch (NOT and COMMIT records)
    cq_units: Counter = field(default_factory=Counter)
    dispatched_cq_units: Counter = field(default_factory=Counter)
    dispatched: int = 0
    delay_levels: Counter = field(default_factory=Counter)

    def as_json(self) -> dict:
        by_topic: dict[str, dict[str, int]] = {}
        for (topic, qid), n in sorted(self.cq_units.items()):
            by_topic.setdefault(topic, {})[str(qid)] = n
        dispatched: dict[str, dict[str, int]] = {}
        for (topic, qid), n in sorted(self.dispatched_cq_units.items()):
            dispatched.setdefault(topic, {})[str(qid)] = n
        return {
            "messages": self.messages,
            "kinds": {k: self.kinds.get(k, 0) for k in KINDS},
            "compressed": self.compressed,
            "born_ipv6": self.born_v6,
            "v2_records": self.v2_records,
            "records_by_topic": dict(sorted(self.records_by_topic.items())),
            "queue_offsets": by_topic,
            "dispatched_messages": self.dispatched,
            "dispatched_queue_offsets": dispatched,
            "delay_levels": {str(k): v for k, v in sorted(self.delay_levels.items())},
        }


PROGRESS_STEP = 4096


def _dir_is_empty(path: Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def make_store(root: Path, options: ForgeOptions, *, progress=None) -> dict:
    """Write a complete store under ``root`` (which must be absent or empty) and return the
    summary ``mqtool fixture make`` prints. ``progress(n)`` is told of every n messages
    written."""
    options.validate()
    root = Path(root)
    if not _dir_is_empty(root):
        raise StoreLayoutError(f"{root}: directory exists and is not empty; the forge only writes "
                               "into a new or empty directory")
    root.mkdir(parents=True, exist_ok=True)
    (root / "commitlog").mkdir(exist_ok=True)
    store = w.StoreWriter(root, commitlog_file_size=options.commitlog_file_size,
                          cq_units_per_file=options.cq_units, index_slots=options.index_slots,
                          index_entries=options.index_entries,
                          broker_version=options.broker_version, prop_crc=options.prop_crc,
                          index=options.index, batch_topics=frozenset(options.batch_cq_topics))
    generator = MessageGenerator(options)
    rng = generator.rng
    n = options.messages
    undispatched = 0
    if options.crash and n:
        # the reput thread trails the CommitLog by a few percent of the log when the JVM halts
        undispatched = min(n, max(1, round(n * rng.uniform(0.01, 0.05))))
    dispatch_until = n - undispatched
    manifest = Manifest(messages=n)
    prepared_offsets: list[int] = []
    first_store_ts = last_store_ts = last_dispatched_ts = 0
    try:
        for i in range(n):
            msg, intent = generator.next(i)
            if intent.prepared_ref is not None:
                msg.prepared_transaction_offset = prepared_offsets[intent.prepared_ref]
            offset, size, queue_offset = store.append(msg)
            if intent.kind == "prepared":
                prepared_offsets.append(offset)
            tracked = intent.kind not in ("prepared", "rollback")
            key = (intent.topic, intent.queue_id)
            manifest.kinds[intent.kind] += 1
            manifest.records_by_topic[intent.topic] += 1
            manifest.compressed += intent.compressed
            manifest.born_v6 += intent.born_v6
            manifest.v2_records += w.message_magic(intent.topic, options.broker_version) \
                == cl_fmt.MESSAGE_MAGIC_CODE_V2
            if intent.delay_level:
                manifest.delay_levels[intent.delay_level] += 1
            if tracked:
                manifest.cq_units[key] += intent.inner_num
            if not first_store_ts:
                first_store_ts = msg.store_timestamp
            last_store_ts = msg.store_timestamp
            if i < dispatch_until:
                store.dispatch(msg.topic, msg.queue_id, offset, size, msg.sys_flag,
                               queue_offset, msg.store_timestamp, msg.properties)
                manifest.dispatched += 1
                last_dispatched_ts = msg.store_timestamp
                if tracked:
                    manifest.dispatched_cq_units[key] += intent.inner_num
            if progress is not None and i % PROGRESS_STEP == PROGRESS_STEP - 1:
                progress(PROGRESS_STEP)
        if progress is not None and n % PROGRESS_STEP:
            progress(n % PROGRESS_STEP)
        end_offset = store.commitlog.offset
        index_ts = store.index.index_msg_timestamp
    finally:
        store.close()

    preallocated = None
    if options.crash:
        # physicMsgTimestamp moves on the 10 s full flush, logicsMsgTimestamp on the CQ flush:
        # both trail the last message by seconds when the JVM halts
        physic = max(0, last_store_ts - rng.randint(2000, 5000)) if n else 0
        logics = max(0, last_dispatched_ts - rng.randint(1000, 3000)) if last_dispatched_ts else 0
        if n:
            size = options.commitlog_file_size
            next_base = end_offset - end_offset % size + size
            allocator = w.CommitLogWriter(root / "commitlog", size, start_offset=next_base)
            allocator.ensure_current_file()
            allocator.close()
            preallocated = w.offset_file_name(next_base)
    else:
        physic = logics = last_store_ts
    (root / "checkpoint").write_bytes(w.checkpoint_bytes(physic, logics, index_ts))
    (root / "lock").write_bytes(LOCK_CONTENT)
    pid = rng.randrange(1000, 65536)
    if options.crash:
        # 4.x leaves abort empty; 5.x writes the broker PID into it
        (root / "abort").write_text(str(pid) if options.broker_version >= 5 else "")
    if options.broker_version >= 5:
        (root / "abort.bak").write_bytes(b"")
        if not options.crash:
            (root / "compaction").mkdir(exist_ok=True)
            (root / "compaction" / "position-checkpoint").write_text(COMPACTION_CHECKPOINT)
    write_configs(root, options, generator.topics, manifest.dispatched_cq_units,
                  last_store_ts or generator.store_clock, rng)
    return _summary(root, options, generator, manifest, end_offset,
                    dict(physic=physic, logics=logics, index=index_ts), preallocated)


def _summary(root: Path, options: ForgeOptions, generator: MessageGenerator, manifest: Manifest,
             end_offset: int, checkpoint: dict, preallocated: str | None) -> dict:
    commitlog_files = sorted(p.name for p in (root / "commitlog").iterdir())
    index_dir = root / "index"
    index_files = sorted(p.name for p in index_dir.iterdir()) if index_dir.is_dir() else []
    cq_files = sorted(p.relative_to(root).as_posix()
                      for p in (root / "consumequeue").glob("*/*/*")) \
        if (root / "consumequeue").is_dir() else []
    return {
        "root": str(root),
        "seed": options.seed,
        "broker_version": options.broker_version,
        "crash": options.crash,
        **manifest.as_json(),
        "topics": generator.topics,
        "queues": options.queues,
        "commitlog": {
            "file_size": options.commitlog_file_size,
            "files": commitlog_files,
            "max_offset": end_offset,
            "preallocated": preallocated,
        },
        "consumequeue": {"units_per_file": options.cq_units, "files": len(cq_files)},
        "index": {"slots": options.index_slots, "entries": options.index_entries,
                  "files": index_files},
        "checkpoint": {"physicMsgTimestamp": checkpoint["physic"],
                       "logicsMsgTimestamp": checkpoint["logics"],
                       "indexMsgTimestamp": checkpoint["index"]},
    }


# --- damage -------------------------------------------------------------------------------------

DAMAGE_KINDS = ("torn-tail", "bit-flip", "zero-range", "truncate-file", "delete-file",
                "stray-file", "stale-checkpoint")
HEX_PREVIEW = 32
# a whole-file damage lists the first records it hits and counts the rest
RECORDS_PREVIEW = 32
HEADER_FIELDS = tuple(
    (sc.name, sc.subcon.sizeof()) for sc in cl_fmt.message_header.subcons)
STRAY_FILE_NAMES = ("commitlog.tmp", "core.{n}", "{offset}.bak", "segment-{n}.old", "README")
STRAY_DIR_NAMES = ("lost+found", "tmp-{n:x}", "TopicTest.bak", "__backup__")


def _relative(store: Store, path: Path) -> str:
    try:
        return Path(path).resolve().relative_to(store.root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _hex(data: bytes) -> str:
    return bytes(data[:HEX_PREVIEW]).hex()


def _describe_record(store: Store, rec: MessageRecord) -> dict:
    seg = store.commitlog.segment_for(rec.offset)
    return {"offset": rec.offset, "size": rec.total_size,
            "file": _relative(store, seg.path) if seg else None,
            "file_pos": rec.offset - seg.base_offset if seg else None,
            "topic": rec.topic, "queue_id": rec.queue_id, "queue_offset": rec.queue_offset,
            "sys_flag": rec.sys_flag, "store_timestamp": rec.store_timestamp}


def _segment_records(store: Store, segment) -> list[MessageRecord]:
    scanner = Scanner(store.commitlog, check_crc=False)
    return [e for e in scanner.scan_segment(segment) if type(e) is MessageRecord]


def _data_segments(store: Store) -> list:
    """CommitLog files whose first bytes are a message (preallocated zero files are not)."""
    found = []
    for seg in store.commitlog.segments:
        with open(seg.path, "rb") as fh:
            head = fh.read(8)
        if len(head) == 8 and int.from_bytes(head[4:8], "big") in cl_fmt.MESSAGE_MAGIC_CODES:
            found.append(seg)
    return found


def _pick_segment(store: Store, file: str | None, rng: random.Random, *, prefer_non_last: bool,
                  min_records: int = 1):
    segments = _data_segments(store)
    if file is not None:
        target = _resolve_file(store, file)
        for seg in store.commitlog.segments:
            if seg.path.resolve() == target.resolve():
                return seg
        raise StoreLayoutError(f"{file}: not a CommitLog file of this store")
    if not segments:
        raise StoreLayoutError(f"{store.root}: no CommitLog file holds a message")
    pool = segments[:-1] if prefer_non_last and len(segments) > 1 else list(segments)
    rng.shuffle(pool)
    if min_records > 1:
        # scanning every file of a big store to rank them would be slow: take the first that fits
        for seg in pool:
            if len(_segment_records(store, seg)) >= min_records:
                return seg
    return pool[0]


def _resolve_file(store: Store, file: str) -> Path:
    """``file`` relative to the store root (or its commitlog/), never a file outside the store."""
    path = Path(file)
    candidates = [path] if path.is_absolute() else [store.root / path,
                                                    store.commitlog.directory / path]
    root = store.root.resolve()
    for candidate in candidates:
        if candidate.is_file():
            resolved = candidate.resolve()
            if not resolved.is_relative_to(root):
                raise StoreLayoutError(f"{file}: outside the store {store.root}")
            return resolved
    raise StoreLayoutError(f"{file}: no such file in {store.root}")


def _record_at(store: Store, offset: int) -> tuple[object, MessageRecord]:
    seg = store.commitlog.segment_for(offset)
    if seg is None:
        raise StoreLayoutError(f"offset {offset}: no CommitLog file holds it")
    for rec in _segment_records(store, seg):
        if rec.offset <= offset < rec.end:
            return seg, rec
    raise StoreLayoutError(f"offset {offset}: not inside a readable message record")


def _rewrite(path: Path, file_pos: int, new: bytes) -> bytes:
    with open(path, "r+b") as fh:
        fh.seek(file_pos)
        old = fh.read(len(new))
        fh.seek(file_pos)
        fh.write(new)
    return old


def _change(store: Store, seg, start: int, old: bytes, new: bytes) -> dict:
    """The common part of a report about bytes changed at global CommitLog offset ``start``."""
    return {"file": _relative(store, seg.path), "file_size": seg.length,
            "range": {"start": start, "end": start + len(old),
                      "file_start": start - seg.base_offset,
                      "file_end": start - seg.base_offset + len(old)},
            "length": len(old), "old_hex": _hex(old), "new_hex": _hex(new),
            "hex_truncated": len(old) > HEX_PREVIEW}


def _torn_tail(store, rng, file, offset, **_):
    if offset is not None:
        seg, rec = _record_at(store, offset)
    else:
        if file is not None:
            seg = _pick_segment(store, file, rng, prefer_non_last=False)
        else:
            segments = _data_segments(store)
            if not segments:
                raise StoreLayoutError(f"{store.root}: no CommitLog file holds a message")
            seg = segments[-1]
        records = _segment_records(store, seg)
        if not records:
            raise StoreLayoutError(f"{_relative(store, seg.path)}: holds no message record")
        rec = records[-1]
    # a torn write persists the first pages of the record and leaves the rest as it was (zeros)
    half = rec.total_size // 2
    start = rec.offset + half
    length = rec.total_size - half
    old = _rewrite(seg.path, start - seg.base_offset, bytes(length))
    return {**_change(store, seg, start, old, bytes(length)),
            "records": [_describe_record(store, rec)]}


def _flippable(rec, target: str) -> int:
    """How many bytes of ``target`` the record has (the properties minus a __CRC32# field, so
    that a property flip is one the property CRC sees)."""
    if target == "body":
        return max(rec.body_length, 0)
    if target == "properties":
        tail = codecs.CRC32_RESERVED_LEN if codecs.stored_prop_crc(rec.properties_raw) else 0
        return max(len(rec.properties_raw) - tail, 0)
    return 1


def _bit_flip(store, rng, file, offset, target="body", **_):
    if target not in ("body", "header", "properties"):
        raise ValueError("--target must be body, header or properties")
    if offset is not None:
        seg, rec = _record_at(store, offset)
        if not _flippable(rec, target):
            raise StoreLayoutError(f"the record at {rec.offset} has no {target} to flip a bit in")
    else:
        seg = _pick_segment(store, file, rng, prefer_non_last=True)
        records = [r for r in _segment_records(store, seg) if _flippable(r, target)]
        if not records:
            raise StoreLayoutError(f"{_relative(store, seg.path)}: no record with {target}")
        rec = records[rng.randrange(len(records))]
    field_name = target
    if target == "body":
        pos = rec.body_position + rng.randrange(rec.body_length)
    elif target == "properties":
        properties_start = rec.offset + rec.total_size - len(rec.properties_raw)
        pos = properties_start + rng.randrange(_flippable(rec, target))
    else:
        index = rng.randrange(len(HEADER_FIELDS))
        field_name, size = HEADER_FIELDS[index]
        field_start = sum(s for _, s in HEADER_FIELDS[:index])
        pos = rec.offset + field_start + rng.randrange(size)
    bit = rng.randrange(8)
    old_byte = store.commitlog.read(pos, 1)
    new_byte = bytes([old_byte[0] ^ (1 << bit)])
    old = _rewrite(seg.path, pos - seg.base_offset, new_byte)
    return {**_change(store, seg, pos, old, new_byte), "target": target, "field": field_name,
            "bit": bit, "records": [_describe_record(store, rec)]}


def _zero_range(store, rng, file, offset, length=None, **_):
    if offset is not None:
        seg, first = _record_at(store, offset)
        records = _segment_records(store, seg)
        start = offset
        if length is None:
            last = records[min(records.index(first) + rng.randint(0, 2), len(records) - 1)]
            length = max(1, last.offset + rng.randrange(1, last.total_size + 1) - start)
    else:
        seg = _pick_segment(store, file, rng, prefer_non_last=False, min_records=3)
        records = _segment_records(store, seg)
        if not records:
            raise StoreLayoutError(f"{_relative(store, seg.path)}: holds no message record")
        # stay clear of the first and last record so the damage sits in the middle of the file
        lo, hi = (1, len(records) - 2) if len(records) >= 3 else (0, len(records) - 1)
        i = rng.randint(lo, hi)
        j = min(hi, i + rng.randint(0, 2))
        first, last = records[i], records[j]
        start = first.offset + rng.randrange(first.total_size)
        if length is None:
            end = last.offset + rng.randint(1, last.total_size)
            if end <= start:
                end = first.end
            length = end - start
    file_end = seg.base_offset + seg.length
    length = max(1, min(length, file_end - start))
    old = _rewrite(seg.path, start - seg.base_offset, bytes(length))
    end = start + length
    hit = [_describe_record(store, r) for r in records if r.offset < end and r.end > start]
    return {**_change(store, seg, start, old, bytes(length)), "records": hit}


def _truncate_file(store, rng, file, offset, **_):
    if offset is not None:
        seg = store.commitlog.segment_for(offset)
        if seg is None:
            raise StoreLayoutError(f"offset {offset}: no CommitLog file holds it")
        cut = offset - seg.base_offset
        records = _segment_records(store, seg)
    else:
        seg = _pick_segment(store, file, rng, prefer_non_last=False)
        records = _segment_records(store, seg)
        if not records:
            raise StoreLayoutError(f"{_relative(store, seg.path)}: holds no message record")
        rec = records[rng.randrange(len(records))]
        cut = rec.offset - seg.base_offset + rng.randrange(rec.total_size)
    with open(seg.path, "rb") as fh:
        fh.seek(cut)
        old = fh.read(HEX_PREVIEW)
    os.truncate(seg.path, cut)
    start = seg.base_offset + cut
    hit = [r for r in records if r.end > start]
    return {"file": _relative(store, seg.path), "old_size": seg.length, "new_size": cut,
            "range": {"start": start, "end": seg.base_offset + seg.length,
                      "file_start": cut, "file_end": seg.length},
            "length": seg.length - cut, "old_hex": _hex(old), "new_hex": "",
            "hex_truncated": seg.length - cut > HEX_PREVIEW,
            "records": [_describe_record(store, r) for r in hit[:RECORDS_PREVIEW]],
            "records_total": len(hit)}


def _delete_file(store, rng, file, offset, **_):
    cq_files = [(q, s) for q in store.consume_queues for s in q.segments]
    middle = store.commitlog.segments[1:-1]
    if file is not None:
        path = _resolve_file(store, file)
    elif offset is not None:
        seg = store.commitlog.segment_for(offset)
        if seg is None:
            raise StoreLayoutError(f"offset {offset}: no CommitLog file holds it")
        path = seg.path
    else:
        choices = []
        if cq_files:
            choices.append("consumequeue")
        if middle:
            choices.append("commitlog")
        if not choices:
            raise StoreLayoutError(f"{store.root}: no ConsumeQueue file and no middle CommitLog "
                                   "file to delete")
        kind = choices[rng.randrange(len(choices))]
        if kind == "commitlog":
            path = middle[rng.randrange(len(middle))].path
        else:
            path = cq_files[rng.randrange(len(cq_files))][1].path
    path = Path(path).resolve()
    data = path.read_bytes()
    report = {"file": _relative(store, path), "old_size": len(data), "new_size": None,
              "range": {"file_start": 0, "file_end": len(data)}, "length": len(data),
              "old_hex": _hex(data), "new_hex": "", "hex_truncated": len(data) > HEX_PREVIEW}
    cl_seg = next((s for s in store.commitlog.segments if s.path.resolve() == path), None)
    cq = next(((q, s) for q, s in cq_files if s.path.resolve() == path), None)
    if cl_seg is not None:
        records = _segment_records(store, cl_seg)
        report["file_kind"] = "commitlog"
        report["range"].update(start=cl_seg.base_offset, end=cl_seg.base_offset + cl_seg.length)
        report["records"] = [_describe_record(store, r) for r in records[:RECORDS_PREVIEW]]
        report["records_total"] = len(records)
    elif cq is not None:
        queue, seg = cq
        unit = cq_fmt.CQ_STORE_UNIT_SIZE
        units = [_CQ_UNIT.unpack_from(data, p) for p in range(0, len(data) - unit + 1, unit)]
        valid = 0
        for commitlog_offset, size, _tags in units:
            if not cq_fmt.is_valid_unit(commitlog_offset, size):
                break
            valid += 1
        first_queue_offset = seg.base_offset // unit
        report["file_kind"] = "consumequeue"
        report["queue"] = {"topic": queue.topic, "queue_id": queue.queue_id,
                           "first_queue_offset": first_queue_offset,
                           "units": valid,
                           "end_queue_offset": first_queue_offset + valid}
    else:
        raise StoreLayoutError(f"{file}: not a CommitLog or ConsumeQueue file of this store")
    path.unlink()
    return report


def _stray_file(store, rng, file, offset, **_):
    n = rng.randrange(1000, 100000)
    name = rng.choice(STRAY_FILE_NAMES).format(
        n=n, offset=w.offset_file_name(rng.randrange(1 << 40)))
    junk = rng.randbytes(rng.randint(16, 4096))
    commitlog_dir = store.commitlog.directory
    junk_path = commitlog_dir / name
    if junk_path.exists():
        raise StoreLayoutError(f"{_relative(store, junk_path)} already exists")
    junk_path.write_bytes(junk)
    dir_name = rng.choice(STRAY_DIR_NAMES).format(n=n)
    stray_dir = store.root / "consumequeue" / dir_name / "not-a-queue"
    stray_dir.mkdir(parents=True, exist_ok=True)
    return {"file": _relative(store, junk_path), "old_size": None, "new_size": len(junk),
            "range": {"file_start": 0, "file_end": len(junk)}, "length": len(junk),
            "old_hex": "", "new_hex": _hex(junk), "hex_truncated": len(junk) > HEX_PREVIEW,
            "dirs": [_relative(store, stray_dir.parent), _relative(store, stray_dir)],
            "records": []}


def _stale_checkpoint(store, rng, file, offset, direction=None, **_):
    path = store.checkpoint_path
    if not path.is_file():
        raise StoreLayoutError(f"{store.root}: no checkpoint file")
    old_bytes = path.read_bytes()
    current = store.read_checkpoint()
    if direction is None:
        direction = rng.choice(("ahead", "behind"))
    if direction not in ("ahead", "behind"):
        raise ValueError("--direction must be ahead or behind")
    days = rng.randint(2, 60)
    delta = days * 86_400_000
    sign = 1 if direction == "ahead" else -1
    names = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")
    new_values = {name: max(0, current[name] + sign * delta) for name in names}
    fresh = w.checkpoint_bytes(new_values["physic_msg_timestamp"],
                               new_values["logics_msg_timestamp"],
                               new_values["index_msg_timestamp"],
                               current["master_flushed_offset"], current["confirm_phy_offset"])
    width = 8 * len(names)
    new_bytes = fresh[:width] + old_bytes[width:]
    w.atomic_write(path, new_bytes)
    return {"file": _relative(store, path), "direction": direction, "shift_ms": sign * delta,
            "range": {"file_start": 0, "file_end": width}, "length": width,
            "old_hex": _hex(old_bytes[:width]), "new_hex": _hex(new_bytes[:width]),
            "hex_truncated": False,
            "old": {name: current[name] for name in names}, "new": new_values,
            "records": []}


_DAMAGERS = {"torn-tail": _torn_tail, "bit-flip": _bit_flip, "zero-range": _zero_range,
             "truncate-file": _truncate_file, "delete-file": _delete_file,
             "stray-file": _stray_file, "stale-checkpoint": _stale_checkpoint}


@holding_store_lock("fixture damage")
def damage_store(root: Path, kind: str, seed: int = 0, *, file: str | None = None,
                 offset: int | None = None, length: int | None = None, target: str = "body",
                 direction: str | None = None) -> dict:
    """Inject one fault of ``kind`` into the store at ``root`` and describe it.

    Refuses (StoreLockedError, exit 3) a store whose lock a live process holds."""
    if kind not in _DAMAGERS:
        raise ValueError(f"unknown damage kind {kind!r}; choose from {', '.join(DAMAGE_KINDS)}")
    Store.refuse_unexplained_layout(root, "fixture damage")
    store = Store(root)
    if store.lock_held():
        raise StoreLockedError(f"{root}: the store's lock is held by a live process (a running "
                               "broker?); refusing to damage it")
    if length is not None and length < 1:
        raise ValueError("--length must be >= 1")
    rng = random.Random(f"{kind}:{seed}")
    report = _DAMAGERS[kind](store, rng, file, offset, length=length, target=target,
                             direction=direction)
    return {"kind": kind, "seed": seed, **report}


__all__ = ["ForgeOptions", "MessageGenerator", "Manifest", "make_store",
           "damage_store", "parse_size", "parse_body_size", "fastjson_pretty", "JavaBean",
           "DAMAGE_KINDS", "DEFAULT_TOPICS", "long_topic_name", "long_retry_topic_name",
           "month_start_ms"]
