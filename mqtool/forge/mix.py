"""The message mix the forge writes: topics x queues, tags, keys with hot keys, UNIQ_KEY, user
properties, delay levels, transactions, compressed bodies, inner batches, hosts; every choice a
function of the seed."""
from __future__ import annotations

import calendar
import datetime as _dt
import random
import re
import zlib
from dataclasses import dataclass

from .. import writer as w
from ..errors import StoreLayoutError
from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..vocabulary import DEFAULT_TOPICS, VERSION_534


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
CLASSIC_BATCH_MAX = 6       # messages in a classic batch (one record each): 2 .. this
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


def parse_consumer_group(text: str) -> tuple[str, int]:
    """``NAME:LAG`` -> (name, lag). A negative LAG puts the offsets past the queue ends."""
    name, sep, lag = str(text).rpartition(":")
    if not sep or not name or not re.fullmatch(r"-?\d+", lag.strip()):
        raise ValueError(f"--consumer-group must be NAME:LAG (e.g. GroupB:10), got {text!r}")
    return name, int(lag)


def check_consumer_groups(groups) -> None:
    names = [name for name, _ in groups]
    if len(set(names)) != len(names):
        raise ValueError("--consumer-group names a group twice")
    for name, lag in groups:
        if abs(lag) > 1 << 40:   # offsets stay far inside Java's long
            raise ValueError(f"--consumer-group {name}: LAG {lag} is out of range")
    for name in names:
        if not name or "@" in name or len(name) > 255:
            raise ValueError(f"--consumer-group: {name!r} is not a group name (1-255 "
                             "characters, no '@')")


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
    # enableDLegerCommitLog: the records go into DLedger entries under dledger-<selfId>/
    dledger: bool = False
    # the first this many records go to a plain CommitLog, then the broker restarts in DLedger
    # mode (a store upgraded from a plain CommitLog); 0: DLedger from the first record
    dledger_after: int = 0
    index: bool = True
    commitlog_file_size: int = 1024 * 1024
    cq_units: int = 300
    index_slots: int = 1000
    index_entries: int = 4000
    batch_cq_topics: tuple[str, ...] = ()
    # share of a BatchCQ topic's sends that are inner batches (one record of 2-10 messages)
    inner_batch_ratio: float = 0.5
    # share of the other sends that are classic batches (2-6 records, one per message)
    classic_batch_ratio: float = 0.0
    # the store code after 5.3.3 (5.3.4+): classic batches keep each message's own properties
    newest: bool = False
    consumer_groups: tuple[tuple[str, int], ...] = ()   # (group, lag per queue)

    def validate(self) -> None:
        check_consumer_groups(self.consumer_groups)
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
        if self.newest and self.broker_version < 5:
            raise ValueError("the 5.3.4+ layout is a 5.x broker's: not with --broker-version 4")
        for name in ("delay_ratio", "transaction_ratio", "compress_ratio", "inner_batch_ratio",
                     "classic_batch_ratio"):
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
        if self.dledger_after and not self.dledger:
            raise ValueError("--dledger-after needs --dledger")
        if self.dledger_after < 0 or (self.dledger_after and self.dledger_after >= self.messages):
            raise ValueError("--dledger-after must be between 1 and --messages - 1 (0: DLedger "
                             "mode from the first record)")
        if self.dledger and self.broker_version >= 5:
            raise ValueError("--dledger writes the 4.9.8 DLedger layout: use --broker-version 4")
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
    classic_batch: bool = False       # one message of a classic batch (a record each)


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


#: fixture make --broker-version values: (major version, the 5.3.4+ classic-batch layout)
FORGE_VERSIONS = {"4": (4, False), "5": (5, False), VERSION_534: (5, True)}


def parse_forge_version(text: str) -> tuple[int, bool]:
    """``--broker-version`` of ``fixture make``: 4, 5 (5.3.3) or 5.3.4+."""
    try:
        return FORGE_VERSIONS[str(text).strip()]
    except KeyError:
        raise ValueError(f"--broker-version must be {', '.join(FORGE_VERSIONS)}, "
                         f"not {text!r}") from None


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
        self.pending: list[tuple[w.Message, Intent]] = []   # the rest of a classic batch

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

    def _tags_and_keys(self, i: int) -> dict[str, str]:
        """A producer's first properties: TAGS (10% have none), then KEYS (0-3 of them)."""
        props: dict[str, str] = {}
        if self.options.tags and self.rng.random() >= NO_TAGS_RATIO:
            props["TAGS"] = self.rng.choice(TAG_POOL)
        keys = self._keys(i) if self.options.keys else None
        if keys:
            props["KEYS"] = keys
        return props

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
        if self.pending:
            return self.pending.pop(0)
        rng, options = self.rng, self.options
        topic = rng.choices(self.topics, cum_weights=self.cum_weights)[0]
        queue_id = rng.randrange(options.queues)
        producer = self.producers[rng.randrange(len(self.producers))]
        self.born_clock += rng.randint(1, 5)
        self.store_clock = max(self.store_clock, self.born_clock + rng.randrange(4))
        if self.born_clock >= self.next_month:
            self.month_start, self.next_month = self.next_month, \
                _next_month_start_ms(self.next_month)

        props = self._tags_and_keys(i)
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
        if kind == "normal" and topic not in options.batch_cq_topics \
                and options.classic_batch_ratio and rng.random() < options.classic_batch_ratio:
            self.pending = self._classic_batch(i, intent, producer)
            return self.pending.pop(0)

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

    def _classic_batch(self, i: int, intent: Intent,
                       producer: Producer) -> list[tuple[w.Message, Intent]]:
        """One classic batch send (``putMessages``) of 2-6 messages to an ordinary topic: a
        record per message, all stored at once. Each message has its own properties (tags,
        keys, UNIQ_KEY, WAIT, user properties); the batch has its own UNIQ_KEY, WAIT and the
        broker's CLUSTER, which the writer appends to every message up to 5.3.3 and leaves out
        for 5.3.4+ (``StoreWriter(classic_batches=...)``)."""
        rng, options = self.rng, self.options
        count = min(rng.randint(2, CLASSIC_BATCH_MAX), max(1, options.messages - i))
        out = []
        for j in range(count):
            props = self._tags_and_keys(i + j)
            props["UNIQ_KEY"] = producer.uniq_key(self.born_clock, self.month_start)
            props["WAIT"] = "true"
            if options.user_properties and rng.random() < 0.5:
                props["userProp0"] = self._text(self.text_pool, rng.randint(1, 24))
            out.append((w.Message(
                topic=intent.topic, queue_id=intent.queue_id, body=self._body(i + j),
                properties=props, born_timestamp=self.born_clock,
                born_host=(producer.ip, producer.port), store_timestamp=self.store_clock,
                store_host=self.store_host),
                Intent("normal", intent.topic, intent.queue_id, born_v6=intent.born_v6,
                       classic_batch=True)))
        batch = {"UNIQ_KEY": producer.uniq_key(self.born_clock, self.month_start),
                 "WAIT": "true", "CLUSTER": CLUSTER_NAME}
        for msg, _ in out:
            msg.batch_properties = dict(batch)
        return out

    def _inner_batch(self, i: int, intent: Intent, producer: Producer) -> w.Message:
        """One send of 2-10 messages to a BatchCQ topic, stored as one inner-batch record. The
        inner bodies share the body budget so the record fits where a single message would."""
        rng, options = self.rng, self.options
        count = rng.randint(2, INNER_BATCH_MAX)
        inner = []
        for j in range(count):
            props = self._tags_and_keys(i)
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
