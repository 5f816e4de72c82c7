"""Merging the per-file results into one :class:`~mqtool.verify.findings.VerifyReport`: findings
that span files (missing runs, short queue files), what lies past the recovered end, the listing
caps and the summary."""
from __future__ import annotations

import collections

from .. import queue_runs
from ..recovery import RecoveryPlan
from ..store import Store
from ..vocabulary import ERROR, INFO, WARNING
from .findings import Finding, _Sink, VerifyReport, _finding
from .context import _MissingRun, _SegmentResult
from .layout import store_geometry


SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}
#: findings listed per code (all are counted in the summary)
MAX_LISTED_PER_CODE = 1000


def _short_file_holes(queues: dict) -> dict:
    """(topic, qid) -> [(first missing unit, next file's first unit, file)]: the units a
    ConsumeQueue file shorter than its slot lacks (its queue's cursors step over them)."""
    holes: dict = {}
    for key, info in queues.items():
        for f, g, rel in zip(info.files, info.files[1:], info.rels):
            if f.first + f.count < g.first:
                holes.setdefault(key, []).append((f.first + f.count, g.first, rel))
    return holes


def _merge_results(store: Store, plan: RecoveryPlan, results: list[_SegmentResult], sink: _Sink,
                   deferred: list[Finding], holes: dict) -> None:
    P = plan.process_offset
    beyond_total = plan.messages_lost
    stale = (beyond_total > 0 and plan.last_exit_ok and plan.cq_units_truncated == 0
             and _matched_beyond(results, plan) == 0)
    torn_tail = (not plan.last_exit_ok and beyond_total == 0)
    deleted_index = {f"index/{name}" for name in plan.index_files_deleted}

    # CommitLog and cross-checks from the scan
    for r in results:
        for f in r.findings:
            cl_offset = f.commitlog_offset
            beyond = cl_offset is not None and cl_offset >= P
            if f.code.startswith(("CL_", "DL_ENTRY_")) and beyond:
                if stale:
                    f.severity = INFO
                    f.message += " (past the recovered end: stale data the broker ignores)"
                elif torn_tail and f.code in ("CL_TRUNCATED", "CL_BAD_MAGIC", "CL_LENGTH_MISMATCH",
                                              "DL_ENTRY_TRUNCATED", "DL_ENTRY_MAGIC",
                                              "DL_ENTRY_SIZE"):
                    f.severity = WARNING
                    f.message += " (a torn write at the end of a crashed store; recovery cuts it)"
            elif f.code in ("CQ_QUEUE_GAP", "IDX_MISSING_KEY") and beyond:
                continue
            if f.code.startswith("IDX_") and f.file in deleted_index:
                f.severity = WARNING
                f.message += " (the broker deletes this index file on start and rebuilds it)"
            sink.add(f)
        for code, count in r.suppressed.items():
            sink.add_suppressed(code, count)
    for f in deferred:
        if f.file in deleted_index:
            f.severity = WARNING
            f.message += " (the broker deletes this index file on start and rebuilds it)"
        sink.add(f)

    # queue offsets across files
    last: dict = {}
    for r in results:
        for key, span in r.spans.items():
            run = queue_runs.Run(*span)
            if run.first_offset >= P:
                continue
            last[key], gap = queue_runs.merge(last.get(key), run)
            if gap is not None:
                first_offset = run.first_offset
                seg = store.commitlog.segment_for(first_offset)
                sink.add(_finding("CQ_QUEUE_GAP", f"commitlog/{seg.name}" if seg else "commitlog",
                                  first_offset - (seg.base_offset if seg else 0),
                                  queue_runs.message(key[0], key[1], *gap),
                                  commitlog_offset=first_offset, topic=key[0], queue_id=key[1],
                                  queue_offset=gap[0], details={"expected": gap[1]}))

    # records without a ConsumeQueue unit
    queue_ends = {(q.topic, q.queue_id): q.valid_end for q in plan.queue_recoveries}
    queue_ends.update({(t.topic, t.queue_id): t.new_end for t in plan.cq_truncations})
    for run in _joined_runs(results):
        if run.first_offset >= P or store.queues_in_rocksdb:
            continue  # a RocksDB ConsumeQueue has no unit files to miss
        end = queue_ends.get((run.topic, run.queue_id), 0)
        tail = run.first_queue_offset >= end
        rebuilt = (plan.redispatch_from is not None and run.first_offset >= plan.redispatch_from)
        # a short file stops the broker at load (refuses_to_start): no recovery fills the hole
        short = next((rel for lo, hi, rel in holes.get((run.topic, run.queue_id), ())
                      if run.first_queue_offset < hi and run.last_queue_offset >= lo), None)
        severity = WARNING if tail and rebuilt and short is None else ERROR
        if run.count == 1:
            what = (f"the record of {run.topic!r} queue {run.queue_id} at queue offset "
                    f"{run.first_queue_offset} (CommitLog {run.first_offset}) has no "
                    f"ConsumeQueue unit")
        else:
            what = (f"{run.count} records of {run.topic!r} queue {run.queue_id} (queue offsets "
                    f"{run.first_queue_offset}..{run.last_queue_offset}, CommitLog "
                    f"{run.first_offset}..{run.last_offset}) have no ConsumeQueue unit")
        it = "it" if run.count == 1 else "them"
        if short is not None:
            units = "its unit" if run.count == 1 else "their units"
            what += f"; {short} is cut short before {units} (the broker refuses to load it)"
        elif severity == WARNING:
            what += f"; the broker's recovery dispatches {it} again"
        elif tail:
            what += f"; recovery does not dispatch {it} again"
        else:
            what += "; the queue has later units, so the broker never fills the hole"
        sink.add(_finding("CQ_MISSING", run.file, run.position, what, severity=severity,
                          commitlog_offset=run.first_offset, topic=run.topic,
                          queue_id=run.queue_id, queue_offset=run.first_queue_offset,
                          count=run.count))

    # what lies past the recovered end
    if plan.stop_file is not None and (beyond_total or plan.cq_units_truncated or plan.bytes_dropped):
        rel = next((s.store_path for s in store.commitlog.segments if s.name == plan.stop_file),
                   f"commitlog/{plan.stop_file}")
        if stale:
            first = plan.first_lost_offset
            seg = store.commitlog.segment_for(first) if first is not None else None
            sink.add(_finding("CL_STALE_DATA", seg.store_path if seg else rel,
                              first - seg.base_offset if seg else plan.stop_position,
                              f"{beyond_total} plausible record{'s' if beyond_total != 1 else ''} "
                              f"past the end of the written data ({P}), referenced by no "
                              f"ConsumeQueue: left by an earlier truncation or overwritten "
                              f"writes; the broker ignores them", commitlog_offset=first,
                              count=beyond_total))
        elif beyond_total or plan.cq_units_truncated:
            parts = [f"{beyond_total} message{'s' if beyond_total != 1 else ''}",
                     f"{plan.bytes_dropped} bytes"]
            if plan.cq_units_truncated:
                parts.append(f"{plan.cq_units_truncated} ConsumeQueue units")
            if plan.commitlog_files_deleted:
                parts.append(f"{len(plan.commitlog_files_deleted)} CommitLog file(s) deleted")
            sink.add(_finding("RECOVERY_TRUNCATES", rel, plan.stop_position,
                              f"{plan.mode} recovery stops at {P} ({plan.stop_reason}) and drops "
                              + ", ".join(parts),
                              commitlog_offset=P, count=beyond_total,
                              details={"bytes": plan.bytes_dropped, "messages": beyond_total,
                                       "cq_units": plan.cq_units_truncated,
                                       "files_deleted": plan.commitlog_files_deleted,
                                       "reason": plan.stop_reason}))

    # checkpoint timestamps against the newest message on disk
    ckpt = plan.checkpoint
    newest = None
    for r in results:
        if r.newest_timestamp is not None:
            newest = r.newest_timestamp if newest is None else max(newest, r.newest_timestamp)
    if ckpt is not None and newest is not None:
        for pos, name in ((0, "physic_msg_timestamp"), (8, "logics_msg_timestamp"),
                          (16, "index_msg_timestamp")):
            value = ckpt[name]
            if value > newest:
                sink.add(_finding("CKPT_AHEAD", "checkpoint", pos,
                                  f"{name} {value} is {value - newest} ms after the newest stored "
                                  f"message ({newest}); an abnormal recovery may start too late"))


def _joined_runs(results: list[_SegmentResult]) -> list[_MissingRun]:
    """Runs of records without a unit, joined across CommitLog files when a queue's run simply
    continues (contiguous queue offsets) in the next file."""
    joined: list[_MissingRun] = []
    open_runs: dict = {}
    for r in results:
        for run in r.missing:
            key = (run.topic, run.queue_id)
            previous = open_runs.get(key)
            if (previous is not None and previous.live == run.live
                    and run.first_queue_offset == previous.last_queue_offset + 1
                    and run.first_offset > previous.last_offset):
                previous.last_offset = run.last_offset
                previous.last_queue_offset = run.last_queue_offset
                previous.count += run.count
                continue
            joined.append(run)
            open_runs[key] = run
    return joined


def _matched_beyond(results: list[_SegmentResult], plan: RecoveryPlan) -> int:
    """Records at or past processOffset that a ConsumeQueue unit references."""
    if plan.stop_file is None:
        return 0
    stop_base = int(plan.stop_file)
    total = 0
    for r in results:
        base = r.verdict.base_offset
        if base == stop_base:
            total += r.matched_after_stop
        elif base > stop_base:
            total += r.matched_after_stop + r.matched_before_stop
    return total


def _report(store: Store, sink: _Sink, plan: RecoveryPlan, results) -> VerifyReport:
    findings = sorted(sink.findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.code, f.file,
                                                    f.offset))
    listed: list[Finding] = []
    per_code = collections.Counter()
    by_code = collections.Counter()
    severities = collections.Counter()
    for f in findings:
        by_code[f.code] += 1
        severities[f.severity] += 1
        per_code[f.code] += 1
        if per_code[f.code] <= MAX_LISTED_PER_CODE:
            listed.append(f)
    for (code, severity), count in sink.extra.items():
        by_code[code] += count
        severities[severity] += count
    listed.sort(key=lambda f: (f.file, f.offset, f.code))
    summary = {
        "errors": severities[ERROR],
        "warnings": severities[WARNING],
        "infos": severities[INFO],
        "by_code": dict(sorted(by_code.items())),
        "messages_scanned": sum(r.messages for r in results),
        "v2_records": sum(r.v2_records for r in results),
        "prop_crc_records_checked": sum(r.prop_crc_records for r in results),
        "own_property_batch_records": sum(r.own_property_batch_records for r in results),
        "commitlog_bytes": sum(r.bytes for r in results),
        "listed": len(listed),
    }
    geometry = store_geometry(store)
    geometry["broker_version"] = plan.broker_version
    return VerifyReport(str(store.root), geometry, listed, summary, plan)
