"""``verify``: every consistency check of a store, as findings with stable codes.

The CommitLog is streamed once, file by file, in offset order with the shared scanner. Each file
is checked on its own (records never cross files), so files can go to worker processes:

* the records themselves (CRCs, lengths, self-recorded offsets) and, with the broker's rules
  (:class:`mqtool.recovery.FileJudge`), where recovery would stop in that file;
* a streaming merge with the ConsumeQueues: each queue's units are in CommitLog order, so a
  cursor per queue (positioned by binary search at the file's first offset) walks alongside the
  scan; nothing is kept per record;
* the same merge with the IndexFile entries (entries are in CommitLog order inside a file).

The scan comes in runs of records as numpy columns (:class:`mqtool.scan.RecordBatch`), and the
merges are joins of sorted arrays per run (:class:`_BatchChecker`); the record-at-a-time checker
(:class:`_SegmentChecker`, ``engine="records"``) is the reference the tests hold it equal to.

Structure that does not need the records (file sizes, unit validity and order, index headers and
hash chains) is checked with numpy over whole files. The recovery prediction is then made from
the per-file verdicts, and decides how serious what lies past the recovered end is.

Memory is bounded by the number of queues, the run length and the read chunk size, not by the
store size.

Modules, in the order to read them:

* :mod:`.run` - :func:`verify_store`, the checks end to end.
* :mod:`.findings` - :class:`Finding` and :class:`VerifyReport`, what everything below produces.
* :mod:`.commitlog` - one CommitLog file, record at a time, merged with its queue units and index
  entries (the reference).
* :mod:`.batches` - the same checks a run of records at a time (the default engine).
* :mod:`.context` - what those checks know of the store, hand back, and keep per worker.
* :mod:`.items` - the chunked cursors over sorted ConsumeQueue units and index entries.
* :mod:`.queues` - ConsumeQueue structure over whole files.
* :mod:`.index` - IndexFile structure, hash chains and unreachable entries.
* :mod:`.layout` - file names, sizes and geometry.
* :mod:`.report` - merging per-file results, the listing caps, the summary.
* :mod:`.expect` - ``--expect``: comparing a report with expected findings.
"""
from __future__ import annotations

# the codes are in mqtool.vocabulary so that the CLI's help can list them without importing numpy
from ..vocabulary import CODES, ERROR, INFO, WARNING
from .findings import Finding, VerifyReport
from .commitlog import _KeyHashes  # noqa: F401 - the tests check the key hashes directly
from .layout import store_geometry
from .report import MAX_LISTED_PER_CODE, SEVERITY_ORDER
from .run import verify_store
from .expect import compare_findings, finding_keys

__all__ = ["CODES", "ERROR", "INFO", "WARNING", "Finding", "VerifyReport", "store_geometry",
           "MAX_LISTED_PER_CODE", "SEVERITY_ORDER", "verify_store", "compare_findings",
           "finding_keys"]
