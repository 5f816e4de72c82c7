"""What the broker's next start will do to a store (spec §7), predicted without starting one.

:func:`predict_recovery` is ``DefaultMessageStore.load`` + ``recover`` as a sequence of named
phases, each a function from plain data to a small dataclass (the broker method it mirrors in
its docstring), read in this order:

1. :func:`start_setup` - ``lastExitOK = !abort`` (``mode`` can force either branch), the family's
   rules (:class:`BrokerRules`) and the checkpoint;
2. :func:`load_files` - ``CommitLog.load`` / ``loadConsumeQueue``: file sizes (5.1.3+ deletes an
   empty last file);
3. :func:`load_index` - ``IndexService.load(lastExitOK)``: after a crash the IndexFiles newer
   than the checkpoint are deleted;
4. :func:`recover_queues` - ``ConsumeQueue.recover`` per queue (:mod:`mqtool.queue_recovery`),
   from its third-to-last file: maxPhyOffsetOfConsumeQueue (RocksDB: its CQ checkpoint);
5. :func:`choose_start_file` - the start file of ``recoverNormally`` / ``recoverAbnormally``,
   per family (``isMappedFileMatchedRecover``);
6. :func:`scan_commitlog` - their scan, exactly as ``checkMessageAndReturnSize`` accepts records
   (:class:`FileJudge`, fed by the shared scanner): a blank moves to the next file, anything
   else it refuses ends recovery at processOffset;
7. :func:`truncate_dirty_files` - ``truncateDirtyFiles(processOffset)``, and what it loses;
8. :func:`truncate_dirty_logic_files` - ``truncateDirtyLogicFiles(processOffset)``, when the
   queues reach past processOffset (always after 5.3.3);
9. :func:`redispatch_rule` - which records are dispatched again (abnormal recovery, 5.3.2+
   normal recovery, 4.9's ``ReputMessageService`` in ``start()``).

:func:`recovery_start` runs phases 1-5 and :func:`predict_from` the rest, so that ``recover``
(:func:`mqtool.repair.planners.plan_recover`) stages the same results: the queues' valid ends
(phase 4), the truncation before a dispatch (phase 8), the re-dispatch start (phase 9). Only the
truncation after a dispatch (abnormal recovery, 5.3.2+) walks the staged queues again, since it
sees the units the dispatch wrote.

The reference stores written by the real 4.9.8 and 5.3.3 brokers are the ground truth this module
is tested against; where they and the spec differ, the stores win (see the comments).
"""
from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np

from .codec import numpy_dtype
from .cores import fork_context, worker_initializer
from .passport import store_passport
from .queue_recovery import (QueueRecovery, QueueTruncation, queue_kinds, recover_consume_queue,
                             scan_valid_prefix, truncate_dirty_logic)
from .errors import ParseError
from .formats import checkpoint as ckpt_fmt
from .formats import commitlog as cl_fmt
from .formats import indexfile as idx_fmt
from .scan import (FLAG_FALSE, FLAG_TRUE, BlankRecord, CorruptRegion, MessageRecord, RecordBatch,
                   UnwrittenTail, scan_segment, scan_segment_batches)
from .store import ConsumeQueue, MappedFile, Segment, Store, parse_at
from .vocabulary import (BROKER_VERSIONS, DISPATCHING_NORMAL_RECOVERY, MODES,  # noqa: F401
                         VERSION_49, VERSION_50, VERSION_532, VERSION_534)

INDEX_HEADER_DTYPE = numpy_dtype(idx_fmt.index_header)
INDEX_ENTRY_DTYPE = numpy_dtype(idx_fmt.index_entry)
_FIRST_RECORD_PREFIX = cl_fmt.message_prefix_through_store_timestamp
_FIRST_RECORD_MAX = 4 * 9 + 8 * 3 + 20 + 8  # header + IPv6 born host + store timestamp


# --- broker version ------------------------------------------------------------------------------

def detect_broker_version(store: Store) -> tuple[str, str]:
    """(recovery rules, evidence) as the store passport decides them: 5.3.2+ with the 5.x-only
    files and fields it lists, else 4.9."""
    passport = store_passport(store)
    return passport["recovery_rules"], "; ".join(
        f"{c['claim']}: {c['evidence']}" for c in passport["claims"])


def resolve_broker_version(store: Store, requested: str) -> str:
    if requested == "auto":
        return detect_broker_version(store)[0]
    if requested not in BROKER_VERSIONS:
        raise ValueError(f"broker version must be auto or one of {', '.join(BROKER_VERSIONS)}, "
                         f"not {requested!r}")
    return requested


# --- what the broker accepts, file by file -------------------------------------------------------

@dataclass(frozen=True)
class BrokerRules:
    """The knobs of checkMessageAndReturnSize that decide where a scan ends."""

    version: str = VERSION_49
    check_crc: bool = True                # checkCRCOnRecover
    force_verify_prop_crc: bool = False   # 5.2+: the property CRC replaces the body CRC check
    crc_scanned: bool = True              # False when the scanner skipped CRCs (verify --quick)

    @property
    def accepts_v2(self) -> bool:
        # 4.9 knows only MESSAGE_MAGIC_CODE; V2 exists from 5.1.0 (5.0.0 is lumped in with 5.x)
        return self.version != VERSION_49

    @property
    def verifies_prop_crc(self) -> bool:
        return self.force_verify_prop_crc and self.version != VERSION_49

    @property
    def checks_declared_size(self) -> bool:
        # 5.3.2+ refuses a record (blank included) whose size runs past the buffer before it even
        # reads the magic
        return self.version in (VERSION_532, VERSION_534)


@dataclass
class FileVerdict:
    """Where the broker's scan of one CommitLog file (from position 0) leaves it."""

    base_offset: int
    name: str
    stop_offset: int            # global offset the scan stops at (the blank, or the refused record)
    reason: str                 # blank | unwritten | body-crc | prop-crc | v2-magic | blank-size |
                                # CL_BAD_MAGIC | CL_LENGTH_MISMATCH | CL_TRUNCATED | end-of-file
    accepted: int = 0           # records accepted before the stop
    last_accepted: int | None = None   # start of the last accepted record (5.x confirmOffset)
    after: int = 0              # plausible records at or after the stop (resynchronised scan)
    first_after: int | None = None
    data_end: int | None = None  # end of the last message/damaged bytes in the file

    @property
    def continues(self) -> bool:
        """Left through an accepted blank: the scan goes on in the next file."""
        return self.reason == "blank"


class FileJudge:
    """checkMessageAndReturnSize applied to the scanner's events of one file.

    Fed in offset order; after the first refusal it only counts what lies beyond (records the
    resynchronising scanner still finds), which is what recovery would throw away."""

    __slots__ = ("rules", "verdict", "_file_end", "stopped")

    def __init__(self, segment: Segment, rules: BrokerRules):
        self.rules = rules
        self._file_end = segment.base_offset + segment.length
        self.verdict = FileVerdict(segment.base_offset, segment.name, segment.base_offset,
                                   "end-of-file")
        self.stopped = False

    def _stop(self, offset: int, reason: str) -> None:
        self.stopped = True
        self.verdict.stop_offset = offset
        self.verdict.reason = reason

    def feed(self, event) -> None:
        v = self.verdict
        kind = type(event)
        if self.stopped:
            if kind is MessageRecord:
                v.after += 1
                if v.first_after is None:
                    v.first_after = event.offset
                v.data_end = event.offset + event.total_size
            elif kind is CorruptRegion:
                v.data_end = corrupt_end(event)
            return
        if kind is MessageRecord:
            reason = None
            rules = self.rules
            if event.magic_code == cl_fmt.MESSAGE_MAGIC_CODE_V2 and not rules.accepts_v2:
                reason = "v2-magic"
            elif rules.check_crc and rules.crc_scanned:
                if rules.verifies_prop_crc:
                    # a missing __CRC32# fails too, and the body CRC is then not looked at
                    if event.prop_crc_ok is not True:
                        reason = "prop-crc"
                elif event.body_crc_ok is False:
                    reason = "body-crc"
            v.data_end = event.offset + event.total_size
            if reason is not None:
                self._stop(event.offset, reason)
                v.after = 1
                v.first_after = event.offset
                return
            v.accepted += 1
            v.last_accepted = event.offset
            v.stop_offset = event.offset + event.total_size
        elif kind is BlankRecord:
            if self.rules.checks_declared_size and event.total_size > self._file_end - event.offset:
                self._stop(event.offset, "blank-size")
            else:
                self._stop(event.offset, "blank")
        elif kind is UnwrittenTail:
            self._stop(event.offset, "unwritten")
        elif kind is CorruptRegion:
            self._stop(event.offset, event.code)
            v.data_end = corrupt_end(event)


    def feed_batch(self, batch) -> int:
        """:meth:`feed` for every record of a scanner ``RecordBatch`` at once (no per-record
        objects); returns how many leading records are accepted (all of them until a refusal)."""
        n = len(batch)
        if n == 0:
            return 0
        v = self.verdict
        offsets = batch.offsets
        ends = offsets + batch.total_size
        if self.stopped:
            v.after += n
            if v.first_after is None:
                v.first_after = int(offsets[0])
            v.data_end = int(ends[-1])
            return 0
        rules = self.rules
        refused = np.zeros(n, dtype=bool)
        reasons = []
        if not rules.accepts_v2:
            reasons.append(("v2-magic", batch.magic_code == cl_fmt.MESSAGE_MAGIC_CODE_V2))
        if rules.check_crc and rules.crc_scanned:
            if rules.verifies_prop_crc:
                reasons.append(("prop-crc", batch.prop_crc_ok != FLAG_TRUE))
            else:
                reasons.append(("body-crc", batch.body_crc_ok == FLAG_FALSE))
        for _, mask in reasons:
            refused |= mask
        bad = np.flatnonzero(refused)
        accepted = int(bad[0]) if len(bad) else n
        if accepted:
            v.accepted += accepted
            v.last_accepted = int(offsets[accepted - 1])
            v.stop_offset = int(ends[accepted - 1])
        v.data_end = int(ends[-1])
        if accepted < n:
            # the first test that fails names the refusal, as in feed()
            reason = next(name for name, mask in reasons if mask[accepted])
            self._stop(int(offsets[accepted]), reason)
            v.after = n - accepted
            v.first_after = int(offsets[accepted])
        return accepted


def corrupt_end(region: CorruptRegion) -> int:
    """End of the bytes a damaged record occupies (its declared size when that stays inside the
    region; the resynchronised region can be much longer and mostly zeros)."""
    if 0 < region.total_size <= region.length:
        return region.offset + region.total_size
    return region.offset + region.length


def judge_segment(segment: Segment, rules: BrokerRules, progress=None) -> FileVerdict:
    """Scan one file as the broker does, and on past its stop with resynchronisation."""
    judge = FileJudge(segment, rules)
    # runs of records as batches: no object per record (a 1 GiB file holds about a million)
    for event in scan_segment_batches(segment, check_crc=rules.check_crc and rules.crc_scanned,
                                      resync=True, progress=progress):
        if type(event) is RecordBatch:
            judge.feed_batch(event)
        else:
            judge.feed(event)
    return judge.verdict


def _judge_alone(job: tuple[Segment, BrokerRules]) -> FileVerdict:
    return judge_segment(*job)


def judge_segments(segments: list[Segment], rules: BrokerRules, progress=None,
                   workers: int = 1) -> dict[int, FileVerdict]:
    """judge_segment of every file (base offset -> verdict), in up to ``workers`` forked
    processes: files are judged independently, and the broker's scan of a crashed store reads
    every one of them."""
    count = min(workers, len(segments))
    context = fork_context()
    if count <= 1 or context is None:
        # a spawned child could not re-import ``python -m mqtool``: fork only
        return {seg.base_offset: judge_segment(seg, rules, progress) for seg in segments}
    verdicts = {}
    # the workers die with this process, whatever kills it (no orphan holds the caller's pipes)
    with ProcessPoolExecutor(count, mp_context=context, initializer=worker_initializer,
                             initargs=(os.getpid(),)) as pool:
        for seg, verdict in zip(segments, pool.map(_judge_alone,
                                                   [(seg, rules) for seg in segments])):
            verdicts[seg.base_offset] = verdict
            if progress is not None:
                progress.update(seg.length)
    return verdicts


def deleted_on_load(files: list[Segment], segment: Segment, version: str) -> bool:
    """5.1.3+ MappedFileQueue.doLoad deletes an empty *last* file (of the CommitLog and of every
    queue) instead of refusing to start over its size."""
    return version != VERSION_49 and segment is files[-1] and segment.length == 0


def _as_loaded(queue: ConsumeQueue, version: str) -> ConsumeQueue:
    if queue.segments and deleted_on_load(queue.segments, queue.segments[-1], version):
        return dataclasses.replace(queue, segments=queue.segments[:-1])
    return queue


# --- the plan --------------------------------------------------------------------------------------

@dataclass
class RecoveryPlan:
    """What the broker's next start does to the store; JSON-able through :meth:`to_dict`."""

    broker_version: str
    mode: str                           # normal | abnormal (the branch taken)
    last_exit_ok: bool                  # no abort file
    check_crc: bool
    force_verify_prop_crc: bool
    message_index_safe: bool
    crc_verified: bool                  # False when the scan that fed the plan skipped CRCs
    checkpoint: dict | None
    max_phy_offset_of_consume_queue: int
    start_file: str | None
    start_offset: int
    start_reason: str
    process_offset: int                 # afterRecovery.maxPhyOffset
    stop_file: str | None
    stop_position: int                  # position of processOffset in stop_file
    stop_reason: str
    confirm_offset: int | None          # 5.x: start of the last valid message
    commitlog_files_kept: list[str]
    commitlog_files_deleted: list[str]
    cut_file: str | None                # the kept file whose write position becomes processOffset
    bytes_dropped: int                  # bytes of records/damage past processOffset
    messages_lost: int                  # plausible records at or past processOffset
    first_lost_offset: int | None
    cq_truncate_called: bool
    cq_units_truncated: int
    cq_truncations: list[QueueTruncation]
    cq_units_dropped_by_cq_recover: int
    redispatch_from: int | None         # records from here to processOffset are dispatched again
    redispatch_rule: str
    index_files_deleted: list[str]
    index_files_kept: list[str]
    index_entries_stale: int            # kept index entries that point at or past processOffset
    refuses_to_start: list[str]
    notes: list[str] = field(default_factory=list)
    queue_recoveries: list[QueueRecovery] = field(default_factory=list, repr=False)
    # (topic, queue) -> queue end after the re-dispatch, when recover's dispatch counted it
    redispatched_ends: dict | None = field(default=None, repr=False)
    # a RocksDB ConsumeQueue after the start (mqtool.rocksdb_recovery.RocksRecovery.summary)
    rocksdb: dict | None = None

    @property
    def truncates(self) -> bool:
        return self.messages_lost > 0 or self.bytes_dropped > 0 or self.cq_units_truncated > 0

    def queue_end_after_recovery(self, topic: str, queue_id: int) -> int | None:
        """Logical unit index the queue ends at once recovery has truncated it."""
        for t in self.cq_truncations:
            if t.topic == topic and t.queue_id == queue_id:
                return t.new_end
        for q in self.queue_recoveries:
            if q.topic == topic and q.queue_id == queue_id:
                return q.valid_end
        return None

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("queue_recoveries", None)
        data.pop("redispatched_ends", None)
        data["cq_truncations"] = [asdict(t) for t in self.cq_truncations if t.units
                                  or t.files_deleted]
        return data


def _checkpoint_dict(store: Store) -> dict | None:
    try:
        ckpt = store.read_checkpoint()
    except ParseError:
        ckpt = None  # a short checkpoint: the broker maps a fresh zeroed page
    if ckpt is None:
        return None
    physic, logics, index = (ckpt.physic_msg_timestamp, ckpt.logics_msg_timestamp,
                             ckpt.index_msg_timestamp)
    return {
        "physic_msg_timestamp": physic,
        "logics_msg_timestamp": logics,
        "index_msg_timestamp": index,
        "master_flushed_offset": ckpt.master_flushed_offset,
        "confirm_phy_offset": ckpt.confirm_phy_offset,
        "min_timestamp": ckpt_fmt.min_timestamp(physic, logics),
        "min_timestamp_index": ckpt_fmt.min_timestamp_index(physic, logics, index),
    }


def _first_record_prefix(segment: Segment, *, min_length: int, accepts_v2: bool):
    """(the fields of the file's first record up to its store timestamp, "") as
    isMappedFileMatchedRecover reads them, or (None, why not): a file shorter than
    ``min_length``, a V2 magic the family does not know, or no message magic."""
    with open(segment.path, "rb") as fh:
        head = fh.read(_FIRST_RECORD_MAX)
    if len(head) < min_length:
        return None, "file too short for a record"
    magic = int.from_bytes(head[4:8], "big")
    if magic == cl_fmt.MESSAGE_MAGIC_CODE_V2 and not accepts_v2:
        return None, "first record has the V2 magic (unknown to 4.9)"
    try:
        return parse_at(_FIRST_RECORD_PREFIX, head, file=segment.name), ""
    except ParseError:
        return None, f"first record has magic 0x{magic:08X}"


def first_record_matches(segment: Segment, rules: BrokerRules, limit_timestamp: int) -> tuple[bool, str]:
    """isMappedFileMatchedRecover (file ConsumeQueue, 4.9 through 5.3.3): the first record has a
    message magic, a non-zero store timestamp and one at or before the checkpoint's limit. No CRC
    and no length check: a damaged first record can still be chosen."""
    first, why = _first_record_prefix(segment, min_length=8, accepts_v2=rules.accepts_v2)
    if first is None:
        return False, why
    if first.store_timestamp == 0:
        return False, "first record's store timestamp is 0"
    if first.store_timestamp <= limit_timestamp:
        return True, (f"first record stored at {first.store_timestamp} <= checkpoint limit "
                      f"{limit_timestamp}")
    return False, f"first record stored at {first.store_timestamp} > checkpoint limit {limit_timestamp}"


def first_record_decoded(segment: Segment, rules: BrokerRules) -> tuple[MessageRecord | None, str]:
    """(the file's first record, "") when checkMessageAndReturnSize accepts it with the CRC check
    (body CRC, or the property CRC with forceVerifyPropCRC), else (None, why not)."""
    judge = FileJudge(segment, BrokerRules(rules.version, rules.check_crc,
                                           rules.force_verify_prop_crc, True))
    for event in scan_segment(segment, check_crc=rules.check_crc, resync=False):
        judge.feed(event)
        if type(event) is MessageRecord and judge.verdict.accepted:
            return event, ""
        kind = type(event).__name__
        if type(event) is BlankRecord:
            return None, "the file starts with a blank (store timestamp 0)"
        if type(event) is UnwrittenTail:
            return None, "the file starts with zeros"
        return None, f"its first record fails the check ({judge.verdict.reason or kind})"
    return None, "the file is empty"


def head_start_file(segments: list[Segment], rules: BrokerRules, branch: str, max_phy_cq: int,
                    ckpt: dict | None, message_index_safe: bool) -> tuple[int, str]:
    """The recovery start file of the store code after 5.3.3 (isMappedFileMatchedRecover, both
    modes): walking back from the last file, the first whose first record decodes with the CRC
    check and then passes the queue store's rule: normal = its PHYSICALOFFSET <= the queues'
    dispatch offset (maxPhyOffsetOfConsumeQueue), abnormal = its store time <= the checkpoint's
    minTimestamp. With messageIndexSafe its store time must also be <= indexMsgTimestamp.
    Normal recovery never checks file 0 (it falls back to it); abnormal checks it too."""
    min_ts = ckpt["min_timestamp"] if ckpt else 0
    index_ts = ckpt["index_msg_timestamp"] if ckpt else 0
    skipped: list[str] = []
    lowest = 1 if branch == "normal" else 0
    for i in range(len(segments) - 1, lowest - 1, -1):
        record, why = first_record_decoded(segments[i], rules)
        if record is None:
            skipped.append(f"{segments[i].name}: {why}")
            continue
        ts = record.store_timestamp
        if ts == 0:
            skipped.append(f"{segments[i].name}: first record's store timestamp is 0")
        elif message_index_safe and ts > index_ts:
            skipped.append(f"{segments[i].name}: first record stored at {ts} > "
                           f"indexMsgTimestamp {index_ts}")
        elif branch == "normal" and record.physical_offset > max_phy_cq:
            skipped.append(f"{segments[i].name}: first record's PHYSICALOFFSET "
                           f"{record.physical_offset} > dispatch offset {max_phy_cq}")
        elif branch != "normal" and ts > min_ts:
            skipped.append(f"{segments[i].name}: first record stored at {ts} > checkpoint "
                           f"minTimestamp {min_ts}")
        else:
            rule = (f"PHYSICALOFFSET {record.physical_offset} <= dispatch offset {max_phy_cq}"
                    if branch == "normal" else
                    f"stored at {ts} <= checkpoint minTimestamp {min_ts}")
            return i, _with_skipped(f"first record decodes with the CRC check and {rule} "
                                    f"({VERSION_534})", skipped)
    if len(segments) == 1:
        return 0, f"the only CommitLog file ({VERSION_534})"
    return 0, _with_skipped(f"no later file's first record qualifies: file 0 ({VERSION_534})",
                            skipped)


def _with_skipped(reason: str, skipped: list[str]) -> str:
    if not skipped:
        return reason
    shown = skipped[:3] + ([f"{len(skipped) - 3} more"] if len(skipped) > 3 else [])
    return f"{reason}; skipped: " + "; ".join(shown)


def first_record_at_or_before(segment: Segment, limit_offset: int) -> tuple[bool, str]:
    """isMappedFileMatchedRecover with a RocksDB ConsumeQueue (5.2-5.3.3): the first record has
    a message magic and its PHYSICALOFFSET field is at or before the RocksDB CQ's max offset."""
    first, why = _first_record_prefix(segment, min_length=36, accepts_v2=True)
    if first is None:
        return False, why
    if first.physical_offset <= limit_offset:
        return True, (f"the file holding the RocksDB CQ checkpoint {limit_offset}: its first "
                      f"record's PHYSICALOFFSET {first.physical_offset} is at or before it")
    return False, (f"first record's PHYSICALOFFSET {first.physical_offset} > RocksDB CQ "
                   f"checkpoint {limit_offset}")


def _index_headers(store: Store) -> list[tuple[str, dict | None]]:
    out = []
    for info in store.index_files:
        with open(info.path, "rb") as fh:
            raw = fh.read(idx_fmt.INDEX_HEADER_SIZE)
        if len(raw) < idx_fmt.INDEX_HEADER_SIZE:
            out.append((info.name, None))
            continue
        out.append((info.name, dict(parse_at(idx_fmt.index_header, raw, file=info.name))))
    return out


def _index_entries_past(store: Store, names: list[str], offset: int) -> int:
    """Entries of the named index files that point at or past ``offset``."""
    count = 0
    for info in store.index_files:
        if info.name not in names:
            continue
        with MappedFile(info.path) as mf:
            if mf.size < idx_fmt.INDEX_HEADER_SIZE:
                continue
            header = np.frombuffer(mf.data, INDEX_HEADER_DTYPE, 1)[0]
            used = int(header["index_count"])
            first = idx_fmt.entry_position(store.index_slots, 1)
            available = max(0, (mf.size - first) // idx_fmt.INDEX_ENTRY_SIZE)
            n = max(0, min(used - 1, available))
            if n:
                entries = np.frombuffer(mf.data, INDEX_ENTRY_DTYPE, n, first)
                count += int((entries["phy_offset"] >= offset).sum())
    return count


# --- the phases of the broker's start (spec §7), each a step on plain data ----------------------------

@dataclass(frozen=True)
class RecoverySetup:
    """What the broker starts with: its family's rules, the branch and the checkpoint."""

    version: str
    rules: BrokerRules
    last_exit_ok: bool          # no abort file
    branch: str                 # normal | abnormal
    message_index_safe: bool
    checkpoint: dict | None
    notes: tuple[str, ...]


def start_setup(store: Store, *, mode: str, broker_version: str, check_crc: bool,
                message_index_safe: bool, force_verify_prop_crc: bool,
                crc_verified: bool) -> RecoverySetup:
    """``lastExitOK = !abort`` and the checkpoint as ``DefaultMessageStore.load`` opens it
    (``StoreCheckpoint``): the inputs every later phase reads."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    version = resolve_broker_version(store, broker_version)
    last_exit_ok = not store.abort_exists
    notes = []
    if force_verify_prop_crc and version == VERSION_49:
        notes.append("forceVerifyPropCRC does not exist in 4.9; ignored")
    ckpt = _checkpoint_dict(store)
    if ckpt is None:
        notes.append("no readable checkpoint: the broker starts with a zeroed one (all timestamps 0)")
    return RecoverySetup(version, BrokerRules(version, check_crc, force_verify_prop_crc,
                                              crc_verified),
                         last_exit_ok, mode if mode != "auto" else
                         ("normal" if last_exit_ok else "abnormal"),
                         message_index_safe, ckpt, tuple(notes))


@dataclass
class LoadedFiles:
    """The CommitLog and queue files as the load leaves them."""

    segments: list[Segment]     # CommitLog files (5.1.3+: an empty last file deleted)
    queue_kinds: list           # (kind, queues, units per file), each queue as loaded
    refuses: list[str]          # files of the wrong size: the broker does not start
    notes: list[str]


def load_files(store: Store, version: str) -> LoadedFiles:
    """``CommitLog.load`` and ``loadConsumeQueue`` (``MappedFileQueue.load``/``doLoad``): every
    file must have the configured size, except that 5.1.3+ deletes an empty last file."""
    segments = store.commitlog.segments
    file_size = store.commitlog.file_size
    notes: list[str] = []
    refuses = [f"{s.store_path} is {s.length} bytes, not {file_size}" for s in segments
               if s.length != file_size and not deleted_on_load(segments, s, version)]
    for kind, queues, upf in queue_kinds(store):
        wanted = upf * kind.unit_size
        for q in queues:
            for s in q.segments:
                if s.length != wanted and deleted_on_load(q.segments, s, version):
                    notes.append(f"5.1.3+ deletes the empty last file {store.relative(s.path)} "
                                 "on load")
                elif s.length != wanted:
                    refuses.append(f"{store.relative(s.path)} is {s.length} bytes, not {wanted}")
    if segments and deleted_on_load(segments, segments[-1], version):
        notes.append(f"5.1.3+ deletes the empty last file commitlog/{segments[-1].name} on load")
        segments = segments[:-1]
    loaded = [(kind, [_as_loaded(q, version) for q in queues], upf)
              for kind, queues, upf in queue_kinds(store)]
    return LoadedFiles(segments, loaded, refuses, notes)


@dataclass
class IndexLoad:
    """The IndexFiles after ``IndexService.load``."""

    deleted: list[str]
    kept: list[str]


def load_index(store: Store, setup: RecoverySetup) -> IndexLoad:
    """``IndexService.load(lastExitOK)``: after an abnormal exit every IndexFile whose
    endTimestamp is past the checkpoint's indexMsgTimestamp is destroyed."""
    headers = _index_headers(store)
    deleted: list[str] = []
    if setup.branch == "abnormal":
        limit = setup.checkpoint["index_msg_timestamp"] if setup.checkpoint else 0
        deleted = [name for name, header in headers
                   if header is not None and header["end_timestamp"] > limit]
    return IndexLoad(deleted, [name for name, _ in headers if name not in deleted])


@dataclass
class QueuePhase:
    """The ConsumeQueues after their own recovery."""

    recoveries: list[QueueRecovery]
    max_phy_offset: int         # maxPhyOffsetOfConsumeQueue (HEAD: getDispatchFromPhyOffset)
    dropped_units: int
    rocks: object | None        # the RocksDB ConsumeQueue (mqtool.rocksdb_cq), when there is one
    notes: list[str]
    # (kind, queues, units per file) as recover leaves them: what truncateDirtyLogicFiles walks
    recovered: list = field(default_factory=list, repr=False)


def recover_queues(store: Store, loaded: LoadedFiles) -> QueuePhase:
    """``ConsumeQueue.recover`` per queue (``recoverConsumeQueue``; 5.x
    ``ConsumeQueueStore.recover``): valid units from each queue's third-to-last file, and
    maxPhyOffsetOfConsumeQueue over them; with the queues in RocksDB, its CQ checkpoint
    (``getMaxPhyOffsetInConsumeQueue``)."""
    recoveries = [recover_consume_queue(q, upf, kind)
                  for kind, queues, upf in loaded.queue_kinds for q in queues]
    max_phy = max((q.max_physic_offset for q in recoveries), default=-1)
    notes: list[str] = []
    rocks = None
    if store.queues_in_rocksdb:
        # the RocksDB ConsumeQueue: its CQ checkpoint (CHECKPOINT_TOPIC) is how far the queues
        # are built (getMaxPhyOffsetInConsumeQueue); an empty database has none
        from .rocksdb_cq import load_rocksdb_cq
        rocks = load_rocksdb_cq(store)
        max_phy = rocks.checkpoint if rocks.checkpoint is not None else 0   # getMaxPhyOffset
        notes.append(f"ConsumeQueues in RocksDB ({rocks.folder}/): {rocks.unit_count:,} units, "
                     f"CQ checkpoint "
                     f"{rocks.checkpoint if rocks.checkpoint is not None else 'absent'}")
    return QueuePhase(recoveries, max_phy, sum(q.dropped_units for q in recoveries), rocks, notes,
                      _as_recovered(loaded.queue_kinds, recoveries))


def _as_recovered(queue_kinds: list, recoveries: list[QueueRecovery]) -> list:
    """The queues as ``ConsumeQueue.recover`` leaves them: its ``truncateDirtyFiles`` deletes
    every file starting past the valid end (a file starting exactly there stays, at write
    position 0), before the CommitLog recovery calls ``truncateDirtyLogicFiles``."""
    decided = iter(recoveries)      # one per queue, in queue_kinds' order
    out = []
    for kind, queues, upf in queue_kinds:
        kept = []
        for q in queues:
            end = next(decided).valid_end * kind.unit_size
            kept.append(dataclasses.replace(q, segments=[s for s in q.segments
                                                         if s.base_offset <= end]))
        out.append((kind, kept, upf))
    return out


@dataclass(frozen=True)
class StartFile:
    """Where the CommitLog recovery starts."""

    index: int                  # into LoadedFiles.segments
    name: str
    offset: int
    reason: str


def choose_start_file(segments: list[Segment], setup: RecoverySetup,
                      queues: QueuePhase) -> StartFile:
    """The start file of ``CommitLog.recoverNormally`` / ``recoverAbnormally``, per family:
    normal 4.9-5.3.1 the third-to-last file, 5.3.2+ the last file at or before
    maxPhyOffsetOfConsumeQueue; abnormal the newest file ``isMappedFileMatchedRecover`` accepts
    (the RocksDB variant with a RocksDB ConsumeQueue); after 5.3.3 that test in both branches."""
    version, branch, max_phy_cq = setup.version, setup.branch, queues.max_phy_offset
    if version == VERSION_534:
        index, reason = head_start_file(segments, setup.rules, branch, max_phy_cq,
                                        setup.checkpoint, setup.message_index_safe)
    elif branch == "normal":
        index, reason = _normal_start_file(segments, version, max_phy_cq)
    elif queues.rocks is not None:
        index, reason = _rocksdb_start_file(segments, max_phy_cq)
    else:
        index, reason = _abnormal_start_file(segments, setup)
    return StartFile(index, segments[index].name, segments[index].base_offset, reason)


def _normal_start_file(segments: list[Segment], version: str, max_phy_cq: int) -> tuple[int, str]:
    if version == VERSION_532:
        index = len(segments) - 1
        while index > 0 and segments[index].base_offset > max_phy_cq:
            index -= 1
        return index, (f"last file starting at or before maxPhyOffsetOfConsumeQueue "
                       f"{max_phy_cq} (5.3.2+)")
    return max(0, len(segments) - 3), "third-to-last file (recoverNormally)"


def _rocksdb_start_file(segments: list[Segment], max_phy_cq: int) -> tuple[int, str]:
    # 5.2-5.3.3 with the RocksDB CQ: the newest file whose first record's PHYSICALOFFSET is at
    # or before the CQ checkpoint, else file 0
    for i in range(len(segments) - 1, -1, -1):
        ok, why = first_record_at_or_before(segments[i], max_phy_cq)
        if ok:
            return i, why
    return 0, (f"no file's first record is at or before the RocksDB CQ checkpoint "
               f"{max_phy_cq}; file 0")


def _abnormal_start_file(segments: list[Segment], setup: RecoverySetup) -> tuple[int, str]:
    ckpt, safe = setup.checkpoint, setup.message_index_safe
    limit = 0
    if ckpt is not None:
        limit = ckpt["min_timestamp_index"] if safe else ckpt["min_timestamp"]
    for i in range(len(segments) - 1, -1, -1):
        ok, why = first_record_matches(segments[i], setup.rules, limit)
        if ok:
            return i, why
    return 0, (f"no file's first record is at or before the checkpoint limit {limit} "
               f"(min(physic, logics) - 3000 ms{', indexMsgTimestamp' if safe else ''}); "
               f"file 0")


class _Verdicts:
    """Per-file verdicts: those a caller handed in, the rest judged here when first asked for."""

    def __init__(self, given: dict[int, FileVerdict] | None, rules: BrokerRules, progress):
        self.known = dict(given or {})
        self.rules = rules
        self.progress = progress

    def judge_ahead(self, segments: list[Segment], workers: int) -> None:
        if workers > 1:
            self.known.update(judge_segments([seg for seg in segments
                                              if seg.base_offset not in self.known],
                                             self.rules, self.progress, workers))

    def __call__(self, seg: Segment) -> FileVerdict:
        if seg.base_offset not in self.known:
            self.known[seg.base_offset] = judge_segment(seg, self.rules, self.progress)
        return self.known[seg.base_offset]


@dataclass
class CommitLogScan:
    """Where the scan of ``recoverNormally``/``recoverAbnormally`` ends."""

    stop_index: int             # into LoadedFiles.segments
    stop_file: str
    process_offset: int
    stop_position: int
    stop_reason: str
    confirm_offset: int | None  # 5.x: start of the last valid message
    last: FileVerdict           # the stop file's verdict


def scan_commitlog(segments: list[Segment], start: StartFile, setup: RecoverySetup,
                   verdict_of: _Verdicts, file_size: int) -> CommitLogScan:
    """The scan loop of ``CommitLog.recoverNormally`` / ``recoverAbnormally``:
    ``checkMessageAndReturnSize`` record after record from the start file; a blank moves to
    the next file, the first refusal ends it at processOffset. 5.x sets confirmOffset to the
    start of the last valid message."""
    stop_index = start.index
    while True:
        verdict = verdict_of(segments[stop_index])
        if verdict.continues and stop_index + 1 < len(segments):
            stop_index += 1
            continue
        break
    stop_seg = segments[stop_index]
    confirm = None
    if setup.version != VERSION_49:
        for seg in reversed(segments[start.index:stop_index + 1]):
            if verdict_of(seg).last_accepted is not None:
                confirm = verdict_of(seg).last_accepted
                break
        if confirm is None:
            # no record accepted: the value recovery started from stays. Normal recovery starts
            # from getConfirmOffset(), which (ASYNC_FLUSH, no controller, no duplication) is the
            # CommitLog's max offset as loaded, every loaded file counted full (5.3.3 on
            # head-clean-damaged-firstrec: 4,194,304); abnormal recovery from the start file
            confirm = (segments[-1].base_offset + file_size if setup.branch == "normal"
                       else start.offset)
    return CommitLogScan(stop_index, stop_seg.name, verdict.stop_offset,
                         verdict.stop_offset - stop_seg.base_offset, verdict.reason, confirm,
                         verdict)


@dataclass
class DirtyTruncation:
    """The CommitLog after ``truncateDirtyFiles(processOffset)`` and what it loses."""

    kept: list[str]
    deleted: list[str]
    cut_file: str | None        # the kept file whose write position becomes processOffset
    messages_lost: int          # plausible records at or past processOffset
    first_lost_offset: int | None
    bytes_dropped: int          # bytes of records/damage past processOffset


def truncate_dirty_files(segments: list[Segment], scan: CommitLogScan, verdict_of: _Verdicts,
                         file_size: int) -> DirtyTruncation:
    """``MappedFileQueue.truncateDirtyFiles(processOffset)``: a file starting past processOffset
    is deleted; the file holding it is kept and cut there, even at its very first byte. The
    reference crash stores lose their preallocated all-zero next file (crash-small: 4 files ->
    3, v5-crash: 5 -> 4) for exactly this reason: processOffset ends inside the previous file,
    so the zero file lies wholly past it. A zero file would survive if the previous file ended
    with a blank (processOffset = its first byte). Also counts what lies past processOffset:
    the rest of the stop file and every later file."""
    po = scan.process_offset
    out = DirtyTruncation([], [], None, scan.last.after, scan.last.first_after,
                          max(0, (scan.last.data_end or po) - po))
    for seg in segments:
        if seg.base_offset + file_size <= po:
            out.kept.append(seg.name)
        elif po >= seg.base_offset:
            out.kept.append(seg.name)
            out.cut_file = seg.name
        else:
            out.deleted.append(seg.name)
    for seg in segments[scan.stop_index + 1:]:
        later = verdict_of(seg)
        count = later.accepted + later.after
        out.messages_lost += count
        if out.first_lost_offset is None and count:
            out.first_lost_offset = seg.base_offset if later.accepted else later.first_after
        if later.data_end is not None:
            out.bytes_dropped += later.data_end - seg.base_offset
    return out


@dataclass
class LogicTruncation:
    """The ConsumeQueues after ``truncateDirtyLogicFiles(processOffset)``."""

    called: bool
    truncations: list[QueueTruncation]
    units_truncated: int


def truncate_dirty_logic_files(queues: QueuePhase, process_offset: int,
                               version: str) -> LogicTruncation:
    """``truncateDirtyLogicFiles(processOffset)`` (HEAD: ``ConsumeQueueStore.truncateDirty``):
    called only when the queues reach processOffset (4.9 - 5.3.3), always after 5.3.3 (which
    changes nothing when they do not reach it); every unit at or past it goes, from the files
    ``ConsumeQueue.recover`` left (``queues.recovered``)."""
    if not (queues.max_phy_offset >= process_offset or version == VERSION_534):
        return LogicTruncation(False, [], 0)
    truncations = [truncate_dirty_logic(q, process_offset, upf, kind)
                   for kind, qs, upf in queues.recovered for q in qs]
    units = sum(t.units for t in truncations)
    if queues.rocks is not None:
        # RocksDB truncateDirty: each queue's max entry goes back to its last unit before
        # processOffset; the units past it stay in the database, stale
        units = sum(1 for q in queues.rocks.queues.values() for u in q.served
                    if u.commitlog_offset + u.size > process_offset)
    return LogicTruncation(True, truncations, units)


@dataclass
class Redispatch:
    """What is dispatched again into the ConsumeQueues and IndexFiles."""

    start: int | None           # records from here to processOffset are dispatched again
    rule: str
    notes: list[str]


def redispatch_rule(store: Store, setup: RecoverySetup, segments: list[Segment],
                    start: StartFile, queues: QueuePhase, logic: LogicTruncation,
                    process_offset: int) -> Redispatch:
    """Which records the broker dispatches again: ``recoverAbnormally`` every record from the
    start file; ``recoverNormally`` 5.3.2+ those past maxPhyOffsetOfConsumeQueue, 5.0-5.3.1
    none; 4.9 ``ReputMessageService`` from the highest ConsumeQueue end (``start()``)."""
    version = setup.version
    min_offset = segments[0].base_offset
    notes: list[str] = []
    if setup.branch == "abnormal":
        out = Redispatch(start.offset, "abnormal recovery dispatches every record from the "
                         "start file", notes)
        if version == VERSION_49 and any(q.topic == "SCHEDULE_TOPIC_XXXX"
                                         for q in store.consume_queues):
            # crash-lost-small/recovered: 4.9 loads the schedule service only after recover(),
            # so the delay-queue units it rebuilds get the TAGS hash as their delivery time
            notes.append("delay messages whose SCHEDULE_TOPIC_XXXX units are rebuilt now get "
                         "the TAGS hash as tagsCode and are delivered at once (4.9 loads the "
                         "schedule service after recovery)")
    elif version == VERSION_49:
        cq_max = (max((t.max_physic_offset for t in logic.truncations), default=-1)
                  if logic.called else queues.max_phy_offset)
        out = Redispatch(max(min_offset, cq_max),
                         "4.9 start(): reput from the highest ConsumeQueue end", notes)
    elif version in DISPATCHING_NORMAL_RECOVERY:
        out = Redispatch(max(min_offset, queues.max_phy_offset + 1),
                         f"{version} normal recovery dispatches records past "
                         "maxPhyOffsetOfConsumeQueue", notes)
    else:
        out = Redispatch(None, "5.0-5.3.1 normal recovery dispatches nothing and reputs from "
                         "the recovered end", notes)
    if out.start is not None and out.start >= process_offset:
        out.rule += "; nothing left to dispatch"
    return out


# --- the prediction: the phases in the broker's order ---------------------------------------------------

@dataclass
class RecoveryStart:
    """The phases before the CommitLog scan: what ``recover`` plans its dispatch from."""

    setup: RecoverySetup
    loaded: LoadedFiles
    index: IndexLoad
    queues: QueuePhase
    start: StartFile | None     # None without a CommitLog file


def recovery_start(store: Store, *, mode: str = "auto", broker_version: str = "auto",
                   check_crc: bool = True, message_index_safe: bool = False,
                   force_verify_prop_crc: bool = False,
                   crc_verified: bool = True) -> RecoveryStart:
    """``DefaultMessageStore.load`` then ``recover`` up to the CommitLog scan (spec §7.1/§7.2):
    the files loaded, the IndexFiles loaded, the ConsumeQueues recovered, the start file."""
    setup = start_setup(store, mode=mode, broker_version=broker_version, check_crc=check_crc,
                        message_index_safe=message_index_safe,
                        force_verify_prop_crc=force_verify_prop_crc, crc_verified=crc_verified)
    loaded = load_files(store, setup.version)
    index = load_index(store, setup)
    queues = recover_queues(store, loaded)
    start = None
    if loaded.segments and store.dledger is None:
        start = choose_start_file(loaded.segments, setup, queues)
    return RecoveryStart(setup, loaded, index, queues, start)


def predict_recovery(store: Store, *, mode: str = "auto", broker_version: str = "auto",
                     check_crc: bool = True, message_index_safe: bool = False,
                     force_verify_prop_crc: bool = False,
                     file_verdicts: dict[int, FileVerdict] | None = None,
                     crc_verified: bool = True, progress=None,
                     workers: int = 1) -> RecoveryPlan:
    """Predict the broker's startup recovery of ``store``.

    ``file_verdicts`` (base offset -> :class:`FileVerdict`) lets a caller that already scanned the
    CommitLog with the same rules (``verify``) skip the second scan; files missing from it are
    scanned here, by ``workers`` processes. ``crc_verified=False`` says those verdicts were made
    without CRCs."""
    begun = recovery_start(store, mode=mode, broker_version=broker_version, check_crc=check_crc,
                           message_index_safe=message_index_safe,
                           force_verify_prop_crc=force_verify_prop_crc,
                           crc_verified=crc_verified)
    return predict_from(store, begun, file_verdicts=file_verdicts, progress=progress,
                        workers=workers)


def predict_from(store: Store, begun: RecoveryStart, *,
                 file_verdicts: dict[int, FileVerdict] | None = None, progress=None,
                 workers: int = 1) -> RecoveryPlan:
    """The rest of ``recover`` from :func:`recovery_start`'s phases: the CommitLog scan,
    ``truncateDirtyFiles``, ``truncateDirtyLogicFiles``, the re-dispatch and the stale index
    entries, as one :class:`RecoveryPlan`."""
    plan = _plan_of(begun)
    if store.dledger is not None:   # DLedger mode: DLedger's own recovery, beside these rules
        from .dledger import predict_dledger_recovery
        return predict_dledger_recovery(store, plan, begun.queues.recovered, progress)
    if begun.start is None:
        return _without_commitlog(plan, begun.loaded)
    segments, setup, start = begun.loaded.segments, begun.setup, begun.start
    file_size = store.commitlog.file_size
    verdict_of = _Verdicts(file_verdicts, setup.rules, progress)
    # every file from the start file on is judged (up to the stop, then for what the recovery
    # loses past it): with workers, judged at once, a file per process
    verdict_of.judge_ahead(segments[start.index:], workers)
    scan = scan_commitlog(segments, start, setup, verdict_of, file_size)
    dirty = truncate_dirty_files(segments, scan, verdict_of, file_size)
    logic = truncate_dirty_logic_files(begun.queues, scan.process_offset, setup.version)
    redispatch = redispatch_rule(store, setup, segments, start, begun.queues, logic,
                                 scan.process_offset)
    stale = _index_entries_past(store, begun.index.kept, scan.process_offset)
    return _fill_plan(plan, start, scan, dirty, logic, redispatch, stale)


def _plan_of(begun: RecoveryStart) -> RecoveryPlan:
    """The plan with what the phases before the scan decided (the rest filled in later)."""
    setup, loaded, queues = begun.setup, begun.loaded, begun.queues
    rules = setup.rules
    return RecoveryPlan(
        broker_version=setup.version, mode=setup.branch, last_exit_ok=setup.last_exit_ok,
        check_crc=rules.check_crc, force_verify_prop_crc=rules.force_verify_prop_crc,
        message_index_safe=setup.message_index_safe, crc_verified=rules.crc_scanned,
        checkpoint=setup.checkpoint, max_phy_offset_of_consume_queue=queues.max_phy_offset,
        start_file=None, start_offset=0, start_reason="", process_offset=0, stop_file=None,
        stop_position=0, stop_reason="", confirm_offset=None, commitlog_files_kept=[],
        commitlog_files_deleted=[], cut_file=None, bytes_dropped=0, messages_lost=0,
        first_lost_offset=None, cq_truncate_called=False, cq_units_truncated=0,
        cq_truncations=[], cq_units_dropped_by_cq_recover=queues.dropped_units,
        redispatch_from=None, redispatch_rule="", index_files_deleted=list(begun.index.deleted),
        index_files_kept=list(begun.index.kept), index_entries_stale=0,
        refuses_to_start=list(loaded.refuses),
        notes=list(setup.notes) + loaded.notes + queues.notes,
        queue_recoveries=queues.recoveries)


def _without_commitlog(plan: RecoveryPlan, loaded: LoadedFiles) -> RecoveryPlan:
    """recoverNormally/Abnormally with no mapped file: flushedWhere = 0, every queue destroyed
    (``destroyLogics``; 5.x ``destroyConsumeQueueStore``)."""
    plan.start_reason = "no CommitLog file"
    plan.stop_reason = "no CommitLog file"
    plan.cq_units_truncated = sum(scan_valid_prefix(seg.path, upf, kind)[1]
                                  for kind, queues, upf in loaded.queue_kinds
                                  for q in queues for seg in q.segments)
    plan.notes.append("no CommitLog files: the broker destroys every ConsumeQueue")
    return plan


def _fill_plan(plan: RecoveryPlan, start: StartFile, scan: CommitLogScan,
               dirty: DirtyTruncation, logic: LogicTruncation, redispatch: Redispatch,
               stale: int) -> RecoveryPlan:
    plan.start_file, plan.start_offset, plan.start_reason = start.name, start.offset, start.reason
    plan.process_offset = scan.process_offset
    plan.stop_file, plan.stop_position, plan.stop_reason = (scan.stop_file, scan.stop_position,
                                                            scan.stop_reason)
    plan.confirm_offset = scan.confirm_offset
    plan.commitlog_files_kept, plan.commitlog_files_deleted = dirty.kept, dirty.deleted
    plan.cut_file = dirty.cut_file
    plan.messages_lost, plan.first_lost_offset = dirty.messages_lost, dirty.first_lost_offset
    plan.bytes_dropped = dirty.bytes_dropped
    plan.cq_truncate_called = logic.called
    plan.cq_truncations, plan.cq_units_truncated = logic.truncations, logic.units_truncated
    plan.redispatch_from, plan.redispatch_rule = redispatch.start, redispatch.rule
    plan.notes.extend(redispatch.notes)
    plan.index_entries_stale = stale
    return plan
