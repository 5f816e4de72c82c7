"""``mqtool fixture make`` and ``mqtool fixture damage``: argument parsing and rendering only."""
from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from ..vocabulary import DEFAULT_TOPICS
from .common import emit_json, error_boundary, progress_bar

fixture_app = typer.Typer(help="Make deterministic test stores and inject faults into them.",
                          no_args_is_help=True, rich_markup_mode=None)  # plain, as cli/main.py


class DamageKind(str, Enum):
    torn_tail = "torn-tail"
    bit_flip = "bit-flip"
    zero_range = "zero-range"
    truncate_file = "truncate-file"
    delete_file = "delete-file"
    stray_file = "stray-file"
    stale_checkpoint = "stale-checkpoint"
    config_empty = "config-empty"
    config_truncate = "config-truncate"
    config_zeros = "config-zeros"


class BitTarget(str, Enum):
    body = "body"
    header = "header"
    properties = "properties"
    entry_header = "entry-header"


class EntryField(str, Enum):
    magic = "magic"
    size = "size"
    index = "index"
    term = "term"
    pos = "pos"
    body_size = "body_size"


class Layout(str, Enum):
    failover = "failover"
    system_topics = "system-topics"
    multi_path = "multi-path"


class Direction(str, Enum):
    ahead = "ahead"
    behind = "behind"


@fixture_app.command("make")
@error_boundary
def make(
    directory: Path = typer.Argument(..., help="New (or empty) directory to write the store into."),
    messages: int = typer.Option(..., "--messages", "-n", help="Number of CommitLog records."),
    seed: int = typer.Option(0, "--seed", help="Same seed and options give byte-identical stores."),
    topics: str = typer.Option(",".join(DEFAULT_TOPICS), "--topics",
                               help="Comma-separated topic names."),
    queues: int = typer.Option(4, "--queues", help="Queues per topic."),
    long_topic: bool = typer.Option(False, "--long-topic",
                                    help="Add a 127-character topic; with --broker-version 5 also "
                                         "a %RETRY% topic of 128-255 characters (V2 records)."),
    keys: bool = typer.Option(True, "--keys/--no-keys", help="0-3 KEYS per message, hot keys "
                                                             "shared by many messages."),
    tags: bool = typer.Option(True, "--tags/--no-tags", help="TAGS on 90% of the messages."),
    user_props: bool = typer.Option(True, "--user-props/--no-user-props",
                                    help="userProp0..2 and an occasional 1-2 KB property."),
    delay_ratio: float = typer.Option(0.02, "--delay-ratio",
                                      help="Share of delay-level messages (SCHEDULE_TOPIC_XXXX)."),
    transaction_ratio: float = typer.Option(0.03, "--transaction-ratio",
                                            help="Share of PREPARED/COMMIT/ROLLBACK records."),
    compress_ratio: float = typer.Option(0.03, "--compress-ratio",
                                         help="Share of zlib-compressed bodies (sysFlag 0x301)."),
    body_size: str = typer.Option("1024/4096", "--body-size",
                                  help="MEAN/MAX body bytes (e.g. 1k/4k); 8% of bodies are empty."),
    ipv6: bool = typer.Option(False, "--ipv6", help="IPv6 store host and (some) born hosts."),
    broker_version: str = typer.Option("4", "--broker-version",
                                       help="4 (4.9.8 layout), 5 (5.3.3: V2 records, abort "
                                            "PID) or 5.3.4+ (5.3.3's layout, but classic "
                                            "batches keep each message's own properties)."),
    classic_batch_ratio: float = typer.Option(0.0, "--classic-batch-ratio",
                                              help="Share of sends to ordinary topics that are "
                                                   "classic batches of 2-6 messages (a record "
                                                   "each; up to 5.3.3 the batch's UNIQ_KEY, "
                                                   "WAIT and CLUSTER are appended to every "
                                                   "message)."),
    prop_crc: bool = typer.Option(False, "--prop-crc",
                                  help="5.2+ __CRC32# property on every record."),
    crash: bool = typer.Option(False, "--crash",
                               help="Leave what a JVM halt leaves: abort file, lagging "
                                    "checkpoint and dispatch, preallocated next file."),
    dledger: bool = typer.Option(False, "--dledger",
                                 help="DLedger mode (enableDLegerCommitLog, 4.9.8 with DLedger "
                                      "0.3.1.2, one peer n0): records inside DLedger entries "
                                      "under dledger-n0/, with its index, checkpoint and "
                                      "currterm; no commitlog/."),
    dledger_after: int = typer.Option(0, "--dledger-after", metavar="N",
                                      help="With --dledger: the first N records go to a plain "
                                           "commitlog/, then the broker restarts in DLedger "
                                           "mode (a store upgraded from a plain CommitLog)."),
    index: bool = typer.Option(True, "--index/--no-index",
                               help="Build IndexFiles (skip them for benchmark stores)."),
    commitlog_file_size: str = typer.Option("1m", "--commitlog-file-size",
                                            help="CommitLog file size: bytes or 1m, 64m, 1g."),
    cq_units: int = typer.Option(300, "--cq-units", help="ConsumeQueue units per file."),
    index_slots: int = typer.Option(1000, "--index-slots", help="Hash slots per IndexFile."),
    index_entries: int = typer.Option(4000, "--index-entries", help="Entries per IndexFile."),
    batch_cq_topics: str = typer.Option("", "--batch-cq-topics",
                                        help="Comma-separated topics whose queues are 5.x "
                                             "BatchConsumeQueues (queue.type=BatchCQ)."),
    consumer_group: list[str] = typer.Option([], "--consumer-group", metavar="NAME:LAG",
                                             help="A consumer group LAG messages behind every "
                                                  "queue end (negative: past it); repeatable. "
                                                  "Also writes subscriptionGroup.json."),
):
    """Write a deterministic store laid out as a broker lays it out; print a JSON summary."""
    from .. import forge

    body_mean, body_max = forge.parse_body_size(body_size)
    version, newest = forge.parse_forge_version(broker_version)
    options = forge.ForgeOptions(
        messages=messages, seed=seed,
        topics=tuple(t.strip() for t in topics.split(",") if t.strip()), queues=queues,
        long_topic=long_topic, keys=keys, tags=tags, user_properties=user_props,
        delay_ratio=delay_ratio, transaction_ratio=transaction_ratio,
        compress_ratio=compress_ratio, body_mean=body_mean, body_max=body_max, ipv6=ipv6,
        broker_version=version, newest=newest, classic_batch_ratio=classic_batch_ratio,
        prop_crc=prop_crc, crash=crash, dledger=dledger,
        dledger_after=dledger_after, index=index,
        commitlog_file_size=forge.parse_size(commitlog_file_size), cq_units=cq_units,
        index_slots=index_slots, index_entries=index_entries,
        batch_cq_topics=tuple(t.strip() for t in batch_cq_topics.split(",") if t.strip()),
        consumer_groups=tuple(forge.parse_consumer_group(g) for g in consumer_group))
    options.validate()
    bar = progress_bar(messages, "forging")
    bar.unit = "msg"
    bar.unit_scale = False
    try:
        summary = forge.make_store(directory, options, progress=bar.update)
    finally:
        bar.close()
    emit_json(summary)


@fixture_app.command("damage")
@error_boundary
def damage(
    directory: Path = typer.Argument(..., help="Store to damage (in place)."),
    kind: DamageKind = typer.Option(..., "--kind", metavar="KIND",
                                    help="Which fault to inject: "
                                         + ", ".join(k.value for k in DamageKind) + "."),
    seed: int = typer.Option(0, "--seed", help="Chooses the file, record, byte and bit."),
    file: str = typer.Option(None, "--file",
                             help="Aim at this file (path relative to the store; config-* "
                                  "kinds: default config/consumerOffset.json)."),
    offset: int = typer.Option(None, "--offset",
                               help="Aim at the record holding this global CommitLog offset "
                                    "(entry-header: the entry holding it; zero-range: start; "
                                    "truncate-file: new end; "
                                    "config-truncate: new file size)."),
    length: int = typer.Option(None, "--length", help="zero-range: number of bytes to zero."),
    target: BitTarget = typer.Option(BitTarget.body, "--target",
                                     help="bit-flip: a body byte, a record header field, a "
                                          "properties byte, or a DLedger entry header field "
                                          "(entry-header, DLedger-mode stores)."),
    field: EntryField = typer.Option(None, "--field",
                                     help="bit-flip --target entry-header: the field to flip a "
                                          "bit in (default: chosen by seed)."),
    direction: Direction = typer.Option(None, "--direction",
                                        help="stale-checkpoint: move the timestamps ahead or "
                                             "behind (default: chosen by seed)."),
):
    """Inject one fault and print, as one JSON object, exactly what changed."""
    from .. import forge

    report = forge.damage_store(directory, kind.value, seed, file=file, offset=offset,
                                length=length, target=target.value,
                                direction=direction.value if direction else None,
                                field=field.value if field else None)
    emit_json(report)


@fixture_app.command("layout")
@error_boundary
def layout(
    kind: Layout = typer.Argument(..., metavar="KIND", help="failover, system-topics or "
                                  "multi-path."),
    directory: Path = typer.Argument(..., help="New (or empty) directory to write into."),
):
    """Write a small store of a 5.x production layout; print what was written as JSON.

    failover: DIR/old and DIR/new, two controller-mode brokers after a master switch.
    system-topics: DIR/store with trace, pop, delayed, timer, DLQ and priority messages.
    multi-path: DIR/store whose CommitLog lies in DIR/disk1, DIR/disk2 and DIR/readonly, with
    DIR/broker.conf naming them."""
    from ..errors import StoreLayoutError

    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise StoreLayoutError(f"{directory}: exists and is not an empty directory")
    directory.mkdir(parents=True, exist_ok=True)
    if kind is Layout.failover:
        from ..forge.controller import make_failover_pair
        summary = make_failover_pair(directory / "old", directory / "new")
    elif kind is Layout.system_topics:
        from ..forge.systopics import make_system_topic_store
        summary = make_system_topic_store(directory / "store")
    else:
        from ..forge.multipath import make_multipath_store
        summary = make_multipath_store(directory / "store",
                                       [directory / "disk1", directory / "disk2"],
                                       directory / "readonly", config=directory / "broker.conf")
    emit_json(summary)
