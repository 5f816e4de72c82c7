"""Offline repair: the broker's startup recovery, truncation, ConsumeQueue and IndexFile rebuilds.

Every mutating command works in three steps that never overlap:

1. **plan** - the new content of every file that changes is computed into a *stage* folder
   (``STORE/.mqtool-stage-<stamp>/``, or a temporary folder for ``--dry-run``) with the one
   writer (:mod:`mqtool.writer`), fed by the one scanner (:mod:`mqtool.scan`) and driven by the
   recovery prediction (:mod:`mqtool.recovery`). Comparing the stage with the store gives a
   :class:`RepairPlan`: files created, changed (byte ranges) and deleted, messages, ConsumeQueue
   units and index entries affected, and what is lost. Nothing in the store is touched.
2. **backup** - every byte an operation changes or removes is copied into the backup folder with a
   manifest (:mod:`mqtool.backup`) before the first operation runs; a journal names it.
3. **apply** - operations run in a fixed order (CommitLog, ConsumeQueues, IndexFiles, checkpoint,
   and the ``abort`` file last, since its absence is what tells the broker the store is clean).
   Rewritten files go through temp file + fsync + rename + fsync of the directory. Every operation
   is idempotent, so a repair killed at any point is finished by running any repair command again,
   and ``mqtool undo BACKUP`` restores the store byte for byte.

Where mqtool goes beyond the broker (all optional except the first, and all reported):

* bytes past the recovered end are erased (the broker only moves its write positions and leaves
  them, so a later scan - or verify - still meets the damaged record and the records after it).
  ``keep_stale=True`` leaves them exactly as the broker does; they are in the backup either way;
* index entries pointing past the recovered end are removed (the broker leaves them and its
  queryMessage skips them) by rebuilding the affected IndexFiles under their own names;
* ``reindex_all`` indexes every message instead of losing the entries of a deleted IndexFile;
* CommitLog and ConsumeQueue files of the wrong size (the broker refuses to start) are padded.

Rewriting a 1 GiB CommitLog file to erase its tail would double the I/O of a repair, so the
CommitLog alone is changed in place: erasing bytes past the recovered end, padding a short file
with zeros, deleting later files. Each of those bytes is in the backup before it is touched, none
of them is live data, and repeating the write is harmless, so a torn write is finished by a re-run.

Modules, in the order to read them:

* :mod:`.transaction` - the plan (:class:`FileOp`, :class:`RepairPlan`), the :class:`Stage`,
  :func:`apply_plan` with its journal, resume of an interrupted repair, stale-stage clean-up,
  the lock refusal.
* :mod:`.run` - :func:`run_repair` and :func:`run_undo`: a command end to end.
* :mod:`.planners` - recover, truncate, rebuild-queues, rebuild-index: each fills a stage.
* :mod:`.dledger` - recover and truncate of a DLedger-mode store (pure or upgraded): DLedger's
  own recovery on the stage, the ledger cut at an entry.
* :mod:`.dispatching` - the broker's dispatch: records to ConsumeQueue units and index entries.
* :mod:`.pipeline` - recover's scan in worker processes ahead of the dispatch (``--workers``).
* :mod:`.writers` - the staged ConsumeQueue, BatchConsumeQueue and IndexFile writers.
* :mod:`.queues` - ConsumeQueue recovery, truncation and settling on the stage.
* :mod:`.index` - reading IndexFiles, the broker's key lookup, staged IndexFile set-up.
* :mod:`.commitlog` - the in-place CommitLog operations.
* :mod:`.bookkeeping` - checkpoint, abort file, 5.x service files.
* :mod:`.changes` - comparing the stage with the store into the plan.
* :mod:`.files` - small helpers on files shared by all of the above.
"""
from __future__ import annotations

from ..reput.dispatching import (DispatchStats, dispatch, iter_records, judged_records,
                                 last_record_before)
from .files import data_end, diff_ranges
from .transaction import (KILL_ENV, MAX_LISTED_RANGES, FileOp, RepairError, RepairPlan,
                          Stage, apply_plan, refuse_if_locked, remove_stale_stages, resume_pending,
                          sparse_copy)
from .writers import RepairIndexWriter, StagedBatchConsumeQueueWriter, StagedConsumeQueueWriter
from .index import IndexFileState, IndexSetup, query_index, query_message_offsets, read_index_states
from .queues import QueueState, queues_with_holes
from .commitlog import commitlog_gaps
from .bookkeeping import CHECKPOINT_LONGS, EMPTY_POSITION_CHECKPOINT, POSITION_CHECKPOINT
from .changes import build_plan
from .planners import (PLANNERS, plan_rebuild_index, plan_rebuild_queues, plan_recover,
                       plan_truncate, record_boundaries_ok)
from .run import RepairResult, mark_reported, refuse_commitlog_dirs, run_repair, run_undo

__all__ = ["RepairPlan", "FileOp", "Stage", "RepairResult", "RepairError", "run_repair", "run_undo",
           "mark_reported",
           "plan_recover", "plan_truncate", "plan_rebuild_queues", "plan_rebuild_index",
           "apply_plan", "resume_pending", "query_index", "query_message_offsets", "dispatch",
           "iter_records", "StagedConsumeQueueWriter", "RepairIndexWriter", "KILL_ENV", "data_end",
           "diff_ranges", "MAX_LISTED_RANGES", "refuse_if_locked",
           "remove_stale_stages", "sparse_copy", "StagedBatchConsumeQueueWriter", "DispatchStats",
           "judged_records", "last_record_before", "IndexFileState", "IndexSetup",
           "read_index_states", "QueueState", "queues_with_holes", "commitlog_gaps",
           "CHECKPOINT_LONGS", "EMPTY_POSITION_CHECKPOINT", "POSITION_CHECKPOINT", "build_plan",
           "PLANNERS", "record_boundaries_ok", "refuse_commitlog_dirs"]
