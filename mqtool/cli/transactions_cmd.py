"""``mqtool transactions``: argument parsing and rendering of
:func:`mqtool.transactions.transaction_report`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import EXIT_FINDINGS
from . import options as opt
from .common import (Commands, emit_json_document, error_boundary, grid, stderr_console,
                     stdout_console)

commands = Commands()


@commands.command("transactions")
@error_boundary
def transactions_command(
    store_path: Path = opt.store(),
    json_output: bool = opt.json_output("One JSON document on stdout: the check progress, every "
                                        "half entry and op message, the transactions with their "
                                        "copies, ends and next-check fates."),
    group: Optional[str] = typer.Option(None, "--group", metavar="PRODUCER_GROUP",
                                        help="Only the transactions of this producer group "
                                             "(the half messages' PGROUP)."),
    check_max: int = typer.Option(15, "--check-max", metavar="N",
                                  help="The broker's transactionCheckMax: a half message checked "
                                       "N times is discarded (default 15, the broker's)."),
    at: Optional[str] = typer.Option(None, "--at", help="When the check runs (epoch ms or "
                                     "ISO-8601; default: right after the newest message): half "
                                     "messages born more than --file-reserved-hours before it "
                                     "are discarded unchecked, as the broker's check does."),
    file_reserved_hours: int = typer.Option(72, "--file-reserved-hours", metavar="H",
                                            help="The broker's fileReservedTime (default 72), "
                                                 "used with --at."),
    broker_version: str = opt.broker_version(),
    commitlog_file_size: Optional[int] = opt.commitlog_file_size(),
):
    """Transactional messages: what the producers decided and what the broker's next check does.

    Per transaction (UNIQ_KEY) its half copies (half-queue and CommitLog offsets, check times),
    real topic/queue, producer group, the op messages that end it, its COMMIT record; whether the
    store shows it committed, rolled back or open; and what the next check round does (committed,
    rolled back, checked again, discarded after --check-max checks, lost to the recovery).
    Read-only. Exit 1 when something is lost to the recovery or the store shows problems."""
    from ..inspect import parse_time
    from ..transactions import transaction_report

    opt.check_broker_version(broker_version)
    opt.check_not_negative(file_reserved_hours, "--file-reserved-hours")
    store = opt.open_store(store_path, commitlog_file_size)
    at_ms = parse_time(at) if at is not None else None
    report = transaction_report(store, check_max=check_max, group=group,
                                broker_version=broker_version, at_ms=at_ms,
                                file_reserved_hours=file_reserved_hours)
    if json_output:
        emit_json_document(report)
    else:
        _render(report)
    lost = [t for t in report["transactions"] if t["next_check"] == "lost"]
    if lost or report["problems"] or report["commit_records_without_half"] or \
            report["op_offsets_without_half"]:
        raise typer.Exit(EXIT_FINDINGS)


def _grid(title: str, *columns: str):
    return grid(*columns, title=title, title_justify="left")


def _render(report: dict) -> None:
    out = stdout_console()
    if not out.is_terminal:  # a pipe gets whole rows
        out = stdout_console(width=260)
    progress = report["check_progress"]
    out.print(f"Check progress ({progress['source'] or 'no consumerOffset.json'}): half queue "
              f"{progress['half_offsets'] or '-'}, op queue {progress['op_offsets'] or '-'}; "
              f"recovery keeps the CommitLog up to {report['recovery']['process_offset']}",
              markup=False, highlight=False)
    s = report["summary"]
    out.print(f"{s['half_entries']} half entr(ies), {s['op_messages']} op message(s), "
              f"{s['commit_records']} COMMIT record(s), {s['transactions']} transaction(s)",
              markup=False, highlight=False)
    table = _grid("Transactions", "UNIQ_KEY", "producer group", "real topic", "q",
                  "half copies (offset:checks)", "ops", "commit at", "store shows",
                  f"next check (max {report['check_max']})")
    for t in report["transactions"]:
        copies = " ".join(f"{c['half_queue_offset']}:{c['check_times'] or 0}"
                          + ("(cut)" if c["truncated_by_recovery"] else "")
                          for c in t["half_copies"])
        commit = t["commit_record"]
        table.add_row(str(t["uniq_key"] or "-"), str(t["producer_group"] or "-"),
                      str(t["real_topic"] or "-"), str(t["real_queue_id"]
                                                       if t["real_queue_id"] is not None else "-"),
                      copies, ",".join(map(str, t["op_messages"])) or "-",
                      "-" if commit is None else str(commit["commitlog_offset"]),
                      t["ended_in_store"], t["next_check"])
    out.print(table)
    err = stderr_console()
    ended = ", ".join(f"{n} {k}" for k, n in s["ended_in_store"].items()) or "none"
    fates = ", ".join(f"{n} {k}" for k, n in s["next_check"].items()) or "none"
    err.print(f"Store shows: {ended}. Next check round: {fates}", markup=False)
    for r in report["check_rounds"]:
        if r["skipped"]:
            err.print(f"  half queue {r['queue_id']}: {r['skipped']}", markup=False)
        else:
            err.print(f"  half queue {r['queue_id']}: from {r['half_offset']} (op {r['op_offset']})"
                      f" to {r['half_offset_after']} (op {r['op_offset_after']}): "
                      f"{r['checked_with_producer']} checked with the producer, "
                      f"{r['discarded']} discarded", markup=False)
    for c in report["commit_records_without_half"]:
        err.print(f"  COMMIT record at {c['commitlog_offset']} ({c['topic']}): no half message at "
                  f"CommitLog offset {c['prepared_transaction_offset']}", markup=False,
                  style="yellow")
    for d in report["op_offsets_without_half"]:
        err.print(f"  op message {d['op_queue_offset']}: no half entry at "
                  f"{', '.join(map(str, d['half_offsets'][:10]))}", markup=False, style="yellow")
    for t in report["transactions"]:
        if t["next_check"] == "lost":
            err.print(f"  lost: {t['uniq_key']}: {t['next_check_detail']}", markup=False,
                      style="red")
    for problem in report["problems"]:
        err.print(f"  problem: {problem}", markup=False, style="yellow")
