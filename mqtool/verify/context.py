"""What the CommitLog checks of one file need to know about the store (its queues and IndexFiles),
what they hand back, and the state a worker process keeps between files."""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from pathlib import Path

from ..recovery import BrokerRules, FileVerdict
from ..store import CommitLog, Segment


# --- what the workers need to know about queues and index files ------------------------------------

@dataclass(frozen=True)
class _QueueInfo:
    topic: str
    queue_id: int
    files: tuple        # of _ItemFile (CQ files; data_start 0, first = base unit)
    rels: tuple         # relative path per file
    first_valid: int    # first unit that is neither pre-blank nor expired-looking
    valid_end: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class _IndexInfo:
    name: str
    rel: str
    path: str
    slots: int
    entries_start: int
    index_count: int
    min_phy: int
    max_phy: int


@dataclass
class _Context:
    commitlog_dir: str
    file_size: int
    root: str
    segments: list[Segment]
    check_crc: bool
    rules: BrokerRules
    queues: dict            # (topic, qid) -> _QueueInfo, the queues merged with the scan
    unchecked_queues: set   # (topic, qid) whose records are not matched (irregular / batch CQ)
    indexes: list           # _IndexInfo of regular index files
    index_blind: list = field(default_factory=list)  # (lo, hi) ranges of unmerged index files
    engine: str = "batches"  # or "records": the record-at-a-time reference checker
    batch_topics: frozenset = frozenset()  # topics with batchconsumequeue/ dirs (5.x)
    # the recovery will be abnormal (it re-dispatches every judged record): count queue ends
    count_queue_ends: bool = False
    # a multi-path CommitLog's other directories (storePathCommitLog, readOnly paths)
    extra_commitlog_dirs: tuple = ()
    # threads of the native core's pass over each batch's bytes (the numpy path ignores it)
    threads: int = 1


@dataclass
class _MissingRun:
    topic: str
    queue_id: int
    file: str
    position: int
    first_offset: int
    first_queue_offset: int
    last_offset: int
    last_queue_offset: int
    count: int
    live: bool


@dataclass
class _SegmentResult:
    index: int
    verdict: FileVerdict
    findings: list = field(default_factory=list)
    suppressed: collections.Counter = field(default_factory=collections.Counter)
    messages: int = 0
    newest_timestamp: int | None = None
    # per queue, over live dispatchable records: (first qoff, first offset, next expected, last offset)
    spans: dict = field(default_factory=dict)
    missing: list = field(default_factory=list)
    matched_before_stop: int = 0     # records a ConsumeQueue unit references, before the file's stop
    matched_after_stop: int = 0
    leftover_units: int = 0
    bytes: int = 0
    v2_records: int = 0             # evidence for the store passport
    prop_crc_records: int = 0       # records whose __CRC32# property was checked
    own_property_batch_records: int = 0   # passport.own_property_batch_record: 5.3.4+ evidence
    # (topic, qid) of a BatchConsumeQueue topic -> offsets of its dispatchable records
    batch_records: dict = field(default_factory=dict)
    # consumers.QueueEnds.summary() of the records the judge accepted (batches engine only)
    queue_ends: tuple | None = None


_WORKER_CONTEXT: _Context | None = None
_WORKER_COMMITLOG: CommitLog | None = None


def _init_worker(context: _Context) -> None:
    global _WORKER_CONTEXT, _WORKER_COMMITLOG
    _WORKER_CONTEXT = context
    _WORKER_COMMITLOG = None


def _worker_context() -> _Context:
    """The context :func:`_init_worker` gave this worker process."""
    return _WORKER_CONTEXT


def _worker_commitlog(ctx: _Context) -> CommitLog:
    """One CommitLog listing per worker process (listing is a stat per file)."""
    global _WORKER_COMMITLOG
    if _WORKER_COMMITLOG is None:
        _WORKER_COMMITLOG = CommitLog(Path(ctx.commitlog_dir), ctx.file_size,
                                      tuple(Path(d) for d in ctx.extra_commitlog_dirs))
    return _WORKER_COMMITLOG
