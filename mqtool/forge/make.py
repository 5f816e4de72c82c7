"""make_store: a whole store written through the one writer, clean or as a JVM halt leaves it."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .. import writer as w
from ..errors import StoreLayoutError
from ..formats import commitlog as cl_fmt
from .configs import write_configs
from .mix import COMPACTION_CHECKPOINT, ForgeOptions, KINDS, LOCK_CONTENT, MessageGenerator


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
    classic_batch_records: int = 0

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
            "classic_batch_records": self.classic_batch_records,
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
    dledger_from_start = options.dledger and not options.dledger_after
    if not dledger_from_start:
        (root / "commitlog").mkdir(exist_ok=True)
    store = w.StoreWriter(root, commitlog_file_size=options.commitlog_file_size,
                          cq_units_per_file=options.cq_units, index_slots=options.index_slots,
                          index_entries=options.index_entries,
                          broker_version=options.broker_version, prop_crc=options.prop_crc,
                          index=options.index, batch_topics=frozenset(options.batch_cq_topics),
                          dledger_self_id=DLEDGER_SELF_ID if dledger_from_start else None,
                          classic_batches=(w.OWN_PROPERTIES_ONLY if options.newest
                                           else w.APPENDED_BATCH_PROPERTIES))
    generator = MessageGenerator(options)
    rng = generator.rng
    n = options.messages
    undispatched = 0
    divided = None
    # in DLedger mode the reference crash left every record dispatched (a single peer commits
    # at once and the reput had caught up): the crash shows in the checkpoints and IndexFiles
    if options.crash and n and not options.dledger:
        # the reput thread trails the CommitLog by a few percent of the log when the JVM halts
        undispatched = min(n, max(1, round(n * rng.uniform(0.01, 0.05))))
    dispatch_until = n - undispatched
    manifest = Manifest(messages=n)
    prepared_offsets: list[int] = []
    first_store_ts = last_store_ts = last_dispatched_ts = 0
    try:
        for i in range(n):
            if options.dledger_after and i == options.dledger_after:
                divided = store.switch_to_dledger(DLEDGER_SELF_ID)
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
            manifest.classic_batch_records += intent.classic_batch
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
                               queue_offset, msg.store_timestamp, store.stored_properties(msg))
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
        last_index = store.commitlog.last_index if options.dledger else None
    finally:
        store.close()

    preallocated = None
    if options.crash:
        # physicMsgTimestamp moves on the 10 s full flush, logicsMsgTimestamp on the CQ flush:
        # both trail the last message by seconds when the JVM halts
        physic = max(0, last_store_ts - rng.randint(2000, 5000)) if n else 0
        logics = max(0, last_dispatched_ts - rng.randint(1000, 3000)) if last_dispatched_ts else 0
        if options.dledger:
            physic = logics     # no CommitLog flush service in DLedger mode: the CQ flush sets both
        if n and not options.dledger:     # DLedger preallocates no data file
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
    dledger = _write_dledger_files(root, options, rng, last_index, divided) \
        if options.dledger else None
    write_configs(root, options, generator.topics, manifest.dispatched_cq_units,
                  last_store_ts or generator.store_clock, rng)
    summary = _summary(root, options, generator, manifest, end_offset,
                       dict(physic=physic, logics=logics, index=index_ts), preallocated)
    if dledger is not None:
        summary["dledger"] = dledger
    return summary


DLEDGER_SELF_ID = "n0"      # dLegerSelfId of the one peer, as in the reference stores


def _write_dledger_files(root: Path, options: ForgeOptions, rng, last_index: int,
                         divided: int | None) -> dict:
    """DLedger's checkpoint and currterm as a single-peer group leaves them. A clean shutdown
    persists committedIndex = endIndex = the last entry, the persist before it (every 3 s) went
    to checkpoint.bak; a crash leaves the last persist, which trails the data by a few entries
    (committedIndex one behind endIndex, as in the reference crash store) and no .bak."""
    folder = root / f"dledger-{DLEDGER_SELF_ID}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data").mkdir(exist_ok=True)
    (folder / "index").mkdir(exist_ok=True)
    committed = end = last_index
    previous = None
    if last_index >= 0:
        if options.crash:
            end = last_index - rng.randint(0, max(0, min(last_index, (last_index + 1) // 50)))
            committed = end - 1
        elif last_index >= 1:
            behind = rng.randint(1, last_index)
            previous = (last_index - behind - 1, last_index - behind)
    (folder / "checkpoint").write_bytes(w.dledger_checkpoint_bytes(committed, end))
    if previous is not None:
        (folder / "checkpoint.bak").write_bytes(w.dledger_checkpoint_bytes(*previous))
    (folder / "currterm").write_bytes(w.dledger_currterm_bytes(DLEDGER_SELF_ID, 0))
    data_files = sorted(p.name for p in (folder / "data").iterdir())
    return {"directory": folder.name, "data_files": data_files, "last_index": last_index,
            "checkpoint": {"committedIndex": committed, "endIndex": end},
            "checkpoint_bak": None if previous is None else
            {"committedIndex": previous[0], "endIndex": previous[1]},
            "current_term": 0, "divided_commitlog_offset": divided}


def _summary(root: Path, options: ForgeOptions, generator: MessageGenerator, manifest: Manifest,
             end_offset: int, checkpoint: dict, preallocated: str | None) -> dict:
    commitlog_files = sorted(p.name for p in (root / "commitlog").iterdir()) \
        if (root / "commitlog").is_dir() else []
    index_dir = root / "index"
    index_files = sorted(p.name for p in index_dir.iterdir()) if index_dir.is_dir() else []
    cq_files = sorted(p.relative_to(root).as_posix()
                      for p in (root / "consumequeue").glob("*/*/*")) \
        if (root / "consumequeue").is_dir() else []
    return {
        "root": str(root),
        "seed": options.seed,
        "broker_version": options.broker_version,
        "classic_batch_layout": "own properties (5.3.4+)" if options.newest
        else "batch properties appended",
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
