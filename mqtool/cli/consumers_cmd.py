"""``mqtool consumers STORE``: committed consumer offsets against the queues, and what the
broker's next start does to each group (rendering only; the work is :mod:`mqtool.consumers`)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..vocabulary import CONSUMER_CODES
from . import options as opt
from .common import Commands, emit_json_document, error_boundary, progress_bar, stdout_console

commands = Commands()

_STATUS_SHORT = {
    "FOUND": "delivers",
    "OFFSET_OVERFLOW_ONE": "caught up",
    "OFFSET_OVERFLOW_BADLY": "moved back",
    "OFFSET_TOO_SMALL": "moved up",
    "NO_MESSAGE_IN_QUEUE": "queue empty",
    "NO_OFFSET": "no offset",
}


_PIPE_WIDTH = 250


def _next_start_cell(row) -> str:
    ns = row.next_start
    text = _STATUS_SHORT.get(ns.status, ns.status)
    if ns.status == "FOUND":
        text += f" {ns.delivers:,} from {row.committed_offset:,}"
    elif ns.status in ("OFFSET_OVERFLOW_BADLY", "OFFSET_TOO_SMALL", "NO_MESSAGE_IN_QUEUE") \
            and ns.next_offset != row.committed_offset:
        text += f" to {ns.next_offset:,}"
        if ns.status == "OFFSET_TOO_SMALL":
            text += f", skips {ns.skips:,}"
    if ns.unconsumed_dropped:
        text += f"; {ns.unconsumed_dropped:,} unconsumed dropped"
    return text


def _render(report) -> None:
    from rich.table import Table

    from ..inspect import ms_to_iso

    out = stdout_console()
    if not out.is_terminal:
        out.width = _PIPE_WIDTH   # piped: keep each queue on one line for grep and diff
    out.print(f"store: {report.store}", markup=False, soft_wrap=True)
    out.print(f"next start: {report.broker_version} rules, {report.recovery_mode} recovery",
              markup=False)
    for name, load in report.configs["files"].items():
        out.print(f"config/{name}: {load['reason']}", markup=False, soft_wrap=True)
    for folder, what in report.configs["rocksdb"].items():
        read = folder == "consumerOffsets" and report.offsets_source == "consumerOffsets/"
        out.print(f"config/{folder}/: {what} (RocksDB, " + (
            "read through a shadow copy: these offsets)" if read else "not read)"),
            markup=False, soft_wrap=True)
    for note in report.notes:
        if "RocksDB" in note:
            out.print(f"note: {note}", markup=False, soft_wrap=True)
    out.print()
    if report.rows:
        table = Table(show_edge=False, pad_edge=False, box=None)
        for column, justify in (("group", "left"), ("topic", "left"), ("queue", "right"),
                                ("committed", "right"), ("min", "right"), ("max", "right"),
                                ("lag", "right"), ("lag bytes", "right"),
                                ("oldest unconsumed", "left"), ("next start", "left")):
            table.add_column(column, justify=justify, overflow="fold")
        for row in report.rows:
            max_cell = f"{row.max_offset:,}"
            if row.max_after_start != row.max_offset:
                max_cell += f" -> {row.max_after_start:,}"
            table.add_row(row.group, row.topic, str(row.queue_id), f"{row.committed_offset:,}",
                          f"{row.min_offset:,}", max_cell, f"{row.lag_messages:,}",
                          f"{row.lag_bytes:,}", ms_to_iso(row.oldest_unconsumed_store_time) or "-",
                          _next_start_cell(row))
        out.print(table)
    else:
        out.print("no committed consumer offsets", markup=False)
    if report.delay:
        out.print()
        table = Table(show_edge=False, pad_edge=False, box=None)
        for column in ("delay level", "queue", "offset", "min", "max at load", "set at load",
                       "pending"):
            table.add_column(column, justify="right")
        for d in report.delay:
            table.add_row(str(d.level), str(d.queue_id), f"{d.offset:,}", f"{d.min_offset:,}",
                          f"{d.max_at_load:,}", f"{d.corrected_offset:,}",
                          f"{d.pending_after_start:,}")
        out.print(table)
    details = [r for r in report.rows if r.next_start.status not in ("FOUND",
                                                                     "OFFSET_OVERFLOW_ONE")
               or r.next_start.unconsumed_dropped or r.next_start.consumed_then_dropped]
    if details or report.problems or report.notes:
        out.print()
    for row in details:
        out.print(f"  {row.group} {row.topic}:{row.queue_id}: {row.next_start.sentence}",
                  markup=False, soft_wrap=True)
    for d in report.delay:
        if d.corrected_offset != d.offset:
            out.print(f"  delay {d.sentence}", markup=False, soft_wrap=True)
    for problem in report.problems:
        out.print(f"  problem: {problem}", markup=False, soft_wrap=True)
    for note in report.notes:
        out.print(f"  note: {note}", markup=False, soft_wrap=True)


_HELP = ("Show every consumer group's committed offsets (config/consumerOffset.json, read as the "
         "broker reads it, falling back to .bak) against its queues: min and max offset, lag in "
         "messages and bytes, the store time of the oldest unconsumed message, and what the "
         "broker's next start does to the group (its recovery predicted as verify does; the "
         "first pull's offset correction by the 4.9/5.x getMessage rules). Read-only.\n\n"
         "Exit status: 0 shown, 2 bad usage or unreadable store.\n\n"
         f"Finding codes verify reports from the same analysis: {', '.join(CONSUMER_CODES)}.")


@commands.command("consumers", help=_HELP)
@error_boundary
def consumers(
    store_path: Path = opt.store(),
    json_output: bool = opt.json_output(),
    group: Optional[str] = typer.Option(None, "--group", help="Only this consumer group."),
    topic: Optional[str] = opt.topic(),
    broker_version: str = opt.broker_version(),
    mode: str = opt.mode(),
    force_verify_prop_crc: bool = opt.force_verify_prop_crc(),
    message_index_safe: bool = opt.message_index_safe(),
    commitlog_file_size: Optional[int] = opt.commitlog_file_size(min=1),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(),
    broker_config: Optional[Path] = opt.broker_config(),
    cq_units: Optional[int] = opt.cq_units(min=1),
    index_slots: Optional[int] = opt.index_slots(min=1),
    index_entries: Optional[int] = opt.index_entries(min=1),
):
    """Consumer offsets and the next start's effect on them (see ``_HELP``)."""
    from ..consumers import consumer_report
    from ..recovery import predict_recovery

    opt.check_broker_version(broker_version)
    opt.check_mode(mode)
    store = opt.open_store(store_path, commitlog_file_size, cq_units, index_slots, index_entries,
                           commitlog_dirs=commitlog_dirs, broker_config=broker_config)
    total = sum(s.length for s in store.commitlog.segments)
    with progress_bar(total, "recovery") as bar:
        plan = predict_recovery(store, mode=mode, broker_version=broker_version,
                                force_verify_prop_crc=force_verify_prop_crc,
                                message_index_safe=message_index_safe, progress=bar)
    report = consumer_report(store, plan)
    if group is not None or topic is not None:
        report.rows = [r for r in report.rows if (group is None or r.group == group)
                       and (topic is None or r.topic == topic)]
    if json_output:
        emit_json_document(report.to_dict())
    else:
        _render(report)
    groups = report.groups()
    sys.stderr.write(f"mqtool: consumers: {len(groups)} group(s), {len(report.rows)} queue "
                     f"offset(s), offsets from {report.offsets_source or 'nowhere'}\n")
